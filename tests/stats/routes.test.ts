import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { Value } from '@sinclair/typebox/value'
import { AccountStatsSchema, HookStatsSchema } from '../../src/stats/schemas.ts'
import { startTestServer } from '../support/server.ts'
import { startReceiver } from '../support/receiver.ts'
import { freePort } from '../support/process.ts'
import { authorizeAndRedeem, flowFixture } from '../oauth/support.ts'

setDefaultTimeout(60_000)

// Each path answers one way; /flaky is down until it is put up.
let flakyUp = false
const receiver = startReceiver(async (request) => {
  if (request.path === '/slow') {
    await Bun.sleep(800)
    return new Response('late')
  }
  if (request.path === '/bad') return new Response('no such thing', { status: 400 })
  if (request.path === '/err') return new Response('broken', { status: 500 })
  if (request.path === '/flaky' && !flakyUp) return new Response('down', { status: 503 })
  return new Response('ok')
})
// Two attempts per delivery; an attempt with no answer in 300 ms is a timeout.
const server = await startTestServer({
  env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile, WEBHOOK_TIMEOUT_MS: '300', WEBHOOK_RETRY_SCHEDULE: '0,100ms' },
})
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
// Taken when each request is made: fixed at load, the hour grew to 62 minute buckets once the file ran past a minute's end.
const lastHour = () => `interval=minute&since=${new Date(Date.now() - 3_600_000).toISOString()}`

async function allPages(owner: Owner, path: string): Promise<any[]> {
  const items: any[] = []
  let cursor: string | null = null
  do {
    const page = await json(await call(owner, 'GET', `${path}?limit=100${cursor ? `&cursor=${cursor}` : ''}`))
    items.push(...page.data)
    cursor = page.next_cursor
  } while (cursor)
  return items
}

/** What the attempt log says, by the deliveries list and each delivery's attempts: the figures the stats must equal. */
async function figuresFromLog(owner: Owner, hookId: string) {
  const deliveries = await allPages(owner, `/hooks/${hookId}/deliveries`)
  const failures: Record<string, number> = { timeout: 0, connection: 0, refused: 0, redirect: 0, http_4xx: 0, http_5xx: 0, unroutable: 0, nacked: 0, denied: 0, other: 0 }
  for (const delivery of deliveries) {
    for (const attempt of (await json(await call(owner, 'GET', `/hooks/${hookId}/deliveries/${delivery.id}`))).attempt_log) {
      const status = attempt.status_code as number | null
      if (status !== null && status >= 200 && status < 300) continue
      const reason =
        status === null ? (String(attempt.error).startsWith('timed out') ? 'timeout' : 'connection') : status >= 500 ? 'http_5xx' : status >= 400 ? 'http_4xx' : 'redirect'
      failures[reason]!++
    }
  }
  const attempts = deliveries.reduce((sum, delivery) => sum + delivery.attempts, 0)
  const succeeded = deliveries.filter((delivery) => delivery.state === 'succeeded').length
  return { attempts, succeeded, failed: attempts - succeeded, failures, pending: deliveries.filter((delivery) => delivery.state === 'pending').length }
}

async function settled(owner: Owner, hookIds: string[], timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const pending = (await Promise.all(hookIds.map((id) => allPages(owner, `/hooks/${id}/deliveries`)))).flat().filter((delivery) => delivery.state === 'pending')
    if (pending.length === 0) return
    if (Date.now() > deadline) throw new Error(`${pending.length} deliveries still pending`)
    await Bun.sleep(50)
  }
}

