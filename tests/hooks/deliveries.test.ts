import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { Webhook } from 'standardwebhooks'
import { Value } from '@sinclair/typebox/value'
import { sql } from 'drizzle-orm'
import postgres from 'postgres'
import { EventSchema } from '../../src/messages/schemas.ts'
import { queryRows } from '../../src/lib/db/client.ts'
import { startTestServer } from '../support/server.ts'
import { startReceiver } from '../support/receiver.ts'
import { authorizeAndRedeem, flowFixture } from '../oauth/support.ts'

setDefaultTimeout(30_000)

// Paths that are down answer 500 until they are put in `up`; a held path answers when its release is called.
const up = new Set<string>()
const held = new Map<string, () => void>()
const receiver = startReceiver(async (request) => {
  if (request.path.startsWith('/held')) await new Promise<void>((release) => held.set(request.path, release))
  if (request.path.startsWith('/gone')) return new Response('gone', { status: 410 })
  if (request.path.startsWith('/down') && !up.has(request.path)) return new Response('not today', { status: 500 })
  return new Response(`thanks for ${request.headers['webhook-id']}`)
})
// One attempt per delivery: a failure is final at once, which recover is about.
const server = await startTestServer({
  env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile, WEBHOOK_TIMEOUT_MS: '1000', WEBHOOK_RETRY_SCHEDULE: '0' },
})
type Owner = { accountId: string; secret: string }
const alice = await server.createAccountWithKey('Alice')
const bob = await server.createAccountWithKey('Bob')

