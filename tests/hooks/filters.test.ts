import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { count, eq } from 'drizzle-orm'
import { deliveries, hooks } from '../../src/lib/db/schema.ts'
import { startTestServer } from '../support/server.ts'
import { startReceiver } from '../support/receiver.ts'

// Filters (docs/api.md#filters): a subscription narrowed to some contacts gets only their events,
// and an event it does not want costs it no delivery row. Driven over HTTP with the real worker
// and a real HTTPS receiver; the rows are counted in the database itself.

setDefaultTimeout(30_000)

const receiver = startReceiver(() => new Response('ok'))
const server = await startTestServer({
  env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile, WEBHOOK_TIMEOUT_MS: '1000' },
})
const db = server.database.handle.db
type Owner = { accountId: string; secret: string }
const alice = await server.createAccountWithKey('Alice')
const bob = await server.createAccountWithKey('Bob')

const call = (owner: Owner, method: string, path: string, body?: unknown) =>
  server.fetch(`/v0/account/${owner.accountId}${path}${path.includes('?') ? '&' : '?'}key=${owner.secret}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
const json = async (response: Response) => (await response.json()) as any

async function subscribe(owner: Owner, event: string, path: string, filter?: unknown) {
  const response = await call(owner, 'POST', '/hooks', { event, target_url: `${receiver.origin}${path}`, ...(filter === undefined ? {} : { filter }) })
  expect(response.status).toBe(201)
  return json(response)
}
/** An outbound message; the sandbox carrier delivers it, or fails it when `to` ends in 0000. */
async function send(owner: Owner, to: string): Promise<string> {
  const response = await call(owner, 'POST', '/messages', { to, body: `to ${to}` })
  expect(response.status).toBe(202)
  return (await json(response)).id
}
async function inbound(owner: Owner, from: string): Promise<string> {
  const response = await call(owner, 'POST', '/sandbox/inbound', { from, body: `from ${from}` })
  expect(response.status).toBe(201)
  return (await json(response)).id
}
const messageIdOf = (body: string) => (JSON.parse(body) as { data: { message: { id: string } } }).data.message.id
const messagesOn = (path: string) => receiver.received.filter((request) => request.path === path).map((request) => messageIdOf(request.body))
/** Waits until every one of `messageIds` reached `path`: their events, and every delivery row they made, are committed. */
const arrived = (path: string, messageIds: string[]) => receiver.waitFor(() => messageIds.every((id) => messagesOn(path).includes(id)))
const deliveryRows = async (hookId: string) => (await db.select({ n: count() }).from(deliveries).where(eq(deliveries.hookId, hookId)))[0]!.n
const listedEventIds = async (owner: Owner, hookId: string) => ((await json(await call(owner, 'GET', `/hooks/${hookId}/deliveries`))).data as { event_id: string }[]).map((delivery) => delivery.event_id)

describe('a filter narrows what a subscription gets', () => {
  test('message.delivered with a `to` filter: only the listed recipients are delivered; the others make no delivery row', async () => {
    const owner = await server.createAccountWithKey('Recipients')
    const filtered = await subscribe(owner, 'message.delivered', '/to-filtered', { to: ['+14155550101', '+14155550102'] })
    expect(filtered.filter).toEqual({ to: ['+14155550101', '+14155550102'] })
    const everything = await subscribe(owner, 'message.delivered', '/to-all')
    expect(everything.filter).toBeNull()

    const wanted = [await send(owner, '+14155550101'), await send(owner, '+14155550102')]
    const unwanted = await send(owner, '+14155550199')
    // The unfiltered subscription got all three: every event and delivery row of them is committed.
    await arrived('/to-all', [...wanted, unwanted])
    await arrived('/to-filtered', wanted)
    expect(messagesOn('/to-filtered').sort()).toEqual([...wanted].sort())
    expect(await deliveryRows(filtered.id)).toBe(2)
    expect(await deliveryRows(everything.id)).toBe(3)

    // The event itself happened and is in the log; only the filtered subscription has no delivery of it.
    const events = (await json(await call(owner, 'GET', '/events?type=message.delivered'))).data as { id: string; data: { message: { id: string } } }[]
    const unwantedEvent = events.find((event) => event.data.message.id === unwanted)!
    expect(unwantedEvent).toBeDefined()
    expect(await listedEventIds(owner, filtered.id)).not.toContain(unwantedEvent.id)
    expect(await listedEventIds(owner, filtered.id)).toHaveLength(2)
    expect((await json(await call(owner, 'GET', `/hooks/${filtered.id}`))).filter).toEqual({ to: ['+14155550101', '+14155550102'] })
  })

  test('message.failed filters on `to` too', async () => {
    const owner = await server.createAccountWithKey('Failures')
    const filtered = await subscribe(owner, 'message.failed', '/failed-filtered', { to: ['+14155550000'] })
    const everything = await subscribe(owner, 'message.failed', '/failed-all')
    const wanted = await send(owner, '+14155550000')
    const unwanted = await send(owner, '+14155560000')
    await arrived('/failed-all', [wanted, unwanted])
    await arrived('/failed-filtered', [wanted])
    expect(messagesOn('/failed-filtered')).toEqual([wanted])
    expect(await deliveryRows(filtered.id)).toBe(1)
    expect(await deliveryRows(everything.id)).toBe(2)
  })

  test('message.inbound with a `from` filter: only the listed senders are delivered', async () => {
    const owner = await server.createAccountWithKey('Senders')
    const filtered = await subscribe(owner, 'message.inbound', '/from-filtered', { from: ['+447700900111'] })
    expect(filtered.filter).toEqual({ from: ['+447700900111'] })
    const everything = await subscribe(owner, 'message.inbound', '/from-all')
    const wanted = await inbound(owner, '+447700900111')
    const unwanted = await inbound(owner, '+447700900222')
    await arrived('/from-all', [wanted, unwanted])
    await arrived('/from-filtered', [wanted])
    expect(messagesOn('/from-filtered')).toEqual([wanted])
    expect(await deliveryRows(filtered.id)).toBe(1)
    expect(await deliveryRows(everything.id)).toBe(2)
  })

  test('a test event is sent whatever the filter (it is an example, not a contact of yours)', async () => {
    const hook = await subscribe(alice, 'message.inbound', '/filtered-test', { from: ['+447700900333'] })
    const result = await json(await call(alice, 'POST', `/hooks/${hook.id}/test`))
    expect(result).toMatchObject({ status_code: 200, error: null })
  })

  test('the filter is part of every answer: create, read, list, update', async () => {
    const hook = await subscribe(alice, 'message.delivered', '/every-answer', { to: ['+14155550123'] })
    expect(hook).toMatchObject({ filter: { to: ['+14155550123'] }, secret: expect.stringMatching(/^whsec_/) })
    const listed = (await json(await call(alice, 'GET', '/hooks?limit=100'))).data as { id: string; filter: unknown }[]
    expect(listed.find((item) => item.id === hook.id)!.filter).toEqual({ to: ['+14155550123'] })
    for (const item of listed) expect(item).toHaveProperty('filter')
    const rotated = await json(await call(alice, 'POST', `/hooks/${hook.id}/secret/rotate`))
    expect(rotated.filter).toEqual({ to: ['+14155550123'] })
    expect((await json(await call(alice, 'POST', `/hooks/${hook.id}/enable`))).filter).toEqual({ to: ['+14155550123'] })
  })

  test('one subscription per event and URL, whatever the filters: the same event and URL with another filter is 409', async () => {
    await subscribe(alice, 'message.delivered', '/one-per-url', { to: ['+14155550123'] })
    const again = await call(alice, 'POST', '/hooks', { event: 'message.delivered', target_url: `${receiver.origin}/one-per-url`, filter: { to: ['+14155550124'] } })
    expect(again.status).toBe(409)
    expect((await json(again)).code).toBe('conflict')
  })
})

describe('PATCH filter', () => {
  test('set, kept when left out, cleared with null; each applies to the events after it', async () => {
    const owner = await server.createAccountWithKey('Patcher')
    const hook = await subscribe(owner, 'message.inbound', '/patched')
    const control = await subscribe(owner, 'message.inbound', '/patched-control')

    const set = await call(owner, 'PATCH', `/hooks/${hook.id}`, { filter: { from: ['+447700900444'] } })
    expect(set.status).toBe(200)
    expect((await json(set)).filter).toEqual({ from: ['+447700900444'] })
    // Another change leaves the filter as it is.
    const paused = await json(await call(owner, 'PATCH', `/hooks/${hook.id}`, { status: 'paused' }))
    expect(paused).toMatchObject({ status: 'paused', filter: { from: ['+447700900444'] } })
    const resumed = await json(await call(owner, 'PATCH', `/hooks/${hook.id}`, { status: 'active', rate_limit_per_s: 100 }))
    expect(resumed).toMatchObject({ status: 'active', rate_limit_per_s: 100, filter: { from: ['+447700900444'] } })

    const other = await inbound(owner, '+447700900555')
    const listed = await inbound(owner, '+447700900444')
    await arrived('/patched-control', [other, listed])
    await arrived('/patched', [listed])
    expect(messagesOn('/patched')).toEqual([listed])
    expect(await deliveryRows(hook.id)).toBe(1)

    const cleared = await call(owner, 'PATCH', `/hooks/${hook.id}`, { filter: null })
    expect(cleared.status).toBe(200)
    expect((await json(cleared)).filter).toBeNull()
    expect((await json(await call(owner, 'GET', `/hooks/${hook.id}`))).filter).toBeNull()
    const [row] = await db.select({ filterContacts: hooks.filterContacts }).from(hooks).where(eq(hooks.id, hook.id))
    expect(row!.filterContacts).toBeNull()
    const afterClear = await inbound(owner, '+447700900555')
    await arrived('/patched', [afterClear])
    expect(await deliveryRows(hook.id)).toBe(2)
    expect(control.id).not.toBe(hook.id)
  })

  test('a new filter replaces the old one whole', async () => {
    const hook = await subscribe(alice, 'message.delivered', '/replaced', { to: ['+14155550001', '+14155550002'] })
    const replaced = await json(await call(alice, 'PATCH', `/hooks/${hook.id}`, { filter: { to: ['+14155550003'] } }))
    expect(replaced.filter).toEqual({ to: ['+14155550003'] })
  })
})

const TEN = Array.from({ length: 10 }, (_, i) => `+1415555010${i}`)
const refusedFilters: [string, unknown, string][] = [
  ['an empty list', { to: [] }, '/filter/to'],
  ['eleven numbers', { to: [...TEN, '+14155550110'] }, '/filter/to'],
  ['a duplicate', { to: ['+14155550123', '+14155550123'] }, '/filter/to'],
  ['a number without +', { to: ['14155550123'] }, '/filter/to/0'],
  ['a number starting with 0', { to: ['+04155550123'] }, '/filter/to/0'],
  ['too short a number', { to: ['+141555'] }, '/filter/to/0'],
  ['too long a number', { to: ['+1415555012345678'] }, '/filter/to/0'],
  ['a bad number after a good one', { to: ['+14155550123', 'call me'] }, '/filter/to/1'],
  ['a number that is not a string', { to: [14155550123] }, '/filter/to/0'],
  ['a list that is not a list', { to: '+14155550123' }, '/filter/to'],
  ['no member', {}, '/filter'],
  ['both members', { to: ['+14155550123'], from: ['+14155550124'] }, '/filter'],
  ['an unknown member', { cc: ['+14155550123'] }, '/filter/cc'],
  ['an unknown member beside the right one', { to: ['+14155550123'], cc: ['+14155550124'] }, '/filter/cc'],
  ['a list instead of an object', ['+14155550123'], '/filter'],
  ['the key of another event type', { from: ['+14155550123'] }, '/filter/from'],
]

async function expectRefused(response: Response, path: string) {
  expect(response.status).toBe(422)
  expect(response.headers.get('content-type')).toBe('application/problem+json')
  const problem = await json(response)
  expect(problem).toMatchObject({ status: 422, code: 'validation_failed', request_id: expect.stringMatching(/^req_/) })
  expect(problem.errors.map((error: { path: string }) => error.path)).toContain(path)
  return problem
}

describe('a bad filter is 422 naming the field', () => {
  test('on create (message.delivered); nothing is created', async () => {
    const owner = await server.createAccountWithKey('Bad creates')
    for (const [, filter, path] of refusedFilters) {
      await expectRefused(await call(owner, 'POST', '/hooks', { event: 'message.delivered', target_url: `${receiver.origin}/refused`, filter }), path)
    }
    // Ten is the most, and is fine.
    expect((await subscribe(owner, 'message.delivered', '/ten', { to: TEN })).filter).toEqual({ to: TEN })
    expect((await json(await call(owner, 'GET', '/hooks'))).data).toHaveLength(1)
  })

  test('the key must be the one of the event type: `from` for message.inbound, `to` for the outcomes; null is not a filter on create', async () => {
    const inboundTo = await expectRefused(await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/wrong-key`, filter: { to: ['+14155550123'] } }), '/filter/to')
    expect(inboundTo.errors).toEqual([{ path: '/filter/to', message: 'a message.inbound subscription filters on from; to is for message.delivered and message.failed' }])
    const failedFrom = await expectRefused(await call(alice, 'POST', '/hooks', { event: 'message.failed', target_url: `${receiver.origin}/wrong-key`, filter: { from: ['+14155550123'] } }), '/filter/from')
    expect(failedFrom.errors).toEqual([{ path: '/filter/from', message: 'a message.failed subscription filters on to; from is for message.inbound' }])
    await expectRefused(await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/wrong-key`, filter: null }), '/filter')
  })

  test('on PATCH, with the path inside the filter; the subscription keeps its filter', async () => {
    const hook = await subscribe(alice, 'message.delivered', '/bad-patch', { to: ['+14155550123'] })
    for (const [, filter, path] of refusedFilters) {
      await expectRefused(await call(alice, 'PATCH', `/hooks/${hook.id}`, { filter }), path)
    }
    const bad = await expectRefused(await call(alice, 'PATCH', `/hooks/${hook.id}`, { filter: { to: ['+14155550123', 'call me'] } }), '/filter/to/1')
    expect(bad.errors).toHaveLength(1)
    expect((await json(await call(alice, 'GET', `/hooks/${hook.id}`))).filter).toEqual({ to: ['+14155550123'] })
  })

  test("another account's subscription is 404, whatever the filter, and is not changed", async () => {
    const hook = await subscribe(alice, 'message.inbound', '/not-bobs', { from: ['+447700900666'] })
    for (const filter of [{ from: ['+447700900777'] }, { to: ['+447700900777'] }, null]) {
      const response = await call(bob, 'PATCH', `/hooks/${hook.id}`, { filter })
      expect(response.status).toBe(404)
      expect((await json(response)).code).toBe('not_found')
    }
    expect((await call(alice, 'PATCH', '/hooks/hook_01m00000000000000000000000', { filter: { from: ['+447700900777'] } })).status).toBe(404)
    expect((await json(await call(alice, 'GET', `/hooks/${hook.id}`))).filter).toEqual({ from: ['+447700900666'] })
  })
})

describe('GET /event-types', () => {
  test('each type names the filter it takes: its one member and the numbers it holds', async () => {
    const { data } = await json(await server.fetch(`/v0/event-types?key=${alice.secret}`))
    const filterOf = (type: string) => data.find((item: { type: string }) => item.type === type).filter
    for (const [type, key] of [['message.delivered', 'to'], ['message.failed', 'to'], ['message.inbound', 'from']] as const) {
      const filter = filterOf(type)
      expect(filter).toMatchObject({ $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object', required: [key], additionalProperties: false })
      expect(Object.keys(filter.properties)).toEqual([key])
      expect(filter.properties[key]).toMatchObject({ type: 'array', minItems: 1, maxItems: 10, uniqueItems: true, items: { type: 'string', pattern: '^\\+[1-9][0-9]{6,14}$' } })
      expect(JSON.stringify(filter)).not.toContain('$id')
    }
  })
})
