import { describe, expect, test } from 'bun:test'
import { eq, sql } from 'drizzle-orm'
import { startTestServer } from '../support/server.ts'
import { queryRows } from '../../src/lib/db/client.ts'
import { deliveries, fanOuts, hookQueues } from '../../src/lib/db/schema.ts'
import { continueFanOut, type FanOut } from '../../src/messages/fan-out.ts'
import { MESSAGE_WRITES, createMessageSettler, receiveInboundMessage, resumeStalledFanOuts, type FanOutWriter } from '../../src/messages/service.ts'

// A wide fan-out written a chunk at a time (src/messages/fan-out.ts, docs/webhooks.md#wide-fan-outs).
const server = await startTestServer({ deliverWebhooks: false })
const db = server.database.handle.db
const CHUNK = 3
const WIDTH = 8

type Owner = { accountId: string; secret: string }

async function subscribe(owner: Owner, target: string): Promise<string> {
  const response = await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event: 'message.inbound', target_url: `https://hooks.example.com/${target}` }),
  })
  expect(response.status).toBe(201)
  return ((await response.json()) as { id: string }).id
}

/** An account with WIDTH inbound subscriptions, sorted by id (the order chunks are written in). */
async function wideAccount(name: string) {
  const owner = await server.createAccountWithKey(name)
  const hooks: string[] = []
  for (let i = 0; i < WIDTH; i++) hooks.push(await subscribe(owner, `${name}-${i}`))
  return { owner, hooks: hooks.sort() }
}

/** Fan-outs handed on, and not written: as if the process stopped after the event's first statement. */
function stoppedWriter(): FanOutWriter & { handed: FanOut[] } {
  const handed: FanOut[] = []
  return { chunk: CHUNK, continue: (fanOuts) => void handed.push(...fanOuts), writing: new Set(), handed }
}

async function receive(owner: Owner, fanOutWriter: FanOutWriter, wakes: unknown[] = []) {
  await receiveInboundMessage({ db, deliveriesQueued: (hookIds) => void wakes.push(hookIds), fanOuts: fanOutWriter }, owner.accountId, { from: '+14155550150', body: 'to everyone' })
  const [row] = await queryRows<{ id: string }>(db, sql`select id from events where account_id = ${owner.accountId} order by id desc limit 1`)
  return row!.id
}

const deliveredHooks = async (eventId: string) => (await db.select({ hookId: deliveries.hookId }).from(deliveries).where(eq(deliveries.eventId, eventId))).map((row) => row.hookId).sort()
const fanOutOf = async (eventId: string) => (await db.select().from(fanOuts).where(eq(fanOuts.eventId, eventId)))[0]

async function writtenToEnd(eventId: string): Promise<number[]> {
  const counts: number[] = []
  for (;;) {
    const chunk = await continueFanOut(db, eventId, CHUNK)
    counts.push(chunk.count)
    if (!chunk.more) return counts
  }
}

