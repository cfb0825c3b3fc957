import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { createTestDatabase } from '../../support/database.ts'
import { startTestServer, type TestServer } from '../../support/server.ts'
import { startReceiver } from '../../support/receiver.ts'
import { SPAN_KIND, startOtlpReceiver, type ReceivedSpan } from '../../support/otlp-receiver.ts'
import { freshDataDir, runCli, startServerProcess } from '../../support/process.ts'
import { authorizeAndRedeem, flowFixture, postJson, signIn } from '../../oauth/support.ts'
import { tokenFor } from '../../support/mcp.ts'
import { Client, StreamableHTTPClientTransport, TRACEPARENT_META_KEY } from '@modelcontextprotocol/client'

// docs/operations.md#traces: one trace from a traced client's request to the receiver, over OTLP/HTTP
// (protobuf and JSON) to a receiver that decodes the wire, as a collector would.
setDefaultTimeout(120_000)

const otlp = startOtlpReceiver()
// /flaky-* fails its first attempt and takes the next; /moved redirects (never followed) to a URL that holds a token of the receiver's.
const receiverToken = randomBytes(20).toString('hex')
const receiver = startReceiver((request, nth) => {
  if (request.path === '/moved') return new Response(null, { status: 302, headers: { location: `https://elsewhere.example/hooks/${receiverToken}?token=${receiverToken}` } })
  return request.path.startsWith('/flaky') && nth === 1 ? new Response('try again', { status: 500 }) : new Response(null, { status: 204 })
})
const tracingEnv = (protocol: 'http/protobuf' | 'http/json') => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint,
  OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
  OTEL_SERVICE_NAME: `messaging-test-${protocol.slice(5)}`,
  OTEL_BSP_SCHEDULE_DELAY: '50',
  WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
  WEBHOOK_CA_FILE: receiver.caFile,
  WEBHOOK_RETRY_SCHEDULE: '0,200ms,200ms',
})

/** A traced client's span: the W3C traceparent it sends, with ids made for the test. */
function clientSpan() {
  const traceId = randomBytes(16).toString('hex')
  const spanId = randomBytes(8).toString('hex')
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` }
}

const byName = (spans: ReceivedSpan[], name: string) => spans.filter((span) => span.name === name)
const only = (spans: ReceivedSpan[], name: string) => {
  const found = byName(spans, name)
  expect(found.map((span) => span.name)).toEqual([name])
  return found[0]!
}

async function subscribe(server: TestServer, accountId: string, key: string, path: string, extra: Record<string, unknown> = {}) {
  const response = await server.fetch(`/v0/account/${accountId}/hooks?key=${key}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event: 'message.delivered', target_url: `${receiver.origin}${path}`, ...extra }),
  })
  expect(response.status).toBe(201)
  return (await response.json()) as { id: string; secret: string }
}

