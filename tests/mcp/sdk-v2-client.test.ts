import { describe, expect, test } from 'bun:test'
import { Client, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client'
import { startTestServer } from '../support/server.ts'
import { flowFixture, type Fixture } from '../oauth/support.ts'
import { TestOAuthProvider, type ToolResult } from '../support/mcp.ts'

// The SDK's 2.x client (@modelcontextprotocol/client), the successor of the 1.x client the other MCP tests drive.
const server = await startTestServer()
const mcpUrl = `${server.config.baseUrl}/mcp`

/** The client signed in from nothing, its OAuth provider playing the browser; `grant` is what the user allows the first time. */
async function agentSignedIn(fixture: Fixture, era: Era, grant?: string) {
  const provider = new TestOAuthProvider(server, fixture)
  if (grant) provider.grantOnce = grant
  const posts: { status: number; method: string | null; version: string | null }[] = []
  const fetchFn = async (url: string | URL, init?: RequestInit) => {
    const response = await fetch(url, init)
    if (String(url) === mcpUrl && init?.method === 'POST') {
      const message = JSON.parse(String(init.body)) as { method?: string }
      posts.push({ status: response.status, method: message.method ?? null, version: new Headers(init.headers).get('mcp-protocol-version') })
    }
    return response
  }
  const first = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider, fetch: fetchFn })
  await expect(new Client({ name: 'agent', version: '2.0.0' }, era.options).connect(first)).rejects.toBeInstanceOf(UnauthorizedError)
  await first.finishAuth(provider.callback!)
  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider, fetch: fetchFn })
  const client = new Client({ name: 'agent', version: '2.0.0' }, era.options)
  await client.connect(transport)
  return { provider, transport, client, posts }
}

interface Era {
  name: string
  options: ConstructorParameters<typeof Client>[1]
  /** The first JSON-RPC method the connected client sends. */
  opens: string
  version: string
}
// The 2.x client's default is still the 2025 handshake; `versionNegotiation: { mode: 'auto' }` probes with server/discover.
const ERAS: Era[] = [
  { name: 'its default (initialize, 2025-11-25)', options: undefined, opens: 'initialize', version: '2025-11-25' },
  { name: "versionNegotiation 'auto' (server/discover, 2026-07-28)", options: { versionNegotiation: { mode: 'auto' } }, opens: 'server/discover', version: '2026-07-28' },
]

describe.each(ERAS)('the SDK 2.x client at $name', (era) => {
  test('401 → discovery → registration → PKCE → token → tools', async () => {
    const fixture = await flowFixture(server)
    const agent = await agentSignedIn(fixture, era)
    expect(agent.provider.client?.client_id).toMatch(/^cli_/)
    expect(agent.posts[0]!.method).toBe(era.opens)
    if (era.opens === 'server/discover') expect(agent.posts.map((post) => post.method)).not.toContain('initialize')

    const { tools } = await agent.client.listTools()
    expect(agent.posts.find((post) => post.method === 'tools/list')!.version).toBe(era.version)
    expect(tools.map((tool) => tool.name)).toContain('create_webhook')
    const created = (await agent.client.callTool({ name: 'create_webhook', arguments: { event: 'message.failed', target_url: 'https://hooks.example.com/v2' } })) as ToolResult
    expect(created.isError).toBeFalsy()
    expect(created.structuredContent).toMatchObject({ event: 'message.failed', status: 'active' })
    const listed = (await agent.client.callTool({ name: 'list_webhooks', arguments: {} })) as ToolResult
    expect(listed.structuredContent.data.map((hook: { id: string }) => hook.id)).toEqual([created.structuredContent.id])
    const refused = (await agent.client.callTool({ name: 'get_webhook', arguments: { hook_id: 'hook_00000000000000000000000000' } })) as ToolResult
    expect(refused.isError).toBe(true)
    await agent.client.close()
  })

  test('steps up: a hooks:read token calls create_webhook, the user allows hooks:write, the call sent again succeeds once', async () => {
    const fixture = await flowFixture(server)
    const agent = await agentSignedIn(fixture, era, 'hooks:read')
    expect(agent.provider.saved?.scope).toBe('hooks:read')
    const create = () => agent.client.callTool({ name: 'create_webhook', arguments: { event: 'message.inbound', target_url: 'https://hooks.example.com/v2-step-up' } })
    const first = await create().then(
      (result) => ({ result }),
      (error: unknown) => ({ error }),
    )
    if ('error' in first) {
      // The client met the 403 challenge and sent the user to consent; the app finishes that, then calls again.
      expect(first.error).toBeInstanceOf(UnauthorizedError)
      await agent.transport.finishAuth(agent.provider.callback!)
    }
    const created = ('result' in first ? first.result : await create()) as ToolResult
    expect(created.isError).toBeFalsy()
    expect(agent.posts.filter((post) => post.status === 403)).toHaveLength(1)
    const stepUp = agent.provider.authorizationUrls.at(-1)!.searchParams
    expect(stepUp.get('scope')!.split(' ').sort()).toEqual(['hooks:read', 'hooks:write'])
    expect(agent.provider.saved?.scope).toBe('hooks:read hooks:write')
    const hooks = (await (await server.fetch(`/v0/account/${fixture.accountId}/hooks?key=${fixture.apiKey}`)).json()) as { data: { id: string }[] }
    expect(hooks.data.map((hook) => hook.id)).toEqual([created.structuredContent.id])
    await agent.client.close()
  })
})