describe('an event wider than a chunk', () => {
  test('its first statement writes the first chunk, in subscription id order, and keeps its place', async () => {
    const { owner, hooks } = await wideAccount('First chunk')
    const writer = stoppedWriter()
    const eventId = await receive(owner, writer)
    expect(await deliveredHooks(eventId)).toEqual(hooks.slice(0, CHUNK))
    expect((await fanOutOf(eventId))!.afterHookId).toBe(hooks[CHUNK - 1]!)
    expect(writer.handed).toEqual([{ eventId, accountId: owner.accountId }])
  })

  test('each chunk writes the next subscriptions once and marks them due; the last one ends the fan-out', async () => {
    const { owner, hooks } = await wideAccount('Chunks')
    const eventId = await receive(owner, stoppedWriter())
    expect(await writtenToEnd(eventId)).toEqual([3, 2])
    expect(await deliveredHooks(eventId)).toEqual(hooks)
    expect(await fanOutOf(eventId)).toBeUndefined()
    const due = await db.select({ hookId: hookQueues.hookId }).from(hookQueues).where(sql`${hookQueues.accountId} = ${owner.accountId} and ${hookQueues.dueAt} is not null`)
    expect(due.map((row) => row.hookId).sort()).toEqual(hooks)
    expect(await continueFanOut(db, eventId, CHUNK)).toEqual({ count: 0, more: false })
  })

  test('a fan-out no wider than a chunk leaves no row', async () => {
    const owner = await server.createAccountWithKey('Narrow')
    const hooks = [await subscribe(owner, 'narrow-0'), await subscribe(owner, 'narrow-1')].sort()
    const writer = stoppedWriter()
    const eventId = await receive(owner, writer)
    expect(await deliveredHooks(eventId)).toEqual(hooks)
    expect(await fanOutOf(eventId)).toBeUndefined()
    expect(writer.handed).toEqual([])
  })

  test('a subscription made after the event gets none; one deleted before its chunk gets none; one paused gets a pending one', async () => {
    const { owner, hooks } = await wideAccount('Changed meanwhile')
    const eventId = await receive(owner, stoppedWriter())
    const deleted = hooks[WIDTH - 1]!
    const paused = hooks[CHUNK]!
    expect((await server.fetch(`/v0/account/${owner.accountId}/hooks/${deleted}?key=${owner.secret}`, { method: 'DELETE' })).status).toBe(204)
    const patched = await server.fetch(`/v0/account/${owner.accountId}/hooks/${paused}?key=${owner.secret}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: '{"status":"paused"}' })
    expect(patched.status).toBe(200)
    const later = await subscribe(owner, 'made-later')
    await writtenToEnd(eventId)
    const delivered = await deliveredHooks(eventId)
    expect(delivered).toEqual(hooks.filter((hook) => hook !== deleted))
    expect(delivered).not.toContain(later)
  })

  test('two writers at once write each subscription\'s delivery once', async () => {
    const { owner, hooks } = await wideAccount('Two writers')
    const eventId = await receive(owner, stoppedWriter())
    await Promise.all([writtenToEnd(eventId), writtenToEnd(eventId), writtenToEnd(eventId)])
    expect(await deliveredHooks(eventId)).toEqual(hooks)
    expect(await fanOutOf(eventId)).toBeUndefined()
  })

  test('an event without a fan-out row, or no event at all, gets no chunk', async () => {
    const owner = await server.createAccountWithKey('No row')
    const hook = await subscribe(owner, 'no-row-0')
    const eventId = await receive(owner, stoppedWriter())
    expect(await continueFanOut(db, eventId, CHUNK)).toEqual({ count: 0, more: false })
    expect(await continueFanOut(db, 'evt_doesnotexist', CHUNK)).toEqual({ count: 0, more: false })
    expect(await deliveredHooks(eventId)).toEqual([hook])
  })
})

describe('the settler writes fan-outs on in its lanes', () => {
  const writes = { ...MESSAGE_WRITES.postgres, fanOutChunk: CHUNK }

  async function until(condition: () => Promise<boolean>) {
    for (let i = 0; i < 500; i++) {
      if (await condition()) return
      await Bun.sleep(10)
    }
    throw new Error('not within 5 s')
  }

  test('an inbound event\'s fan-out is written to its end, with a wake after each chunk that wrote deliveries', async () => {
    const { owner, hooks } = await wideAccount('Written on')
    let wakes = 0
    const settler = createMessageSettler(db, writes, () => wakes++)
    const eventId = await receive(owner, settler.fanOuts)
    expect(settler.fanOuts.writing.has(eventId)).toBe(true)
    await until(async () => (await fanOutOf(eventId)) === undefined)
    await until(async () => !settler.fanOuts.writing.has(eventId))
    expect(await deliveredHooks(eventId)).toEqual(hooks)
    expect(wakes).toBe(2)
  })

  test('a fan-out left by a stopped process is resumed by the catch-up once it has not moved for a minute; a recent one is left', async () => {
    const { owner, hooks } = await wideAccount('Resumed')
    const stalled = await receive(owner, stoppedWriter())
    const recent = await receive(owner, stoppedWriter())
    await db.update(fanOuts).set({ movedAt: sql`now() - interval '61 seconds'` }).where(eq(fanOuts.eventId, stalled))
    const settler = createMessageSettler(db, writes)
    expect(await resumeStalledFanOuts({ db, fanOuts: settler.fanOuts })).toBeGreaterThanOrEqual(1)
    await until(async () => (await fanOutOf(stalled)) === undefined)
    expect(await deliveredHooks(stalled)).toEqual(hooks)
    expect(await deliveredHooks(recent)).toEqual(hooks.slice(0, CHUNK))
    expect(await fanOutOf(recent)).toBeDefined()
  })
})
