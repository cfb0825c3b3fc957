import { describe, expect, test } from 'bun:test'
import { Client, DpopSession, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client'
import { decodeJwt } from 'jose'
import { startTestServer } from '../support/server.ts'
import { flowFixture, type Fixture } from '../oauth/support.ts'
import { TestOAuthProvider, type ToolResult } from '../support/mcp.ts'
import type { TestServer } from '../support/server.ts'

// The official SDK client (2.x) with DPoP (RFC 9449, SEP-1932): its provider's dpop() session
// signs the token requests and every MCP request; it meets use_dpop_nonce challenges by itself.
const server = await startTestServer()
const mcpUrl = `${server.config.baseUrl}/mcp`
const tokenUrl = `${server.config.baseUrl}/auth/token`

/** The test's OAuth provider (the consent step played by the test) with a DPoP session. */
class DpopOAuthProvider extends TestOAuthProvider {
  constructor(
    server: TestServer,
    fixture: Fixture,
    readonly session: DpopSession,
  ) {
    super(server, fixture)
  }
  dpop() {
    return this.session
  }
}

interface Exchange {
  url: string
  method: string
  status: number
  authorization: string | null
  dpop: boolean
  error?: string
}

/** Signed in from nothing, as an agent is: 401, discovery, registration, consent, token, connect. Every request and answer recorded. */
async function dpopAgent() {
  const provider = new DpopOAuthProvider(server, await flowFixture(server), await DpopSession.create())
  const exchanges: Exchange[] = []
  const fetchFn = async (url: string | URL, init?: RequestInit) => {
    const response = await fetch(url, init)
    const headers = new Headers(init?.headers)
    const exchange: Exchange = { url: String(url), method: init?.method ?? 'GET', status: response.status, authorization: headers.get('authorization'), dpop: headers.has('dpop') }
    if (response.status >= 400 && response.headers.get('content-type')?.includes('json')) exchange.error = ((await response.clone().json()) as { error?: string }).error
    if (response.status === 401) exchange.error = /error="([a-z_]+)"/.exec(response.headers.get('www-authenticate') ?? '')?.[1] ?? exchange.error
    exchanges.push(exchange)
    return response
  }
  const first = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider, fetch: fetchFn })
  await expect(new Client({ name: 'dpop-agent', version: '1.0.0' }).connect(first)).rejects.toBeInstanceOf(UnauthorizedError)
  await first.finishAuth(provider.callback!)
  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider, fetch: fetchFn })
  const client = new Client({ name: 'dpop-agent', version: '1.0.0' })
  await client.connect(transport)
  return { provider, client, exchanges }
}

const to = (url: string) => (exchange: Exchange) => exchange.url === url && exchange.method === 'POST'

