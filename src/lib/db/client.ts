import { PGlite, type PGliteOptions } from '@electric-sql/pglite'
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite'
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js'
import { PgDialect, type PgDatabase, type PgQueryResultHKT } from 'drizzle-orm/pg-core'
import { DrizzleQueryError, sql, type SQL } from 'drizzle-orm'
import postgres from 'postgres'
import * as schema from './schema.ts'
import { DatabaseUnavailableError, isDatabaseUnavailable } from './errors.ts'
import { KEYED_PLAN_SETTINGS } from './keyed-plans.ts'
import { pgliteNamedClient } from './pglite-named.ts'

/** The one database type the features see; both drivers implement it. */
export type Database = PgDatabase<PgQueryResultHKT, typeof schema>

export interface DatabaseHandle {
  db: Database
  /**
   * The same database for statements that start from a batch and reach every row by key (a
   * message settlement; on PGlite also the delivery worker's claims and records), prepared once
   * and planned with KEYED_PLAN_SETTINGS (src/lib/db/keyed-plans.ts): on PostgreSQL a pool of its
   * own whose sessions have them, so that each such statement is one round trip; on PGlite the
   * same session, each statement run by a name of its own (src/lib/db/pglite-named.ts).
   */
  keyedDb: Database
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
 * Connection settings for every pool of ours: a connection attempt gives up after 5 s (the
 * default is 30), and a failed connection is tried again after at most 1 s (postgres-js's
 * default backoff grows to 10–20 s after a few failures). Broken connections are replaced at
 * the next query. See `postgresClient` for what happens to queries while the database is away.
 */
export const POSTGRES_OPTIONS = {
  onnotice: () => {},
  connect_timeout: 5,
  backoff: (attempt: number) => Math.min(0.05 * 2 ** attempt, 1),
} as const

/** How often a pool whose database is away checks whether it is back (on top of the pool's own backoff). */
const PROBE_INTERVAL_MS = 200

export interface PostgresClientOptions {
  max: number
  /** Server settings for each connection of the pool (sent when it connects). */
  settings?: Record<string, string>
  /** Called when the pool finds its database away (with the error that showed it), and when it answers again. */
  onAvailability?(available: boolean, error?: unknown): void
}

/**
 * A postgres-js pool that refuses queries at once while its database is away, for every pool
 * of ours (requests, the delivery worker). postgres-js gives each connection attempt one queued
 * query and keeps the others queued until their turn, so while PostgreSQL is down, queries
 * wait in line for one failed attempt each: at 50 requests a second, requests sent during a
 * 2.5 s restart waited until PostgreSQL was back, and with 10 connections failing about once
 * a second every query beyond 10 a second makes the line longer (measured at 100 a second: 44 s).
 *
 * So: once a query or transaction fails because the database is unavailable
 * (src/lib/db/errors.ts), new ones fail at once with DatabaseUnavailableError (a 503 for a
 * request) and never reach the pool, while one `select 1` at a time checks whether the
 * database answers; the first that does lets queries through again. Queries already queued
 * when the outage began are refused by the pool's failing attempts within a few seconds.
 * A transaction cut short is rolled back by PostgreSQL.
 */
export function postgresClient(url: string, options: PostgresClientOptions): postgres.Sql {
  const client = postgres(url, { ...POSTGRES_OPTIONS, max: options.max, ...(options.settings ? { connection: options.settings } : {}) })
  let away = false
  let ended = false
  let probeTimer: ReturnType<typeof setTimeout> | undefined

  const answered = () => {
    if (!away) return
    away = false
    options.onAvailability?.(true)
  }
  const probe = () => {
    probeTimer = undefined
    if (ended) return
    client.unsafe('select 1').then(answered, (error) => {
      // An error from the database itself means it answered.
      if (!isDatabaseUnavailable(error)) return answered()
      if (!ended) {
        probeTimer = setTimeout(probe, PROBE_INTERVAL_MS)
        ;(probeTimer as { unref?(): void }).unref?.()
      }
    })
  }
  const failed = (error: unknown) => {
    if (away || ended || !isDatabaseUnavailable(error)) return
    away = true
    options.onAvailability?.(false, error)
    probe()
  }
  const refusal = () => {
    const refused = Promise.reject(new DatabaseUnavailableError())
    refused.catch(() => {})
    // What Drizzle calls on a query (`.values()`) hands back the same refusal.
    return Object.assign(refused, { values: () => refused, raw: () => refused, execute: () => refused })
  }

  return new Proxy(client, {
    get(target, property, receiver) {
      if (property === 'unsafe') {
        return (...args: Parameters<postgres.Sql['unsafe']>) => {
          if (away) return refusal()
          const query = target.unsafe(...args)
          // Promise's own `then`: a postgres-js query runs when its `then` is called, and Drizzle calls `.values()` first.
          Promise.prototype.then.call(query, undefined, failed)
          return query
        }
      }
      if (property === 'begin') {
        return (...args: unknown[]) => {
          if (away) return refusal()
          const transaction = (target.begin as (...a: unknown[]) => Promise<unknown>)(...args)
          transaction.then(undefined, failed)
          return transaction
        }
      }
      if (property === 'end' || property === 'close') {
        return (...args: unknown[]) => {
          ended = true
          clearTimeout(probeTimer)
          return (Reflect.get(target, property) as (...a: unknown[]) => unknown).apply(target, args)
        }
      }
      return Reflect.get(target, property, receiver)
    },
  })
}

/**
 * Connections per process: the API's pool, its pool for settlements (one statement at a time
 * per account settling: src/messages/service.ts) and the delivery worker thread's own (the
 * metrics report each).
 */
export const POOL_SIZES = { api: 10, keyed: 4, worker: 4 } as const

export function postgresDatabase(url: string, options: { max?: number } = {}): DatabaseHandle {
  const client = postgresClient(url, { max: options.max ?? POOL_SIZES.api })
  const keyed = postgresClient(url, { max: POOL_SIZES.keyed, settings: KEYED_PLAN_SETTINGS })
  return {
    db: preparedDrizzle(client),
    keyedDb: preparedDrizzle(keyed),
    kind: 'postgres',
    close: async () => {
      await Promise.all([client.end({ timeout: 5 }), keyed.end({ timeout: 5 })])
    },
  }
}

export function pgliteDatabase(client: PGlite): DatabaseHandle {
  const db = drizzlePglite(client, { schema }) as unknown as Database
  return {
    db,
    keyedDb: drizzlePglite(pgliteNamedClient(client, KEYED_PLAN_SETTINGS) as PGlite, { schema }) as unknown as Database,
    kind: 'pglite',
    close: () => client.close(),
  }
}

// How long PGlite's calls may run one after another before the event loop takes a turn.
const MAX_CHAIN_MS = 5

/**
 * PGlite runs a statement on this thread, and its promise settles within the same turn of the
 * event loop. A burst whose continuations each issue the next statement (an account's 60
 * messages stored, dispatched and settled one after another) is then one chain of microtasks,
 * and timers and sockets wait until it ends: another account's request was read up to 665 ms late
 * (docs/performance.md, issue 37, nineteenth pass). Every protocol exchange (each statement is
 * several) notes whether a turn of the loop has passed since the chain began; after MAX_CHAIN_MS
 * without one, it waits for the next turn first. Calls with turns between them, the usual case,
 * never wait.
 */
export class TurnTakingPGlite extends PGlite {
  // Whether a turn is awaited since the first call of the current chain (a marker is scheduled for it), and when that call came.
  #turnPending = false
  #chainStartedAt = 0

