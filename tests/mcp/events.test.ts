import { afterAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Webhook } from 'standardwebhooks'
import {
  createMCPClient,
  experimental_createMCPEventWebhook as createMCPEventWebhook,
  type Experimental_MCPEvent as MCPEvent,
  type Experimental_MCPEventStore as MCPEventStore,
  type Experimental_MCPEventSubscription as MCPEventSubscription,
} from '@ai-sdk/mcp'
import { makeCertificates } from '../../fixtures/tls.ts'
import { startTestServer } from '../support/server.ts'
import { until } from '../support/until.ts'
import { flowFixture, type Fixture } from '../oauth/support.ts'
import { connectWithToken, modernRequest, tokenFor } from '../support/mcp.ts'
import { FAILED_VERIFICATIONS, SUBSCRIPTIONS_PER_GRANT, grantedTtlMs, SUBSCRIPTION_TTL_MS } from '../../src/mcp/events.ts'
import { TERMINATED_ENVELOPES_IN_FLIGHT } from '../../src/mcp/event-subscriptions.ts'
import { NEXT_POLL_MS, POLL_SCAN, pollCost, pollEvents } from '../../src/mcp/event-poll.ts'
import { createRequestRateLimiter } from '../../src/auth/request-rate-limit.ts'
import { createSecretBox } from '../../src/lib/security/secret-box.ts'
import { sql } from 'drizzle-orm'
import { lowestIdAt } from '../../src/lib/db/ids.ts'

/** The agent's side: an HTTPS server for its webhook callbacks, each path answered by the handler set for it. */
function startCallbackServer() {
  const dir = mkdtempSync(join(tmpdir(), 'agent-tls-'))
  const tls = makeCertificates(dir)
  const handlers = new Map<string, (request: Request) => Promise<Response> | Response>()
  const seen: { path: string; headers: Record<string, string>; body: string }[] = []
  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    tls: { key: tls.key, cert: tls.cert },
    async fetch(request) {
      const path = new URL(request.url).pathname
      seen.push({ path, headers: Object.fromEntries(request.headers), body: await request.clone().text() })
      const handler = handlers.get(path)
      return handler ? handler(request) : new Response(null, { status: 404 })
    },
  })
  afterAll(() => {
    server.stop(true)
    rmSync(dir, { recursive: true, force: true })
  })
  return { origin: `https://localhost:${server.port}`, caFile: join(dir, 'ca.pem'), handlers, seen }
}

/** The AI SDK's store of subscriptions, kept in memory as its documentation's example does. */
function memoryStore(): MCPEventStore & { all: Map<string, MCPEventSubscription> } {
  const all = new Map<string, MCPEventSubscription>()
  return {
    all,
    async get(key) {
      return all.get(key)
    },
    async getById(id) {
      return [...all.values()].find((subscription) => subscription.id === id)
    },
    async set(subscription) {
      all.set(subscription.key, structuredClone(subscription))
    },
    async update(key, patch) {
      const current = all.get(key)
      if (current) all.set(key, { ...current, ...patch })
    },
    async delete(key) {
      all.delete(key)
    },
  }
}

const callbacks = startCallbackServer()
// HOOKS_PER_ACCOUNT 30: the account-wide bound of agents' subscriptions, above one grant's 25.
const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: callbacks.caFile, WEBHOOK_RETRY_SCHEDULE: '0,200ms,500ms', HOOKS_PER_ACCOUNT: '30' } })
const mcpUrl = `${server.config.baseUrl}/mcp`

// One registered client for the whole file: each test still has an account and a user of its own.
let sharedClientId: string | undefined
async function newFixture(): Promise<Fixture> {
  const fixture = await flowFixture(server, { clientId: sharedClientId })
  sharedClientId = fixture.clientId
  return fixture
}

const eventsToken = (fixture: Fixture, scope = 'hooks:read messages:read') => tokenFor(server, fixture, { scope, resource: mcpUrl })

async function rpc(token: string, method: string, params: Record<string, unknown> = {}) {
  const response = await modernRequest(mcpUrl, token, method, params)
  return { status: response.status, headers: response.headers, body: (await response.json()) as { result?: any; error?: { code: number; message: string; data?: any } } }
}

const secret = () => `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`

/** A callback path that answers the verification challenge as a receiver should, and takes every event. */
function echoingCallback(path: string) {
  const bodies: any[] = []
  callbacks.handlers.set(path, async (request) => {
    const body = (await request.json()) as { type?: string; challenge?: string }
    bodies.push(body)
    return body.type === 'verification' ? Response.json({ challenge: body.challenge }) : new Response(null, { status: 204 })
  })
  return { url: `${callbacks.origin}${path}`, bodies }
}