const call = (owner: Owner, method: string, path: string, body?: unknown) =>
  server.fetch(`/v0/account/${owner.accountId}${path}?key=${owner.secret}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
const json = async (response: Response) => (await response.json()) as any

async function subscribe(owner: Owner, path: string, event = 'message.inbound'): Promise<{ id: string; secret: string }> {
  const created = await call(owner, 'POST', '/hooks', { event, target_url: `${receiver.origin}${path}` })
  expect(created.status).toBe(201)
  return json(created)
}
const inbound = async (owner: Owner, text: string) => {
  const response = await call(owner, 'POST', '/sandbox/inbound', { from: '+447700900800', body: text })
  expect(response.status).toBe(201)
  return ((await response.json()) as { id: string }).id
}
const onPath = (path: string) => receiver.received.filter((request) => request.path === path)
const listOf = async (owner: Owner, hookId: string, query = '') => (await json(await server.fetch(`/v0/account/${owner.accountId}/hooks/${hookId}/deliveries?key=${owner.secret}${query}`))).data as any[]

/** The subscription's deliveries once `done` holds for them (the worker records an attempt after the receiver answered). */
async function deliveriesWhen(owner: Owner, hookId: string, done: (deliveries: any[]) => boolean, timeoutMs = 5_000): Promise<any[]> {
  let deliveries = await listOf(owner, hookId)
  for (let tries = 0; tries < timeoutMs / 20 && !done(deliveries); tries++) {
    await Bun.sleep(20)
    deliveries = await listOf(owner, hookId)
  }
  expect(done(deliveries)).toBe(true)
  return deliveries
}

describe('POST …/hooks/{hook_id}/test', () => {
  test("sends a signed example of the subscription's type now and answers the receiver's response; the log shows it as a test, GET /events does not", async () => {
    const hook = await subscribe(alice, '/test-ok', 'message.delivered')
    const response = await call(alice, 'POST', `/hooks/${hook.id}/test`)
    expect(response.status).toBe(200)
    const result = await json(response)
    expect(result).toEqual({ delivery_id: expect.stringMatching(/^dlv_/), status_code: 200, duration_ms: expect.any(Number), error: null })

    const [request] = onPath('/test-ok')
    expect(new Webhook(hook.secret).verify(request!.body, request!.headers)).toBeTruthy()
    const event = JSON.parse(request!.body)
    expect(Value.Check(EventSchema, event)).toBe(true)
    expect(event).toMatchObject({ id: request!.headers['webhook-id'], type: 'message.delivered', account_id: alice.accountId, data: { message: { account_id: alice.accountId } } })

    const [listed] = await listOf(alice, hook.id)
    expect(listed).toEqual({
      id: result.delivery_id,
      hook_id: hook.id,
      event_id: event.id,
      event_type: 'message.delivered',
      state: 'succeeded',
      test: true,
      attempts: 1,
      next_attempt_at: null,
      last_attempt: { status_code: 200, duration_ms: result.duration_ms, error: null, at: expect.any(String) },
      created_at: expect.any(String),
    })
    const detail = await json(await call(alice, 'GET', `/deliveries/${result.delivery_id}`))
    expect(detail.attempt_log).toEqual([{ id: expect.stringMatching(/^att_/), at: expect.any(String), status_code: 200, duration_ms: result.duration_ms, error: null, response_snippet: `thanks for ${event.id}` }])
    const events = await json(await call(alice, 'GET', '/events'))
    expect(events.data.map((item: { id: string }) => item.id)).not.toContain(event.id)
    const line = server.logs.find((entry) => entry.msg === 'delivery attempt' && entry.delivery_id === result.delivery_id)
    expect(line).toMatchObject({ level: 'info', hook_id: hook.id, event_id: event.id, status: 200, outcome: 'delivered', test: true })
  })

  test('a failing receiver, a 410 and an unreachable one are answered as they are; a test never changes the subscription, paused or not', async () => {
    const failing = await subscribe(alice, '/down-test')
    expect(await json(await call(alice, 'POST', `/hooks/${failing.id}/test`))).toMatchObject({ status_code: 500, error: 'HTTP 500' })
    expect((await listOf(alice, failing.id))[0]).toMatchObject({ state: 'failed', test: true, next_attempt_at: null })

    const gone = await subscribe(alice, '/gone-test')
    expect(await json(await call(alice, 'POST', `/hooks/${gone.id}/test`))).toMatchObject({ status_code: 410 })
    expect(await json(await call(alice, 'GET', `/hooks/${gone.id}`))).toMatchObject({ status: 'active' })

    const closed = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('') })
    const port = closed.port
    await closed.stop(true)
    const unreachable = await json(await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `http://127.0.0.1:${port}/nobody` }))
    const nobody = await json(await call(alice, 'POST', `/hooks/${unreachable.id}/test`))
    expect(nobody).toMatchObject({ status_code: null, error: expect.stringMatching(/^connection failed/) })

    const paused = await subscribe(alice, '/test-paused')
    await call(alice, 'PATCH', `/hooks/${paused.id}`, { status: 'paused' })
    expect(await json(await call(alice, 'POST', `/hooks/${paused.id}/test`))).toMatchObject({ status_code: 200 })
    expect(onPath('/test-paused')).toHaveLength(1)
    expect(await json(await call(alice, 'GET', `/hooks/${paused.id}`))).toMatchObject({ status: 'paused' })
    // The failed test is not retried: one attempt is all it ever gets.
    await Bun.sleep(1_200)
    expect(onPath('/down-test')).toHaveLength(1)
  })

  test("another account's subscription and an unknown id are 404, and nothing is sent", async () => {
    const hook = await subscribe(alice, '/test-theirs')
    expect((await call(bob, 'POST', `/hooks/${hook.id}/test`)).status).toBe(404)
    expect((await call(alice, 'POST', '/hooks/hook_01m00000000000000000000000/test')).status).toBe(404)
    expect(onPath('/test-theirs')).toHaveLength(0)
  })

  /** Alice's subscription at `path` (a held one) and its test event, once the receiver holds the request. */
  const testHeldByReceiver = async (path: string) => {
    const hook = await subscribe(alice, path)
    const testing = call(alice, 'POST', `/hooks/${hook.id}/test`)
    await receiver.waitFor(() => held.has(path), 5_000)
    return { hook, testing, release: held.get(path)! }
  }

  test('a subscription deleted while its test is in flight is 404, not a server error, and leaves nothing behind', async () => {
    const { hook, testing, release } = await testHeldByReceiver('/held-test')
    expect((await call(alice, 'DELETE', `/hooks/${hook.id}`)).status).toBe(204)
    release()
    const answered = await testing
    expect(answered.status).toBe(404)
    expect(await json(answered)).toMatchObject({ status: 404, code: 'not_found', detail: `No subscription ${hook.id} on this account.` })
    const orphans = await queryRows<{ id: string }>(server.database.handle.db, sql`select id from events e where e.account_id = ${alice.accountId} and e.test and not exists (select 1 from deliveries d where d.event_id = e.id)`)
    expect(orphans).toEqual([])
  })

  // PostgreSQL only: PGlite runs one transaction at a time, so a delete cannot be open while the test's log is written.
  test.skipIf(server.database.handle.kind !== 'postgres')('a delete still open when the test is logged: the log waits for it and the test is 404, not a foreign-key failure', async () => {
    const { hook, testing, release } = await testHeldByReceiver('/held-test-open-delete')
    const deleter = postgres(server.database.url!, { max: 1, onnotice: () => {} })
    try {
      await deleter.begin(async (tx) => {
        await tx`delete from hooks where id = ${hook.id}`
        release()
        // Long enough for the test's log statement to begin and wait on the subscription's row.
        await Bun.sleep(500)
      })
    } finally {
      await deleter.end({ timeout: 5 })
    }
    const answered = await testing
    expect(answered.status).toBe(404)
    expect(await json(answered)).toMatchObject({ code: 'not_found' })
  })
})

