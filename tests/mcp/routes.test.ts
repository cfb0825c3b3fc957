import { describe, expect, test } from 'bun:test'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js'
import { startTestServer } from '../support/server.ts'
import { flowFixture, postJson, type Fixture } from '../oauth/support.ts'
import { TestOAuthProvider, connectWithToken as connectTo, expectScopeRefused, modernRequest, problemOf, tokenFor as tokenOn, type ToolResult } from '../support/mcp.ts'

const server = await startTestServer({ env: { MCP_ALLOWED_ORIGINS: 'https://agent.example' } })
const mcpUrl = `${server.config.baseUrl}/mcp`

const tokenFor = (fixture: Fixture, options: { scope?: string; resource?: string }) => tokenOn(server, fixture, options)
const connectWithToken = (token: string) => connectTo(server, token)

const rpc = (headers: Record<string, string>, body: unknown = { jsonrpc: '2.0', id: 1, method: 'ping' }) =>
  fetch(mcpUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', ...headers },
    body: JSON.stringify(body),
  })

describe('the SDK client with its OAuth provider, from nothing', () => {
  test('401 → discovery → registration → PKCE → token → tools: create, list, delete a webhook; REST sees it', async () => {
    const fixture = await flowFixture(server)
    const provider = new TestOAuthProvider(server, fixture)

    const first = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider })
    await expect(new Client({ name: 'agent', version: '1.0.0' }).connect(first)).rejects.toBeInstanceOf(UnauthorizedError)
    // The SDK registered itself and asked for this resource; the consent step produced a code.
    expect(provider.client?.client_id).toMatch(/^cli_/)
    expect(provider.authorizationUrl?.searchParams.get('resource')).toBe(mcpUrl)
    expect(provider.authorizationUrl?.searchParams.get('code_challenge_method')).toBe('S256')
    await first.finishAuth(provider.code!)
    expect(provider.saved?.access_token).toBeString()

    const client = new Client({ name: 'agent', version: '1.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider }))
    const { tools } = await client.listTools()
    expect(tools.map((tool) => tool.name).sort()).toEqual(['create_webhook', 'delete_webhook', 'get_delivery', 'get_webhook', 'get_webhook_health', 'list_deliveries', 'list_event_types', 'list_webhooks', 'retry_delivery', 'test_webhook', 'update_webhook'])
    for (const tool of tools) {
      expect(tool.description!.length).toBeGreaterThan(40)
      expect(tool.inputSchema.type).toBe('object')
      expect(tool.outputSchema?.type).toBe('object')
      expect(tool.annotations).toBeDefined()
    }
    expect(tools.find((tool) => tool.name === 'delete_webhook')!.annotations).toMatchObject({ destructiveHint: true, readOnlyHint: false })
    expect(tools.find((tool) => tool.name === 'list_webhooks')!.annotations).toMatchObject({ readOnlyHint: true })

    const created = (await client.callTool({ name: 'create_webhook', arguments: { event: 'message.inbound', target_url: 'https://hooks.example.com/mcp' } })) as ToolResult
    expect(created.isError).toBeFalsy()
    expect(created.structuredContent).toMatchObject({ account_id: fixture.accountId, event: 'message.inbound', status: 'active' })
    expect(created.structuredContent.secret).toMatch(/^whsec_/)
    const hookId = created.structuredContent.id as string

    const rest = await server.fetch(`/v0/account/${fixture.accountId}/hooks/${hookId}?key=${fixture.apiKey}`)
    expect(rest.status).toBe(200)
    expect(((await rest.json()) as { target_url: string }).target_url).toBe('https://hooks.example.com/mcp')

    const listed = (await client.callTool({ name: 'list_webhooks', arguments: {} })) as ToolResult
    expect(listed.structuredContent.data.map((hook: { id: string }) => hook.id)).toEqual([hookId])
    const got = (await client.callTool({ name: 'get_webhook', arguments: { hook_id: hookId } })) as ToolResult
    expect(got.structuredContent.secret).toBeUndefined()
    const deliveries = (await client.callTool({ name: 'list_deliveries', arguments: { hook_id: hookId } })) as ToolResult
    expect(deliveries.structuredContent).toEqual({ data: [], next_cursor: null })
    const types = (await client.callTool({ name: 'list_event_types', arguments: {} })) as ToolResult
    expect(types.structuredContent.data.map((type: { type: string }) => type.type)).toEqual(['message.delivered', 'message.failed', 'message.inbound'])

    const deleted = (await client.callTool({ name: 'delete_webhook', arguments: { hook_id: hookId } })) as ToolResult
    expect(deleted.structuredContent).toEqual({ id: hookId, deleted: true })
    expect((await server.fetch(`/v0/account/${fixture.accountId}/hooks/${hookId}?key=${fixture.apiKey}`)).status).toBe(404)
    await client.close()
  })
})