const inbound = (fixture: Fixture, from: string, body: string) =>
  server.fetch(`/v0/account/${fixture.accountId}/sandbox/inbound?key=${fixture.apiKey}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ from, body }) })

async function waitFor(predicate: () => boolean, timeoutMs = 10_000) {
  const until = Date.now() + timeoutMs
  while (!predicate()) {
    if (Date.now() > until) throw new Error(`not within ${timeoutMs} ms`)
    await Bun.sleep(20)
  }
}

describe('the AI SDK client (@ai-sdk/mcp), at its default protocol', () => {
  test('lists tools and events, subscribes by webhook with its own handler, receives a contact’s reply, unsubscribes', async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    const store = memoryStore()
    const received: MCPEvent[] = []
    callbacks.handlers.set('/agent', createMCPEventWebhook({ store, onEvent: async ({ event }) => void received.push(event) }))

    const client = await createMCPClient({ transport: { type: 'http', url: mcpUrl, headers: { authorization: `Bearer ${token}` } }, experimental_events: { store } })
    // server/discover answered: no initialize was sent (that path would negotiate 2025-11-25).
    expect(client.initializeResult.protocolVersion).toBe('2026-07-28')
    expect(Object.keys(await client.tools())).toContain('list_webhooks')

    const { events } = await client.experimental_events.list()
    expect(events.map((event) => event.name)).toEqual(['message.delivered', 'message.failed', 'message.inbound'])
    const inboundType = events.find((event) => event.name === 'message.inbound')!
    expect(inboundType.delivery).toEqual(['webhook', 'poll'])
    expect(inboundType.inputSchema).toMatchObject({ type: 'object', properties: { from: { type: 'array' } }, additionalProperties: false })
    expect(inboundType.payloadSchema).toMatchObject({ type: 'object', properties: { message: { type: 'object' } } })

    const subscribed = await client.experimental_events.subscribe({ name: 'message.inbound', arguments: { from: ['+15550001111'] }, delivery: { mode: 'webhook', url: `${callbacks.origin}/agent` } })
    expect(subscribed.id).toMatch(/^evs_/)
    expect(subscribed.truncated).toBe(false)
    const granted = Date.parse(subscribed.refreshBefore!) - Date.now()
    expect(granted).toBeGreaterThan(SUBSCRIPTION_TTL_MS.default - 60_000)
    expect(granted).toBeLessThanOrEqual(SUBSCRIPTION_TTL_MS.default)

    expect((await inbound(fixture, '+15550002222', 'not for this agent')).status).toBe(201)
    expect((await inbound(fixture, '+15550001111', 'Yes, Tuesday works')).status).toBe(201)
    await waitFor(() => received.length === 1)
    const [event] = received
    expect(event).toMatchObject({ name: 'message.inbound', data: { message: { from: '+15550001111', body: 'Yes, Tuesday works', direction: 'inbound' } } })
    // The event id is the REST event's: the reconciliation log has it.
    const log = (await (await server.fetch(`/v0/account/${fixture.accountId}/events?key=${fixture.apiKey}`)).json()) as { data: { id: string }[] }
    expect(log.data.map((entry) => entry.id)).toContain(event!.eventId)
    const delivery = callbacks.seen.find((request) => request.path === '/agent' && request.headers['webhook-id'] === event!.eventId)!
    expect(delivery.headers['x-mcp-subscription-id']).toBe(subscribed.id)

    // The subscription is the agent's, not one of the account's webhooks.
    const hooks = (await (await server.fetch(`/v0/account/${fixture.accountId}/hooks?key=${fixture.apiKey}`)).json()) as { data: unknown[] }
    expect(hooks.data).toEqual([])

    await client.experimental_events.unsubscribe({ id: subscribed.id })
    expect(store.all.size).toBe(0)
    expect((await inbound(fixture, '+15550001111', 'after unsubscribing')).status).toBe(201)
    await Bun.sleep(500)
    expect(received).toHaveLength(1)
    await client.close()
  })
})

describe('events over raw 2026-07-28 JSON-RPC', () => {
  test('server/discover advertises the extension and the events capability; push is method-not-found; a 2025 initialize sees no events', async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    const discovered = await rpc(token, 'server/discover')
    expect(discovered.body.result.capabilities).toMatchObject({ tools: {}, events: {}, extensions: { 'io.modelcontextprotocol/events': {} } })
    // Push is not served (docs/mcp.md#what-events-do-not-do-yet).
    expect((await rpc(token, 'events/stream', { name: 'message.inbound', arguments: {}, cursor: null })).body.error?.code).toBe(-32601)
    const legacy = await connectWithToken(server, token)
    expect(legacy.getServerCapabilities()).toEqual({ tools: {} })
    await legacy.close()
  })

  test('subscribing needs messages:read: a token without it gets the step-up challenge, and nothing is made', async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture, 'hooks:read hooks:write')
    const callback = echoingCallback('/no-scope')
    const refused = await rpc(token, 'events/subscribe', { name: 'message.inbound', arguments: {}, delivery: { mode: 'webhook', url: callback.url, secret: secret() } })
    expect(refused.status).toBe(403)
    const challenge = refused.headers.get('www-authenticate')!
    expect(challenge).toContain('error="insufficient_scope"')
    expect(challenge).toContain('scope="hooks:read hooks:write messages:read"')
    expect(callback.bodies).toEqual([])
    // Listing the event types needs no scope of its own.
    expect((await rpc(token, 'events/list')).body.result.events).toHaveLength(3)
  })

  test('bad params are InvalidParams, an unknown event NotFound, and nothing is verified or made for them', async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    const callback = echoingCallback('/bad-params')
    const base = { name: 'message.inbound', arguments: {}, delivery: { mode: 'webhook', url: callback.url, secret: secret() } }
    const cases: [Record<string, unknown>, number, string][] = [
      [{ ...base, delivery: { ...base.delivery, secret: 'whsec_short' } }, -32602, '/delivery/secret'],
      [{ ...base, delivery: { ...base.delivery, secret: 'not-a-secret' } }, -32602, '/delivery/secret'],
      [{ ...base, delivery: { ...base.delivery, url: 'http://hooks.example.com/agent' } }, -32602, '/delivery/url'],
      [{ ...base, delivery: { ...base.delivery, url: 'https://user:pw@hooks.example.com/agent' } }, -32602, '/delivery/url'],
      [{ ...base, delivery: { ...base.delivery, mode: 'push' } }, -32602, '/delivery/mode'],
      [{ ...base, arguments: { to: ['+15550001111'] } }, -32602, '/arguments'],
      [{ ...base, arguments: { from: 'everyone' } }, -32602, '/arguments/from'],
      [{ ...base, ttlMs: 'forever' }, -32602, '/ttlMs'],
      [{ ...base, name: 'message.read' }, -32023, 'Unknown event'],
      [{ ...base, delivery: { ...base.delivery, url: 'x'.repeat(3000) } }, -32602, '/delivery/url'],
    ]
    for (const [params, code, mentions] of cases) {
      const answer = await rpc(token, 'events/subscribe', params)
      expect(answer.status).toBe(200)
      expect(answer.body.error?.code).toBe(code)
      expect(JSON.stringify(answer.body.error)).toContain(mentions)
    }
    expect(callback.bodies).toEqual([])
  })

  test('a callback that does not echo the challenge is CallbackEndpointError, and no subscription is made', async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    const cases: [string, (request: Request) => Response | Promise<Response>, string][] = [
      ['/wrong-echo', () => Response.json({ challenge: 'something else' }), 'challenge_failed'],
      ['/no-body', () => new Response(null, { status: 204 }), 'challenge_failed'],
      ['/refuses', () => new Response('no', { status: 403 }), 'http_4xx'],
      ['/broken', () => new Response('oops', { status: 502 }), 'http_5xx'],
      // An endpoint that answers with what it was sent has the challenge too, inside the verification envelope.
      ['/echoes', async (request: Request) => new Response(await request.text(), { headers: { 'content-type': 'application/json' } }), 'challenge_failed'],
      ['/echoes-parsed', async (request: Request) => Response.json(await request.json()), 'challenge_failed'],
    ]
    for (const [path, answer, reason] of cases) {
      callbacks.handlers.set(path, answer)
      const refused = await rpc(token, 'events/subscribe', { name: 'message.failed', delivery: { mode: 'webhook', url: `${callbacks.origin}${path}`, secret: secret() } })
      expect(refused.body.error).toMatchObject({ code: -32027, data: { reason } })
    }
    const unreachable = await rpc(token, 'events/subscribe', { name: 'message.failed', delivery: { mode: 'webhook', url: 'https://127.0.0.1:9/closed', secret: secret() } })
    expect(unreachable.body.error).toMatchObject({ code: -32027, data: { reason: 'connection_refused' } })
    const grants = (await (await server.fetch(`/v0/account/${fixture.accountId}/grants?key=${fixture.apiKey}`)).json()) as { data: { id: string }[] }
    const listed = await server.fetch(`/v0/account/${fixture.accountId}/grants/${grants.data[0]!.id}/event-subscriptions?key=${fixture.apiKey}`)
    expect(((await listed.json()) as { data: unknown[] }).data).toEqual([])
  })

  test('the verification POST is signed with the client’s secret and names the subscription; subscribing again refreshes without a second challenge', async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    const callback = echoingCallback('/refresh')
    const key = secret()
    const params = { name: 'message.delivered', arguments: { to: ['+15550003333'] }, delivery: { mode: 'webhook', url: callback.url, secret: key }, ttlMs: 120_000 }
    const first = await rpc(token, 'events/subscribe', params)
    const id = first.body.result.id as string
    expect(id).toMatch(/^evs_/)
    expect(first.body.result).toMatchObject({ cursor: null, truncated: false, resultType: 'complete' })
    expect(Date.parse(first.body.result.refreshBefore) - Date.now()).toBeLessThanOrEqual(120_000)
    const verification = callbacks.seen.find((request) => request.path === '/refresh')!
    expect(verification.headers['webhook-id']).toMatch(/^msg_verification_/)
    expect(verification.headers['x-mcp-subscription-id']).toBe(id)
    expect(() => new Webhook(key).verify(verification.body, verification.headers)).not.toThrow()

    // The same key: the same subscription, refreshed (a longer lifetime), not verified again.
    const again = await rpc(token, 'events/subscribe', { ...params, ttlMs: 600_000 })
    expect(again.body.result.id).toBe(id)
    expect(Date.parse(again.body.result.refreshBefore)).toBeGreaterThan(Date.parse(first.body.result.refreshBefore))
    // Other arguments: another subscription, to an already verified URL.
    const other = await rpc(token, 'events/subscribe', { ...params, arguments: {} })
    expect(other.body.result.id).not.toBe(id)
    expect(callback.bodies.filter((body) => body.type === 'verification')).toHaveLength(1)

    const gone = await rpc(token, 'events/unsubscribe', { name: 'message.delivered', arguments: { to: ['+15550003333'] }, delivery: { url: callback.url } })
    expect(gone.body.result).toMatchObject({ resultType: 'complete' })
    const missing = await rpc(token, 'events/unsubscribe', { name: 'message.delivered', arguments: { to: ['+15550003333'] }, delivery: { url: callback.url } })
    expect(missing.body.error).toMatchObject({ code: -32023, data: { kind: 'subscription' } })
    // Arguments no subscription could have, however large or deep, are refused as subscribing refuses them.
    let deep: unknown = 'x'
    for (let i = 0; i < 1_000; i++) deep = [deep]
    for (const args of [{ from: ['+15550003333'] }, { to: 'everyone' }, { to: deep }]) {
      const refused = await rpc(token, 'events/unsubscribe', { name: 'message.delivered', arguments: args, delivery: { url: callback.url } })
      expect(refused.body.error?.code).toBe(-32602)
    }
  })

  test(`a grant holds at most ${SUBSCRIPTIONS_PER_GRANT} subscriptions, an account's agents HOOKS_PER_ACCOUNT: the next is ResourceExhausted`, async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    const callback = echoingCallback('/many')
    for (let i = 0; i < SUBSCRIPTIONS_PER_GRANT; i++) {
      const made = await rpc(token, 'events/subscribe', { name: 'message.inbound', arguments: { from: [`+1555000${String(i).padStart(4, '0')}`] }, delivery: { mode: 'webhook', url: callback.url, secret: secret() } })
      expect(made.body.result?.id).toMatch(/^evs_/)
    }
    const refused = await rpc(token, 'events/subscribe', { name: 'message.inbound', arguments: {}, delivery: { mode: 'webhook', url: callback.url, secret: secret() } })
    expect(refused.body.error).toMatchObject({ code: -32025, data: { limit: 'subscriptions', max: SUBSCRIPTIONS_PER_GRANT } })

    // Signing in again makes another grant, with room of its own, but the account's agents hold HOOKS_PER_ACCOUNT (30) at most.
    const again = await eventsToken(fixture)
    for (let i = 0; i < 5; i++) {
      const made = await rpc(again, 'events/subscribe', { name: 'message.failed', arguments: { to: [`+1555100${String(i).padStart(4, '0')}`] }, delivery: { mode: 'webhook', url: callback.url, secret: secret() } })
      expect(made.body.result?.id).toMatch(/^evs_/)
    }
    const full = await rpc(again, 'events/subscribe', { name: 'message.failed', arguments: {}, delivery: { mode: 'webhook', url: callback.url, secret: secret() } })
    expect(full.body.error).toMatchObject({ code: -32025, data: { limit: 'account_subscriptions', max: 30 } })
    // HOOKS_PER_ACCOUNT bounds one event's fan-out: the account's webhooks count with its agents' subscriptions.
    const rest = await server.fetch(`/v0/account/${fixture.accountId}/hooks?key=${fixture.apiKey}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ event: 'message.inbound', target_url: 'https://hooks.example.com/rest' }) })
    expect(rest.status).toBe(409)
    expect(await rest.json()).toMatchObject({ code: 'hooks_limit_reached', detail: expect.stringContaining("(30 of them are agents')") })
  })

  test("an account's webhooks leave its agents only the rest of HOOKS_PER_ACCOUNT; the refusal comes before any verification POST", async () => {
    const fixture = await newFixture()
    for (let i = 0; i < 30; i++) {
      const made = await server.fetch(`/v0/account/${fixture.accountId}/hooks?key=${fixture.apiKey}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ event: 'message.inbound', target_url: `https://hooks.example.com/rest-${i}` }) })
      expect(made.status).toBe(201)
    }
    const callback = echoingCallback('/after-webhooks')
    const refused = await rpc(await eventsToken(fixture), 'events/subscribe', { name: 'message.inbound', delivery: { mode: 'webhook', url: callback.url, secret: secret() } })
    expect(refused.body.error).toMatchObject({ code: -32025, data: { limit: 'account_subscriptions', max: 30 } })
    expect(callback.bodies).toEqual([])
  })

  test('a grant at its bound, or revoked, makes the service call out to no new callback URL', async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    const callback = echoingCallback('/full-grant')
    for (let i = 0; i < SUBSCRIPTIONS_PER_GRANT; i++) {
      const made = await rpc(token, 'events/subscribe', { name: 'message.inbound', arguments: { from: [`+1555200${String(i).padStart(4, '0')}`] }, delivery: { mode: 'webhook', url: callback.url, secret: secret() } })
      expect(made.body.result?.id).toMatch(/^evs_/)
    }
    const probe = echoingCallback('/probe-while-full')
    const full = await rpc(token, 'events/subscribe', { name: 'message.inbound', delivery: { mode: 'webhook', url: probe.url, secret: secret() } })
    expect(full.body.error).toMatchObject({ code: -32025, data: { limit: 'subscriptions' } })
    expect(probe.bodies).toEqual([])

    // Revoked in the database, before this instance's caches hear of it: the token still authenticates, the subscribe is refused unsent.
    const other = await eventsToken(fixture)
    expect((await rpc(other, 'events/list')).status).toBe(200)
    const grants = (await (await server.fetch(`/v0/account/${fixture.accountId}/grants?key=${fixture.apiKey}`)).json()) as { data: { id: string; created_at: string }[] }
    const newest = grants.data.toSorted((a, b) => b.created_at.localeCompare(a.created_at))[0]!
    await server.database.handle.db.execute(sql`update grants set revoked_at = now() where id = ${newest.id}`)
    const revokedProbe = echoingCallback('/probe-while-revoked')
    const revoked = await rpc(other, 'events/subscribe', { name: 'message.inbound', delivery: { mode: 'webhook', url: revokedProbe.url, secret: secret() } })
    expect(revoked.body.error).toMatchObject({ code: -32024 })
    expect(revokedProbe.bodies).toEqual([])
  })

  test(`failed verifications are bounded per grant (${FAILED_VERIFICATIONS.perGrant} an hour) and per account (${FAILED_VERIFICATIONS.perAccount}): past them no POST goes out; a callback that verifies does not count`, async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    const good = echoingCallback('/verifies-between-failures')
    expect((await rpc(token, 'events/subscribe', { name: 'message.inbound', delivery: { mode: 'webhook', url: good.url, secret: secret() } })).body.result?.id).toMatch(/^evs_/)
    let probes = 0
    const failVerifications = async (grantToken: string, count: number) => {
      for (let i = 0; i < count; i++) {
        const path = `/probe-${probes}`
        callbacks.handlers.set(path, () => {
          probes++
          return new Response('no', { status: 404 })
        })
        const failed = await rpc(grantToken, 'events/subscribe', { name: 'message.inbound', delivery: { mode: 'webhook', url: `${callbacks.origin}${path}`, secret: secret() } })
        expect(failed.body.error).toMatchObject({ code: -32027, data: { reason: 'http_4xx' } })
      }
    }
    await failVerifications(token, FAILED_VERIFICATIONS.perGrant)
    expect(probes).toBe(FAILED_VERIFICATIONS.perGrant)
    const unsent = echoingCallback('/after-too-many-failures')
    const refused = await rpc(token, 'events/subscribe', { name: 'message.inbound', delivery: { mode: 'webhook', url: unsent.url, secret: secret() } })
    expect(refused.body.error).toMatchObject({ code: -32025, data: { limit: 'verifications', max: FAILED_VERIFICATIONS.perGrant, retryAfterMs: expect.any(Number) } })
    expect(unsent.bodies).toEqual([])
    // Another grant (the same user signing in again) has room of its own, within the account's.
    const fresh = await rpc(await eventsToken(fixture), 'events/subscribe', { name: 'message.inbound', delivery: { mode: 'webhook', url: unsent.url, secret: secret() } })
    expect(fresh.body.result?.id).toMatch(/^evs_/)
    for (let grant = 1; grant < FAILED_VERIFICATIONS.perAccount / FAILED_VERIFICATIONS.perGrant; grant++) await failVerifications(await eventsToken(fixture), FAILED_VERIFICATIONS.perGrant)
    expect(probes).toBe(FAILED_VERIFICATIONS.perAccount)
    const another = echoingCallback('/after-the-account-failed-too-often')
    const accountRefused = await rpc(await eventsToken(fixture), 'events/subscribe', { name: 'message.inbound', delivery: { mode: 'webhook', url: another.url, secret: secret() } })
    expect(accountRefused.body.error).toMatchObject({ code: -32025, data: { limit: 'verifications', max: FAILED_VERIFICATIONS.perAccount } })
    expect(another.bodies).toEqual([])
  })

  test('grantedTtlMs: the suggestion within bounds; none is the default; null (no expiry) is the longest finite grant', () => {
    expect(grantedTtlMs(undefined)).toBe(SUBSCRIPTION_TTL_MS.default)
    expect(grantedTtlMs(null)).toBe(SUBSCRIPTION_TTL_MS.max)
    expect(grantedTtlMs(1)).toBe(SUBSCRIPTION_TTL_MS.min)
    expect(grantedTtlMs(3_600_000)).toBe(3_600_000)
    expect(grantedTtlMs(Number.MAX_SAFE_INTEGER)).toBe(SUBSCRIPTION_TTL_MS.max)
  })
})

