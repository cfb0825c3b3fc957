import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { PGlite } from '@electric-sql/pglite'
import { sql } from 'drizzle-orm'
import { drizzle } from 'drizzle-orm/pglite'
import { pgliteDatabase, queryRows, type Database, type DatabaseHandle } from '../../../src/lib/db/client.ts'
import { KEYED_PLAN_SETTINGS } from '../../../src/lib/db/keyed-plans.ts'
import { pgliteNamedClient } from '../../../src/lib/db/pglite-named.ts'

// The embedded database of every pass: PGlite runs in this process whatever TEST_DATABASE says.
describe('statements run by name on PGlite (src/lib/db/pglite-named.ts)', () => {
  let handle: DatabaseHandle
  let client: PGlite
  const named = (settings: Record<string, string>) => drizzle(pgliteNamedClient(client, settings) as PGlite) as unknown as Database
  const prepared = () =>
    queryRows<{ statement: string; generic_plans: number; custom_plans: number }>(
      handle.db,
      sql`select statement, generic_plans::int, custom_plans::int from pg_prepared_statements order by prepare_time`,
    )

  beforeAll(async () => {
    client = await PGlite.create()
    handle = pgliteDatabase(client)
    await client.exec(`create table items (id int primary key, name text not null, tags jsonb not null default '{}', at timestamptz not null default now());
      insert into items (id, name, tags) select g, 'item ' || g, jsonb_build_object('even', g % 2 = 0) from generate_series(1, 200) g;`)
  })
  afterAll(() => handle.close())

  const lookup = (ids: number[], allowances: Record<string, number>, name: string | null) =>
    sql`select i.id, i.name, (i.tags ->> 'even')::boolean as even, coalesce((${JSON.stringify(allowances)}::jsonb ->> i.name)::int, 0) as allowance, i.at
        from items i where i.id = any(array(select jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb)::int)) and (${name}::text is null or i.name = ${name})
        order by i.id`

  test('the keyed database answers what the same statement answers unnamed, each value parsed the same way, and plans it once, generically', async () => {
    for (const [ids, allowances, name] of [
      [[1, 2, 3], { 'item 2': 5 }, null],
      [[150, 7], {}, 'item 7'],
      [[], {}, null],
    ] as const) {
      const query = lookup([...ids], allowances, name)
      expect(await queryRows(handle.keyedDb, query)).toEqual(await queryRows(handle.db, query))
    }
    expect((await queryRows(handle.keyedDb, lookup([2], { 'item 2': 5 }, null)))[0]).toEqual({ id: 2, name: 'item 2', even: true, allowance: 5, at: expect.stringMatching(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/) })
    // Drizzle's own builders (rows as arrays, mapped to fields) come back the same way too.
    const items = (await import('drizzle-orm/pg-core')).pgTable('items', (c) => ({ id: c.integer().primaryKey(), name: c.text().notNull() }))
    const { eq } = await import('drizzle-orm')
    expect(await handle.keyedDb.select().from(items).where(eq(items.id, 3))).toEqual([{ id: 3, name: 'item 3' }])

    const statements = await prepared()
    const lookups = statements.filter((row) => row.statement.includes('jsonb_array_elements_text'))
    expect(lookups).toEqual([{ statement: expect.any(String), generic_plans: 4, custom_plans: 0 }])
    expect(statements.filter((row) => row.statement.startsWith('select set_config('))).toHaveLength(1)
  })

  test('its settings hold for its own calls only: the rest of the session keeps its own', async () => {
    const db = named({ enable_seqscan: 'off', work_mem: '1234kB' })
    const settings = sql`select current_setting('enable_seqscan') as seqscan, current_setting('work_mem') as work_mem, current_setting('plan_cache_mode') as plans`
    expect(await queryRows(db, settings)).toEqual([{ seqscan: 'off', work_mem: '1234kB', plans: 'auto' }])
    expect(await queryRows(handle.db, settings)).toEqual([{ seqscan: 'on', work_mem: '4MB', plans: 'auto' }])
    expect(await queryRows(handle.keyedDb, settings)).toEqual([{ seqscan: KEYED_PLAN_SETTINGS.enable_seqscan, work_mem: '4MB', plans: 'force_generic_plan' }])
    expect(await queryRows(handle.db, settings)).toEqual([{ seqscan: 'on', work_mem: '4MB', plans: 'auto' }])
  })

  test('a failing call rejects with the database error, with its text, and leaves the statement usable; a text that does not prepare leaves no name behind', async () => {
    const db = named({})
    const divide = (by: number) => sql`select 10 / ${by}::int as quotient`
    const failed = await queryRows(db, divide(0)).catch((error: Error) => error)
    expect(failed).toMatchObject({ cause: { code: '22012', query: 'select 10 / $1::int as quotient', params: [0] } })
    expect(await queryRows(db, divide(5))).toEqual([{ quotient: 2 }])

    const before = (await prepared()).length
    await expect(queryRows(db, sql`select from nowhere_at_all where ${1} = 1`)).rejects.toMatchObject({ cause: { code: '42P01' } })
    expect(await prepared()).toHaveLength(before)
    await client.exec('create table nowhere_at_all (id int)')
    expect(await queryRows(db, sql`select from nowhere_at_all where ${1} = 1`)).toEqual([])
    expect(await prepared()).toHaveLength(before + 1)
  })

  test('waits for a transaction in progress instead of running inside it', async () => {
    let release!: () => void
    const held = new Promise<void>((resolve) => (release = resolve))
    const transaction = client.transaction(async (tx) => {
      await tx.query(`insert into items (id, name) values (1000, 'uncommitted')`)
      await held
      await tx.rollback()
    })
    await Bun.sleep(10)
    const counted = queryRows<{ n: number }>(handle.keyedDb, sql`select count(*)::int as n from items where id = ${1000}`)
    await Bun.sleep(20)
    release()
    await transaction
    expect(await counted).toEqual([{ n: 0 }])
  })

  test('in its own transaction, statements run by name with its settings, see each other, and roll back together', async () => {
    const db = named({ work_mem: '2345kB' })
    const insert = (id: number) => sql`insert into items (id, name) values (${id}, ${`in a transaction ${id}`}) returning current_setting('work_mem') as work_mem`
    const count = sql`select count(*)::int as n from items where name like ${'in a transaction %'}`
    await expect(
      db.transaction(async (tx) => {
        expect(await queryRows(tx as unknown as Database, insert(2001))).toEqual([{ work_mem: '2345kB' }])
        expect(await queryRows(tx as unknown as Database, count)).toEqual([{ n: 1 }])
        await queryRows(tx as unknown as Database, insert(2001))
      }),
    ).rejects.toMatchObject({ cause: { code: '23505' } })
    expect(await queryRows(handle.db, count)).toEqual([{ n: 0 }])
    await db.transaction(async (tx) => {
      await queryRows(tx as unknown as Database, insert(2002))
      await queryRows(tx as unknown as Database, insert(2003))
    })
    expect(await queryRows(handle.db, count)).toEqual([{ n: 2 }])
    expect((await prepared()).filter((row) => row.statement.startsWith('insert into items'))).toHaveLength(1)
  })

  test('past 64 texts, more run unnamed and still answer; two clients on one PGlite keep their names apart', async () => {
    const db = named({})
    const first = named({})
    expect(await queryRows(first, sql`select ${1}::int as n`)).toEqual([{ n: 1 }])
    const before = (await prepared()).length
    // Sent together, as the server's callers send them: the last places are not taken twice.
    const answers = await Promise.all(Array.from({ length: 70 }, (_, i) => queryRows(db, sql.raw(`select ${i} as n`))))
    expect(answers).toEqual(Array.from({ length: 70 }, (_, i) => [{ n: i }]))
    // 64 texts and the settings statement.
    expect((await prepared()).length - before).toBe(65)
    expect(await queryRows(db, sql.raw('select 69 as n'))).toEqual([{ n: 69 }])
    expect((await prepared()).length - before).toBe(65)
    expect(await queryRows(first, sql`select ${2}::int as n`)).toEqual([{ n: 2 }])
  })
})
