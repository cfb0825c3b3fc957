import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { PGlite } from '@electric-sql/pglite'
import { sql } from 'drizzle-orm'
import { pgliteDatabase, queryRows, type DatabaseHandle } from '../../../src/lib/db/client.ts'
import { pgliteNamedStatement } from '../../../src/lib/db/pglite-named.ts'

// The embedded database of every pass: PGlite runs in this process whatever TEST_DATABASE says.
describe('a statement run by name on PGlite (src/lib/db/pglite-named.ts)', () => {
  let handle: DatabaseHandle
  let client: PGlite
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

  test('answers what the same statement answers through Drizzle, with each value parsed the same way, and is planned once, generically', async () => {
    const named = pgliteNamedStatement(client, 'lookup', { plan_cache_mode: 'force_generic_plan', enable_seqscan: 'off' })
    for (const [ids, allowances, name] of [
      [[1, 2, 3], { 'item 2': 5 }, null],
      [[150, 7], {}, 'item 7'],
      [[], {}, null],
    ] as const) {
      const query = lookup([...ids], allowances, name)
      const expected = await queryRows(handle.db, query)
      const answered = await named(query)
      expect(answered).toEqual(expected)
    }
    expect((await named(lookup([2], { 'item 2': 5 }, null)))[0]).toEqual({ id: 2, name: 'item 2', even: true, allowance: 5, at: expect.stringMatching(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/) })
    const [statement] = await queryRows<{ generic_plans: number; custom_plans: number }>(
      handle.db,
      sql`select generic_plans::int, custom_plans::int from pg_prepared_statements where name = 'lookup'`,
    )
    expect(statement).toEqual({ generic_plans: 4, custom_plans: 0 })
  })

  test('its settings hold for its own call only: the rest of the session keeps its own', async () => {
    const named = pgliteNamedStatement(client, 'settings_seen', { enable_seqscan: 'off', work_mem: '1234kB' })
    expect(await named(sql`select current_setting('enable_seqscan') as seqscan, current_setting('work_mem') as work_mem`)).toEqual([{ seqscan: 'off', work_mem: '1234kB' }])
    expect(await queryRows(handle.db, sql`select current_setting('enable_seqscan') as seqscan, current_setting('work_mem') as work_mem`)).toEqual([{ seqscan: 'on', work_mem: '4MB' }])
  })

  test('a failing call rejects with the database error and leaves the statement usable; a statement that does not prepare leaves no name behind', async () => {
    const named = pgliteNamedStatement(client, 'divides', {})
    await expect(named(sql`select 10 / ${0}::int as quotient`)).rejects.toMatchObject({ code: '22012' })
    expect(await named(sql`select 10 / ${5}::int as quotient`)).toEqual([{ quotient: 2 }])
    await expect(named(sql`select 10 / ${5}::int as other`)).rejects.toThrow('prepared for another text')

    const broken = pgliteNamedStatement(client, 'broken', { work_mem: '2MB' })
    await expect(broken(sql`select from nowhere_at_all`)).rejects.toMatchObject({ code: '42P01' })
    await client.exec('create table nowhere_at_all (id int)')
    expect(await broken(sql`select from nowhere_at_all`)).toEqual([])
  })

  test('waits for a transaction in progress instead of running inside it', async () => {
    const named = pgliteNamedStatement(client, 'count_items', {})
    let release!: () => void
    const held = new Promise<void>((resolve) => (release = resolve))
    const transaction = client.transaction(async (tx) => {
      await tx.query(`insert into items (id, name) values (1000, 'uncommitted')`)
      await held
      await tx.rollback()
    })
    await Bun.sleep(10)
    const counted = named<{ n: number }>(sql`select count(*)::int as n from items where id = ${1000}`)
    await Bun.sleep(20)
    release()
    await transaction
    expect(await counted).toEqual([{ n: 0 }])
  })
})
