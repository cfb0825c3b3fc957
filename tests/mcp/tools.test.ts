import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { Webhook } from 'standardwebhooks'
import { Value } from '@sinclair/typebox/value'
import { EventSchema } from '../../src/messages/schemas.ts'
import { TOOLS, toJsonSchema } from '../../src/mcp/tools.ts'
import { startTestServer } from '../support/server.ts'
import { startReceiver, type ReceivedWebhook } from '../support/receiver.ts'
import { connectWithToken, expectScopeRefused, problemOf, tokenFor, type ToolProblem, type ToolResult } from '../support/mcp.ts'
import { flowFixture, type Fixture } from '../oauth/support.ts'

const withoutClosedObjects = (schema: unknown) => JSON.parse(JSON.stringify(schema), (key, value) => (key === 'additionalProperties' ? undefined : value))

// The MCP tools for changing, testing and inspecting webhook deliveries (update_webhook,
// test_webhook, list_deliveries, get_delivery, retry_delivery), called as an agent calls them:
// the official SDK client over real sockets, a real HTTPS receiver, the real worker.

setDefaultTimeout(30_000)

// Paths under /fail always answer 500; paths in `down` answer 500 until taken out of it.
const down = new Set<string>()
const receiver = startReceiver((request) => {
  if (request.path.startsWith('/fail') || down.has(request.path)) return new Response('not today', { status: 500 })
  return new Response(`thanks for ${request.headers['webhook-id']}`)
})
// One attempt per delivery: a failure is final at once (state `failed`), nothing retries behind a test's back.
const server = await startTestServer({
  env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile, WEBHOOK_TIMEOUT_MS: '2000', WEBHOOK_RETRY_SCHEDULE: '0' },
})

const NEW_TOOLS = ['update_webhook', 'test_webhook', 'list_deliveries', 'get_delivery', 'retry_delivery'] as const
const toolNamed = (name: string) => TOOLS.find((tool) => tool.name === name)!

/**
 * An agent: the SDK client with a token of `fixture`'s account. `ok` asserts a call succeeded and
 * that its structuredContent is valid for the tool's output schema (and is what the text says);
 * `fails` asserts a tool error and answers its problem body.
 */
async function agentOf(fixture: Fixture, options: { scope?: string } = {}) {
  const client = await connectWithToken(server, await tokenFor(server, fixture, options))
  // With the list cached, the SDK client itself also checks every structuredContent against the advertised outputSchema.
  await client.listTools()
  const call = async (name: string, args: Record<string, unknown>) => (await client.callTool({ name, arguments: args })) as ToolResult
  return {
    client,
    call,
    async ok(name: string, args: Record<string, unknown>): Promise<any> {
      const result = await call(name, args)
      if (result.isError) throw new Error(`${name} failed: ${result.content[0]?.text}`)
      expect(result.structuredContent).toBeDefined()
      expect([...Value.Errors(toolNamed(name).output, result.structuredContent)]).toEqual([])
      expect(Value.Check(toolNamed(name).output, result.structuredContent)).toBe(true)
      expect(JSON.parse(result.content[0]!.text)).toEqual(result.structuredContent)
      return result.structuredContent
    },
    async fails(name: string, args: Record<string, unknown>): Promise<ToolProblem> {
      const result = await call(name, args)
      expect(result.isError).toBe(true)
      expect(result.structuredContent).toBeUndefined()
      return problemOf(result)
    },
  }
}
type Agent = Awaited<ReturnType<typeof agentOf>>

const alice = await flowFixture(server)
const agent = await agentOf(alice)