const sendMessage = (origin: string, accountId: string, key: string, body: string, traceparent?: string) =>
  fetch(`${origin}/v0/account/${accountId}/messages?key=${key}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(traceparent ? { traceparent } : {}) },
    body: JSON.stringify({ to: '+15550001234', body }),
  })

/** The request's span, the work that accepted, dispatched and settled the message, and the attempts, checked as one trace. */
function expectMessageTrace(spans: ReceivedSpan[], client: { traceId: string; spanId: string }) {
  const server = only(spans, 'POST /v0/account/:account_id/messages')
  expect(server).toMatchObject({ kind: SPAN_KIND.server, parentSpanId: client.spanId })
  expect(server.attributes).toMatchObject({ 'http.request.method': 'POST', 'http.route': '/v0/account/:account_id/messages', 'http.response.status_code': 202 })
  expect(server.attributes['url.query']).toBe('key=[REDACTED]')
  const accept = only(spans, 'message accept')
  expect(accept.parentSpanId).toBe(server.spanId)
  const dispatch = only(spans, 'message dispatch')
  expect(dispatch).toMatchObject({ kind: SPAN_KIND.client, parentSpanId: accept.spanId })
  const settle = only(spans, 'message settle')
  expect(settle.parentSpanId).toBe(dispatch.spanId)
  expect(settle.attributes).toMatchObject({ 'app.event.type': 'message.delivered', 'app.deliveries.queued': 1 })
  const attempts = byName(spans, 'POST').filter((span) => span.kind === SPAN_KIND.client)
  for (const attempt of attempts) {
    expect(attempt.parentSpanId).toBe(settle.spanId)
    expect(attempt.attributes).toMatchObject({ 'http.request.method': 'POST', 'server.address': 'localhost', 'url.scheme': 'https', 'app.event.id': settle.attributes['app.event.id'] })
    expect(Object.keys(attempt.attributes)).not.toContain('url.full')
  }
  return { server, settle, attempts: attempts.toSorted((a, b) => Number(a.attributes['app.delivery.attempt']) - Number(b.attributes['app.delivery.attempt'])) }
}

const servers = { 'http/protobuf': await startTestServer({ env: tracingEnv('http/protobuf') }), 'http/json': await startTestServer({ env: tracingEnv('http/json') }) }

describe.each(['http/protobuf', 'http/json'] as const)('OTLP over %s', (protocol) => {
  const server = servers[protocol]
  const flaky = `/flaky-${protocol.slice(5)}`

  test('a POST …/messages with a traceparent: the request, the settlement and every attempt (a retry too) in the client’s trace; the receiver continues it', async () => {
    const { accountId, secret: key } = await server.createAccountWithKey('Traced')
    await subscribe(server, accountId, key, flaky)
    const client = clientSpan()
    expect((await sendMessage(server.origin, accountId, key, 'traced hello', client.traceparent)).status).toBe(202)
    await receiver.waitFor((received) => received.filter((request) => request.path === flaky).length === 2)
    await otlp.waitFor(() => byName(otlp.trace(client.traceId), 'POST').length === 2)
    const spans = otlp.trace(client.traceId)
    expect(new Set(spans.map((span) => span.contentType))).toEqual(new Set([protocol === 'http/json' ? 'application/json' : 'application/x-protobuf']))
    expect(new Set(spans.map((span) => span.service))).toEqual(new Set([`messaging-test-${protocol.slice(5)}`]))
    const { attempts } = expectMessageTrace(spans, client)
    expect(attempts.map((attempt) => [attempt.attributes['app.delivery.attempt'], attempt.attributes['http.response.status_code'], attempt.status.code])).toEqual([
      [1, 500, 2],
      [2, 204, 0],
    ])
    expect(attempts[0]!.attributes['error.type']).toBe('500')
    // What the receiver got: a traceparent of the same trace, whose parent is the attempt that sent it.
    const sent = receiver.received.filter((request) => request.path === flaky).map((request) => request.headers.traceparent)
    expect(sent).toEqual(attempts.map((attempt) => `00-${client.traceId}-${attempt.spanId}-01`))

    // Log lines written inside a span name it: the request's line, and each attempt's line its attempt's span.
    const requestLine = server.logs.find((line) => line.msg === 'request' && line.trace_id === client.traceId)
    expect(requestLine).toMatchObject({ path: expect.stringContaining('/messages'), span_id: only(spans, 'POST /v0/account/:account_id/messages').spanId })
    // The worker thread's lines reach the log in batches, at most 50 ms late.
    const attemptLines = () => server.logs.filter((line) => line.msg === 'delivery attempt' && line.trace_id === client.traceId)
    for (const until = Date.now() + 5_000; attemptLines().length < 2 && Date.now() < until; ) await Bun.sleep(20)
    expect(attemptLines().map((line) => line.span_id)).toEqual(attempts.map((attempt) => attempt.spanId))
  })

  test('without a traceparent a request starts its own trace; an inbound message and a test event trace the same way', async () => {
    const { accountId, secret: key } = await server.createAccountWithKey('Traced inbound')
    const hook = await subscribe(server, accountId, key, `/inbound-${protocol.slice(5)}`, { event: 'message.inbound' })
    const client = clientSpan()
    const inbound = await server.fetch(`/v0/account/${accountId}/sandbox/inbound?key=${key}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: client.traceparent },
      body: JSON.stringify({ from: '+15550004321', body: 'a reply' }),
    })
    expect(inbound.status).toBe(201)
    await otlp.waitFor(() => byName(otlp.trace(client.traceId), 'POST').length === 1)
    const spans = otlp.trace(client.traceId)
    const receive = only(spans, 'message receive')
    expect(receive.parentSpanId).toBe(only(spans, 'POST /v0/account/:account_id/sandbox/inbound').spanId)
    expect(only(spans, 'POST').parentSpanId).toBe(receive.spanId)

    const tested = await server.fetch(`/v0/account/${accountId}/hooks/${hook.id}/test?key=${key}`, { method: 'POST' })
    expect(tested.status).toBe(200)
    const requestLine = server.logs.findLast((line) => line.msg === 'request' && String(line.path).includes('/test'))!
    const traceId = String(requestLine.trace_id)
    expect(traceId).toMatch(/^[0-9a-f]{32}$/)
    await otlp.waitFor(() => byName(otlp.trace(traceId), 'POST').length === 1)
    const testSpans = otlp.trace(traceId)
    const request = only(testSpans, 'POST /v0/account/:account_id/hooks/:hook_id/test')
    expect(request.parentSpanId).toBe('')
    expect(only(testSpans, 'POST')).toMatchObject({ kind: SPAN_KIND.client, parentSpanId: request.spanId, attributes: { 'app.subscription.id': hook.id, 'app.delivery.attempt': 1 } })
  })

  test('an MCP tools/call with _meta.traceparent continues that trace; without one, the HTTP request’s', async () => {
    const fixture = await flowFixture(server)
    const mcpUrl = `${server.config.baseUrl}/mcp`
    const token = await tokenFor(server, fixture, { resource: mcpUrl, scope: 'hooks:read' })
    const call = (meta: Record<string, unknown>, headers: Record<string, string> = {}) =>
      fetch(mcpUrl, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'list_webhooks', ...headers },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 7,
          method: 'tools/call',
          params: {
            name: 'list_webhooks',
            arguments: {},
            _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientInfo': { name: 'traced-agent', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': {}, ...meta },
          },
        }),
      })
    const agent = clientSpan()
    const viaMeta = await call({ traceparent: agent.traceparent })
    expect(viaMeta.status).toBe(200)
    expect(((await viaMeta.json()) as { result?: { isError?: boolean } }).result?.isError).toBeUndefined()
    await otlp.waitFor(() => byName(otlp.trace(agent.traceId), 'tools/call list_webhooks').length === 1)
    const tool = only(otlp.trace(agent.traceId), 'tools/call list_webhooks')
    expect(tool).toMatchObject({ kind: SPAN_KIND.server, parentSpanId: agent.spanId })
    expect(tool.attributes).toMatchObject({ 'mcp.method.name': 'tools/call', 'gen_ai.tool.name': 'list_webhooks', 'gen_ai.operation.name': 'execute_tool', 'jsonrpc.request.id': '7', 'mcp.protocol.version': '2026-07-28' })

    // The official 2.x client, its trace context put in _meta under the SDK's own key.
    const sdk = clientSpan()
    const client = new Client({ name: 'traced-sdk-agent', version: '2.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { requestInit: { headers: { authorization: `Bearer ${token}` } } }))
    await client.callTool({ name: 'list_webhooks', arguments: {}, _meta: { [TRACEPARENT_META_KEY]: sdk.traceparent } })
    await client.close()
    await otlp.waitFor(() => byName(otlp.trace(sdk.traceId), 'tools/call list_webhooks').length === 1)
    expect(only(otlp.trace(sdk.traceId), 'tools/call list_webhooks').parentSpanId).toBe(sdk.spanId)

    // A method of the client's own making does not name a span.
    const odd = clientSpan()
    await server.fetch('/v0/account', { method: 'PROPFIND', headers: { traceparent: odd.traceparent } })
    await otlp.waitFor(() => otlp.trace(odd.traceId).length === 1)
    expect(otlp.trace(odd.traceId)[0]).toMatchObject({ name: 'HTTP', attributes: { 'http.request.method': '_OTHER', 'http.request.method_original': 'PROPFIND' } })

    const http = clientSpan()
    expect((await call({}, { traceparent: http.traceparent })).status).toBe(200)
    await otlp.waitFor(() => byName(otlp.trace(http.traceId), 'tools/call list_webhooks').length === 1)
    const viaHttp = otlp.trace(http.traceId)
    expect(only(viaHttp, 'tools/call list_webhooks').parentSpanId).toBe(only(viaHttp, 'POST /v0/mcp').spanId)
  })
})