describe('tools: the same rules as REST', () => {
  test('an http URL, a private address, an unknown event, a duplicate and another account’s hook are tool errors with the REST problem', async () => {
    const fixture = await flowFixture(server)
    const client = await connectWithToken(await tokenFor(fixture, {}))
    const create = (args: Record<string, unknown>) => client.callTool({ name: 'create_webhook', arguments: args }) as Promise<ToolResult>

    const http = await create({ event: 'message.inbound', target_url: 'http://hooks.example.com/' })
    expect(http.isError).toBe(true)
    expect(problemOf(http)).toMatchObject({ status: 422, code: 'validation_failed', errors: [{ path: '/target_url', message: 'must use https' }] })
    expect(problemOf(http).type).toBe(`${server.config.publicUrl}/docs/errors#validation_failed`)
    const loopback = await create({ event: 'message.inbound', target_url: 'https://127.0.0.1/hook' })
    expect(problemOf(loopback).errors).toEqual([{ path: '/target_url', message: 'must not point at a private, loopback or link-local address (WEBHOOK_ALLOW_PRIVATE_TARGETS=true allows it, for local development)' }])
    const unknownEvent = await create({ event: 'message.exploded', target_url: 'https://hooks.example.com/' })
    expect(problemOf(unknownEvent)).toMatchObject({ status: 422, code: 'validation_failed' })
    expect(problemOf(unknownEvent).errors![0]!.path).toBe('/event')
    const extra = await create({ event: 'message.inbound', target_url: 'https://hooks.example.com/', secret: 'mine' })
    expect(problemOf(extra).code).toBe('validation_failed')

    expect((await create({ event: 'message.inbound', target_url: 'https://hooks.example.com/dup' })).isError).toBeFalsy()
    expect(problemOf(await create({ event: 'message.inbound', target_url: 'https://hooks.example.com/dup' }))).toMatchObject({ status: 409, code: 'conflict' })

    const other = await flowFixture(server)
    const theirs = await postJson(server, `/v0/account/${other.accountId}/hooks?key=${other.apiKey}`, { event: 'message.inbound', target_url: 'https://theirs.example.com/' })
    const theirId = ((await theirs.json()) as { id: string }).id
    for (const name of ['get_webhook', 'delete_webhook', 'list_deliveries']) {
      const result = (await client.callTool({ name, arguments: { hook_id: theirId } })) as ToolResult
      expect(problemOf(result)).toMatchObject({ status: 404, code: 'not_found' })
    }
    expect((await server.fetch(`/v0/account/${other.accountId}/hooks/${theirId}?key=${other.apiKey}`)).status).toBe(200)
    const wrongType = (await client.callTool({ name: 'get_webhook', arguments: { hook_id: 42 } })) as ToolResult
    expect(problemOf(wrongType).code).toBe('validation_failed')
    await expect(client.callTool({ name: 'drop_database', arguments: {} })).rejects.toThrow(/Unknown tool/)
    await client.close()
  })

  test('a read-only token lists but cannot create: the error names hooks:write', async () => {
    const fixture = await flowFixture(server)
    const client = await connectWithToken(await tokenFor(fixture, { scope: 'hooks:read' }))
    expect(((await client.callTool({ name: 'list_webhooks', arguments: {} })) as ToolResult).isError).toBeFalsy()
    await expectScopeRefused(() => client.callTool({ name: 'create_webhook', arguments: { event: 'message.inbound', target_url: 'https://hooks.example.com/ro' } }))
    expect(((await (await server.fetch(`/v0/account/${fixture.accountId}/hooks?key=${fixture.apiKey}`)).json()) as { data: unknown[] }).data).toHaveLength(0)
    await client.close()
  })
})

