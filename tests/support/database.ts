import { createHash, randomBytes } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { PGlite } from '@electric-sql/pglite'
import postgres from 'postgres'
import { pgliteDatabase, postgresDatabase, TurnTakingPGlite, type DatabaseHandle } from '../../src/lib/db/client.ts'
import { MIGRATIONS_FOLDER, migratePgliteDatabase, migratePostgresDatabase } from '../../src/lib/db/migrate.ts'

/**
 * Every test file gets a database of its own, so files can run in parallel. TEST_DATABASE picks
 * where (unset or empty: `postgres` when DATABASE_URL is set, else `pglite`):
 * - `pglite`: a clone of one migrated in-memory PGlite; DATABASE_URL is ignored;
 * - `postgres`: a fresh database on the server at DATABASE_URL, copied from a migrated template;
 * - `container`: the same on a PostgreSQL container started by testcontainers (POSTGRES_IMAGE).
 * The preload (tests/support/preflight.ts) resolves the choice once before any test file loads,
 * so an unreachable database stops the run with one line instead of failing every file.
 */
export interface TestDatabase {
  handle: DatabaseHandle
  /** The PostgreSQL URL of this database; undefined on PGlite. */
  url: string | undefined
  drop(): Promise<void>
}

export const TEST_DATABASE_CHOICES = ['pglite', 'postgres', 'container'] as const
export type TestDatabaseChoice = (typeof TEST_DATABASE_CHOICES)[number]

/**
 * The image TEST_DATABASE=container starts; TEST_POSTGRES_IMAGE names another. The official
 * image's tag: where no registry is reachable, .ci/postgres-image.sh builds a stand-in under it
 * from Debian's postgresql-15 (the major version the CI server runs).
 */
export const POSTGRES_IMAGE = 'postgres:15-bookworm'

export type TestDatabaseMode =
  | { choice: 'pglite'; kind: 'pglite' }
  | { choice: 'postgres'; kind: 'postgres'; serverUrl: string; icuLocale?: string }
  | { choice: 'container'; kind: 'postgres'; serverUrl: string; image: string; icuLocale?: string }

/** The chosen test database cannot be used. The message is one line, printed as it is. */
export class TestDatabaseUnavailable extends Error {
  override name = 'TestDatabaseUnavailable'
}

let modePromise: Promise<TestDatabaseMode> | undefined
let pgliteTemplate: Promise<PGlite> | undefined
let postgresTemplate: Promise<string> | undefined

/** What TEST_DATABASE asks for, its default applied; throws TestDatabaseUnavailable on any other value. */
export function testDatabaseChoice(env: Record<string, string | undefined> = process.env): TestDatabaseChoice {
  const value = env.TEST_DATABASE?.trim()
  if (!value) return env.DATABASE_URL ? 'postgres' : 'pglite'
  if ((TEST_DATABASE_CHOICES as readonly string[]).includes(value)) return value as TestDatabaseChoice
  throw new TestDatabaseUnavailable(
    `TEST_DATABASE=${oneLine(value)}: not a test database; use pglite, postgres or container (unset: postgres if DATABASE_URL is set, else pglite)`,
  )
}

/**
 * TEST_POSTGRES_ICU_LOCALE (`en-US`, say): on PostgreSQL, every test database is made with that ICU
 * collation (`locale_provider icu`), the default of many managed PostgreSQL services, instead of the
 * server's own. Text then sorts as people read it, not byte by byte: what ids rely on is tested there
 * (docs/architecture.md#ids). Unset: the server's default.
 */
export function testIcuLocale(env: Record<string, string | undefined> = process.env): string | undefined {
  const value = env.TEST_POSTGRES_ICU_LOCALE?.trim()
  if (!value) return undefined
  if (!/^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$/.test(value)) throw new TestDatabaseUnavailable(`TEST_POSTGRES_ICU_LOCALE=${oneLine(value)}: not an ICU locale such as en-US`)
  if (testDatabaseChoice(env) === 'pglite') throw new TestDatabaseUnavailable('TEST_POSTGRES_ICU_LOCALE needs PostgreSQL: TEST_DATABASE=postgres or container')
  return value
}