describe('the owner and the end of a subscription', () => {
  async function subscribed(path: string, name = 'message.inbound') {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    const callback = echoingCallback(path)
    const key = secret()
    const made = await rpc(token, 'events/subscribe', { name, arguments: {}, delivery: { mode: 'webhook', url: callback.url, secret: key } })
    const grants = (await (await server.fetch(`/v0/account/${fixture.accountId}/grants?key=${fixture.apiKey}`)).json()) as { data: { id: string }[] }
    return { fixture, token, callback, key, id: made.body.result.id as string, grantId: grants.data[0]!.id }
  }
  const terminations = (callback: { bodies: any[] }) => callback.bodies.filter((body) => body.type === 'terminated')

  test('the owner lists an agent’s subscriptions with its grant and ends one: its callback is told, signed, and gets nothing more', async () => {
    const { fixture, callback, key, id, grantId } = await subscribed('/owner-ends')
    const listUrl = `/v0/account/${fixture.accountId}/grants/${grantId}/event-subscriptions?key=${fixture.apiKey}`
    const listed = (await (await server.fetch(listUrl)).json()) as { data: any[] }
    expect(listed.data).toEqual([
      { id, grant_id: grantId, event: 'message.inbound', arguments: {}, callback_url: callback.url, status: 'active', circuit: 'closed', expires_at: expect.any(String), created_at: expect.any(String) },
    ])
    // Another account cannot see or end it.
    const stranger = await server.createAccountWithKey('Stranger')
    expect((await server.fetch(`/v0/account/${stranger.accountId}/grants/${grantId}/event-subscriptions?key=${stranger.secret}`)).status).toBe(404)
    expect((await server.fetch(`/v0/account/${stranger.accountId}/grants/${grantId}/event-subscriptions/${id}?key=${stranger.secret}`, { method: 'DELETE' })).status).toBe(404)

    expect((await server.fetch(`/v0/account/${fixture.accountId}/grants/${grantId}/event-subscriptions/${id}?key=${fixture.apiKey}`, { method: 'DELETE' })).status).toBe(204)
    expect(((await (await server.fetch(listUrl)).json()) as { data: unknown[] }).data).toEqual([])
    await waitFor(() => terminations(callback).length === 1)
    expect(terminations(callback)[0]).toEqual({ type: 'terminated', error: { code: -32024, message: 'Forbidden', data: { reason: 'Ended by the account owner' } } })
    const envelope = callbacks.seen.find((request) => request.path === '/owner-ends' && request.headers['webhook-id']?.startsWith('msg_terminated_'))!
    expect(envelope.headers['x-mcp-subscription-id']).toBe(id)
    expect(() => new Webhook(key).verify(envelope.body, envelope.headers)).not.toThrow()

    expect((await inbound(fixture, '+15550004444', 'after the end')).status).toBe(201)
    await Bun.sleep(500)
    expect(callback.bodies.filter((body) => body.eventId)).toEqual([])
    expect((await server.fetch(`/v0/account/${fixture.accountId}/grants/${grantId}/event-subscriptions/${id}?key=${fixture.apiKey}`, { method: 'DELETE' })).status).toBe(404)
  })

  test('revoking the grant ends its subscriptions: a terminated envelope, nothing delivered after, the token refused', async () => {
    const { fixture, token, callback, grantId } = await subscribed('/revoked')
    expect((await inbound(fixture, '+15550005555', 'before the revocation')).status).toBe(201)
    await waitFor(() => callback.bodies.some((body) => body.eventId))
    expect((await server.fetch(`/v0/account/${fixture.accountId}/grants/${grantId}?key=${fixture.apiKey}`, { method: 'DELETE' })).status).toBe(204)
    expect((await inbound(fixture, '+15550005555', 'after the revocation')).status).toBe(201)
    await waitFor(() => terminations(callback).length === 1)
    expect(terminations(callback)[0].error.data).toEqual({ reason: 'Access revoked' })
    await Bun.sleep(300)
    expect(callback.bodies.filter((body) => body.eventId).map((body) => body.data.message.body)).toEqual(['before the revocation'])
    expect((await rpc(token, 'events/list')).status).toBe(401)
  })

  test(`a mass revocation's terminated envelopes go out ${TERMINATED_ENVELOPES_IN_FLIGHT} at a time, not all at once`, async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    let inFlight = 0
    let most = 0
    const told = new Set<string>()
    // The envelopes are answered once the test has seen the first ones in flight together.
    let answer!: () => void
    const answering = new Promise<void>((resolve) => (answer = resolve))
    callbacks.handlers.set('/mass-revocation', async (request) => {
      const body = (await request.json()) as { type?: string; challenge?: string }
      if (body.type === 'verification') return Response.json({ challenge: body.challenge })
      inFlight++
      most = Math.max(most, inFlight)
      // An envelope the sender gave up on (its timeout, on a very slow machine) is no longer in flight.
      const givenUp = new Promise<void>((resolve) => request.signal.addEventListener('abort', () => resolve()))
      await Promise.race([answering, givenUp])
      inFlight--
      told.add(request.headers.get('x-mcp-subscription-id')!)
      return new Response(null, { status: 204 })
    })
    for (let i = 0; i < SUBSCRIPTIONS_PER_GRANT; i++) {
      const made = await rpc(token, 'events/subscribe', { name: 'message.failed', arguments: { to: [`+1555300${String(i).padStart(4, '0')}`] }, delivery: { mode: 'webhook', url: `${callbacks.origin}/mass-revocation`, secret: secret() } })
      expect(made.body.result?.id).toMatch(/^evs_/)
    }
    const grants = (await (await server.fetch(`/v0/account/${fixture.accountId}/grants?key=${fixture.apiKey}`)).json()) as { data: { id: string }[] }
    expect((await server.fetch(`/v0/account/${fixture.accountId}/grants/${grants.data[0]!.id}?key=${fixture.apiKey}`, { method: 'DELETE' })).status).toBe(204)
    try {
      await waitFor(() => inFlight === TERMINATED_ENVELOPES_IN_FLIGHT, 20_000)
      // None answered yet: no more go out meanwhile.
      await Bun.sleep(300)
      expect(most).toBe(TERMINATED_ENVELOPES_IN_FLIGHT)
    } finally {
      answer()
    }
    await waitFor(() => told.size === SUBSCRIPTIONS_PER_GRANT, 20_000)
    expect(most).toBe(TERMINATED_ENVELOPES_IN_FLIGHT)
  })

  test('an expired subscription is sent nothing and is deleted', async () => {
    const { fixture, callback, id } = await subscribed('/expired')
    await server.database.handle.db.execute(`update hooks set expires_at = now() - interval '1 second' where id = '${id}'`)
    expect((await inbound(fixture, '+15550006666', 'too late')).status).toBe(201)
    await Bun.sleep(2_500)
    expect(callback.bodies.filter((body) => body.eventId || body.type === 'terminated')).toEqual([])
    // The sweep (every 2 s) passes over a row a claim holds at that moment, and takes it at its next run.
    await until(() => server.database.handle.db.execute(`select count(*)::int as n from hooks where id = '${id}'`).then((left) => JSON.stringify(left)), (left) => left.includes('"n":0'), 10_000, 'the expired subscription deleted')
    expect(callback.bodies.filter((body) => body.eventId || body.type === 'terminated')).toEqual([])
  })

  test('a receiver’s 410 refuses that one event: it is not retried and the subscription goes on', async () => {
    const { fixture, callback, id } = await subscribed('/gone-once')
    let answered = 0
    callbacks.handlers.set('/gone-once', async (request) => {
      const body = (await request.json()) as { type?: string; data?: { message: { body: string } } }
      callback.bodies.push(body)
      answered++
      return new Response(null, { status: body.data?.message.body === 'refuse me' ? 410 : 204 })
    })
    expect((await inbound(fixture, '+15550007777', 'refuse me')).status).toBe(201)
    expect((await inbound(fixture, '+15550007777', 'take me')).status).toBe(201)
    await waitFor(() => callback.bodies.some((body) => body.data?.message.body === 'take me'))
    await Bun.sleep(1_000)
    expect(callback.bodies.filter((body) => body.data?.message.body === 'refuse me')).toHaveLength(1)
    expect(answered).toBe(2)
    // Active, and the refusal did not start the clock of five days of failures that disables a subscription.
    const rows = await server.database.handle.db.execute(`select status, failing_since from hooks where id = '${id}'`)
    expect(JSON.stringify(rows)).toContain('"status":"active"')
    expect(JSON.stringify(rows)).toContain('"failing_since":null')
    // The agent's delivery log is not the account's: the REST delivery routes do not find it.
    const delivery = JSON.stringify(await server.database.handle.db.execute(`select id from deliveries where hook_id = '${id}' limit 1`)).match(/dlv_[0-9a-z]+/)![0]
    expect((await server.fetch(`/v0/account/${fixture.accountId}/deliveries/${delivery}?key=${fixture.apiKey}`)).status).toBe(404)
    expect((await server.fetch(`/v0/account/${fixture.accountId}/deliveries/${delivery}/retry?key=${fixture.apiKey}`, { method: 'POST' })).status).toBe(404)
  })

  test('subscribing again with the key of a subscription the owner just ended is a clean answer, never a database error', async () => {
    const { fixture, token, callback, key, id, grantId } = await subscribed('/ended-then-again')
    expect((await server.fetch(`/v0/account/${fixture.accountId}/grants/${grantId}/event-subscriptions/${id}?key=${fixture.apiKey}`, { method: 'DELETE' })).status).toBe(204)
    const again = await rpc(token, 'events/subscribe', { name: 'message.inbound', arguments: {}, delivery: { mode: 'webhook', url: callback.url, secret: key } })
    // Before the sweep has removed the ended row: a retryable refusal; after it: a new subscription with the same id.
    if (again.body.error) expect(again.body.error).toMatchObject({ code: -32025, data: { limit: 'ending' } })
    else expect(again.body.result.id).toBe(id)
  })
})

