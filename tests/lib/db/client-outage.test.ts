import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { DrizzleQueryError, sql } from 'drizzle-orm'
import postgres from 'postgres'
import { isDatabaseReachable, pipelinedTransaction, postgresClient, preparedDrizzle, queryRows, type Database } from '../../../src/lib/db/client.ts'
import { isDatabaseUnavailable } from '../../../src/lib/db/errors.ts'
import { testDatabaseChoice } from '../../support/database.ts'
import { privatePostgresUnavailable, startPrivatePostgres, type PrivatePostgres } from '../../support/private-postgres.ts'

// Our postgres-js pools (src/lib/db/client.ts, with patches/postgres@3.4.9.patch) on a PostgreSQL
// of the test's own, which is stopped, started and has sessions killed. Only in the PostgreSQL
// pass: the PGlite pass has no database server to lose.
const unavailable = testDatabaseChoice() === 'pglite' ? 'the PGlite pass has no database server to stop' : privatePostgresUnavailable()

const selectOne = (db: Database) => queryRows(db, sql`select 1`)

/** Milliseconds until `attempt` first succeeds, retried every 10 ms; fails after `withinMs`. */
async function msUntil(attempt: () => Promise<unknown>, withinMs: number): Promise<number> {
  const started = performance.now()
  for (;;) {
    if (await attempt().then(() => true, () => false)) return performance.now() - started
    if (performance.now() - started > withinMs) throw new Error(`still failing after ${withinMs} ms`)
    await Bun.sleep(10)
  }
}

describe.skipIf(unavailable !== null)(`the PostgreSQL pool through a database outage${unavailable ? ` (skipped: ${unavailable})` : ''}`, () => {
  let database: PrivatePostgres
  beforeAll(async () => {
    database = await startPrivatePostgres()
  })
  afterAll(() => database?.remove())

  test('while the database is down, queries fail at once instead of queueing for it, readiness says so, and the pool comes back by itself', async () => {
    const availability: boolean[] = []
    const client = postgresClient(database.url, { max: 4, onAvailability: (available) => availability.push(available) })
    const db = preparedDrizzle(client)
    try {
      await selectOne(db)
      await database.stop()
      // A burst on a pool that does not know yet. postgres-js used to fail one waiting query per
      // connection attempt, attempts spaced by its backoff: 200 queries on 4 connections took minutes.
      const burst = performance.now()
      const outcomes = await Promise.all(Array.from({ length: 200 }, () => selectOne(db).then(() => 'answered', (error) => (isDatabaseUnavailable(error) ? 'unavailable' : String(error)))))
      expect([...new Set(outcomes)]).toEqual(['unavailable'])
      expect(performance.now() - burst).toBeLessThan(3_000)
      // Now the pool knows: refused without waiting for a connection, readiness included.
      const refused = performance.now()
      expect(await selectOne(db).then(() => null, (error) => isDatabaseUnavailable(error))).toBe(true)
      expect(await isDatabaseReachable(db)).toBe(false)
      expect(performance.now() - refused).toBeLessThan(500)
      expect(availability).toEqual([false])

      await database.start()
      expect(await msUntil(() => selectOne(db), 5_000)).toBeLessThan(2_500)
      expect(await isDatabaseReachable(db)).toBe(true)
      expect(availability).toEqual([false, true])
    } finally {
      await client.end({ timeout: 1 })
      // Running again for the next test, whatever failed here (already running: pg_ctl refuses, harmlessly).
      await database.start().catch(() => {})
    }
  })

  /**
   * Three rounds of: `run` starts a transaction that writes to `table` and then sleeps; its session
   * is killed during the sleep. It must fail as unavailable, commit nothing and throw nothing
   * uncaught, and its connection must serve the next query at once (one connection, so the next
   * query is on the very connection whose session died).
   */
  async function killedMidTransaction(table: string, run: (db: Database, round: number) => Promise<unknown>) {
    const client = postgresClient(database.url, { max: 1 })
    const killer = postgres(database.url, { max: 1, onnotice: () => {} })
    const db = preparedDrizzle(client)
    // Unpatched, postgres-js wrote the transaction's ROLLBACK to the closed socket from a
    // setImmediate: an uncaught TypeError that ends the process (or the delivery worker thread),
    // and the connection never connected again (every attempt ended in CONNECT_TIMEOUT).
    const uncaught: unknown[] = []
    const onUncaught = (error: unknown) => uncaught.push(error)
    process.on('uncaughtException', onUncaught)
    try {
      await db.execute(sql.raw(`create table ${table} (round int)`))
      for (let round = 0; round < 3; round++) {
        const transaction = run(db, round)
        let sleeping: { pid: number }[] = []
        while (sleeping.length === 0) {
          await Bun.sleep(5)
          sleeping = await killer<{ pid: number }[]>`select pid from pg_stat_activity where state = 'active' and query like 'select pg_sleep(%' and pid <> pg_backend_pid()`
        }
        await killer`select pg_terminate_backend(${sleeping[0]!.pid})`
        expect(await transaction.then(() => 'committed', (error) => (isDatabaseUnavailable(error) ? 'unavailable' : String(error)))).toBe('unavailable')
        // The pool may refuse for the moment its probe takes to see the database answer.
        expect(await msUntil(() => selectOne(db), 3_000)).toBeLessThan(1_000)
        expect(await queryRows(db, sql.raw(`select count(*)::int as n from ${table}`))).toEqual([{ n: 0 }])
      }
      await Bun.sleep(50)
      expect(uncaught).toEqual([])
    } finally {
      process.off('uncaughtException', onUncaught)
      await killer.end({ timeout: 1 })
      await client.end({ timeout: 1 })
    }
  }

  test('a transaction whose session is killed mid-statement fails as unavailable, commits nothing, throws nothing uncaught, and its connection serves the next query at once', () =>
    killedMidTransaction('killed_transaction', (db, round) =>
      db.transaction(async (tx) => {
        await tx.execute(sql`insert into killed_transaction values (${round})`)
        await tx.execute(sql`select pg_sleep(5)`)
        await tx.execute(sql`insert into killed_transaction values (${round})`)
      }),
    ))

  test("the same with the statements sent together (pipelinedTransaction, as the delivery claim is): the ones still in flight fail with it, as the connection's error, not a statement's", () =>
    killedMidTransaction('killed_pipeline', (db, round) =>
      pipelinedTransaction(db, [sql`insert into killed_pipeline values (${round})`, sql`select pg_sleep(${5})`, sql`insert into killed_pipeline values (${round})`]).catch((error) => {
        // A worker's log line during an outage then carries no claim text (src/lib/db/client.ts).
        expect(error).not.toBeInstanceOf(DrizzleQueryError)
        throw error
      }),
    ))
})