describe('the endpoint', () => {
  test('no token: 401 naming the MCP protected-resource metadata by absolute URL; that document names this resource', async () => {
    const response = await rpc({})
    expect(response.status).toBe(401)
    const challenge = response.headers.get('www-authenticate')!
    const metadataUrl = /resource_metadata="([^"]+)"/.exec(challenge)![1]!
    expect(metadataUrl).toBe(`${server.origin}/.well-known/oauth-protected-resource/v0/mcp`)
    const metadata = (await (await fetch(metadataUrl)).json()) as { resource: string }
    expect(metadata.resource).toBe(mcpUrl)
  })

  test('an API key is not accepted; a token narrowed to the REST API is refused with invalid_token', async () => {
    const fixture = await flowFixture(server)
    const byKey = await fetch(`${mcpUrl}?key=${fixture.apiKey}`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: '{}' })
    expect(byKey.status).toBe(401)
    const restOnly = await tokenFor(fixture, { resource: server.config.baseUrl })
    const refused = await rpc({ authorization: `Bearer ${restOnly}` })
    expect(refused.status).toBe(401)
    expect(refused.headers.get('www-authenticate')).toContain('error="invalid_token"')
    // The same token works on the REST API it was made for.
    expect((await server.fetch(`/v0/account/${fixture.accountId}/hooks`, { headers: { authorization: `Bearer ${restOnly}` } })).status).toBe(200)
  })

  test('an expired token gets 401 with error="invalid_token"', async () => {
    const fixture = await flowFixture(server)
    const token = await tokenFor(fixture, { resource: mcpUrl })
    const claims = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as Record<string, unknown>
    const shortLived = await server.instance.signer.sign(
      { client_id: claims.client_id, account_id: claims.account_id, scope: claims.scope, grant_id: claims.grant_id },
      { typ: 'at+jwt', subject: claims.sub as string, audience: mcpUrl, expiresInSeconds: 1 },
    )
    expect((await rpc({ authorization: `Bearer ${shortLived}` })).status).toBe(200)
    await Bun.sleep(2_100)
    const expired = await rpc({ authorization: `Bearer ${shortLived}` })
    expect(expired.status).toBe(401)
    expect(expired.headers.get('www-authenticate')).toContain('error="invalid_token"')
  })

  test('Origin: another site is refused with 403 before anything else; loopback, PUBLIC_URL and listed origins pass', async () => {
    const fixture = await flowFixture(server)
    const token = await tokenFor(fixture, {})
    const evil = await rpc({ authorization: `Bearer ${token}`, origin: 'http://evil.example.com' })
    expect(evil.status).toBe(403)
    expect(((await evil.json()) as { code: string }).code).toBe('origin_not_allowed')
    expect((await rpc({ origin: 'http://evil.example.com' })).status).toBe(403)
    for (const origin of ['http://localhost:6274', 'http://127.0.0.1:5173', server.origin, 'https://agent.example']) {
      expect((await rpc({ authorization: `Bearer ${token}`, origin })).status).toBe(200)
    }
    expect((await rpc({ authorization: `Bearer ${token}`, origin: 'null' })).status).toBe(403)
  })

  test('CORS preflight is answered without a token; GET and DELETE are 405 (stateless)', async () => {
    const preflight = await fetch(mcpUrl, { method: 'OPTIONS', headers: { origin: 'http://localhost:6274', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type, mcp-protocol-version' } })
    expect(preflight.status).toBe(204)
    expect(preflight.headers.get('access-control-allow-headers')).toContain('Authorization')
    expect(preflight.headers.get('access-control-expose-headers')).toContain('WWW-Authenticate')

    const fixture = await flowFixture(server)
    const token = await tokenFor(fixture, {})
    for (const method of ['GET', 'DELETE']) {
      const response = await fetch(mcpUrl, { method, headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' } })
      expect(response.status).toBe(405)
      expect(response.headers.get('allow')).toBe('POST, OPTIONS')
    }
    const unauthenticated = await fetch(mcpUrl, { method: 'GET' })
    expect(unauthenticated.status).toBe(401)
  })

  test('malformed input is a 4xx, never a 5xx', async () => {
    const fixture = await flowFixture(server)
    const token = await tokenFor(fixture, {})
    const auth = { authorization: `Bearer ${token}`, accept: 'application/json, text/event-stream' }
    const notJson = await fetch(mcpUrl, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: '{not json' })
    expect(notJson.status).toBe(400)
    const wrongType = await fetch(mcpUrl, { method: 'POST', headers: { ...auth, 'content-type': 'text/plain' }, body: 'hello' })
    expect(wrongType.status).toBe(415)
    const notRpc = await rpc({ authorization: `Bearer ${token}` }, { hello: 'world' })
    expect(notRpc.status).toBe(400)
    const noAccept = await fetch(mcpUrl, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }) })
    expect(noAccept.status).toBe(406)
    expect(noAccept.headers.get('x-request-id')).toMatch(/^req_/)
  })
})

