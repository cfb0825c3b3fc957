import { afterAll, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../../src/lib/db/client.ts'
import { newId } from '../../../src/lib/db/ids.ts'
import { createTestDatabase } from '../../support/database.ts'

// docs/architecture.md#ids: ids compare byte by byte whatever the database's collation. The
// PostgreSQL pass with TEST_POSTGRES_ICU_LOCALE=en-US (.ci/run) runs this on a database whose
// default collation sorts '~' before letters, as many managed services' do.
const database = await createTestDatabase()
afterAll(() => database.drop())
const db = database.handle.db

test('every column that holds an id is collated "C", whatever the database default', async () => {
  const columns = await queryRows<{ column: string; collation: string | null }>(
    db,
    sql`select table_name || '.' || column_name as column, collation_name as collation from information_schema.columns
        where table_schema = 'public' and data_type = 'text' and (column_name = 'id' or right(column_name, 3) = '_id')
        order by 1`,
  )
  expect(columns.length).toBeGreaterThan(25)
  expect(columns.filter((column) => column.collation !== 'C')).toEqual([])
})

test('an id column compares with a literal byte by byte: nothing sorts after "~", and order by id is the order JavaScript sorts in', async () => {
  const accountId = newId('acc')
  await db.execute(sql`insert into accounts (id, name) values (${accountId}, 'collation')`)
  const ids = Array.from({ length: 50 }, () => newId('evt', Date.now() - Math.floor(Math.random() * 1e9)))
  for (const id of ids) await db.execute(sql`insert into events (id, account_id, type, payload) values (${id}, ${accountId}, 'message.inbound', '{}')`)
  const [after] = await queryRows<{ n: number }>(db, sql`select count(*)::int as n from events where account_id = ${accountId} and id > '~'`)
  expect(after!.n).toBe(0)
  const ordered = await queryRows<{ id: string }>(db, sql`select id from events where account_id = ${accountId} order by id`)
  expect(ordered.map((row) => row.id)).toEqual([...ids].sort())
})
