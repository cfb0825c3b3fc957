import { afterAll, describe, expect, test } from 'bun:test'
import { DrizzleQueryError, sql } from 'drizzle-orm'
import postgres from 'postgres'
import { pipelinedTransaction, preparedDrizzle } from '../../../src/lib/db/client.ts'
import { describeError } from '../../../src/lib/runtime/logger.ts'
import { createTestDatabase } from '../../support/database.ts'

const database = await createTestDatabase()
const { db } = database.handle
afterAll(() => database.drop())

await db.execute(sql`create table pipelined_rows (n int primary key)`)
// Answers with a notice, so the client sees when PostgreSQL has run it; takes a parameter, as the claim's lock does.
await db.execute(sql.raw(`create function pipelined_notice(label text) returns int language plpgsql as $$ begin raise notice '%', label; return 1; end $$`))

const numbers = (rows: unknown[] | undefined) => (rows as { n: number }[]).map((row) => row.n)

describe('pipelinedTransaction (src/lib/db/client.ts)', () => {
  test("returns each statement's rows; each statement sees what the ones before it wrote", async () => {
    const [inserted, counted] = await pipelinedTransaction(db, [
      sql`insert into pipelined_rows (n) values (1), (2) returning n`,
      sql`select count(*)::int as n from pipelined_rows`,
    ])
    expect(numbers(inserted)).toEqual([1, 2])
    expect(numbers(counted)).toEqual([2])
  })

  test('no statement: an empty transaction, and no rows', async () => {
    expect(await pipelinedTransaction(db, [])).toEqual([])
  })

  test('a failing statement fails the call and rolls back the ones before it', async () => {
    const error = (await pipelinedTransaction(db, [sql`insert into pipelined_rows (n) values (3)`, sql`insert into pipelined_rows (n) values (1)`]).catch((caught) => caught)) as Error
    // As Drizzle fails its own queries, on both drivers: the failing statement's text, the database's error as the cause.
    expect(error).toBeInstanceOf(DrizzleQueryError)
    expect((error as DrizzleQueryError).query).toBe('insert into pipelined_rows (n) values (1)')
    expect((error.cause as Error).message).toMatch(/duplicate key/)
    expect((error.cause as { code?: string }).code).toBe('23505')
    // What the worker's log says of a failed claim.
    expect(describeError(error)).toMatchObject({ sql_state: '23505', query: 'insert into pipelined_rows (n) values (1)' })
    const [after] = await pipelinedTransaction(db, [sql`select n from pipelined_rows order by n`])
    expect(numbers(after)).toEqual([1, 2])
  })

  test('a failing first statement: the next one never runs', async () => {
    const error = (await pipelinedTransaction(db, [sql`select 1 / ${0}::int`, sql`insert into pipelined_rows (n) values (4)`]).catch((caught) => caught)) as Error
    expect((error as DrizzleQueryError).query).toBe('select 1 / $1::int')
    expect((error.cause as Error).message).toMatch(/division by zero/)
    const [after] = await pipelinedTransaction(db, [sql`select n from pipelined_rows order by n`])
    expect(numbers(after)).toEqual([1, 2])
  })

  // postgres-js names a failing statement by its text alone: where that does not tell which one failed, all are named.
  test.if(!!database.url)('on PostgreSQL, a failure at COMMIT, or in one of two statements of the same text, names every statement', async () => {
    await db.execute(sql`create table pipelined_deferred (n int unique deferrable initially deferred)`)
    const atCommit = (await pipelinedTransaction(db, [sql`insert into pipelined_deferred (n) values (1)`, sql`insert into pipelined_deferred (n) values (1)`]).catch((caught) => caught)) as DrizzleQueryError
    expect(atCommit).toBeInstanceOf(DrizzleQueryError)
    expect(atCommit.query).toBe('insert into pipelined_deferred (n) values (1);\ninsert into pipelined_deferred (n) values (1)')
    expect((atCommit.cause as { code?: string }).code).toBe('23505')
    const sameText = (await pipelinedTransaction(db, [sql`insert into pipelined_rows (n) values (${5})`, sql`insert into pipelined_rows (n) values (${5})`]).catch((caught) => caught)) as DrizzleQueryError
    expect(sameText.query).toBe('insert into pipelined_rows (n) values ($1);\ninsert into pipelined_rows (n) values ($1)')
    expect(sameText.params).toEqual([5, 5])
    const [after] = await pipelinedTransaction(db, [sql`select n from pipelined_rows order by n`])
    expect(numbers(after)).toEqual([1, 2])
  })

  // On PGlite the statements run in this process: there is no round trip to save. A statement with parameters
  // is pipelined once it is prepared on the connection (its first use waits for its description), as
  // preparedDrizzle has every statement prepared: the second call shows what every later claim does.
  test.if(!!database.url)('on PostgreSQL, once prepared, the second statement is sent before the first is answered', async () => {
    const events: string[] = []
    const client = postgres(database.url!, {
      max: 1,
      onnotice: (notice) => events.push(`answered: ${notice.message}`),
      debug: (_connection, query) => events.push(`sent: ${query.trim().split(/\s+/).slice(0, 2).join(' ')}`),
    })
    try {
      const pipelinedDb = preparedDrizzle(client)
      const call = () => pipelinedTransaction(pipelinedDb, [sql`select pipelined_notice(${'first'})`, sql`select ${2}::int as second`])
      await call()
      events.length = 0
      await call()
      expect(events.filter((event) => !/^sent: (begin|commit)$/.test(event))).toEqual(['sent: select pipelined_notice($1)', 'sent: select $1::int', 'answered: first'])
    } finally {
      await client.end({ timeout: 5 })
    }
  })
})
