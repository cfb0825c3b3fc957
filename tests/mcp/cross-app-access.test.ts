import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { Client, CrossAppAccessProvider, DpopSession, StreamableHTTPClientTransport, type CrossAppAccessContext } from '@modelcontextprotocol/client'
import { decodeJwt } from 'jose'
import { startTestServer } from '../support/server.ts'
import { startTestIdentityProvider } from '../support/identity-provider.ts'
import { flowFixture, postJson } from '../oauth/support.ts'
import type { ToolResult } from '../support/mcp.ts'

// Enterprise-managed authorization with the official MCP SDK client (2.x), unchanged: its
// CrossAppAccessProvider asks its `assertion` callback for an ID-JAG (here from an identity provider
// the test runs, signing with its own key), finds our token endpoint through discovery, and
// exchanges the ID-JAG with the JWT bearer grant, authenticating with client_secret_basic. No
// consent screen. docs/oauth.md#enterprise-managed-authorization-cross-app-access.

setDefaultTimeout(30_000)

const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer'
const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' } })
const issuer = server.config.baseUrl
const mcpUrl = `${issuer}/mcp`
const idp = await startTestIdentityProvider()
const fixture = await flowFixture(server)

// The agent registers as the SDK's provider describes itself: a confidential client of the JWT bearer grant.
const registered = await postJson(server, '/v0/auth/register', {
  client_name: 'Acme agent',
  redirect_uris: [],
  grant_types: [JWT_BEARER],
  token_endpoint_auth_method: 'client_secret_basic',
  scope: 'hooks:read hooks:write',
})
expect(registered.status).toBe(201)
const agent = (await registered.json()) as { client_id: string; client_secret: string }

// The account's owner trusts the provider for this agent, mapping its users by email.
const trusted = await postJson(server, `/v0/account/${fixture.accountId}/identity-providers?key=${fixture.apiKey}`, {
  issuer: idp.issuer,
  jwks_uri: idp.jwksUri,
  allowed_client_ids: [agent.client_id],
  subject_mapping: 'email',
})
expect(trusted.status).toBe(201)

/** The provider's side of the exchange: what the agent's IdP would return for the signed-in employee. */
function crossAppAccess(contexts: CrossAppAccessContext[]) {
  return {
    assertion: async (context: CrossAppAccessContext) => {
      contexts.push(context)
      return idp.idJag({
        audience: context.authorizationServerUrl,
        clientId: agent.client_id,
        subject: '00u8a9kq2zTr5vH3x697',
        email: fixture.email,
        scope: 'hooks:read hooks:write',
        resource: context.resourceUrl,
      })
    },
    clientId: agent.client_id,
    clientSecret: agent.client_secret,
    expectedIssuer: issuer,
  }
}

/** MCP requests as sent: their Authorization scheme and whether they carried a DPoP proof. */
type Sent = { scheme: string; proof: boolean }

async function connected(provider: CrossAppAccessProvider, sent: Sent[] = []) {
  const recording = async (url: string | URL, init?: RequestInit) => {
    const headers = new Headers(init?.headers)
    if (String(url) === mcpUrl) sent.push({ scheme: headers.get('authorization')?.split(' ')[0] ?? '', proof: headers.has('dpop') })
    return fetch(url, init)
  }
  const client = new Client({ name: 'acme-agent', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider, fetch: recording }))
  return client
}