type Owner = { accountId: string; apiKey: string }
const rest = (owner: Owner, method: string, path: string, body?: unknown) =>
  server.fetch(`/v0/account/${owner.accountId}${path}?key=${owner.apiKey}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
const restJson = async (owner: Owner, method: string, path: string, body?: unknown) => {
  const response = await rest(owner, method, path, body)
  return { status: response.status, body: (await response.json()) as any }
}

/** A message.inbound event for the account (every message.inbound subscription of it gets one: tell them apart by path). */
async function inbound(owner: Owner, text: string, from = '+447700900900'): Promise<string> {
  const response = await rest(owner, 'POST', '/sandbox/inbound', { from, body: text })
  expect(response.status).toBe(201)
  return ((await response.json()) as { id: string }).id
}
const onPath = (path: string) => receiver.received.filter((request) => request.path === path)
const messageIdOf = (request: ReceivedWebhook) => (JSON.parse(request.body) as { data: { message: { id: string } } }).data.message.id
const arrivedFor = (messageId: string, path: string) => onPath(path).filter((request) => messageIdOf(request) === messageId)

/** Polls `read` until `done` holds of what it answered (up to 10 s), and answers that. */
async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let value = await read()
  while (!done(value) && Date.now() < deadline) {
    await Bun.sleep(25)
    value = await read()
  }
  expect(done(value)).toBe(true)
  return value
}

/** A message.inbound subscription to the receiver's `path`, made with create_webhook. */
async function subscribe(path: string, event = 'message.inbound', by: Agent = agent): Promise<{ id: string; secret: string; target_url: string; rate_limit_per_s: number | null }> {
  return by.ok('create_webhook', { event, target_url: `${receiver.origin}${path}` })
}
const deliveriesOf = async (hookId: string, state?: string) => ((await agent.ok('list_deliveries', { hook_id: hookId, ...(state ? { state } : {}) })).data as any[])

describe('tools/list: the new tools as an agent discovers them', () => {
  test('annotations, an object outputSchema that is the TypeBox schema the calls are checked against, and the inputs they take', async () => {
    const { tools } = await agent.client.listTools()
    const listed = (name: string) => tools.find((tool) => tool.name === name)!
    for (const name of NEW_TOOLS) {
      const tool = listed(name)
      expect(tool).toBeDefined()
      expect(tool.outputSchema?.type).toBe('object')
      // What the structuredContent checks in this file (Value.Check on TOOLS[…].output) check is what tools/list advertises.
      // Elysia adds additionalProperties: false to a route's response schema object the first time
      // that route fails (after tools/list was built from it), so compare without it.
      expect(withoutClosedObjects(tool.outputSchema)).toEqual(withoutClosedObjects(toJsonSchema(toolNamed(name).output)))
      expect(tool.inputSchema.type).toBe('object')
      expect(tool.annotations).toBeDefined()
    }
    expect(listed('update_webhook').annotations).toMatchObject({ readOnlyHint: false, destructiveHint: false, idempotentHint: true })
    expect(listed('test_webhook').annotations).toMatchObject({ readOnlyHint: false, destructiveHint: false, openWorldHint: true })
    expect(listed('retry_delivery').annotations).toMatchObject({ readOnlyHint: false, destructiveHint: false, openWorldHint: true })
    expect(listed('get_delivery').annotations).toMatchObject({ readOnlyHint: true })
    expect(listed('list_deliveries').annotations).toMatchObject({ readOnlyHint: true })
    expect(listed('update_webhook').description).toContain('hooks:write')
    expect(listed('get_delivery').description).toContain('hooks:read')

    expect(listed('update_webhook').inputSchema.required).toEqual(['hook_id'])
    expect(Object.keys(listed('update_webhook').inputSchema.properties!).sort()).toEqual(['filter', 'hook_id', 'rate_limit_per_s', 'status', 'target_url'])
    expect(listed('test_webhook').inputSchema.required).toEqual(['hook_id'])
    expect(listed('get_delivery').inputSchema.required).toEqual(['delivery_id'])
    expect(listed('retry_delivery').inputSchema.required).toEqual(['delivery_id'])
    const stateFilter = JSON.stringify(listed('list_deliveries').inputSchema.properties!.state)
    for (const state of ['pending', 'succeeded', 'failed', 'canceled']) expect(stateFilter).toContain(`"${state}"`)
  })
})

describe('update_webhook', () => {
  test('paused holds an event (recorded, pending, not sent) while an active subscription gets it; active sends it', async () => {
    const hook = await subscribe('/paused')
    const control = await subscribe('/paused-control')
    const paused = await agent.ok('update_webhook', { hook_id: hook.id, status: 'paused' })
    expect(paused).toMatchObject({ id: hook.id, status: 'paused', target_url: `${receiver.origin}/paused` })
    expect(paused.secret).toBeUndefined()
    expect((await agent.ok('get_webhook', { hook_id: hook.id })).status).toBe('paused')

    const messageId = await inbound(alice, 'held while paused')
    // The same event reached the active subscription: the worker has been at it, and left the paused one alone.
    await receiver.waitFor(() => arrivedFor(messageId, '/paused-control').length === 1)
    const [held] = await until(() => deliveriesOf(hook.id), (rows) => rows.length === 1)
    expect(held).toMatchObject({ state: 'pending', attempts: 0, last_attempt: null, test: false })
    await Bun.sleep(500)
    expect(arrivedFor(messageId, '/paused')).toHaveLength(0)
    expect((await deliveriesOf(hook.id))[0]).toMatchObject({ id: held.id, state: 'pending', attempts: 0 })

    const resumed = await agent.ok('update_webhook', { hook_id: hook.id, status: 'active' })
    expect(resumed).toMatchObject({ id: hook.id, status: 'active' })
    await receiver.waitFor(() => arrivedFor(messageId, '/paused').length === 1)
    const [sent] = await until(() => deliveriesOf(hook.id), (rows) => rows[0]?.state === 'succeeded')
    expect(sent).toMatchObject({ id: held.id, state: 'succeeded', attempts: 1, last_attempt: { status_code: 200, error: null } })
    expect(arrivedFor(messageId, '/paused')[0]!.headers['webhook-id']).toBe(held.event_id)
    expect(control.id).not.toBe(hook.id)
  })

  test('a new target_url keeps the secret: the next delivery goes there and verifies with the secret create_webhook gave', async () => {
    const hook = await subscribe('/before-move')
    const moved = await agent.ok('update_webhook', { hook_id: hook.id, target_url: `${receiver.origin}/after-move` })
    expect(moved).toMatchObject({ id: hook.id, target_url: `${receiver.origin}/after-move`, status: 'active' })
    expect(moved.secret).toBeUndefined()
    const messageId = await inbound(alice, 'moved')
    await receiver.waitFor(() => arrivedFor(messageId, '/after-move').length === 1)
    const [request] = arrivedFor(messageId, '/after-move')
    expect(new Webhook(hook.secret).verify(request!.body, request!.headers)).toBeTruthy()
    expect(arrivedFor(messageId, '/before-move')).toHaveLength(0)
    const theRest = await restJson(alice, 'GET', `/hooks/${hook.id}`)
    expect(theRest.body.target_url).toBe(`${receiver.origin}/after-move`)
  })

  test('rate_limit_per_s is set, then removed with null; REST reads the same', async () => {
    const hook = await subscribe('/limited')
    expect(hook.rate_limit_per_s).toBeNull()
    expect(await agent.ok('update_webhook', { hook_id: hook.id, rate_limit_per_s: 5 })).toMatchObject({ rate_limit_per_s: 5, status: 'active' })
    expect((await restJson(alice, 'GET', `/hooks/${hook.id}`)).body.rate_limit_per_s).toBe(5)
    expect((await agent.ok('update_webhook', { hook_id: hook.id, rate_limit_per_s: null })).rate_limit_per_s).toBeNull()
    expect((await restJson(alice, 'GET', `/hooks/${hook.id}`)).body.rate_limit_per_s).toBeNull()
  })

  test('no change, status "disabled", rate 0, an http URL to a public host: tool errors with the problem PATCH answers; nothing changes', async () => {
    const hook = await subscribe('/patch-errors')
    const noChange = await agent.fails('update_webhook', { hook_id: hook.id })
    expect(noChange).toMatchObject({ status: 422, code: 'validation_failed', errors: [{ path: '/', message: 'give at least one change: target_url, status, rate_limit_per_s or filter' }] })
    const cases: [Record<string, unknown>, string][] = [
      [{ status: 'disabled' }, '/status'],
      [{ rate_limit_per_s: 0 }, '/rate_limit_per_s'],
      [{ target_url: 'http://hooks.example.com/' }, '/target_url'],
    ]
    for (const [changes, path] of cases) {
      const problem = await agent.fails('update_webhook', { hook_id: hook.id, ...changes })
      expect(problem).toMatchObject({ status: 422, code: 'validation_failed' })
      expect(problem.errors!.map((error) => error.path)).toContain(path)
      const patched = await rest(alice, 'PATCH', `/hooks/${hook.id}`, changes)
      expect(patched.status).toBe(422)
      const { request_id: _tool, ...fromTool } = problem
      const { request_id: _rest, ...fromRest } = (await patched.json()) as ToolProblem
      expect(fromTool).toEqual(fromRest)
    }
    const http = await agent.fails('update_webhook', { hook_id: hook.id, target_url: 'http://hooks.example.com/' })
    expect(http.errors).toEqual([{ path: '/target_url', message: 'must use https' }])
    // A numeric string is not an integer to the tools (tools/list says integer; tests/mcp/schemas.test.ts),
    // whatever its value; REST, which reads "5" as 5, refuses the out-of-range ones all the same.
    for (const rate of ['0', '10001', '-3', '5']) {
      const problem = await agent.fails('update_webhook', { hook_id: hook.id, rate_limit_per_s: rate })
      expect(problem).toMatchObject({ status: 422, code: 'validation_failed' })
      expect(problem.errors).toHaveLength(1)
      expect(problem.errors![0]!.path).toBe('/rate_limit_per_s')
      if (rate !== '5') expect((await rest(alice, 'PATCH', `/hooks/${hook.id}`, { rate_limit_per_s: rate })).status).toBe(422)
    }
    expect((await agent.fails('create_webhook', { event: 'message.inbound', target_url: `${receiver.origin}/zero`, rate_limit_per_s: '0' })).errors![0]!.path).toBe('/rate_limit_per_s')
    expect(await agent.ok('get_webhook', { hook_id: hook.id })).toMatchObject({ status: 'active', target_url: `${receiver.origin}/patch-errors`, rate_limit_per_s: null })
    expect((await agent.ok('list_webhooks', { limit: 100 })).data.map((item: { target_url: string }) => item.target_url)).not.toContain(`${receiver.origin}/zero`)
    expect((await agent.ok('update_webhook', { hook_id: hook.id, rate_limit_per_s: 5 })).rate_limit_per_s).toBe(5)
  })
})

describe('test_webhook', () => {
  test("a receiver answering 200: a signed, valid example event of the subscription's type for the caller's account; a test in the log, not in GET /events", async () => {
    const hook = await subscribe('/test-ok', 'message.delivered')
    const result = await agent.ok('test_webhook', { hook_id: hook.id })
    expect(result).toEqual({ delivery_id: expect.stringMatching(/^dlv_/), status_code: 200, duration_ms: expect.any(Number), error: null })

    // Answered after the receiver answered: the request is there already.
    const requests = onPath('/test-ok')
    expect(requests).toHaveLength(1)
    const request = requests[0]!
    expect(new Webhook(hook.secret).verify(request.body, request.headers)).toBeTruthy()
    const event = JSON.parse(request.body)
    expect([...Value.Errors(EventSchema, event)]).toEqual([])
    expect(event).toMatchObject({ id: request.headers['webhook-id'], type: 'message.delivered', account_id: alice.accountId, data: { message: { account_id: alice.accountId } } })

    const listed = await deliveriesOf(hook.id)
    expect(listed).toEqual([
      {
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
      },
    ])
    const detail = await agent.ok('get_delivery', { delivery_id: result.delivery_id })
    expect(detail).toMatchObject({ id: result.delivery_id, test: true, state: 'succeeded', event_id: event.id })
    expect(detail.attempt_log).toEqual([{ id: expect.stringMatching(/^att_/), at: expect.any(String), status_code: 200, duration_ms: result.duration_ms, error: null, response_snippet: `thanks for ${event.id}` }])

    const events = await restJson(alice, 'GET', '/events')
    expect(events.status).toBe(200)
    expect(events.body.data.map((item: { id: string }) => item.id)).not.toContain(event.id)
  })

  test('a receiver answering 500: status_code 500 and error "HTTP 500", a failed test delivery with its attempt', async () => {
    const hook = await subscribe('/fail-test')
    const result = await agent.ok('test_webhook', { hook_id: hook.id })
    expect(result.delivery_id).toMatch(/^dlv_/)
    expect(result).toMatchObject({ status_code: 500, error: 'HTTP 500' })
    expect(onPath('/fail-test')).toHaveLength(1)
    expect(await deliveriesOf(hook.id)).toMatchObject([{ id: result.delivery_id, state: 'failed', test: true, attempts: 1, last_attempt: { status_code: 500, error: 'HTTP 500' } }])
    expect(await deliveriesOf(hook.id, 'failed')).toMatchObject([{ id: result.delivery_id }])
    const detail = await agent.ok('get_delivery', { delivery_id: result.delivery_id })
    expect(detail.attempt_log).toMatchObject([{ status_code: 500, error: 'HTTP 500', response_snippet: 'not today' }])
    // A test never changes the subscription.
    expect((await agent.ok('get_webhook', { hook_id: hook.id })).status).toBe('active')
  })

  test('works on a paused subscription, which stays paused', async () => {
    const hook = await subscribe('/test-paused')
    await agent.ok('update_webhook', { hook_id: hook.id, status: 'paused' })
    const result = await agent.ok('test_webhook', { hook_id: hook.id })
    expect(result).toMatchObject({ status_code: 200, error: null })
    expect(onPath('/test-paused')).toHaveLength(1)
    expect(new Webhook(hook.secret).verify(onPath('/test-paused')[0]!.body, onPath('/test-paused')[0]!.headers)).toBeTruthy()
    expect((await agent.ok('get_webhook', { hook_id: hook.id })).status).toBe('paused')
  })
})

describe('list_deliveries, get_delivery, retry_delivery', () => {
  test('retry of a succeeded delivery sends it again: the receiver sees the same webhook-id twice; get_delivery shows both attempts', async () => {
    const hook = await subscribe('/retry')
    const messageId = await inbound(alice, 'once more')
    const [delivery] = await until(() => deliveriesOf(hook.id), (rows) => rows[0]?.state === 'succeeded')
    const before = await agent.ok('get_delivery', { delivery_id: delivery.id })
    expect(before).toMatchObject({ id: delivery.id, hook_id: hook.id, state: 'succeeded', attempts: 1, test: false })
    expect(before.attempt_log).toHaveLength(1)

    const retried = await agent.ok('retry_delivery', { delivery_id: delivery.id })
    expect(retried).toMatchObject({ id: delivery.id, event_id: delivery.event_id, state: 'pending' })
    await receiver.waitFor(() => arrivedFor(messageId, '/retry').length === 2)
    expect(arrivedFor(messageId, '/retry').map((request) => request.headers['webhook-id'])).toEqual([delivery.event_id, delivery.event_id])
    const after = await until(() => agent.ok('get_delivery', { delivery_id: delivery.id }), (detail) => detail.state === 'succeeded' && detail.attempt_log.length === 2)
    expect(after.attempt_log).toMatchObject([{ status_code: 200 }, { status_code: 200 }])
  })

  test('retry on a paused subscription is a 409 subscription_not_active tool error, as REST answers; the delivery is left alone', async () => {
    const hook = await subscribe('/retry-paused')
    const messageId = await inbound(alice, 'then paused')
    const [delivery] = await until(() => deliveriesOf(hook.id), (rows) => rows[0]?.state === 'succeeded')
    await agent.ok('update_webhook', { hook_id: hook.id, status: 'paused' })
    const problem = await agent.fails('retry_delivery', { delivery_id: delivery.id })
    expect(problem).toMatchObject({ status: 409, code: 'subscription_not_active' })
    expect(problem.detail).toContain('paused')
    const viaRest = await restJson(alice, 'POST', `/deliveries/${delivery.id}/retry`)
    expect(viaRest.status).toBe(409)
    expect(viaRest.body.code).toBe('subscription_not_active')
    expect(await agent.ok('get_delivery', { delivery_id: delivery.id })).toMatchObject({ state: 'succeeded', attempts: 1 })
    expect(arrivedFor(messageId, '/retry-paused')).toHaveLength(1)
  })

  test('the state filter: failed, succeeded and pending each list their own; retry of the failed one, once the receiver is up, succeeds', async () => {
    const path = '/states'
    const hook = await subscribe(path)
    down.add(path)
    await inbound(alice, 'fails')
    const [failed] = await until(() => deliveriesOf(hook.id), (rows) => rows[0]?.state === 'failed')
    expect(failed).toMatchObject({ attempts: 1, next_attempt_at: null, last_attempt: { status_code: 500, error: 'HTTP 500' } })
    down.delete(path)
    await inbound(alice, 'succeeds')
    const [succeeded] = await until(() => deliveriesOf(hook.id), (rows) => rows.length === 2 && rows[0].state === 'succeeded')
    await agent.ok('update_webhook', { hook_id: hook.id, status: 'paused' })
    await inbound(alice, 'waits')
    const [pending] = await until(() => deliveriesOf(hook.id), (rows) => rows.length === 3)
    expect(pending).toMatchObject({ state: 'pending', attempts: 0, last_attempt: null })
    expect(Date.parse(pending.next_attempt_at)).not.toBeNaN()

    expect((await deliveriesOf(hook.id)).map((row) => row.id)).toEqual([pending.id, succeeded.id, failed.id])
    expect((await deliveriesOf(hook.id, 'failed')).map((row) => row.id)).toEqual([failed.id])
    expect((await deliveriesOf(hook.id, 'succeeded')).map((row) => row.id)).toEqual([succeeded.id])
    expect((await deliveriesOf(hook.id, 'pending')).map((row) => row.id)).toEqual([pending.id])
    expect(await deliveriesOf(hook.id, 'canceled')).toEqual([])
    const badFilter = await agent.fails('list_deliveries', { hook_id: hook.id, state: 'delivered' })
    expect(badFilter).toMatchObject({ status: 422, code: 'validation_failed' })
    expect(badFilter.errors!.map((error) => error.path)).toContain('/state')

    await agent.ok('update_webhook', { hook_id: hook.id, status: 'active' })
    expect(await agent.ok('retry_delivery', { delivery_id: failed.id })).toMatchObject({ id: failed.id, state: 'pending' })
    const retried = await until(() => agent.ok('get_delivery', { delivery_id: failed.id }), (detail) => detail.state === 'succeeded')
    expect(retried.attempt_log).toMatchObject([{ status_code: 500 }, { status_code: 200 }])
    await until(() => deliveriesOf(hook.id, 'succeeded'), (rows) => rows.length === 3)
  })

  test('an unknown or malformed delivery id is a 404 not_found tool error', async () => {
    for (const deliveryId of ['dlv_01m00000000000000000000000', 'not-a-delivery']) {
      expect(await agent.fails('get_delivery', { delivery_id: deliveryId })).toMatchObject({ status: 404, code: 'not_found' })
      expect(await agent.fails('retry_delivery', { delivery_id: deliveryId })).toMatchObject({ status: 404, code: 'not_found' })
    }
  })
})

describe('filter', () => {
  test('create_webhook takes a filter and answers it, only its contacts are delivered; update_webhook sets it, keeps it when left out and clears it with null, as REST reads it', async () => {
    const hook = await agent.ok('create_webhook', { event: 'message.inbound', target_url: `${receiver.origin}/mcp-filtered`, filter: { from: ['+447700900901'] } })
    expect(hook).toMatchObject({ filter: { from: ['+447700900901'] }, secret: expect.stringMatching(/^whsec_/) })
    expect((await agent.ok('get_webhook', { hook_id: hook.id })).filter).toEqual({ from: ['+447700900901'] })
    const control = await subscribe('/mcp-filter-control')

    const wanted = await inbound(alice, 'in the filter', '+447700900901')
    const unwanted = await inbound(alice, 'not in the filter')
    // Both reached the unfiltered subscription, so every delivery row of them is committed.
    await receiver.waitFor(() => arrivedFor(wanted, '/mcp-filter-control').length === 1 && arrivedFor(unwanted, '/mcp-filter-control').length === 1)
    await receiver.waitFor(() => arrivedFor(wanted, '/mcp-filtered').length === 1)
    expect(onPath('/mcp-filtered').map(messageIdOf)).toEqual([wanted])
    expect(await deliveriesOf(hook.id)).toHaveLength(1)
    expect(control.id).not.toBe(hook.id)

    expect((await agent.ok('update_webhook', { hook_id: hook.id, filter: { from: ['+447700900900', '+447700900901'] } })).filter).toEqual({ from: ['+447700900900', '+447700900901'] })
    expect(await agent.ok('update_webhook', { hook_id: hook.id, status: 'paused' })).toMatchObject({ status: 'paused', filter: { from: ['+447700900900', '+447700900901'] } })
    expect((await restJson(alice, 'GET', `/hooks/${hook.id}`)).body.filter).toEqual({ from: ['+447700900900', '+447700900901'] })
    expect((await agent.ok('update_webhook', { hook_id: hook.id, filter: null })).filter).toBeNull()
    expect((await restJson(alice, 'GET', `/hooks/${hook.id}`)).body.filter).toBeNull()
    expect((await agent.ok('list_webhooks', { limit: 100 })).data.find((item: { id: string }) => item.id === hook.id).filter).toBeNull()
  })

  test('a bad filter is a tool error with the problem REST answers, its path inside the filter; nothing is made or changed', async () => {
    const hook = await subscribe('/mcp-filter-errors')
    const eleven = Array.from({ length: 11 }, (_, i) => `+4477009001${String(i).padStart(2, '0')}`)
    const cases: [unknown, string][] = [
      [{ to: ['+14155550123'] }, '/filter/to'],
      [{ from: ['+447700900901', 'nope'] }, '/filter/from/1'],
      [{ from: ['+447700900901', '+447700900901'] }, '/filter/from'],
      [{ from: eleven }, '/filter/from'],
      [{ from: [] }, '/filter/from'],
      [{}, '/filter'],
      [{ from: ['+447700900901'], cc: ['+447700900902'] }, '/filter/cc'],
    ]
    const withoutRequestId = ({ request_id: _, ...problem }: ToolProblem) => problem
    for (const [filter, path] of cases) {
      const updated = await agent.fails('update_webhook', { hook_id: hook.id, filter })
      expect(updated).toMatchObject({ status: 422, code: 'validation_failed' })
      expect(updated.errors!.map((error) => error.path)).toContain(path)
      expect(withoutRequestId(updated)).toEqual(withoutRequestId((await restJson(alice, 'PATCH', `/hooks/${hook.id}`, { filter })).body))

      const create = { event: 'message.inbound', target_url: `${receiver.origin}/mcp-filter-refused`, filter }
      const created = await agent.fails('create_webhook', create)
      expect(created.errors!.map((error) => error.path)).toContain(path)
      expect(withoutRequestId(created)).toEqual(withoutRequestId((await restJson(alice, 'POST', '/hooks', create)).body))
    }
    expect((await agent.ok('get_webhook', { hook_id: hook.id })).filter).toBeNull()
    expect((await agent.ok('list_webhooks', { limit: 100 })).data.map((item: { target_url: string }) => item.target_url)).not.toContain(`${receiver.origin}/mcp-filter-refused`)
  })
})

describe('signature', () => {
  test('create_webhook with signature "ed25519" answers a public key and no secret; get_webhook reads the key; deliveries carry v1a signatures it verifies', async () => {
    const hook = await agent.ok('create_webhook', { event: 'message.inbound', target_url: `${receiver.origin}/mcp-ed25519`, signature: 'ed25519' })
    expect(hook.secret).toBeUndefined()
    expect([hook.signature, hook.public_key]).toEqual(['ed25519', expect.stringMatching(/^whpk_/)])
    expect(Value.Check(toolNamed('create_webhook').output, hook)).toBe(true)
    const read = await agent.ok('get_webhook', { hook_id: hook.id })
    expect(read.public_key).toBe(hook.public_key)

    const messageId = await inbound(alice, 'signed with ed25519')
    await receiver.waitFor(() => arrivedFor(messageId, '/mcp-ed25519').length === 1)
    const [request] = arrivedFor(messageId, '/mcp-ed25519')
    const [version, signature] = request!.headers['webhook-signature']!.split(',')
    expect(version).toBe('v1a')
    const key = await crypto.subtle.importKey('raw', Buffer.from(read.public_key.slice('whpk_'.length), 'base64'), 'Ed25519', false, ['verify'])
    const signed = new TextEncoder().encode(`${request!.headers['webhook-id']}.${request!.headers['webhook-timestamp']}.${request!.body}`)
    expect(await crypto.subtle.verify('Ed25519', key, Buffer.from(signature!, 'base64'), signed)).toBe(true)
  })

  test('an unknown signature, or a secret with ed25519, is a 422 tool error naming the field', async () => {
    const target = { event: 'message.inbound', target_url: `${receiver.origin}/mcp-bad-signature` }
    expect((await agent.fails('create_webhook', { ...target, signature: 'rsa' })).errors!.map((error) => error.path)).toContain('/signature')
    const secret = `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`
    expect((await agent.fails('create_webhook', { ...target, signature: 'ed25519', secret })).errors).toEqual([{ path: '/secret', message: expect.stringContaining('ed25519') }])
  })
})

describe("another account's resources", () => {
  test("its hook id for update_webhook and test_webhook, its delivery id for get_delivery and retry_delivery: 404 not_found, and nothing of it changes", async () => {
    const bob = await flowFixture(server)
    const created = await restJson(bob, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/theirs` })
    expect(created.status).toBe(201)
    const theirs = created.body as { id: string; secret: string }
    const messageId = await inbound(bob, 'for bob')
    const delivery = await until(
      async () => (await restJson(bob, 'GET', `/hooks/${theirs.id}/deliveries`)).body.data[0],
      (row) => row?.state === 'succeeded',
    )

    for (const changes of [{ status: 'paused' }, { target_url: `${receiver.origin}/hijacked` }, { rate_limit_per_s: 1 }, { filter: { from: ['+447700900999'] } }, { filter: { to: ['+447700900999'] } }]) {
      expect(await agent.fails('update_webhook', { hook_id: theirs.id, ...changes })).toMatchObject({ status: 404, code: 'not_found' })
    }
    expect(await agent.fails('test_webhook', { hook_id: theirs.id })).toMatchObject({ status: 404, code: 'not_found' })
    expect(await agent.fails('list_deliveries', { hook_id: theirs.id })).toMatchObject({ status: 404, code: 'not_found' })
    expect(await agent.fails('get_delivery', { delivery_id: delivery.id })).toMatchObject({ status: 404, code: 'not_found' })
    expect(await agent.fails('retry_delivery', { delivery_id: delivery.id })).toMatchObject({ status: 404, code: 'not_found' })

    // Bob's subscription and delivery are as they were (a retry would have made it pending at once).
    const hook = await restJson(bob, 'GET', `/hooks/${theirs.id}`)
    expect(hook.body).toMatchObject({ status: 'active', target_url: `${receiver.origin}/theirs`, rate_limit_per_s: null, filter: null })
    const detail = await restJson(bob, 'GET', `/deliveries/${delivery.id}`)
    expect(detail.body).toMatchObject({ state: 'succeeded', attempts: 1 })
    expect(detail.body.attempt_log).toHaveLength(1)
    expect((await restJson(bob, 'GET', `/hooks/${theirs.id}/deliveries`)).body.data).toHaveLength(1)
    expect(onPath('/theirs').map(messageIdOf)).toEqual([messageId])
    expect(onPath('/hijacked')).toHaveLength(0)
    // Bob's own tools still see it.
    const bobs = await agentOf(bob)
    expect(await bobs.ok('get_delivery', { delivery_id: delivery.id })).toMatchObject({ id: delivery.id, hook_id: theirs.id })
    await bobs.client.close()
  })
})