test("an MCP POST keeps the caller's valid X-Request-Id, as every other route does", async () => {
  const fixture = await flowFixture(server)
  const token = await tokenFor(fixture, {})
  const response = await server.fetch('/v0/mcp', {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'x-request-id': 'agent-trace.42',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } }),
  })
  expect(response.status).toBe(200)
  expect(response.headers.get('x-request-id')).toBe('agent-trace.42')
})

describe('protocol 2026-07-28: no initialize, the version and client in each request', () => {
  const modern = (token: string, method: string, params: Record<string, unknown> = {}, name?: string) => modernRequest(mcpUrl, token, method, params, name)

  test('server/discover names the versions and the tools capability; tools/list and tools/call answer without initialize', async () => {
    const fixture = await flowFixture(server)
    const token = await tokenFor(fixture, { scope: 'hooks:read' })
    const discovered = await modern(token, 'server/discover')
    expect(discovered.status).toBe(200)
    const discovery = (await discovered.json()) as { result: { supportedVersions: string[]; capabilities: Record<string, unknown>; _meta: Record<string, { name: string }> } }
    // Modern revisions only: 2025 clients negotiate theirs through initialize, still answered (the tests above).
    expect(discovery.result.supportedVersions).toEqual(['2026-07-28'])
    expect(discovery.result.capabilities.tools).toBeDefined()
    expect(discovery.result._meta['io.modelcontextprotocol/serverInfo']?.name).toBe('messaging-service')

    const listed = (await (await modern(token, 'tools/list')).json()) as { result: { tools: { name: string }[] } }
    expect(listed.result.tools.map((tool) => tool.name)).toContain('list_webhooks')

    const called = (await (await modern(token, 'tools/call', { name: 'list_webhooks', arguments: {} }, 'list_webhooks')).json()) as { result: { structuredContent: { data: unknown[] } } }
    expect(called.result.structuredContent.data).toEqual([])
  })

  test('a 2026-07-28 request with no envelope, a malformed one, or a Mcp-Method the body contradicts is a 400 JSON-RPC error, never a 5xx', async () => {
    const fixture = await flowFixture(server)
    const token = await tokenFor(fixture, { scope: 'hooks:read' })
    const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28' }
    const bodies: [string, unknown][] = [
      ['tools/list', { jsonrpc: '2.0', id: 1, method: 'tools/list' }],
      ['tools/list', { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': 42, 'io.modelcontextprotocol/clientInfo': 'x' } } }],
      ['tools/call', { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientInfo': { name: 'a', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': {} } } }],
    ]
    for (const [method, body] of bodies) {
      const response = await fetch(mcpUrl, { method: 'POST', headers: { ...headers, 'mcp-method': method }, body: JSON.stringify(body) })
      expect(response.status).toBe(400)
      expect(((await response.json()) as { error: { code: number } }).error.code).toBeNumber()
    }
  })

  test('the Mcp-Name header must name the tool the body calls', async () => {
    const fixture = await flowFixture(server)
    const token = await tokenFor(fixture, { scope: 'hooks:read' })
    const mismatched = await modern(token, 'tools/call', { name: 'list_webhooks', arguments: {} }, 'list_event_types')
    expect(mismatched.status).toBe(400)
    const body = (await mismatched.json()) as { error: { code: number } }
    expect(body.error.code).toBeNumber()
  })

  test('a tool call the token has no scope for gets the same 403 step-up challenge', async () => {
    const fixture = await flowFixture(server)
    const token = await tokenFor(fixture, { scope: 'hooks:read' })
    const refused = await modern(token, 'tools/call', { name: 'create_webhook', arguments: { event: 'message.inbound', target_url: 'https://example.com/h' } }, 'create_webhook')
    expect(refused.status).toBe(403)
    const challenge = refused.headers.get('www-authenticate')!
    expect(challenge).toContain('error="insufficient_scope"')
    expect(challenge).toContain('create_webhook needs hooks:write')
  })
})