describe('CrossAppAccessProvider (the official MCP SDK client)', () => {
  test('gets a token with the ID-JAG, without consent, and lists and calls our tools as the employee', async () => {
    const contexts: CrossAppAccessContext[] = []
    const provider = new CrossAppAccessProvider(crossAppAccess(contexts))
    const client = await connected(provider)

    // The callback was told our issuer and the MCP resource, found through discovery.
    expect(contexts).toHaveLength(1)
    expect(contexts[0]).toMatchObject({ authorizationServerUrl: issuer, resourceUrl: mcpUrl })
    const tokens = provider.tokens()!
    expect(tokens.token_type).toBe('Bearer')
    expect(tokens.refresh_token).toBeUndefined()
    expect(decodeJwt(tokens.access_token)).toMatchObject({ sub: fixture.userId, account_id: fixture.accountId, client_id: agent.client_id, aud: mcpUrl, scope: 'hooks:read hooks:write' })

    const tools = await client.listTools()
    expect(tools.tools.map((tool) => tool.name)).toContain('create_webhook')
    const created = (await client.callTool({ name: 'create_webhook', arguments: { event: 'message.delivered', target_url: 'https://receiver.example.com/hooks' } })) as ToolResult
    expect(created.isError).toBeFalsy()
    const listed = (await client.callTool({ name: 'list_webhooks', arguments: {} })) as ToolResult
    expect(listed.structuredContent.data.map((hook: { target_url: string }) => hook.target_url)).toContain('https://receiver.example.com/hooks')
    await client.close()

    // The agent is a connected app of the employee's account, revocable like any other.
    const grants = (await (await server.fetch(`/v0/account/${fixture.accountId}/grants?key=${fixture.apiKey}`)).json()).data as { client_id: string; user_id: string }[]
    expect(grants).toContainEqual(expect.objectContaining({ client_id: agent.client_id, user_id: fixture.userId }))
  })

  test('with a DPoP session, the same exchange gets a DPoP-bound token and every MCP request carries a proof', async () => {
    class DpopCrossAppAccessProvider extends CrossAppAccessProvider {
      readonly session: DpopSession
      constructor(options: ConstructorParameters<typeof CrossAppAccessProvider>[0], session: DpopSession) {
        super(options)
        this.session = session
      }
      dpop() {
        return this.session
      }
    }
    const session = await DpopSession.create()
    const provider = new DpopCrossAppAccessProvider(crossAppAccess([]), session)
    const sent: Sent[] = []
    const client = await connected(provider, sent)
    const tokens = provider.tokens()!
    expect(tokens.token_type).toBe('DPoP')
    expect(decodeJwt(tokens.access_token).cnf).toEqual({ jkt: expect.any(String) })
    expect((await client.listTools()).tools.length).toBeGreaterThan(0)
    await client.close()
    const authorized = sent.filter((request) => request.scheme !== '')
    expect(authorized.length).toBeGreaterThanOrEqual(2)
    expect(authorized.every((request) => request.scheme === 'DPoP' && request.proof)).toBe(true)

    // Copied to a client without the key, the token is refused.
    const copied = await server.fetch('/v0/mcp', {
      method: 'POST',
      headers: { authorization: `Bearer ${tokens.access_token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    })
    expect(copied.status).toBe(401)
  })

  test('once the owner stops trusting the provider, the next exchange is refused', async () => {
    const provider = await startTestIdentityProvider()
    const account = await flowFixture(server)
    const created = await postJson(server, `/v0/account/${account.accountId}/identity-providers?key=${account.apiKey}`, {
      issuer: provider.issuer,
      jwks_uri: provider.jwksUri,
      allowed_client_ids: [agent.client_id],
      subject_mapping: 'email',
    })
    const { id } = (await created.json()) as { id: string }
    const options = {
      assertion: (context: CrossAppAccessContext) =>
        provider.idJag({ audience: context.authorizationServerUrl, clientId: agent.client_id, subject: 'u-2', email: account.email, scope: 'hooks:read', resource: context.resourceUrl }),
      clientId: agent.client_id,
      clientSecret: agent.client_secret,
      expectedIssuer: issuer,
    }
    await (await connected(new CrossAppAccessProvider(options))).close()
    expect((await server.fetch(`/v0/account/${account.accountId}/identity-providers/${id}?key=${account.apiKey}`, { method: 'DELETE' })).status).toBe(204)
    await expect(connected(new CrossAppAccessProvider(options))).rejects.toThrow()
  })
})