describe('health over time after a mixed run', () => {
  test('each subscription’s figures and the account’s equal the deliveries list and the event log: successes, 4xx, 5xx, timeouts, refused connections, a circuit that opened and closed, a test event', async () => {
    const targets = {
      ok: `${receiver.origin}/ok`,
      bad: `${receiver.origin}/bad`,
      err: `${receiver.origin}/err`,
      slow: `${receiver.origin}/slow`,
      closed: `https://127.0.0.1:${freePort()}/nobody`,
      flaky: `${receiver.origin}/flaky`,
    }
    // Those that fail without an answer or with a 5xx get one event (two failures: their circuits stay closed);
    // the others four, from another number.
    const once = ['err', 'slow', 'closed']
    const hooks: Record<string, string> = {}
    for (const [name, target_url] of Object.entries(targets)) {
      const filter = { from: [once.includes(name) ? '+447700900801' : '+447700900800'] }
      const created = await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url, filter })
      expect(created.status).toBe(201)
      hooks[name] = (await json(created)).id
    }
    expect((await call(alice, 'POST', '/sandbox/inbound', { from: '+447700900801', body: 'hello once' })).status).toBe(201)
    for (let i = 0; i < 4; i++) expect((await call(alice, 'POST', '/sandbox/inbound', { from: '+447700900800', body: `hello ${i}` })).status).toBe(201)
    const sent = [await call(alice, 'POST', '/messages', { to: '+447700900123', body: 'fine' }), await call(alice, 'POST', '/messages', { to: '+447700900000', body: 'fails' })]
    for (const response of sent) expect(response.status).toBe(202)
    expect((await call(alice, 'POST', `/hooks/${hooks.ok}/test`)).status).toBe(200)

    // /flaky failed three times in a row: its circuit opened and holds the rest. Its next probe is put far off,
    // so that what is pending stays still while it is compared.
    const flaky = hooks.flaky!
    await settled(alice, Object.values(hooks).filter((id) => id !== flaky))
    for (let tries = 0; (await json(await call(alice, 'GET', `/hooks/${flaky}`))).circuit.state === 'closed'; tries++) {
      expect(tries).toBeLessThan(200)
      await Bun.sleep(50)
    }
    await server.database.handle.db.execute(sql`update hooks set circuit_probe_at = now() + interval '1 hour' where id = ${flaky}`)
    await Bun.sleep(400)
    const whileOpen = await figuresFromLog(alice, flaky)
    expect(whileOpen.pending).toBeGreaterThan(0)
    const openStats = await json(await call(alice, 'GET', `/hooks/${flaky}/stats?${lastHour()}`))
    expect(openStats.pending).toBe(whileOpen.pending)
    expect(openStats.totals).toMatchObject({ attempts: whileOpen.attempts, succeeded: 0, failed: whileOpen.attempts, failures: whileOpen.failures })

    // The receiver is fixed; a retry by hand is the probe, its success closes the circuit and the rest follow.
    flakyUp = true
    const [first] = await allPages(alice, `/hooks/${flaky}/deliveries`)
    expect((await call(alice, 'POST', `/hooks/${flaky}/deliveries/${first.id}/retry`)).status).toBe(202)
    await settled(alice, [flaky])
    expect((await json(await call(alice, 'GET', `/hooks/${flaky}`))).circuit.state).toBe('closed')

    let attempts = 0
    for (const [name, hookId] of Object.entries(hooks)) {
      const expected = await figuresFromLog(alice, hookId)
      const stats = await json(await call(alice, 'GET', `/hooks/${hookId}/stats?${lastHour()}`))
      expect(stats.hook_id).toBe(hookId)
      expect({ name, pending: stats.pending, ...stats.totals, latency_ms: undefined }).toEqual({ name, ...expected, latency_ms: undefined })
      // The buckets add up to the totals.
      const summed = stats.buckets.reduce((sum: number, bucket: any) => sum + bucket.attempts, 0)
      expect(summed).toBe(stats.totals.attempts)
      expect(stats.buckets).toHaveLength(61)
      attempts += expected.attempts
    }
    // Each kind of failure is where it belongs.
    const totals = async (name: string) => (await json(await call(alice, 'GET', `/hooks/${hooks[name]}/stats?${lastHour()}`))).totals
    expect((await totals('ok')).succeeded).toBe(5)
    expect((await totals('bad')).failures.http_4xx).toBe(8)
    expect((await totals('err')).failures.http_5xx).toBe(2)
    expect((await totals('slow')).failures.timeout).toBe(2)
    expect((await totals('slow')).latency_ms.p50).toBeGreaterThanOrEqual(300)
    expect((await totals('closed')).failures.connection).toBe(2)
    const flakyTotals = await totals('flaky')
    expect(flakyTotals.succeeded).toBeGreaterThan(0)
    expect(flakyTotals.failures.http_5xx).toBeGreaterThanOrEqual(3)

    // The account: every subscription together, its messages and its events, as the logs have them.
    for (let tries = 0; (await allPages(alice, '/events')).length < 7; tries++) {
      expect(tries).toBeLessThan(200)
      await Bun.sleep(50)
    }
    const events = await allPages(alice, '/events')
    const byType: Record<string, number> = {}
    for (const event of events) byType[event.type] = (byType[event.type] ?? 0) + 1
    const account = await json(await call(alice, 'GET', `/stats?${lastHour()}`))
    expect(account.account_id).toBe(alice.accountId)
    expect(account.pending).toBe(0)
    expect(account.totals.attempts).toBe(attempts)
    expect(account.totals.events).toEqual(byType)
    expect(account.totals.messages).toEqual({ sent: 2, delivered: 1, failed: 1, received: 5 })
    // By the hour and by the day, the same totals.
    for (const interval of ['hour', 'day']) {
      const coarse = await json(await call(alice, 'GET', `/stats?interval=${interval}&since=${new Date(Date.now() - 86_400_000).toISOString()}`))
      expect(coarse.totals).toEqual(account.totals)
    }
    // Another account sees none of it.
    const bobs = await json(await call(bob, 'GET', `/stats?${lastHour()}`))
    expect(bobs.totals).toMatchObject({ attempts: 0, messages: { sent: 0, delivered: 0, failed: 0, received: 0 }, events: {}, latency_ms: null })
  })
})