/** A URL fit to print: no password, in the user part or in a query parameter. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url)
    parsed.password = ''
    for (const key of [...parsed.searchParams.keys()]) if (/pass/i.test(key)) parsed.searchParams.set(key, '***')
    return parsed.toString()
  } catch {
    return '(not a URL)'
  }
}

/** One human line: which database this run uses. */
export function describeTestDatabaseMode(mode: TestDatabaseMode): string {
  switch (mode.choice) {
    case 'pglite':
      return 'PGlite (in-memory clones)'
    case 'postgres':
      return `PostgreSQL at ${redactUrl(mode.serverUrl)}${collationNote(mode.icuLocale)}`
    case 'container':
      return `PostgreSQL in a container (${mode.image})${collationNote(mode.icuLocale)}`
  }
}

const collationNote = (icuLocale: string | undefined) => (icuLocale ? `, databases collated by ICU ${icuLocale}` : '')

function oneLine(text: string): string {
  const line = text.replace(/\s+/g, ' ').trim()
  return line.length > 200 ? `${line.slice(0, 199)}…` : line
}

/** The shortest telling reason: PostgreSQL's own message, else a code such as ECONNREFUSED, else the message. */
function reason(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code
    if (error.name !== 'PostgresError' && typeof code === 'string' && /^[A-Z][A-Z_]+$/.test(code)) return code
    return oneLine(error.message.split('\n')[0] || error.name)
  }
  return oneLine(String(error))
}

async function checkPostgres(url: string): Promise<void> {
  try {
    new URL(url)
  } catch {
    throw new TestDatabaseUnavailable('TEST_DATABASE=postgres: DATABASE_URL is not a URL such as postgres://postgres@127.0.0.1:5432/test')
  }
  const sql = postgres(url, { max: 1, connect_timeout: 5, onnotice: () => {} })
  try {
    await sql`select 1`
  } catch (error) {
    throw new TestDatabaseUnavailable(`TEST_DATABASE=postgres: cannot reach ${redactUrl(url)} (${reason(error)})`)
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {})
  }
}

const noEngine = (at: string, why: string) =>
  new TestDatabaseUnavailable(`TEST_DATABASE=container: no Docker engine reachable${at} (${why}): install and start one, or use TEST_DATABASE=pglite|postgres`)

/**
 * DOCKER_HOST, when set, names the one engine to use: its `/_ping` must answer. testcontainers
 * would otherwise fall back to the usual sockets and start the container on another engine.
 */
async function pingDockerHost(dockerHost: string): Promise<void> {
  const at = ` at ${redactUrl(dockerHost)}`
  let url: URL
  try {
    url = new URL(dockerHost)
  } catch {
    throw noEngine(at, 'DOCKER_HOST is not a URL such as unix:///var/run/docker.sock or tcp://127.0.0.1:2375')
  }
  const request =
    url.protocol === 'unix:'
      ? { href: 'http://docker/_ping', init: { unix: url.pathname } }
      : { href: `${url.protocol === 'https:' || process.env.DOCKER_TLS_VERIFY ? 'https' : 'http'}://${url.host}/_ping`, init: {} }
  try {
    const response = await fetch(request.href, { ...request.init, signal: AbortSignal.timeout(5_000) })
    if (!response.ok) throw new Error(`HTTP ${response.status}`)
  } catch (error) {
    throw noEngine(at, reason(error))
  }
}

let stopContainer: (() => Promise<void>) | undefined

/** Stops the container TEST_DATABASE=container started, if any: once, at the end of the run (tests/support/preflight.ts). */
export async function stopTestDatabaseContainer(): Promise<void> {
  const stop = stopContainer
  stopContainer = undefined
  await stop?.()
}

