import { describe, expect, test } from 'bun:test'
import { eq, sql } from 'drizzle-orm'
import { startTestServer } from '../support/server.ts'
import { deliveries, events, messages } from '../../src/lib/db/schema.ts'
import { createLogger } from '../../src/lib/runtime/logger.ts'
import { isId } from '../../src/lib/db/ids.ts'
import { sandboxCarrier } from '../../src/messages/carrier.ts'
import { createAdmission } from '../../src/messages/admission.ts'
import { acceptMessage, createMessageSettler, createMessageStorer, dispatchMessage, dispatchStaleQueuedMessages, renewDispatchLeases, startQueuedCatchUp, type MessageDeps } from '../../src/messages/service.ts'
import { NARROW_FAN_OUT } from '../../src/messages/outbox.ts'
import { authorizeAndRedeem, flowFixture } from '../oauth/support.ts'

// These tests read the outbox as the message path writes it: no worker sends (and records attempts) meanwhile.
const server = await startTestServer({ deliverWebhooks: false })
const db = server.database.handle.db
const alice = await server.createAccountWithKey('Alice')
const bob = await server.createAccountWithKey('Bob')

const post = (owner: { accountId: string; secret: string }, path: string, body: unknown) =>
  server.fetch(`/v0/account/${owner.accountId}${path}?key=${owner.secret}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
const get = (owner: { accountId: string; secret: string }, path: string, query = '') => server.fetch(`/v0/account/${owner.accountId}${path}?key=${owner.secret}${query}`)

async function subscribe(owner: { accountId: string; secret: string }, event: string, target: string) {
  const response = await post(owner, '/hooks', { event, target_url: `https://hooks.example.com/${target}` })
  expect(response.status).toBe(201)
  return (await response.json()).id as string
}

async function settled(owner: { accountId: string; secret: string }, messageId: string) {
  for (let i = 0; i < 100; i++) {
    const message = await (await get(owner, `/messages/${messageId}`)).json()
    if (message.status !== 'queued') return message
    await Bun.sleep(10)
  }
  throw new Error('the message stayed queued')
}

/** A settler's parts of MessageDeps: its settlements and its fan-outs. */
const settlerDeps = () => {
  const { settle, fanOuts } = createMessageSettler(db)
  return { settleMessage: settle, fanOuts }
}
const deliveriesOf = (eventId: string) => db.select().from(deliveries).where(eq(deliveries.eventId, eventId))

