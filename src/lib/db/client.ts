import { PGlite } from '@electric-sql/pglite'
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite'
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js'
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core'
import { sql, type SQL } from 'drizzle-orm'
import postgres from 'postgres'
import * as schema from './schema.ts'

/** The one database type the features see; both drivers implement it. */
export type Database = PgDatabase<PgQueryResultHKT, typeof schema>

export interface DatabaseHandle {
  db: Database
  kind: 'postgres' | 'pglite'
  close(): Promise<void>
}

/**
 * Drizzle over postgres-js, with every statement prepared. Drizzle asks postgres-js not to
 * prepare, and postgres-js then sends each parameterized statement in two round trips (Parse +
 * Describe, then Bind + Execute) and PostgreSQL plans it every time; prepared, a statement costs
 * one round trip after its first use on a connection. Our SQL texts are a fixed set (values
 * are always parameters), so the per-connection statement cache stays small.
 */
export function preparedDrizzle(client: postgres.Sql): Database {
  return drizzlePostgres(alwaysPrepare(client), { schema }) as unknown as Database
}

function alwaysPrepare(client: postgres.Sql): postgres.Sql {
  return new Proxy(client, {
    get(target, property, receiver) {
      if (property === 'unsafe') {
        return (query: string, parameters?: postgres.ParameterOrJSON<never>[], options?: postgres.UnsafeQueryOptions) =>
          target.unsafe(query, parameters, { ...options, prepare: true })
      }
      if (property === 'begin' || property === 'savepoint') {
        return (...args: unknown[]) => {
          const body = args.pop() as (inner: postgres.Sql) => unknown
          return (Reflect.get(target, property) as (...a: unknown[]) => unknown).call(target, ...args, (inner: postgres.Sql) => body(alwaysPrepare(inner)))
        }
      }
      return Reflect.get(target, property, receiver)
    },
  })
}

/**
 * Connection settings for every pool of ours, so that while PostgreSQL is down or restarting a
 * request fails within about a second with a 503 (src/lib/db/errors.ts) instead of waiting: a
 * connection attempt gives up after 5 s (the default is 30), and a failed connection is tried
 * again after at most 1 s. postgres-js's default backoff grows to 10–20 s after a few failures,
 * and the queries queued on that connection wait it out (measured: 11–17 s answers during a
 * restart). Broken connections are replaced at the next query.
 */
export const POSTGRES_OPTIONS = {
  onnotice: () => {},
  connect_timeout: 5,
  backoff: (attempt: number) => Math.min(0.05 * 2 ** attempt, 1),
} as const

export function postgresDatabase(url: string, options: { max?: number } = {}): DatabaseHandle {
  const client = postgres(url, { ...POSTGRES_OPTIONS, max: options.max ?? 10 })
  return {
    db: preparedDrizzle(client),
    kind: 'postgres',
    close: () => client.end({ timeout: 5 }),
  }
}

export function pgliteDatabase(client: PGlite): DatabaseHandle {
  return {
    db: drizzlePglite(client, { schema }) as unknown as Database,
    kind: 'pglite',
    close: () => client.close(),
  }
}

export async function openPgliteDirectory(dataDir: string): Promise<PGlite> {
  return PGlite.create(dataDir)
}

/** Raw SQL rows, whichever driver ran them (PGlite answers `{ rows }`, postgres-js an array). */
export async function queryRows<T>(db: Database, query: SQL): Promise<T[]> {
  const result = (await db.execute(query)) as unknown
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[]
}

/** Whether `select 1` answers within `timeoutMs`: readiness must answer promptly while the database is away. */
export async function isDatabaseReachable(db: Database, timeoutMs = 2000): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timedOut = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)))
  try {
    return await Promise.race([queryRows(db, sql`select 1`).then(() => true), timedOut])
  } catch {
    return false
  } finally {
    clearTimeout(timer)
  }
}

export type DatabaseTransaction = Parameters<Parameters<Database['transaction']>[0]>[0]