describe('events/poll', () => {
  const poll = (token: string, params: Record<string, unknown>) => rpc(token, 'events/poll', { name: 'message.inbound', arguments: {}, ...params })

  test('a null cursor starts from now; then the matching events in order, once each; maxEvents pages with hasMore', async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    expect((await inbound(fixture, '+15550008888', 'before the first poll')).status).toBe(201)
    const start = await poll(token, { arguments: { from: ['+15550008888'] }, cursor: null })
    expect(start.body.result).toMatchObject({ events: [], truncated: false, hasMore: false, nextPollMs: NEXT_POLL_MS, resultType: 'complete' })

    for (const [from, body] of [['+15550008888', 'one'], ['+15550009999', 'someone else'], ['+15550008888', 'two'], ['+15550008888', 'three']]) {
      expect((await inbound(fixture, from!, body!)).status).toBe(201)
    }
    const first = await poll(token, { arguments: { from: ['+15550008888'] }, cursor: start.body.result.cursor, maxEvents: 2 })
    expect(first.body.result.events.map((event: any) => event.data.message.body)).toEqual(['one', 'two'])
    expect(first.body.result.hasMore).toBe(true)
    expect(first.body.result.events[0]).toEqual({ eventId: expect.stringMatching(/^evt_/), name: 'message.inbound', timestamp: expect.any(String), data: { message: expect.objectContaining({ from: '+15550008888' }) } })
    const second = await poll(token, { arguments: { from: ['+15550008888'] }, cursor: first.body.result.cursor, maxEvents: 2 })
    expect(second.body.result.events.map((event: any) => event.data.message.body)).toEqual(['three'])
    expect(second.body.result.hasMore).toBe(false)
    const quiet = await poll(token, { arguments: { from: ['+15550008888'] }, cursor: second.body.result.cursor })
    expect(quiet.body.result.events).toEqual([])
    // Without a filter, the other contact's reply too (another type is not mixed in).
    const all = await poll(token, { cursor: start.body.result.cursor })
    expect(all.body.result.events.map((event: any) => event.data.message.body)).toEqual(['one', 'someone else', 'two', 'three'])
  })

  test('a cursor older than maxAgeMs starts from now with truncated; a foreign cursor is InvalidParams; polling needs messages:read', async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    const start = await poll(token, { cursor: null })
    expect((await inbound(fixture, '+15550001212', 'skipped')).status).toBe(201)
    await Bun.sleep(20)
    const late = await poll(token, { cursor: start.body.result.cursor, maxAgeMs: 10 })
    expect(late.body.result).toMatchObject({ events: [], truncated: true })
    // Made up, or another account's: cursors are sealed with the service's key and bound to their account.
    const stranger = await newFixture()
    const strangers = (await poll(await eventsToken(stranger), { cursor: null })).body.result.cursor
    for (const cursor of ['not-a-cursor', Buffer.from(`{"a":"${fixture.accountId}","x":"0","i":"","t":${Date.now()}}`).toString('base64url'), strangers]) {
      expect((await poll(token, { cursor })).body.error).toMatchObject({ code: -32602 })
    }
    const hooksOnly = await eventsToken(fixture, 'hooks:read')
    const refused = await poll(hooksOnly, { cursor: null })
    expect(refused.status).toBe(403)
    expect(refused.headers.get('www-authenticate')).toContain('messages:read')
  })

  test(`a replayed early cursor reads what one answer needs, at most ${POLL_SCAN} events with a filter, and is charged by what it read in the rate limit`, async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    const start = await poll(token, { cursor: null })
    // pollEvents itself, with a limiter that records what it is charged: its cursors are sealed with this test's key.
    const charged: number[] = []
    const rateLimiter = { ...createRequestRateLimiter({ ratePerSecond: 100 }), charge: (_key: string, requests: number) => void charged.push(requests) }
    const deps = { db: server.database.handle.db, secretBox: await createSecretBox(crypto.getRandomValues(new Uint8Array(32))), retentionDays: 30, rateLimiter }
    const caller = { accountId: fixture.accountId, credential: { kind: 'access_token' as const, grantId: 'grt_test', clientId: 'cli_test', userId: 'usr_test', audience: [], exp: 0 }, scopes: ['messages:read' as const] }
    const directStart = (await pollEvents(deps, caller, { name: 'message.inbound', cursor: null })).cursor
    // More than one filtered poll may read, none of them the contact polled for; then one that is.
    await server.database.handle.db.execute(sql`
      insert into events (id, account_id, type, payload, contact)
      select id, ${fixture.accountId}, 'message.inbound',
        json_build_object('id', id, 'type', 'message.inbound', 'timestamp', now(), 'data', json_build_object('message', json_build_object('from', '+15550007000', 'body', 'filler')))::text,
        '+15550007000'
      from (select 'evt_' || lpad(i::text, 26, '0') as id from generate_series(1, ${POLL_SCAN + 1}) as i) as filler`)
    expect((await inbound(fixture, '+15550007001', 'the one')).status).toBe(201)

    const filtered = { name: 'message.inbound', arguments: { from: ['+15550007001'] } }
    const first = await pollEvents(deps, caller, { ...filtered, cursor: directStart })
    expect(first).toMatchObject({ events: [], hasMore: true })
    const second = await pollEvents(deps, caller, { ...filtered, cursor: first.cursor })
    expect(second.events.map((event: any) => event.data.message.body)).toEqual(['the one'])
    expect(second.hasMore).toBe(false)
    // Without a filter: one page and one more event read.
    const page = await pollEvents(deps, caller, { name: 'message.inbound', cursor: directStart, maxEvents: 100 })
    expect(page.events).toHaveLength(100)
    expect(page.hasMore).toBe(true)
    // Charged beyond the request itself: 49 for 5,000 events read, nothing for the one after them, 1 for the page and one more (a null cursor reads nothing).
    expect(charged).toEqual([pollCost(POLL_SCAN) - 1, 0, 1])

    // Over MCP the grant's bucket shows it: the RateLimit header of the next request has about 50 fewer (a few come back meanwhile).
    const remaining = async () => Number(/r=(\d+)/.exec((await rpc(token, 'events/list')).headers.get('ratelimit') ?? '')![1])
    const before = await remaining()
    expect((await poll(token, { ...filtered, cursor: start.body.result.cursor })).body.result).toMatchObject({ events: [], hasMore: true })
    expect(await remaining()).toBeLessThan(before - 30)
  })

  test.skipIf(server.database.handle.kind !== 'postgres')('an event whose transaction commits late is not passed over: polls stop at the oldest transaction still running', async () => {
    const fixture = await newFixture()
    const token = await eventsToken(fixture)
    const start = await poll(token, { cursor: null })
    const db = server.database.handle.db
    let release!: () => void
    const held = new Promise<void>((resolve) => (release = resolve))
    // An id made now, as a slow settlement's would be: lower than the id of the reply sent after it.
    const early = lowestIdAt('evt', Date.now())
    const payload = JSON.stringify({ id: early, type: 'message.inbound', timestamp: new Date().toISOString(), account_id: fixture.accountId, data: { message: { body: 'slow to commit' } } })
    let inserted!: () => void
    const written = new Promise<void>((resolve) => (inserted = resolve))
    const slow = db.transaction(async (tx) => {
      await tx.execute(sql`insert into events (id, account_id, type, payload) values (${early}, ${fixture.accountId}, 'message.inbound', ${payload})`)
      inserted()
      await held
    })
    await written
    expect((await inbound(fixture, '+15550001313', 'committed first')).status).toBe(201)
    const during = await poll(token, { cursor: start.body.result.cursor })
    expect(during.body.result.events).toEqual([])
    release()
    await slow
    const after = await poll(token, { cursor: during.body.result.cursor })
    expect(after.body.result.events.map((event: any) => event.data.message.body)).toEqual(['slow to commit', 'committed first'])
  })
})