describe('messages and their events', () => {
  test('a sent message is accepted as queued, delivered by the sandbox, and its event fans out to matching subscriptions only', async () => {
    const delivered = await subscribe(alice, 'message.delivered', 'a-delivered')
    const delivered2 = await subscribe(alice, 'message.delivered', 'a-delivered-2')
    await subscribe(alice, 'message.failed', 'a-failed')
    await subscribe(bob, 'message.delivered', 'b-delivered')

    const accepted = await post(alice, '/messages', { to: '+14155550123', body: 'Hello' })
    expect(accepted.status).toBe(202)
    const message = await accepted.json()
    expect(message).toEqual({ id: expect.stringMatching(/^msg_/), account_id: alice.accountId, direction: 'outbound', to: '+14155550123', body: 'Hello', status: 'queued', created_at: expect.any(String), updated_at: expect.any(String) })

    expect((await settled(alice, message.id)).status).toBe('delivered')
    const log = await (await get(alice, '/events', '&type=message.delivered')).json()
    const event = log.data.find((item: { data: { message: { id: string } } }) => item.data.message.id === message.id)
    expect(event).toMatchObject({ type: 'message.delivered', account_id: alice.accountId, data: { message: { id: message.id, status: 'delivered', to: '+14155550123' } } })
    const rows = await deliveriesOf(event.id)
    expect(rows.map((row) => row.hookId).sort()).toEqual([delivered, delivered2].sort())
    expect(rows.every((row) => row.status === 'pending' && row.attempts === 0)).toBe(true)
  })

  test('a recipient ending in 0000 fails, with a message.failed event', async () => {
    const message = await (await post(alice, '/messages', { to: '+14155550000', body: 'Nobody home' })).json()
    const final = await settled(alice, message.id)
    expect(final.status).toBe('failed')
    expect(final.error).toContain('0000')
    const log = await (await get(alice, '/events', '&type=message.failed')).json()
    expect(log.data.some((item: { data: { message: { id: string } } }) => item.data.message.id === message.id)).toBe(true)
  })

  test('an inbound reply is stored with its message.inbound event and deliveries in one go', async () => {
    const inboundHook = await subscribe(alice, 'message.inbound', 'a-inbound')
    const response = await post(alice, '/sandbox/inbound', { from: '+447700900123', body: 'Thanks!' })
    expect(response.status).toBe(201)
    const message = await response.json()
    expect([message.direction, message.from, message.status]).toEqual(['inbound', '+447700900123', 'received'])
    const [event] = (await (await get(alice, '/events', '&type=message.inbound')).json()).data
    expect(event.data.message.id).toBe(message.id)
    expect((await deliveriesOf(event.id)).map((row) => row.hookId)).toEqual([inboundHook])
  })

  test('a subscription sees only events after its creation; a disabled one sees none', async () => {
    const owner = await server.createAccountWithKey('Late')
    const before = await (await post(owner, '/sandbox/inbound', { from: '+447700900124', body: 'early' })).json()
    const hookId = await subscribe(owner, 'message.inbound', 'late')
    const after = await (await post(owner, '/sandbox/inbound', { from: '+447700900124', body: 'late' })).json()
    const log = (await (await get(owner, '/events')).json()).data as { id: string; data: { message: { id: string } } }[]
    const eventOf = (messageId: string) => log.find((item) => item.data.message.id === messageId)!.id
    expect(await deliveriesOf(eventOf(before.id))).toHaveLength(0)
    expect((await deliveriesOf(eventOf(after.id))).map((row) => row.hookId)).toEqual([hookId])
  })

  test('deleting a subscription removes its pending deliveries', async () => {
    const owner = await server.createAccountWithKey('Deleter')
    const hookId = await subscribe(owner, 'message.inbound', 'deleted')
    await post(owner, '/sandbox/inbound', { from: '+447700900125', body: 'hi' })
    expect(await db.select().from(deliveries).where(eq(deliveries.hookId, hookId))).toHaveLength(1)
    expect((await server.fetch(`/v0/account/${owner.accountId}/hooks/${hookId}?key=${owner.secret}`, { method: 'DELETE' })).status).toBe(204)
    expect(await db.select().from(deliveries).where(eq(deliveries.hookId, hookId))).toHaveLength(0)
  })

  test('a burst of messages, settled in batches: each gets its own event, with one delivery per subscription, ids well formed and unique', async () => {
    const carol = await server.createAccountWithKey('Carol')
    const first = await subscribe(carol, 'message.delivered', 'c-1')
    const second = await subscribe(carol, 'message.delivered', 'c-2')
    const sent = await Promise.all(Array.from({ length: 60 }, (_, i) => post(carol, '/messages', { to: `+1415555${String(1000 + i)}`, body: `burst ${i}` }).then((response) => response.json())))
    for (const message of sent) expect((await settled(carol, message.id)).status).toBe('delivered')
    const stored = await db.select().from(events).where(eq(events.accountId, carol.accountId))
    expect(stored.map((event) => JSON.parse(event.payload).data.message.id).sort()).toEqual(sent.map((message) => message.id).sort())
    for (const event of stored) {
      const payload = JSON.parse(event.payload)
      expect(payload).toMatchObject({ id: event.id, type: 'message.delivered', account_id: carol.accountId, data: { message: { status: 'delivered' } } })
      const rows = await deliveriesOf(event.id)
      expect(rows.map((row) => row.hookId).sort()).toEqual([first, second].sort())
      for (const row of rows) expect(isId('dlv', row.id)).toBe(true)
    }
    const ids = (await db.select({ id: deliveries.id }).from(deliveries).where(sql`${deliveries.hookId} in (${first}, ${second})`)).map((row) => row.id)
    expect(new Set(ids).size).toBe(120)
    // The message the API reads back is the one the event carries.
    const [one] = sent
    const read = await (await get(carol, `/messages/${one.id}`)).json()
    const carried = stored.map((event) => JSON.parse(event.payload)).find((payload) => payload.data.message.id === one.id)
    expect(carried.data.message).toEqual(read)
  })

  test('the event log filters by since and pages newest first', async () => {
    const owner = await server.createAccountWithKey('Log')
    for (let i = 0; i < 3; i++) await post(owner, '/sandbox/inbound', { from: '+447700900126', body: `n${i}` })
    const all = await (await get(owner, '/events', '&limit=2')).json()
    expect(all.data.map((item: { data: { message: { body: string } } }) => item.data.message.body)).toEqual(['n2', 'n1'])
    const rest = await (await get(owner, '/events', `&limit=2&cursor=${all.next_cursor}`)).json()
    expect(rest).toEqual({ data: [expect.objectContaining({ type: 'message.inbound' })], next_cursor: null })
    const future = await (await get(owner, '/events', `&since=${new Date(Date.now() + 60_000).toISOString()}`)).json()
    expect(future.data).toEqual([])
  })
})