describe('deliveries with state', () => {
  test('one row per event, newest first, filtered by state and paged; a bad filter is 422', async () => {
    const hook = await subscribe(alice, '/down-states')
    await inbound(alice, 'first, fails')
    await deliveriesWhen(alice, hook.id, (rows) => rows.length === 1 && rows[0].state === 'failed')
    up.add('/down-states')
    await inbound(alice, 'second, succeeds')
    const rows = await deliveriesWhen(alice, hook.id, (rows) => rows.length === 2 && rows[0].state === 'succeeded')
    expect(rows.map((row) => [row.state, row.attempts, row.last_attempt.status_code])).toEqual([
      ['succeeded', 1, 200],
      ['failed', 1, 500],
    ])
    expect(rows[1].last_attempt.error).toBe('HTTP 500')
    expect((await listOf(alice, hook.id, '&state=failed')).map((row) => row.id)).toEqual([rows[1].id])
    expect((await listOf(alice, hook.id, '&state=succeeded')).map((row) => row.id)).toEqual([rows[0].id])
    expect(await listOf(alice, hook.id, '&state=canceled')).toEqual([])

    const first = await json(await server.fetch(`/v0/account/${alice.accountId}/hooks/${hook.id}/deliveries?key=${alice.secret}&limit=1`))
    expect(first.data.map((row: { id: string }) => row.id)).toEqual([rows[0].id])
    const second = await json(await server.fetch(`/v0/account/${alice.accountId}/hooks/${hook.id}/deliveries?key=${alice.secret}&limit=1&cursor=${first.next_cursor}`))
    expect([second.data.map((row: { id: string }) => row.id), second.next_cursor]).toEqual([[rows[1].id], null])

    for (const query of ['&state=delivered', '&state=', '&limit=0']) {
      const response = await server.fetch(`/v0/account/${alice.accountId}/hooks/${hook.id}/deliveries?key=${alice.secret}${query}`)
      expect(response.status).toBe(422)
    }
  })

  test('a pending delivery shows when its next attempt is due', async () => {
    const owner = await server.createAccountWithKey('Pending')
    const hook = await subscribe(owner, '/pending')
    await call(owner, 'PATCH', `/hooks/${hook.id}`, { status: 'paused' })
    await inbound(owner, 'held')
    const [row] = await listOf(owner, hook.id)
    expect(row).toMatchObject({ state: 'pending', attempts: 0, last_attempt: null, test: false })
    expect(Date.parse(row.next_attempt_at)).toBeLessThanOrEqual(Date.now())
  })

  test("a delivery is read by the account's path or its subscription's; another account's, another subscription's or a malformed id is 404", async () => {
    const hook = await subscribe(alice, '/read-one')
    const other = await subscribe(alice, '/read-other')
    const { delivery_id } = await json(await call(alice, 'POST', `/hooks/${hook.id}/test`))
    const short = await json(await call(alice, 'GET', `/deliveries/${delivery_id}`))
    const nested = await json(await call(alice, 'GET', `/hooks/${hook.id}/deliveries/${delivery_id}`))
    expect(nested).toEqual(short)
    expect(short).toMatchObject({ id: delivery_id, hook_id: hook.id, state: 'succeeded' })

    const notFound = [
      await call(bob, 'GET', `/deliveries/${delivery_id}`),
      await call(alice, 'GET', `/hooks/${other.id}/deliveries/${delivery_id}`),
      await call(alice, 'GET', '/deliveries/dlv_01m0000000000000000000000a'),
      await call(alice, 'GET', '/deliveries/not-an-id'),
      await call(bob, 'POST', `/deliveries/${delivery_id}/retry`),
      await call(alice, 'POST', `/hooks/${other.id}/deliveries/${delivery_id}/retry`),
    ]
    for (const response of notFound) {
      expect(response.status).toBe(404)
      expect(response.headers.get('content-type')).toBe('application/problem+json')
    }
    // Bob's own path with Alice's account id is refused before any lookup.
    expect((await server.fetch(`/v0/account/${alice.accountId}/deliveries/${delivery_id}?key=${bob.secret}`)).status).toBe(404)
    expect(onPath('/read-one')).toHaveLength(1)
  })
})