describe('scopes', () => {
  test('a hooks:read token lists and reads deliveries; update_webhook, test_webhook and retry_delivery are refused for hooks:write, and do nothing', async () => {
    const hook = await subscribe('/read-only')
    const messageId = await inbound(alice, 'read me')
    const [delivery] = await until(() => deliveriesOf(hook.id), (rows) => rows[0]?.state === 'succeeded')

    const reader = await agentOf(alice, { scope: 'hooks:read' })
    expect((await reader.ok('list_deliveries', { hook_id: hook.id })).data.map((row: { id: string }) => row.id)).toEqual([delivery.id])
    expect(await reader.ok('get_delivery', { delivery_id: delivery.id })).toMatchObject({ id: delivery.id, state: 'succeeded' })

    await expectScopeRefused(() => reader.call('update_webhook', { hook_id: hook.id, status: 'paused' }))
    await expectScopeRefused(() => reader.call('test_webhook', { hook_id: hook.id }))
    await expectScopeRefused(() => reader.call('retry_delivery', { delivery_id: delivery.id }))

    expect((await restJson(alice, 'GET', `/hooks/${hook.id}`)).body.status).toBe('active')
    expect(await agent.ok('get_delivery', { delivery_id: delivery.id })).toMatchObject({ state: 'succeeded', attempts: 1 })
    expect(await deliveriesOf(hook.id)).toHaveLength(1)
    expect(arrivedFor(messageId, '/read-only')).toHaveLength(1)
    expect(onPath('/read-only')).toHaveLength(1)
    await reader.client.close()
  })
})

