import { expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { startTestServer } from '../support/server.ts'
import { explainedConnection, isSuperuser, nodesOf } from '../support/plans.ts'
import { preparedDrizzle, queryRows } from '../../src/lib/db/client.ts'
import { KEYED_PLAN_SETTINGS } from '../../src/lib/db/keyed-plans.ts'
import { newId } from '../../src/lib/db/ids.ts'
import { MESSAGE_WRITES, createMessageSettler } from '../../src/messages/service.ts'

// What a message settlement reads on PostgreSQL (src/messages/service.ts, createMessageSettler),
// from its executed plan, on a connection with the settings of the pool settlements run on
// (`keyedDb`, src/lib/db/client.ts).
const server = await startTestServer({ deliverWebhooks: false })
const db = server.database.handle.db
const superuser = server.database.url ? await isSuperuser(db) : false

test.if(!!server.database.url)('the pool settlements run on plans with the keyed settings; the API pool with the defaults', async () => {
  const hashJoins = async (pool: typeof db) => (await queryRows<{ enable_hashjoin: string }>(pool, sql`show enable_hashjoin`))[0]!.enable_hashjoin
  expect(await hashJoins(server.database.handle.keyedDb)).toBe('off')
  expect(await hashJoins(db)).toBe('on')
})

test.if(superuser)('a settlement reaches its message by key: first planned on an empty table, after 3,000 messages settled', async () => {
  const owner = await server.createAccountWithKey('Settling')
  const created = await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event: 'message.delivered', target_url: 'https://hooks.example.com/settled' }),
  })
  expect(created.status).toBe(201)
  const hook = (await created.json()) as { id: string }
  const { connection, plans } = explainedConnection(server.database.url!, KEYED_PLAN_SETTINGS)
  try {
    const { settle } = createMessageSettler(preparedDrizzle(connection))
    const queue = async (count: number) => {
      const ids = Array.from({ length: count }, () => newId('msg'))
      await db.execute(sql`insert into messages (id, account_id, direction, contact, body, status)
        select id, ${owner.accountId}, 'outbound', '+14155550100', 'hi', 'queued' from unnest(${sql.raw(`array[${ids.map((id) => `'${id}'`).join(',')}]`)}::text[]) as id`)
      return ids
    }
    const settleAll = (ids: string[]) =>
      Promise.all(
        ids.map((id) =>
          settle({ account_id: owner.accountId, message_id: id, status: 'delivered', error: null, updated_at: new Date().toISOString(), event_id: newId('evt'), event_type: 'message.delivered', payload: '{}', trace_context: null }),
        ),
      )
    // Planned while messages is empty, then kept on this connection.
    expect(await settleAll(await queue(1))).toEqual([{ count: 1, dueHooks: [hook.id], fanOuts: [] }])
    // Each settled message leaves its entry in the partial index of queued messages until a vacuum.
    for (let i = 0; i < 6; i++) await settleAll(await queue(500))
    plans.length = 0
    expect(await settleAll(await queue(1))).toEqual([{ count: 1, dueHooks: [hook.id], fanOuts: [] }])
    const settlement = plans.find((item) => item.query.includes('settled as ('))
    expect(settlement).toBeDefined()
    const readsOfMessages = nodesOf(settlement!.plan)
      .filter((node) => node['Node Type'] !== 'ModifyTable' && (node['Relation Name'] === 'messages' || node['Index Name']?.startsWith('messages_')))
      .map((node) => `${node['Node Type']} ${node['Index Name'] ?? node['Relation Name']} × ${node['Actual Loops']}`)
    expect(readsOfMessages).toEqual(['Index Scan messages_pkey × 1'])
  } finally {
    await connection.end({ timeout: 5 })
  }
}, 60_000)

test.if(superuser)('a wide fan-out\'s statements read about as many subscriptions as they write, by key, however wide it is', async () => {
  const owner = await server.createAccountWithKey('Fanning out')
  const neighbour = await server.createAccountWithKey('Fanning out, next door')
  const width = 60
  // The neighbour's 2,000 subscriptions have ids between ours, as subscriptions made over time do.
  await db.execute(sql`insert into hooks (id, account_id, event, target_url, secret_ciphertext)
    select 'hk_' || lpad(n::text, 24, '0'), case when n % 34 = 0 then ${owner.accountId} else ${neighbour.accountId} end,
      'message.delivered', 'https://hooks.example.com/wide/' || n, 'sealed'
    from generate_series(1, ${width * 34}) as n`)
  await db.execute(sql`analyze hooks`)
  const { connection, plans } = explainedConnection(server.database.url!, KEYED_PLAN_SETTINGS)
  try {
    const keyed = preparedDrizzle(connection)
    const chunk = 10
    const { settle, fanOuts } = createMessageSettler(keyed, { ...MESSAGE_WRITES.postgres, fanOutChunk: chunk })
    const messageId = newId('msg')
    await db.execute(sql`insert into messages (id, account_id, direction, contact, body, status) values (${messageId}, ${owner.accountId}, 'outbound', '+14155550100', 'hi', 'queued')`)
    const eventId = newId('evt')
    const queued = await settle({ account_id: owner.accountId, message_id: messageId, status: 'delivered', error: null, updated_at: new Date().toISOString(), event_id: eventId, event_type: 'message.delivered', payload: '{}', trace_context: null })
    expect(queued.count).toBe(chunk)
    expect(queued.fanOuts).toEqual([eventId])
    while (fanOuts.writing.has(eventId)) await Bun.sleep(5)
    expect((await queryRows<{ n: number }>(db, sql`select count(*)::int as n from deliveries where event_id = ${eventId}`))[0]!.n).toBe(width)
    // Each node that reads hooks: how, and how many rows it read (those it returned and those its filter passed over).
    const readsOfHooks = (query: string) => {
      const found = plans.filter((item) => item.query.includes(query))
      expect(found.length).toBeGreaterThan(0)
      return found.map((item) =>
        nodesOf(item.plan)
          .filter((node) => node['Node Type'] !== 'ModifyTable' && node['Relation Name'] === 'hooks')
          .map((node) => `${node['Node Type']}, ${node['Actual Rows'] + (node['Rows Removed by Filter'] ?? 0) <= chunk + 1 ? 'at most one past the chunk' : `${node['Actual Rows'] + (node['Rows Removed by Filter'] ?? 0)} rows`}`),
      )
    }
    // The first statement reads one past the chunk; each later one the same, from where the last left off.
    expect(readsOfHooks('settled as (')).toEqual([['Index Scan, at most one past the chunk']])
    expect(readsOfHooks('from fan_outs where event_id')).toEqual(Array.from({ length: width / chunk - 1 }, () => ['Index Scan, at most one past the chunk']))
  } finally {
    await connection.end({ timeout: 5 })
  }
}, 60_000)