describe('refusals', () => {
  test("another account's messages and events are 404", async () => {
    const message = await (await post(alice, '/messages', { to: '+14155550124', body: 'private' })).json()
    expect((await server.fetch(`/v0/account/${alice.accountId}/messages/${message.id}?key=${bob.secret}`)).status).toBe(404)
    expect((await server.fetch(`/v0/account/${bob.accountId}/messages/${message.id}?key=${bob.secret}`)).status).toBe(404)
    expect((await server.fetch(`/v0/account/${alice.accountId}/events?key=${bob.secret}`)).status).toBe(404)
    expect((await server.fetch(`/v0/account/${alice.accountId}/messages?key=${bob.secret}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"to":"+14155550125","body":"x"}' })).status).toBe(404)
  })

  const bad: [string, string, unknown][] = [
    ['a number without +', '/messages', { to: '14155550123', body: 'x' }],
    ['letters in the number', '/messages', { to: '+1415CALLME', body: 'x' }],
    ['an empty body', '/messages', { to: '+14155550123', body: '' }],
    ['a body over 1600 characters', '/messages', { to: '+14155550123', body: 'x'.repeat(1601) }],
    ['an unknown field', '/messages', { to: '+14155550123', body: 'x', priority: 'high' }],
    ['inbound without from', '/sandbox/inbound', { body: 'x' }],
  ]
  for (const [name, path, body] of bad) {
    test(`${name}: 422`, async () => {
      expect((await post(alice, path, body)).status).toBe(422)
    })
  }

  test('an unknown event type filter is 422', async () => {
    expect((await get(alice, '/events', '&type=message.read')).status).toBe(422)
  })

  test('bearer tokens need messages:send to send and messages:read to read', async () => {
    const fixture = await flowFixture(server)
    const hooksOnly = (await authorizeAndRedeem(server, fixture, { scope: 'hooks:read hooks:write' })).tokens.access_token
    const headers = { authorization: `Bearer ${hooksOnly}`, 'content-type': 'application/json' }
    const send = await server.fetch(`/v0/account/${fixture.accountId}/messages`, { method: 'POST', headers, body: '{"to":"+14155550126","body":"x"}' })
    expect(send.status).toBe(403)
    expect(send.headers.get('www-authenticate')).toContain('scope="messages:send"')
    expect((await server.fetch(`/v0/account/${fixture.accountId}/events`, { headers })).status).toBe(403)
  })
})

describe('the wake after a settlement (src/delivery/dispatcher.ts)', () => {
  test(`names the active subscriptions it made due when they are ${NARROW_FAN_OUT} or fewer, and none for a wider fan-out`, async () => {
    const owner = await server.createAccountWithKey('Woken')
    const storeMessage = createMessageStorer(db)
    const admission = createAdmission({ holdMs: 0 })
    const wakes: (readonly string[] | undefined)[] = []
    const deps = { db, carrier: sandboxCarrier, logger: createLogger('silent'), storeMessage, ...settlerDeps(), deliveriesQueued: (hookIds?: readonly string[]) => void wakes.push(hookIds), admission, dispatching: new Set<string>() }
    const send = async () => dispatchMessage(deps, await acceptMessage({ storeMessage, admission }, owner.accountId, { to: '+14155550129', body: 'wake' }))
    const active: string[] = []
    for (let i = 0; i < NARROW_FAN_OUT; i++) active.push(await subscribe(owner, 'message.delivered', `woken-${i}`))
    const paused = await subscribe(owner, 'message.delivered', 'woken-paused')
    expect((await server.fetch(`/v0/account/${owner.accountId}/hooks/${paused}?key=${owner.secret}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: '{"status":"paused"}' })).status).toBe(200)
    await send()
    expect(wakes).toHaveLength(1)
    expect([...wakes[0]!].sort()).toEqual([...active].sort())
    await subscribe(owner, 'message.delivered', 'woken-wide')
    await send()
    expect(wakes[1]).toEqual([])
  })
})