describe('get_webhook_health', () => {
  test('a summary in words first, then the same figures as GET …/hooks/{hook_id}/stats, with the status and circuit; a hooks:read token may ask', async () => {
    const good = await subscribe('/health-good')
    const bad = await subscribe('/fail-health')
    for (const text of ['one', 'two']) await inbound(alice, `health ${text}`)
    await until(() => deliveriesOf(bad.id), (rows) => rows.length === 2 && rows.every((row) => row.state === 'failed'))
    await until(() => deliveriesOf(good.id), (rows) => rows.length === 2 && rows.every((row) => row.state === 'succeeded'))

    const reader = await agentOf(alice, { scope: 'hooks:read' })
    const since = new Date(Date.now() - 3_600_000).toISOString()
    const health = await reader.ok('get_webhook_health', { hook_id: bad.id, interval: 'minute', since })
    expect(Object.keys(health)[0]).toBe('summary')
    const { summary, status, circuit, ...figures } = health
    const stats = await server.fetch(`/v0/account/${alice.accountId}/hooks/${bad.id}/stats?interval=minute&since=${encodeURIComponent(since)}&key=${alice.apiKey}`)
    expect(stats.status).toBe(200)
    expect(figures).toEqual(await stats.json())
    expect(status).toBe('active')
    expect(circuit.state).toBe('closed')
    expect(figures.totals).toMatchObject({ attempts: 2, succeeded: 0, failed: 2, failures: { http_5xx: 2 } })
    expect(summary).toContain('2 attempts, 0.0 % succeeded (0), 2 failed.')
    expect(summary).toContain('Failures: 2 answered 5xx.')
    expect(summary).toContain('No delivery is pending.')

    const fine = await reader.ok('get_webhook_health', { hook_id: good.id })
    expect(fine).toMatchObject({ interval: 'hour', totals: { attempts: 2, succeeded: 2, failed: 0 } })
    expect(fine.buckets).toHaveLength(24)
    expect(fine.summary).toContain('2 attempts, 100.0 % succeeded (2), 0 failed.')
    expect(fine.summary).not.toContain('Failures')
    await reader.client.close()
  })

  test("another account's subscription is not_found; a bad range is validation_failed naming the field", async () => {
    const bob = await flowFixture(server, { clientId: alice.clientId })
    const theirs = (await restJson(bob, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/bobs-health` })).body
    expect((await agent.fails('get_webhook_health', { hook_id: theirs.id })).code).toBe('not_found')
    const mine = await subscribe('/health-range')
    const tooLong = await agent.fails('get_webhook_health', { hook_id: mine.id, interval: 'minute', since: '2026-01-01T00:00:00Z', until: '2026-02-01T00:00:00Z' })
    expect(tooLong.code).toBe('validation_failed')
    expect(JSON.stringify(tooLong.errors)).toContain('since')
    const badInterval = await agent.fails('get_webhook_health', { hook_id: mine.id, interval: 'week' })
    expect(badInterval.code).toBe('validation_failed')
  })
})