test('after a kill -9 between the request and the attempt, the process that delivers it (and retries it) later adds its attempts to the same trace', async () => {
  const database = await createTestDatabase()
  afterAll(() => database.drop())
  const env: Record<string, string> = {
    ...tracingEnv('http/protobuf'),
    ...(database.url ? { DATABASE_URL: database.url } : {}),
    DATA_DIR: freshDataDir(),
    ENCRYPTION_KEY: randomBytes(32).toString('base64url'),
    OTEL_SERVICE_NAME: 'messaging-process',
  }
  if (database.url) await database.handle.close()
  const demo = JSON.parse((await runCli(['demo', '--json'], env)).stdout) as { account: { id: string }; api_key: { secret: string } }
  const accountId = demo.account.id
  const key = demo.api_key.secret
  let server = await startServerProcess(['bun', 'src/main.ts'], env)
  const hooks = `${server.origin}/v0/account/${accountId}/hooks`
  const made = await fetch(`${hooks}?key=${key}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ event: 'message.delivered', target_url: `${receiver.origin}/flaky-process` }) })
  expect(made.status).toBe(201)
  const hookId = ((await made.json()) as { id: string }).id
  // Paused: the delivery is written with the event and waits, unsent, for the next process.
  const pause = (origin: string, status: 'paused' | 'active') =>
    fetch(`${origin}/v0/account/${accountId}/hooks/${hookId}?key=${key}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ status }) })
  expect((await pause(server.origin, 'paused')).status).toBe(200)
  const client = clientSpan()
  expect((await sendMessage(server.origin, accountId, key, 'outlives its process', client.traceparent)).status).toBe(202)
  await otlp.waitFor(() => byName(otlp.trace(client.traceId), 'message settle').length === 1)
  expect(await server.stop('SIGKILL')).not.toBe(0)

  server = await startServerProcess(['bun', 'src/main.ts'], env)
  try {
    expect((await pause(server.origin, 'active')).status).toBe(200)
    // The first attempt fails (500) and is retried: both are the new process's, both in the trace.
    await otlp.waitFor((spans) => spans.filter((span) => span.traceId === client.traceId && span.name === 'POST').length === 2, 30_000)
  } catch (error) {
    throw new Error(`${(error as Error).message}\nthe restarted server's output:\n${server.output()}`)
  } finally {
    await server.stop()
  }
  const { attempts } = expectMessageTrace(otlp.trace(client.traceId), client)
  expect(attempts.map((attempt) => [attempt.attributes['app.delivery.attempt'], attempt.attributes['http.response.status_code'], attempt.service])).toEqual([
    [1, 500, 'messaging-process'],
    [2, 204, 'messaging-process'],
  ])
  const sent = receiver.received.filter((request) => request.path === '/flaky-process').map((request) => request.headers.traceparent)
  expect(sent).toEqual(attempts.map((attempt) => `00-${client.traceId}-${attempt.spanId}-01`))
})

