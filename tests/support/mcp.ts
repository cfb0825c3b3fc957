import { expect } from 'bun:test'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { OAuthClientProvider, OAuthDiscoveryState } from '@modelcontextprotocol/sdk/client/auth.js'
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js'
import { REDIRECT_URI, authorizeAndRedeem, postJson, signIn, type Fixture } from '../oauth/support.ts'
import type { TestServer } from './server.ts'

/** The MCP endpoint of a test server. */
export const mcpUrlOf = (server: TestServer) => `${server.config.baseUrl}/mcp`

/** A token as a client that asked for `scope` on `resource` would hold it. */
export async function tokenFor(server: TestServer, fixture: Fixture, options: { scope?: string; resource?: string }) {
  const { tokens } = await authorizeAndRedeem(server, fixture, { ...(options.scope ? { scope: options.scope } : {}), ...(options.resource ? { resource: options.resource } : {}) })
  return tokens.access_token
}

/** The official SDK client over Streamable HTTP, sending `token` as its bearer token. */
export async function connectWithToken(server: TestServer, token: string) {
  const client = new Client({ name: 'test', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrlOf(server)), { requestInit: { headers: { authorization: `Bearer ${token}` } } }))
  return client
}

/**
 * A raw MCP 2026-07-28 request: no initialize; the version, client info and capabilities in the
 * request's `_meta`, and the `MCP-Protocol-Version`, `Mcp-Method` (and `Mcp-Name`) headers.
 */
export function modernRequest(url: string, token: string, method: string, params: Record<string, unknown> = {}, name?: string) {
  return fetch(url, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': method,
      ...(name ? { 'mcp-name': name } : {}),
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method,
      params: {
        ...params,
        _meta: {
          'io.modelcontextprotocol/protocolVersion': '2026-07-28',
          'io.modelcontextprotocol/clientInfo': { name: 'raw-agent', version: '1.0.0' },
          'io.modelcontextprotocol/clientCapabilities': {},
        },
      },
    }),
  })
}

export type ToolResult = { isError?: boolean; structuredContent?: any; content: { type: string; text: string }[] }
export type ToolProblem = { status: number; code: string; detail: string; errors?: { path: string; message: string }[]; type?: string; title?: string; request_id?: string }

/** A tool error's text: the problem body REST would answer. */
export const problemOf = (result: ToolResult) => JSON.parse(result.content[0]!.text) as ToolProblem

/**
 * How a tool call that needs `scope` is refused to a token without it (SPEC §9, docs/mcp.md):
 * HTTP 403 with a step-up challenge, before the tool runs. A client without an OAuth provider (a
 * fixed bearer header, as connectWithToken makes) cannot re-authorize, so the SDK rejects the
 * call with that status and the problem body. `call` makes the refused call; nothing may have been done.
 */
export async function expectScopeRefused(call: () => Promise<unknown>, scope = 'hooks:write') {
  const error = await call().then(
    (result) => {
      throw new Error(`expected an HTTP 403, got a result: ${JSON.stringify(result)}`)
    },
    (error: unknown) => error,
  )
  expect(error).toBeInstanceOf(StreamableHTTPError)
  expect((error as StreamableHTTPError).code).toBe(403)
  const problem = JSON.parse(/\{.*\}$/s.exec((error as Error).message)![0]) as ToolProblem
  expect(problem).toMatchObject({ status: 403, code: 'insufficient_scope' })
  expect(problem.detail).toContain(scope)
}

/**
 * The SDK's OAuth client, with the browser step played by the test: the consent page's
 * `POST /v0/auth/authorize` with the signed-in user's id_token, as the page itself would send it,
 * for the scope and resource the authorization URL asks. `grantOnce` makes the next consent
 * grant that scope instead (a token as an app granted less holds it).
 */
export class TestOAuthProvider implements OAuthClientProvider {
  client?: OAuthClientInformationMixed
  saved?: OAuthTokens
  verifier = ''
  code?: string
  /** The query of the redirect the consent answered with: code, state and iss (RFC 9207). */
  callback?: URLSearchParams
  discovery?: OAuthDiscoveryState
  authorizationUrl?: URL
  /** Every authorization URL the SDK sent the user to, oldest first. */
  readonly authorizationUrls: URL[] = []
  grantOnce?: string
  constructor(
    private readonly server: TestServer,
    private readonly fixture: Fixture,
  ) {}
  get redirectUrl() {
    return REDIRECT_URI
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: 'MCP SDK test client',
      redirect_uris: [REDIRECT_URI],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      scope: 'hooks:read hooks:write',
    }
  }
  clientInformation() {
    return this.client
  }
  saveClientInformation(client: OAuthClientInformationMixed) {
    this.client = client
  }
  tokens() {
    return this.saved
  }
  saveTokens(tokens: OAuthTokens) {
    this.saved = tokens
  }
  saveCodeVerifier(verifier: string) {
    this.verifier = verifier
  }
  codeVerifier() {
    return this.verifier
  }
  async redirectToAuthorization(url: URL) {
    this.authorizationUrl = url
    this.authorizationUrls.push(url)
    const query = url.searchParams
    const scope = this.grantOnce ?? query.get('scope')
    this.grantOnce = undefined
    const consent = await postJson(this.server, '/v0/auth/authorize', {
      client_id: query.get('client_id'),
      redirect_uri: query.get('redirect_uri'),
      id_token: await signIn(this.server, this.fixture),
      code_challenge: query.get('code_challenge'),
      code_challenge_method: query.get('code_challenge_method'),
      ...(query.get('state') ? { state: query.get('state') } : {}),
      ...(scope ? { scope } : {}),
      ...(query.get('resource') ? { resource: query.get('resource') } : {}),
    })
    expect(consent.status).toBe(200)
    const answer = (await consent.json()) as { code: string; redirect_to: string }
    this.code = answer.code
    this.callback = new URL(answer.redirect_to).searchParams
  }
  // The SDK 2.x client keeps what discovery found between the redirect and the callback (it checks the callback's iss against it).
  saveDiscoveryState(state: OAuthDiscoveryState) {
    this.discovery = state
  }
  discoveryState() {
    return this.discovery
  }
}