describe('POST …/deliveries/{delivery_id}/retry', () => {
  test('a succeeded delivery is sent again now, with the same webhook-id', async () => {
    const hook = await subscribe(alice, '/retry-ok')
    await inbound(alice, 'retry me')
    const [delivered] = await deliveriesWhen(alice, hook.id, (rows) => rows[0]?.state === 'succeeded')
    const response = await call(alice, 'POST', `/hooks/${hook.id}/deliveries/${delivered.id}/retry`)
    expect(response.status).toBe(202)
    expect(await json(response)).toMatchObject({ id: delivered.id, state: 'pending', attempts: 1, next_attempt_at: expect.any(String) })
    await receiver.waitFor(() => onPath('/retry-ok').length === 2)
    expect(new Set(onPath('/retry-ok').map((request) => request.headers['webhook-id']))).toEqual(new Set([delivered.event_id]))
    const [again] = await deliveriesWhen(alice, hook.id, (rows) => rows[0]?.attempts === 2)
    expect(again).toMatchObject({ state: 'succeeded', attempts: 2 })
    expect((await json(await call(alice, 'GET', `/deliveries/${delivered.id}`))).attempt_log).toHaveLength(2)
  })

  test('a failed delivery is sent again and can succeed; by its id alone too', async () => {
    const hook = await subscribe(alice, '/down-retry')
    await inbound(alice, 'fails first')
    const [failed] = await deliveriesWhen(alice, hook.id, (rows) => rows[0]?.state === 'failed')
    up.add('/down-retry')
    expect((await call(alice, 'POST', `/deliveries/${failed.id}/retry`)).status).toBe(202)
    const [succeeded] = await deliveriesWhen(alice, hook.id, (rows) => rows[0]?.state === 'succeeded')
    expect(succeeded).toMatchObject({ id: failed.id, attempts: 2, last_attempt: { status_code: 200 } })
  })

  test('while the circuit is open, a retry goes out at once as the probe, ahead of the backlog; a recover too', async () => {
    const owner = await server.createAccountWithKey('Probing')
    const opened = async (path: string) => {
      const hook = await subscribe(owner, path)
      for (const text of ['one', 'two', 'three']) await inbound(owner, `${path} ${text}`)
      await deliveriesWhen(owner, hook.id, (rows) => rows.length === 3 && rows.every((row) => row.state === 'failed'))
      expect((await json(await call(owner, 'GET', `/hooks/${hook.id}`))).circuit.state).not.toBe('closed')
      // A backlog waits behind the open circuit, and the next probe is an hour away, as after a long outage.
      await inbound(owner, `${path} waiting`)
      await server.database.handle.db.execute(sql`update hooks set circuit_probe_at = now() + interval '1 hour' where id = ${hook.id}`)
      up.add(path)
      return hook
    }
    const bodyOf = (request: { body: string }) => JSON.parse(request.body).data.message.body as string

    const retried = await opened('/down-probe-retry')
    const sentBefore = onPath('/down-probe-retry').length
    const first = (await listOf(owner, retried.id, '&state=failed')).at(-1)
    expect((await call(owner, 'POST', `/deliveries/${first.id}/retry`)).status).toBe(202)
    await receiver.waitFor(() => onPath('/down-probe-retry').length > sentBefore, 3_000)
    // The retried delivery was the probe, not the backlog's head; its answer closed the circuit, and the backlog followed.
    expect(bodyOf(onPath('/down-probe-retry')[sentBefore]!)).toBe('/down-probe-retry one')
    await receiver.waitFor(() => onPath('/down-probe-retry').some((request) => bodyOf(request) === '/down-probe-retry waiting'), 3_000)
    expect((await json(await call(owner, 'GET', `/hooks/${retried.id}`))).circuit.state).toBe('closed')

    const recovered = await opened('/down-probe-recover')
    const before = onPath('/down-probe-recover').length
    expect(await json(await call(owner, 'POST', `/hooks/${recovered.id}/recover`, { since: new Date(Date.now() - 60_000).toISOString() }))).toEqual({ requeued: 3 })
    await receiver.waitFor(() => onPath('/down-probe-recover').length >= before + 4, 5_000)
  })

  test('a paused or disabled subscription is 409 subscription_not_active, and nothing is sent', async () => {
    const hook = await subscribe(alice, '/retry-paused')
    await inbound(alice, 'then paused')
    const [delivered] = await deliveriesWhen(alice, hook.id, (rows) => rows[0]?.state === 'succeeded')
    await call(alice, 'PATCH', `/hooks/${hook.id}`, { status: 'paused' })
    const refused = await call(alice, 'POST', `/deliveries/${delivered.id}/retry`)
    expect(refused.status).toBe(409)
    expect(await json(refused)).toMatchObject({ code: 'subscription_not_active', detail: expect.stringContaining('paused') })
    expect((await listOf(alice, hook.id))[0]).toMatchObject({ state: 'succeeded' })
    await Bun.sleep(1_200)
    expect(onPath('/retry-paused')).toHaveLength(1)
  })
})