  /**
   * A TurnTakingPGlite, ready: how the server's data directory (src/instance.ts) and the tests'
   * clones of a migrated template (tests/support/database.ts) are opened, so both run this class.
   * PGlite's own `create` would make a plain PGlite, without the turns.
   */
  static override async create(dataDirOrOptions?: string | PGliteOptions, options?: PGliteOptions): Promise<TurnTakingPGlite> {
    const client = new TurnTakingPGlite(typeof dataDirOrOptions === 'string' ? { ...options, dataDir: dataDirOrOptions } : (dataDirOrOptions ?? {}))
    await client.waitReady
    return client
  }

  override async execProtocolRaw(...args: Parameters<PGlite['execProtocolRaw']>): ReturnType<PGlite['execProtocolRaw']> {
    // The marker was scheduled first, so it runs in that turn before this call goes on, and a new chain begins.
    if (this.#turnPending && performance.now() - this.#chainStartedAt > MAX_CHAIN_MS) await new Promise<void>((resolve) => setImmediate(resolve))
    if (!this.#turnPending) {
      this.#turnPending = true
      this.#chainStartedAt = performance.now()
      setImmediate(() => (this.#turnPending = false))
    }
    return super.execProtocolRaw(...args)
  }
}

/** Raw SQL rows, whichever driver ran them (PGlite answers `{ rows }`, postgres-js an array). */
export async function queryRows<T>(db: Database, query: SQL): Promise<T[]> {
  const result = (await db.execute(query)) as unknown
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[]
}

/**
 * Runs statements as one transaction, each seeing what the ones before it did, and returns each
 * one's rows. On PostgreSQL they are sent together, without waiting for each answer (postgres-js
 * pipelines the queries a transaction's callback returns as an array, once each is prepared on
 * the connection, which `preparedDrizzle` asks for): a lock and the statement it guards cost one
 * round trip, not two, and on a busy machine each round trip is a wait for the scheduler on both
 * sides (docs/performance.md, issue 37, fourteenth pass). PGlite answers within this process:
 * there they simply run one after another.
 */
export async function pipelinedTransaction(db: Database, statements: SQL[]): Promise<unknown[][]> {
  // `Database` does not say which driver it is over; postgres-js's client is a function with `begin`.
  const client = (db as unknown as { $client: unknown }).$client
  if (typeof client === 'function' && 'begin' in client) {
    const queries = statements.map((statement) => postgresDialect.sqlToQuery(statement))
    try {
      return (await (client as postgres.Sql).begin((tx) => queries.map((query) => tx.unsafe(query.sql, query.params as postgres.ParameterOrJSON<never>[])))) as unknown[][]
    } catch (error) {
      // A lost or refused connection is not the statements' doing: it goes on as it is.
      if (isDatabaseUnavailable(error)) throw error
      // A statement's failure fails as Drizzle's own queries fail (and as on PGlite), so the log names
      // its SQL text and SQLSTATE (src/lib/runtime/logger.ts). postgres-js names the statement that
      // failed by its text; a failure of BEGIN or COMMIT, or two statements of the same text, names them all.
      const named = queries.filter((query) => query.sql === (error as { query?: unknown }).query)
      const failed = named.length === 1 ? named[0] : undefined
      throw new DrizzleQueryError(failed?.sql ?? queries.map((query) => query.sql).join(';\n'), failed?.params ?? queries.flatMap((query) => query.params), error as Error)
    }
  }
  return db.transaction(async (tx) => {
    const results: unknown[][] = []
    for (const statement of statements) results.push(await queryRows<unknown>(tx as unknown as Database, statement))
    return results
  })
}

const postgresDialect = new PgDialect()

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