test('no secret of a whole run (sign-in, OAuth, keys, hooks, messages, MCP) reaches an exported span: no key, token, code, password, signing secret or message body', async () => {
  const server = servers['http/protobuf']
  const before = otlp.rawBodies.length
  const fixture = await flowFixture(server)
  const idToken = await signIn(server, fixture)
  const mcpUrl = `${server.config.baseUrl}/mcp`
  const { code, verifier, tokens } = await authorizeAndRedeem(server, fixture, { scope: 'hooks:read hooks:write messages:read keys:write', resource: [server.config.baseUrl, mcpUrl] })
  const refreshed = await postJson(server, '/v0/auth/token/refresh', { grant_type: 'refresh_token', refresh_token: tokens.refresh_token, client_id: fixture.clientId })
  expect(refreshed.status).toBe(200)
  const pair = (await refreshed.json()) as { access_token: string; refresh_token: string }
  const bearer = { authorization: `Bearer ${pair.access_token}`, 'content-type': 'application/json' }
  const key = await server.fetch(`/v0/account/${fixture.accountId}/keys`, { method: 'POST', headers: { ...bearer, 'idempotency-key': 'trace-secrets' }, body: JSON.stringify({ name: 'traced' }) })
  expect(key.status).toBe(201)
  const keySecret = ((await key.json()) as { secret: string }).secret
  const hookSecret = `whsec_${randomBytes(32).toString('base64')}`
  const hook = await server.fetch(`/v0/account/${fixture.accountId}/hooks?key=${keySecret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event: 'message.delivered', target_url: `${receiver.origin}/secrets`, secret: hookSecret }),
  })
  expect(hook.status).toBe(201)
  const hookId = ((await hook.json()) as { id: string }).id
  const moved = await server.fetch(`/v0/account/${fixture.accountId}/hooks?key=${keySecret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event: 'message.delivered', target_url: `${receiver.origin}/moved` }),
  })
  const movedId = ((await moved.json()) as { id: string }).id
  const body = `confidential ${randomBytes(12).toString('hex')}`
  expect((await sendMessage(server.origin, fixture.accountId, fixture.apiKey, body)).status).toBe(202)
  const tool = await fetch(mcpUrl, {
    method: 'POST',
    headers: { ...bearer, accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'secrets', version: '1' } } }),
  })
  expect(tool.status).toBe(200)
  await receiver.waitFor((received) => received.some((request) => request.path === '/secrets'))
  const revoked = await postJson(server, '/v0/auth/revoke', { token: pair.refresh_token, client_id: fixture.clientId })
  expect(revoked.status).toBe(200)
  await otlp.waitFor((spans) => spans.some((span) => span.name === 'POST /v0/auth/revoke'))
  await otlp.waitFor((spans) => spans.some((span) => span.name === 'POST' && span.attributes['app.subscription.id'] === hookId))
  await otlp.waitFor((spans) => spans.some((span) => span.name === 'POST' && span.attributes['app.subscription.id'] === movedId && span.attributes['http.response.status_code'] === 302))
  const exported = otlp.rawBodies.slice(before).join('\n')
  expect(exported).toContain('POST /v0/auth/token')
  for (const secret of [fixture.apiKey, keySecret, fixture.password, idToken, code, verifier, tokens.access_token, tokens.refresh_token, pair.access_token, pair.refresh_token, hookSecret, hookSecret.slice(6), body, receiverToken]) {
    expect(exported).not.toContain(secret)
  }
})

test('an endpoint that does not answer is said in the log: a warning line, with no secret of the exporter’s headers', async () => {
  // A PGlite of its own whatever the pass: the process would otherwise inherit the PostgreSQL pass's DATABASE_URL.
  const env = { DATABASE_URL: '', DATA_DIR: freshDataDir(), OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_EXPORTER_OTLP_HEADERS: 'x-api-key=otlp-sekrit-value', OTEL_BSP_SCHEDULE_DELAY: '50' }
  const server = await startServerProcess(['bun', 'src/main.ts'], env)
  try {
    await server.waitForOutput('"msg":"OpenTelemetry"', 15_000)
  } finally {
    await server.stop()
  }
  const warning = server.output().split('\n').find((line) => line.includes('"msg":"OpenTelemetry"'))!
  expect(JSON.parse(warning)).toMatchObject({ level: 'warn', error: expect.any(String) })
  expect(server.output()).not.toContain('otlp-sekrit-value')
})