describe('POST …/hooks/{hook_id}/recover', () => {
  test('sends again only the failed deliveries created since the time given, not older ones, not succeeded ones, not tests', async () => {
    const owner = await server.createAccountWithKey('Recovering')
    const hook = await subscribe(owner, '/down-recover')
    const older = await inbound(owner, 'before the outage')
    await deliveriesWhen(owner, hook.id, (rows) => rows[0]?.state === 'failed')
    await Bun.sleep(20)
    const since = new Date().toISOString()
    await Bun.sleep(20)
    const during = [await inbound(owner, 'during 1'), await inbound(owner, 'during 2')]
    await call(owner, 'POST', `/hooks/${hook.id}/test`)
    await deliveriesWhen(owner, hook.id, (rows) => rows.length === 4 && rows.every((row) => row.state === 'failed'))
    up.add('/down-recover')
    await inbound(owner, 'after the fix')
    // Three failures in a row opened the circuit (docs/webhooks.md#when-an-endpoint-keeps-failing): the fix is seen by the next probe, 5 s after it opened.
    expect((await json(await call(owner, 'GET', `/hooks/${hook.id}`))).circuit.state).not.toBe('closed')
    await deliveriesWhen(owner, hook.id, (rows) => rows[0]?.state === 'succeeded', 15_000)
    const sentBefore = onPath('/down-recover').length

    const response = await call(owner, 'POST', `/hooks/${hook.id}/recover`, { since })
    expect(response.status).toBe(202)
    expect(await json(response)).toEqual({ requeued: 2 })
    await receiver.waitFor(() => onPath('/down-recover').length === sentBefore + 2)
    await Bun.sleep(300)
    const resent = onPath('/down-recover').slice(sentBefore).map((request) => JSON.parse(request.body).data.message.id)
    expect(resent.sort()).toEqual([...during].sort())
    expect(resent).not.toContain(older)
    const rows = await deliveriesWhen(owner, hook.id, (rows) => rows.filter((row) => row.state === 'succeeded').length === 3)
    expect(rows.filter((row) => row.state === 'failed').map((row) => row.test)).toEqual([true, false])
  })

  test("a bad since is 422; another account's subscription is 404; a paused one is 409", async () => {
    const hook = await subscribe(alice, '/recover-errors')
    for (const body of [{}, { since: 'yesterday' }, { since: 5 }, { since: '2026-01-01T00:00:00Z', extra: 1 }]) {
      const response = await call(alice, 'POST', `/hooks/${hook.id}/recover`, body)
      expect(response.status).toBe(422)
    }
    expect((await call(bob, 'POST', `/hooks/${hook.id}/recover`, { since: '2026-01-01T00:00:00Z' })).status).toBe(404)
    await call(alice, 'PATCH', `/hooks/${hook.id}`, { status: 'paused' })
    const paused = await call(alice, 'POST', `/hooks/${hook.id}/recover`, { since: '2026-01-01T00:00:00Z' })
    expect([paused.status, (await json(paused)).code]).toEqual([409, 'subscription_not_active'])
  })
})