describe('GET …/stats refuses what it cannot answer', () => {
  test('another account’s subscription, or an unknown one, is 404; another account’s stats are 404', async () => {
    const created = await json(await call(alice, 'POST', '/hooks', { event: 'message.delivered', target_url: `${receiver.origin}/ok` }))
    expect((await call(bob, 'GET', `/hooks/${created.id}/stats`)).status).toBe(404)
    expect((await call(alice, 'GET', '/hooks/hook_01jd3m9x2qk7r5v8w4y6z0abcd/stats')).status).toBe(404)
    expect((await call(alice, 'GET', `/hooks/not-an-id/stats`)).status).toBe(404)
    const other = await server.fetch(`/v0/account/${bob.accountId}/stats?key=${alice.secret}`)
    expect(other.status).toBe(404)
  })

  test.each([
    ['interval=week', 'query:/interval'],
    ['since=yesterday', 'query:/since'],
    ['until=2026-13-01T00:00:00Z', 'query:/until'],
    ['since=2026-11-02T00:00:00Z&until=2026-11-01T00:00:00Z', 'query:/since'],
    ['interval=minute&since=2026-11-01T00:00:00Z&until=2026-11-03T00:00:00Z', 'query:/since'],
    ['interval=hour&since=2026-01-01T00:00:00Z&until=2026-11-01T00:00:00Z', 'query:/since'],
    ['colour=blue', 'query:/colour'],
  ])('%s is 422 naming %s', async (query, path) => {
    const response = await call(alice, 'GET', `/stats?${query}`)
    expect(response.status).toBe(422)
    expect(response.headers.get('content-type')).toContain('application/problem+json')
    const problem = await json(response)
    expect(problem.errors.map((error: { path: string }) => error.path)).toContain(path)
  })

  test('the range is whole buckets: until rounded up, since rounded down, 1,440 at most; by default the last 24 hours by the hour', async () => {
    const byDefault = await json(await call(alice, 'GET', '/stats'))
    expect(byDefault.interval).toBe('hour')
    expect(byDefault.buckets).toHaveLength(24)
    expect(Date.parse(byDefault.until)).toBeGreaterThanOrEqual(Date.now() - 1000)
    expect(Date.parse(byDefault.until) % 3_600_000).toBe(0)
    const day = await json(await call(alice, 'GET', '/stats?interval=minute&since=2026-11-01T00:00:30Z&until=2026-11-01T23:59:10Z'))
    expect(day).toMatchObject({ since: '2026-11-01T00:00:00.000Z', until: '2026-11-02T00:00:00.000Z' })
    expect(day.buckets).toHaveLength(1440)
    expect(day.buckets[1].start).toBe('2026-11-01T00:01:00.000Z')
    // 24 hours that do not start on a minute span 1,441 once rounded: the latest 1,440 are answered.
    const shifted = await json(await call(alice, 'GET', '/stats?interval=minute&since=2026-11-01T00:00:30Z&until=2026-11-02T00:00:30Z'))
    expect(shifted).toMatchObject({ since: '2026-11-01T00:01:00.000Z', until: '2026-11-02T00:01:00.000Z' })
    expect(shifted.buckets).toHaveLength(1440)
  })

  test('hooks:read reads a subscription’s figures; the account’s need messages:read', async () => {
    const fixture = await flowFixture(server)
    const { tokens } = await authorizeAndRedeem(server, fixture, { scope: 'hooks:read' })
    const owner = { accountId: fixture.accountId, secret: fixture.apiKey }
    const created = await json(await call(owner, 'POST', '/hooks', { event: 'message.delivered', target_url: `${receiver.origin}/ok` }))
    const bearer = (path: string) => server.fetch(`/v0/account/${fixture.accountId}${path}`, { headers: { authorization: `Bearer ${tokens.access_token}` } })
    expect((await bearer(`/hooks/${created.id}/stats`)).status).toBe(200)
    const refused = await bearer('/stats')
    expect(refused.status).toBe(403)
    expect(refused.headers.get('www-authenticate')).toContain('scope="messages:read"')
  })
})

describe('the OpenAPI document', () => {
  test('describes both operations with their scopes, and examples that are valid answers', async () => {
    const document = (await (await server.fetch('/v0/openapi.json')).json()) as any
    const hookStats = document.paths['/v0/account/{account_id}/hooks/{hook_id}/stats'].get
    const accountStats = document.paths['/v0/account/{account_id}/stats'].get
    expect(hookStats.operationId).toBe('getHookStats')
    expect(accountStats.operationId).toBe('getAccountStats')
    expect(JSON.stringify(hookStats.security)).toContain('hooks:read')
    expect(JSON.stringify(accountStats.security)).toContain('messages:read')
    expect(hookStats.parameters.map((parameter: { name: string }) => parameter.name)).toEqual(expect.arrayContaining(['since', 'until', 'interval']))
    for (const [schema, example] of [[HookStatsSchema, HookStatsSchema.examples[0]], [AccountStatsSchema, AccountStatsSchema.examples[0]]] as const) {
      expect([...Value.Errors(schema, example)]).toEqual([])
    }
    expect(JSON.stringify(document)).toContain('"p99":950')
  })
})
