import { fileURLToPath } from 'node:url'
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator'
import { migrate as migratePostgres } from 'drizzle-orm/postgres-js/migrator'
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js'
import type { PgliteDatabase } from 'drizzle-orm/pglite'
import postgres from 'postgres'
import type { DatabaseHandle } from './client.ts'

export const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../../drizzle', import.meta.url))

// Arbitrary constant shared by every instance: drizzle's migrator takes no lock of its own.
const MIGRATION_LOCK_ID = 72_390_114

/** Applies drizzle/ to PostgreSQL; concurrent starts queue on an advisory lock. */
export async function migratePostgresDatabase(url: string): Promise<void> {
  const client = postgres(url, { max: 1, onnotice: () => {} })
  try {
    await client`select pg_advisory_lock(${MIGRATION_LOCK_ID})`
    try {
      await migratePostgres(drizzlePostgres(client), { migrationsFolder: MIGRATIONS_FOLDER })
    } finally {
      await client`select pg_advisory_unlock(${MIGRATION_LOCK_ID})`
    }
  } finally {
    await client.end({ timeout: 5 })
  }
}

/** PGlite is one connection in one thread (guarded by the data-dir lock), so no lock is needed. */
export async function migratePgliteDatabase(handle: DatabaseHandle): Promise<void> {
  await migratePglite(handle.db as unknown as PgliteDatabase, { migrationsFolder: MIGRATIONS_FOLDER })
}