describe('a process stopped between accepting and dispatching', () => {
  /** A new account's message, stored as queued five minutes ago (past the catch-up's stale age), and the dependencies to dispatch with. */
  async function queuedLongAgo(accountName: string, input: { to: string; body: string }) {
    const owner = await server.createAccountWithKey(accountName)
    const storeMessage = createMessageStorer(db)
    const admission = createAdmission({ holdMs: 0 })
    const message = await acceptMessage({ storeMessage, admission }, owner.accountId, input)
    await db.update(messages).set({ createdAt: sql`now() - interval '5 minutes'` }).where(eq(messages.id, message.id))
    const deps = (parts: Partial<Pick<MessageDeps, 'carrier' | 'settleMessage'>> = {}): MessageDeps => ({
      db, carrier: sandboxCarrier, logger: createLogger('silent'), storeMessage, ...settlerDeps(), deliveriesQueued: () => {}, admission, dispatching: new Set(), ...parts,
    })
    return { owner, storeMessage, admission, message, deps }
  }

  test('messages left queued are dispatched at the next start, with their events', async () => {
    const { owner, storeMessage, admission, message: stranded, deps } = await queuedLongAgo('Crashed', { to: '+14155550127', body: 'left behind' })
    const fresh = await acceptMessage({ storeMessage, admission }, owner.accountId, { to: '+14155550128', body: 'still being sent' })
    const count = await dispatchStaleQueuedMessages(deps())
    expect(count).toBeGreaterThanOrEqual(1)
    const [after] = await db.select().from(messages).where(eq(messages.id, stranded.id))
    expect(after!.status).toBe('delivered')
    const [untouched] = await db.select().from(messages).where(eq(messages.id, fresh.id))
    expect(untouched!.status).toBe('queued')
    expect((await db.select().from(events).where(eq(events.accountId, owner.accountId))).length).toBe(1)
  })

  /** A carrier that counts its calls for one body: other tests' messages queued past the stale age may be dispatched too. */
  function countingCarrier(body: string) {
    const carried: string[] = []
    const carrier = { name: 'counting', deliver: async (to: string, sent: string) => (carried.push(sent), sandboxCarrier.deliver(to, sent)) }
    return { carrier, calls: () => carried.filter((sent) => sent === body).length }
  }

  /** A settlement whose first call for the message waits in its lane until released; any other goes at once. */
  function heldSettlement(messageId: string) {
    const { settle } = createMessageSettler(db)
    let release!: () => void
    const laneHeld = new Promise<void>((resolve) => (release = resolve))
    let held = false
    const settleMessage = async (settlement: Parameters<typeof settle>[0]) => {
      if (settlement.message_id === messageId && !held) {
        held = true
        await laneHeld
      }
      return settle(settlement)
    }
    return { settleMessage, release }
  }

  const leaseOf = async (messageId: string) => (await db.select().from(messages).where(eq(messages.id, messageId)))[0]!.dispatchLeaseUntil

  test('a message whose settlement this process holds in its lane (a neighbour\'s fan-out ahead of it) is not dispatched again by the catch-up, however long it has been queued', async () => {
    const { message, deps: depsWith } = await queuedLongAgo('Slow lane', { to: '+14155550129', body: 'waits in its lane' })
    const counting = countingCarrier(message.body)
    const lane = heldSettlement(message.id)
    const deps = depsWith({ carrier: counting.carrier, settleMessage: lane.settleMessage })
    const dispatched = dispatchMessage(deps, message)
    while (counting.calls() === 0) await Bun.sleep(5)
    await dispatchStaleQueuedMessages(deps)
    expect(counting.calls()).toBe(1)
    lane.release()
    await dispatched
    const [after] = await db.select().from(messages).where(eq(messages.id, message.id))
    expect(after!.status).toBe('delivered')
    await dispatchStaleQueuedMessages(deps)
    expect(counting.calls()).toBe(1)
  })

  test("another process's catch-up leaves a message alone while this one renews its lease, and takes it once the lease has run out (this process stopped)", async () => {
    const { message, deps: depsWith } = await queuedLongAgo('Two processes', { to: '+14155550131', body: 'leased by the first' })
    const counting = countingCarrier(message.body)
    const lane = heldSettlement(message.id)
    // Two processes of the service: each with its own set of messages in dispatch (depsWith makes one per call).
    const first = depsWith({ carrier: counting.carrier, settleMessage: lane.settleMessage })
    const second = depsWith({ carrier: counting.carrier })
    const dispatched = dispatchMessage(first, message)
    while (counting.calls() === 0) await Bun.sleep(5)
    await renewDispatchLeases(first)
    expect((await leaseOf(message.id))!.getTime()).toBeGreaterThan(Date.now() + 170_000)
    await dispatchStaleQueuedMessages(second)
    expect(counting.calls()).toBe(1)
    // The first process stops (its settlement never comes): no one renews the lease, and once it has run out the second takes the message.
    await db.update(messages).set({ dispatchLeaseUntil: sql`now() - interval '1 second'` }).where(eq(messages.id, message.id))
    await dispatchStaleQueuedMessages(second)
    expect(counting.calls()).toBe(2)
    const [after] = await db.select().from(messages).where(eq(messages.id, message.id))
    expect(after!.status).toBe('delivered')
    lane.release()
    await dispatched
  })

  test('two processes whose catch-ups run at once (both started together) call the carrier once for each message left queued', async () => {
    const { message, deps: depsWith } = await queuedLongAgo('Started together', { to: '+14155550132', body: 'left for two processes' })
    const counting = countingCarrier(message.body)
    const processes = [depsWith({ carrier: counting.carrier }), depsWith({ carrier: counting.carrier })]
    await Promise.all(processes.map((deps) => dispatchStaleQueuedMessages(deps)))
    expect(counting.calls()).toBe(1)
    const [after] = await db.select().from(messages).where(eq(messages.id, message.id))
    expect(after!.status).toBe('delivered')
  })

  test('the leases are renewed while a catch-up run waits for the dispatches it started', async () => {
    const { message, deps: depsWith } = await queuedLongAgo('Renewed meanwhile', { to: '+14155550133', body: 'taken by the catch-up, held in its lane' })
    const counting = countingCarrier(message.body)
    const lane = heldSettlement(message.id)
    const deps = depsWith({ carrier: counting.carrier, settleMessage: lane.settleMessage })
    const catchUp = startQueuedCatchUp(deps, { catchUpMs: 60_000, renewMs: 20 })
    while (counting.calls() === 0) await Bun.sleep(5)
    // The catch-up took the message and waits for its settlement. Were the lease renewed only by the catch-up's own runs,
    // it would stay in the past now.
    await db.update(messages).set({ dispatchLeaseUntil: sql`now() - interval '1 second'` }).where(eq(messages.id, message.id))
    for (let i = 0; i < 200 && (await leaseOf(message.id))!.getTime() < Date.now(); i++) await Bun.sleep(10)
    expect((await leaseOf(message.id))!.getTime()).toBeGreaterThan(Date.now() + 170_000)
    lane.release()
    await catchUp.stop()
    const [after] = await db.select().from(messages).where(eq(messages.id, message.id))
    expect(after!.status).toBe('delivered')
    expect(counting.calls()).toBe(1)
  })

  test('a renewal writes only the leases about to lapse: not a message accepted moments ago, nor a lease renewed moments ago', async () => {
    const { owner, storeMessage, admission, message: old, deps: depsWith } = await queuedLongAgo('Renewed when due', { to: '+14155550134', body: 'queued long ago' })
    const fresh = await acceptMessage({ storeMessage, admission }, owner.accountId, { to: '+14155550135', body: 'accepted moments ago' })
    const deps = depsWith()
    deps.dispatching.add(old.id).add(fresh.id)
    await renewDispatchLeases(deps)
    const renewed = (await leaseOf(old.id))!.getTime()
    expect(renewed).toBeGreaterThan(Date.now() + 170_000)
    expect(await leaseOf(fresh.id)).toBeNull()
    // Its age protects the fresh message for three minutes; once that would end within 170 s, it is leased.
    await db.update(messages).set({ createdAt: sql`now() - interval '40 seconds'` }).where(eq(messages.id, fresh.id))
    await db.update(messages).set({ dispatchLeaseUntil: sql`now() + interval '175 seconds'` }).where(eq(messages.id, old.id))
    await renewDispatchLeases(deps)
    expect((await leaseOf(fresh.id))!.getTime()).toBeGreaterThan(Date.now() + 170_000)
    expect((await leaseOf(old.id))!.getTime()).toBeLessThan(Date.now() + 177_500)
  })

  test('a message whose dispatch failed is no longer counted as being dispatched: the catch-up sends it', async () => {
    const { message, deps: depsWith } = await queuedLongAgo('Failed dispatch', { to: '+14155550130', body: 'first dispatch fails' })
    const { settle } = createMessageSettler(db)
    let failed = false
    const settleMessage = async (settlement: Parameters<typeof settle>[0]) => {
      if (settlement.message_id === message.id && !failed) {
        failed = true
        throw new Error('a bug in the settlement, not the database being away')
      }
      return settle(settlement)
    }
    const deps = depsWith({ settleMessage })
    await expect(dispatchMessage(deps, message)).rejects.toThrow('a bug in the settlement')
    await dispatchStaleQueuedMessages(deps)
    const [after] = await db.select().from(messages).where(eq(messages.id, message.id))
    expect(after!.status).toBe('delivered')
  })
})
