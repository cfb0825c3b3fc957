import { createHash, randomBytes } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { PGlite } from '@electric-sql/pglite'
import postgres from 'postgres'
import { pgliteDatabase, postgresDatabase, type DatabaseHandle } from '../../src/lib/db/client.ts'
import { MIGRATIONS_FOLDER, migratePgliteDatabase, migratePostgresDatabase } from '../../src/lib/db/migrate.ts'

/**
 * Every test file gets a database of its own, so files can run in parallel:
 * - DATABASE_URL set: a fresh database on that server, copied from a migrated template database;
 * - else, Docker reachable: the same on a PostgreSQL container started by testcontainers;
 * - else: a clone of one migrated in-memory PGlite.
 */
export interface TestDatabase {
  handle: DatabaseHandle
  /** The PostgreSQL URL of this database; undefined on PGlite. */
  url: string | undefined
  drop(): Promise<void>
}

export type TestDatabaseMode = { kind: 'postgres'; serverUrl: string; source: 'DATABASE_URL' | 'testcontainers' } | { kind: 'pglite' }

let modePromise: Promise<TestDatabaseMode> | undefined
let pgliteTemplate: Promise<PGlite> | undefined
let postgresTemplate: Promise<string> | undefined

async function dockerReachable(): Promise<boolean> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers')
    await getContainerRuntimeClient()
    return true
  } catch {
    return false
  }
}

async function startPostgresContainer(): Promise<string> {
  const { GenericContainer, Wait } = await import('testcontainers')
  const container = await new GenericContainer('postgres:16-alpine')
    .withEnvironment({ POSTGRES_PASSWORD: 'postgres' })
    .withExposedPorts(5432)
    // Under Bun the default wait strategy has hung; the second "ready" line is the real server.
    .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
    .start()
  return `postgres://postgres:postgres@${container.getHost()}:${container.getMappedPort(5432)}/postgres`
}

export function testDatabaseMode(): Promise<TestDatabaseMode> {
  modePromise ??= (async () => {
    if (process.env.DATABASE_URL) return { kind: 'postgres', serverUrl: process.env.DATABASE_URL, source: 'DATABASE_URL' }
    if (await dockerReachable()) return { kind: 'postgres', serverUrl: await startPostgresContainer(), source: 'testcontainers' }
    return { kind: 'pglite' }
  })()
  return modePromise
}

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url)
  parsed.pathname = `/${database}`
  return parsed.toString()
}

function migrationsFingerprint(): string {
  const hash = createHash('sha256')
  for (const file of readdirSync(MIGRATIONS_FOLDER).filter((name) => name.endsWith('.sql')).sort()) {
    hash.update(file).update(readFileSync(join(MIGRATIONS_FOLDER, file)))
  }
  return hash.digest('hex').slice(0, 12)
}

async function ensurePostgresTemplate(serverUrl: string): Promise<string> {
  const template = `msgsvc_tpl_${migrationsFingerprint()}`
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  try {
    // One creator at a time across parallel test processes.
    await admin`select pg_advisory_lock(72390115)`
    try {
      const [existing] = await admin`select 1 from pg_database where datname = ${template}`
      if (!existing) {
        await admin.unsafe(`create database "${template}"`)
        await migratePostgresDatabase(withDatabase(serverUrl, template))
      }
    } finally {
      await admin`select pg_advisory_unlock(72390115)`
    }
  } finally {
    await admin.end({ timeout: 5 })
  }
  return template
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const mode = await testDatabaseMode()
  if (mode.kind === 'pglite') {
    pgliteTemplate ??= (async () => {
      const template = await PGlite.create()
      await migratePgliteDatabase(pgliteDatabase(template))
      return template
    })()
    const handle = pgliteDatabase((await (await pgliteTemplate).clone()) as PGlite)
    return { handle, url: undefined, drop: () => handle.close() }
  }
  postgresTemplate ??= ensurePostgresTemplate(mode.serverUrl)
  const template = await postgresTemplate
  const name = `msgsvc_test_${randomBytes(6).toString('hex')}`
  const admin = postgres(mode.serverUrl, { max: 1, onnotice: () => {} })
  try {
    await admin.unsafe(`create database "${name}" template "${template}"`)
  } finally {
    await admin.end({ timeout: 5 })
  }
  const url = withDatabase(mode.serverUrl, name)
  const handle = postgresDatabase(url, { max: 5 })
  return {
    handle,
    url,
    async drop() {
      await handle.close()
      const dropper = postgres(mode.serverUrl, { max: 1, onnotice: () => {} })
      try {
        await dropper.unsafe(`drop database if exists "${name}" with (force)`)
      } finally {
        await dropper.end({ timeout: 5 })
      }
    },
  }
}
