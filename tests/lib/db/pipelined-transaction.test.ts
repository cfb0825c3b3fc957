import { afterAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import postgres from 'postgres'
import { pipelinedTransaction, preparedDrizzle } from '../../../src/lib/db/client.ts'
import { createTestDatabase } from '../../support/database.ts'

const database = await createTestDatabase()
const { db } = database.handle
afterAll(() => database.drop())

await db.execute(sql`create table pipelined_rows (n int primary key)`)

describe('pipelinedTransaction (src/lib/db/client.ts)', () => {
  test("returns each statement's rows; each statement sees what the ones before it wrote", async () => {
    const [inserted, counted] = await pipelinedTransaction<{ n: number }>(db, [
      sql`insert into pipelined_rows (n) values (1), (2) returning n`,
      sql`select count(*)::int as n from pipelined_rows`,
    ])
    expect(inserted!.map((row) => row.n)).toEqual([1, 2])
    expect(counted).toEqual([{ n: 2 }])
  })

  test('a failing statement fails the call and rolls back the ones before it', async () => {
    const error = (await pipelinedTransaction(db, [sql`insert into pipelined_rows (n) values (3)`, sql`insert into pipelined_rows (n) values (1)`]).catch((caught) => caught)) as Error
    // Drizzle (PGlite) wraps the database's error; postgres-js (PostgreSQL) throws it as it is.
    expect((error.cause as Error | undefined)?.message ?? error.message).toMatch(/duplicate key/)
    const [after] = await pipelinedTransaction<{ n: number }>(db, [sql`select n from pipelined_rows order by n`])
    expect(after!.map((row) => row.n)).toEqual([1, 2])
  })

  // On PGlite the statements run in this process: there is no round trip to save.
  test.if(!!database.url)('on PostgreSQL the second statement is sent before the first is answered', async () => {
    const events: string[] = []
    const client = postgres(database.url!, {
      max: 1,
      onnotice: (notice) => events.push(`answered: ${notice.message}`),
      debug: (_connection, query) => events.push(`sent: ${query.trim().split(/\s+/).slice(0, 2).join(' ')}`),
    })
    try {
      await pipelinedTransaction(preparedDrizzle(client), [sql.raw(`do $$ begin raise notice 'first'; end $$`), sql`select 2 as second`])
      expect(events.filter((event) => /^(sent: (do|select 2)|answered)/.test(event))).toEqual(['sent: do $$', 'sent: select 2', 'answered: first'])
    } finally {
      await client.end({ timeout: 5 })
    }
  })
})