describe('scopes', () => {
  test('a hooks:read token reads deliveries but cannot test, retry or recover; a hooks:write token can', async () => {
    const fixture = await flowFixture(server)
    const owner = { accountId: fixture.accountId, secret: fixture.apiKey }
    const hook = await subscribe(owner, '/scoped')
    const { delivery_id } = await json(await call(owner, 'POST', `/hooks/${hook.id}/test`))
    const base = `/v0/account/${fixture.accountId}`
    const as = (token: string, method: string, path: string, body?: unknown) =>
      server.fetch(`${base}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      })

    const reader = (await authorizeAndRedeem(server, fixture, { scope: 'hooks:read' })).tokens.access_token
    expect((await as(reader, 'GET', `/hooks/${hook.id}/deliveries`)).status).toBe(200)
    expect((await as(reader, 'GET', `/deliveries/${delivery_id}`)).status).toBe(200)
    const writes: [string, unknown?][] = [[`/hooks/${hook.id}/test`], [`/deliveries/${delivery_id}/retry`], [`/hooks/${hook.id}/recover`, { since: '2026-01-01T00:00:00Z' }]]
    for (const [path, body] of writes) {
      const denied = await as(reader, 'POST', path, body)
      expect(denied.status).toBe(403)
      expect(denied.headers.get('www-authenticate')).toContain('scope="hooks:write"')
    }
    expect(onPath('/scoped')).toHaveLength(1)

    const writer = (await authorizeAndRedeem(server, fixture, { scope: 'hooks:write' })).tokens.access_token
    expect((await as(writer, 'POST', `/hooks/${hook.id}/test`)).status).toBe(200)
    expect((await as(writer, 'POST', `/deliveries/${delivery_id}/retry`)).status).toBe(202)
    expect((await as(writer, 'POST', `/hooks/${hook.id}/recover`, { since: '2026-01-01T00:00:00Z' })).status).toBe(202)
  })
})