describe('the SDK client with dpop()', () => {
  test('gets a DPoP-bound token (after the token endpoint asks for a nonce) and lists and calls tools with proofs', async () => {
    const agent = await dpopAgent()
    const tokenRequests = agent.exchanges.filter(to(tokenUrl))
    // The token endpoint always asks for a nonce first; the SDK signs again with it.
    expect(tokenRequests.map((exchange) => [exchange.status, exchange.error ?? null, exchange.dpop])).toEqual([
      [400, 'use_dpop_nonce', true],
      [200, null, true],
    ])
    expect(agent.provider.saved?.token_type).toBe('DPoP')
    expect(decodeJwt(agent.provider.saved!.access_token).cnf).toEqual({ jkt: agent.provider.session.thumbprint })

    const { tools } = await agent.client.listTools()
    expect(tools.map((tool) => tool.name)).toContain('create_webhook')
    const created = (await agent.client.callTool({ name: 'create_webhook', arguments: { event: 'message.failed', target_url: 'https://hooks.example.com/dpop' } })) as ToolResult
    expect(created.isError).toBeFalsy()
    const listed = (await agent.client.callTool({ name: 'list_webhooks', arguments: {} })) as ToolResult
    expect(listed.structuredContent.data.map((hook: { id: string }) => hook.id)).toEqual([created.structuredContent.id])

    // Every MCP POST after the token: the DPoP scheme and a proof, all accepted.
    const mcpAfterToken = agent.exchanges.slice(agent.exchanges.findIndex(to(tokenUrl)) + 2).filter(to(mcpUrl))
    expect(mcpAfterToken.length).toBeGreaterThan(3)
    for (const exchange of mcpAfterToken) {
      expect(exchange.authorization).toStartWith('DPoP ')
      expect(exchange.dpop).toBe(true)
      expect(exchange.status).toBeLessThan(300)
    }
    await agent.client.close()
  })

  test('meets a use_dpop_nonce challenge at the MCP endpoint (its nonce expired) and the call goes through once', async () => {
    const agent = await dpopAgent()
    agent.provider.session.rememberNonce(mcpUrl, 'a-nonce-from-long-ago')
    const before = agent.exchanges.length
    const created = (await agent.client.callTool({ name: 'create_webhook', arguments: { event: 'message.inbound', target_url: 'https://hooks.example.com/after-nonce' } })) as ToolResult
    expect(created.isError).toBeFalsy()
    expect(agent.exchanges.slice(before).filter(to(mcpUrl)).map((exchange) => [exchange.status, exchange.error ?? null])).toEqual([
      [401, 'use_dpop_nonce'],
      [200, null],
    ])
    const listed = (await agent.client.callTool({ name: 'list_webhooks', arguments: {} })) as ToolResult
    expect(listed.structuredContent.data).toHaveLength(1)
    await agent.client.close()
  })

  test('refreshes with a proof by the same key when its access token is no longer taken, and goes on with the new one', async () => {
    const agent = await dpopAgent()
    const original = agent.provider.saved!
    // As when it expires: the resource server refuses it, the client refreshes.
    agent.provider.saved = { ...original, access_token: 'expired.access.token' }
    const before = agent.exchanges.length
    const listed = (await agent.client.callTool({ name: 'list_webhooks', arguments: {} })) as ToolResult
    expect(listed.isError).toBeFalsy()
    const refresh = agent.exchanges.slice(before).filter(to(tokenUrl))
    expect(refresh.at(-1)).toMatchObject({ status: 200, dpop: true })
    const renewed = agent.provider.saved!
    expect(renewed.token_type).toBe('DPoP')
    expect(renewed.refresh_token).not.toBe(original.refresh_token)
    expect(decodeJwt(renewed.access_token).cnf).toEqual({ jkt: agent.provider.session.thumbprint })
    const created = (await agent.client.callTool({ name: 'create_webhook', arguments: { event: 'message.delivered', target_url: 'https://hooks.example.com/after-refresh' } })) as ToolResult
    expect(created.isError).toBeFalsy()
    await agent.client.close()
  })

  test('a token copied to a client without the key is refused, however well that client signs', async () => {
    const agent = await dpopAgent()
    const thief = await DpopSession.create()
    const proof = await thief.buildProof({ htm: 'POST', htu: mcpUrl, accessToken: agent.provider.saved!.access_token, nonce: agent.provider.session.nonceFor(mcpUrl) })
    const response = await fetch(mcpUrl, {
      method: 'POST',
      headers: { authorization: `DPoP ${agent.provider.saved!.access_token}`, dpop: proof, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
    })
    expect(response.status).toBe(401)
    expect(response.headers.get('www-authenticate')).toStartWith('DPoP ')
    expect(response.headers.get('www-authenticate')).toContain('error="invalid_token"')
    const asBearer = await fetch(mcpUrl, {
      method: 'POST',
      headers: { authorization: `Bearer ${agent.provider.saved!.access_token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
    })
    expect(asBearer.status).toBe(401)
    expect(asBearer.headers.get('www-authenticate')).toContain('bound to a DPoP key')
    await agent.client.close()
  })
})