async function startPostgresContainer(image: string): Promise<string> {
  const { GenericContainer, Wait, getContainerRuntimeClient } = await import('testcontainers')
  const dockerHost = process.env.DOCKER_HOST?.trim()
  if (dockerHost) await pingDockerHost(dockerHost)
  try {
    await getContainerRuntimeClient()
  } catch (error) {
    throw noEngine(dockerHost ? ` at ${redactUrl(dockerHost)}` : '', reason(error))
  }
  try {
    // The variables testcontainers' PostgreSQL module sets; the official image and the stand-in honour them.
    const container = await new GenericContainer(image)
      .withEnvironment({ POSTGRES_USER: 'postgres', POSTGRES_PASSWORD: 'postgres', POSTGRES_DB: 'postgres' })
      .withExposedPorts(5432)
      // Under Bun the default wait strategy has hung; the second "ready" line is the real server.
      .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
      .start()
    stopContainer = () => container.stop({ timeout: 5_000 }).then(() => undefined)
    return `postgres://postgres:postgres@${container.getHost()}:${container.getMappedPort(5432)}/postgres`
  } catch (error) {
    throw new TestDatabaseUnavailable(
      `TEST_DATABASE=container: cannot start ${image} (${reason(error)}): the engine must be able to pull or have the image, or use TEST_DATABASE=pglite|postgres`,
    )
  }
}

async function resolveTestDatabaseMode(): Promise<TestDatabaseMode> {
  const choice = testDatabaseChoice()
  const icuLocale = testIcuLocale()
  if (choice === 'postgres') {
    const serverUrl = process.env.DATABASE_URL
    if (!serverUrl) {
      throw new TestDatabaseUnavailable(
        'TEST_DATABASE=postgres needs DATABASE_URL (e.g. postgres://postgres@127.0.0.1:5432/test); unset TEST_DATABASE or use TEST_DATABASE=pglite to run without a server',
      )
    }
    await checkPostgres(serverUrl)
    return { choice, kind: 'postgres', serverUrl, icuLocale }
  }
  // Processes the tests spawn inherit process.env: on PGlite or a container they must not find
  // (and use) a server that is not the chosen one.
  delete process.env.DATABASE_URL
  if (choice === 'container') {
    const image = process.env.TEST_POSTGRES_IMAGE?.trim() || POSTGRES_IMAGE
    return { choice, kind: 'postgres', serverUrl: await startPostgresContainer(image), image, icuLocale }
  }
  return { choice, kind: 'pglite' }
}

/**
 * The database this run uses, resolved once per test process (the container, if any, started
 * once). Rejects with a TestDatabaseUnavailable when the chosen database cannot be used.
 */
export function testDatabaseMode(): Promise<TestDatabaseMode> {
  modePromise ??= resolveTestDatabaseMode()
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

async function ensurePostgresTemplate(serverUrl: string, icuLocale: string | undefined): Promise<string> {
  const template = `msgsvc_tpl_${migrationsFingerprint()}${icuLocale ? `_icu_${icuLocale.toLowerCase().replaceAll('-', '_')}` : ''}`
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  try {
    // One creator at a time across parallel test processes.
    await admin`select pg_advisory_lock(72390115)`
    try {
      const [existing] = await admin`select 1 from pg_database where datname = ${template}`
      if (!existing) {
        // testIcuLocale checked the locale's form: letters, digits and dashes only.
        await admin.unsafe(`create database "${template}"${icuLocale ? ` locale_provider icu icu_locale '${icuLocale}' template template0` : ''}`)
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
    // The server's PGlite (src/lib/db/client.ts), so every test on PGlite runs through its turns.
    const clone = await TurnTakingPGlite.create({ loadDataDir: await (await pgliteTemplate).dumpDataDir('none') })
    const handle = pgliteDatabase(clone)
    return { handle, url: undefined, drop: () => handle.close() }
  }
  postgresTemplate ??= ensurePostgresTemplate(mode.serverUrl, mode.icuLocale)
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
