import { afterEach, describe, expect, setSystemTime, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { eq } from 'drizzle-orm'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js'
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js'
import { createUser } from '../../src/accounts/service.ts'
import { grants, oauthClients } from '../../src/lib/db/schema.ts'
import { clientIdUrlProblem, documentCacheSeconds, fetchMetadataDocument } from '../../src/oauth/client-metadata-document.ts'
import { startReceiver, type ReceivedWebhook } from '../support/receiver.ts'
import { startTestServer, type TestServer } from '../support/server.ts'
import { REDIRECT_URI, pkcePair, postForm, postJson, signIn, type Fixture } from './support.ts'
import type { ToolResult } from '../support/mcp.ts'

/**
 * Client ID metadata documents (SPEC §5, docs/oauth.md#client-id-metadata-documents), over real
 * sockets: the documents are served by a local HTTPS server whose CA the service trusts through
 * WEBHOOK_CA_FILE, reachable because WEBHOOK_ALLOW_PRIVATE_TARGETS=true (it listens on loopback).
 */

type Answer = (request: ReceivedWebhook) => Response | Promise<Response>
const answers = new Map<string, Answer>()
const documents = startReceiver((request) => (answers.get(request.path) ?? (() => new Response('no such document', { status: 404 })))(request))
const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: documents.caFile } })
const mcpUrl = `${server.config.baseUrl}/mcp`

afterEach(() => setSystemTime())

/** A path of its own for each test, so that caches and fetch counts never mix. */
const newPath = (name: string) => `/clients/${name}-${randomBytes(4).toString('hex')}.json`
const urlOf = (path: string) => `${documents.origin}${path}`
const fetchesOf = (path: string) => documents.received.filter((request) => request.path === path).length

function metadataFor(url: string, extra: Record<string, unknown> = {}) {
  return {
    client_id: url,
    client_name: 'Metadata document client',
    redirect_uris: [REDIRECT_URI],
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    ...extra,
  }
}

/** Serves `body` (an object is sent as JSON) at a new path; returns the path and the client_id URL. */
function serve(name: string, body: (url: string) => unknown, headers: Record<string, string> = {}) {
  const path = newPath(name)
  const url = urlOf(path)
  answers.set(path, () => {
    const value = body(url)
    return new Response(typeof value === 'string' ? value : JSON.stringify(value), { headers: { 'content-type': 'application/json', ...headers } })
  })
  return { path, url }
}

/** An account and a user who can sign in; no client is registered (nothing reaches /auth/register). */
async function userFixture(target: TestServer, clientId: string): Promise<Fixture> {
  const { accountId, secret: apiKey } = await target.createAccountWithKey('Metadata document account')
  const email = `cimd-${randomBytes(4).toString('hex')}@example.com`
  const password = 'correct horse battery staple'
  const user = await createUser(target.database.handle.db, { accountId, email, password })
  return { accountId, apiKey, email, password, userId: user.id, clientId }
}

const authorizeQuery = (clientId: string, extra: Record<string, string> = {}) =>
  new URLSearchParams({ client_id: clientId, redirect_uri: REDIRECT_URI, response_type: 'code', code_challenge: pkcePair().challenge, code_challenge_method: 'S256', state: 's1', ...extra })

const getAuthorize = (target: TestServer, clientId: string) => target.fetch(`/v0/auth/authorize?${authorizeQuery(clientId)}`, { redirect: 'manual' })

/** The consent step as the page would run it: POST /auth/authorize with the user's id_token. */
async function approve(target: TestServer, fixture: Fixture) {
  const { verifier, challenge } = pkcePair()
  const response = await postJson(target, '/v0/auth/authorize', {
    client_id: fixture.clientId,
    redirect_uri: REDIRECT_URI,
    id_token: await signIn(target, fixture),
    code_challenge: challenge,
    code_challenge_method: 'S256',
  })
  return { response, verifier }
}

const storedClient = async (target: TestServer, clientId: string) =>
  (await target.database.handle.db.select().from(oauthClients).where(eq(oauthClients.id, clientId)))[0]

/**
 * A client the service refuses: the authorize endpoint shows an error page with `message` (never
 * a redirect) and the token endpoint answers 401 invalid_client with it.
 */
async function expectRefused(target: TestServer, clientId: string, message: string | RegExp) {
  const page = await getAuthorize(target, clientId)
  expect(page.status).toBe(400)
  expect(page.headers.get('location')).toBeNull()
  expect(page.headers.get('content-type')).toStartWith('text/html')
  const html = await page.text()
  const entities: Record<string, string> = { quot: '"', amp: '&', lt: '<', gt: '>', apos: "'" }
  const decoded = html.replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, (entity, name: string) =>
    name.startsWith('#x') ? String.fromCodePoint(parseInt(name.slice(2), 16)) : name.startsWith('#') ? String.fromCodePoint(Number(name.slice(1))) : (entities[name] ?? entity),
  )
  if (typeof message === 'string') expect(decoded).toContain(message)
  else expect(decoded).toMatch(message)

  const token = await postForm(target, '/v0/auth/token', { grant_type: 'authorization_code', code: 'not-a-code', client_id: clientId, redirect_uri: REDIRECT_URI, code_verifier: pkcePair().verifier })
  expect(token.status).toBe(401)
  const body = (await token.json()) as { error: string; error_description: string }
  expect(body.error).toBe('invalid_client')
  if (typeof message === 'string') expect(body.error_description).toContain(message)
  else expect(body.error_description).toMatch(message)
}

/** The SDK's OAuth client with a metadata document URL; the browser step is played by the test. */
class DocumentClientProvider implements OAuthClientProvider {
  client?: OAuthClientInformationMixed
  saved?: OAuthTokens
  verifier = ''
  code?: string
  authorizations = 0
  consentPage = ''
  constructor(
    private readonly target: TestServer,
    private readonly fixture: Fixture,
    readonly clientMetadataUrl: string,
  ) {}
  get redirectUrl() {
    return REDIRECT_URI
  }
  get clientMetadata(): OAuthClientMetadata {
    return { client_name: 'never sent: the document says it', redirect_uris: [REDIRECT_URI], token_endpoint_auth_method: 'none' }
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
    this.authorizations++
    // The page the browser would open, then its Allow button.
    const page = await fetch(url, { redirect: 'manual' })
    expect(page.status).toBe(200)
    this.consentPage = await page.text()
    const query = url.searchParams
    const consent = await postJson(this.target, '/v0/auth/authorize', {
      client_id: query.get('client_id'),
      redirect_uri: query.get('redirect_uri'),
      id_token: await signIn(this.target, this.fixture),
      code_challenge: query.get('code_challenge'),
      code_challenge_method: query.get('code_challenge_method'),
      ...(query.get('state') ? { state: query.get('state') } : {}),
      ...(query.get('scope') ? { scope: query.get('scope') } : {}),
      ...(query.get('resource') ? { resource: query.get('resource') } : {}),
    })
    expect(consent.status).toBe(200)
    this.code = ((await consent.json()) as { code: string }).code
  }
}

const requestsTo = (target: TestServer, path: string) => target.logs.filter((line) => line.msg === 'request' && String(line.path).startsWith(path))

describe('the official MCP SDK client with a client ID metadata document', () => {
  test('401 → discovery → the document URL as client_id → consent → token → tools, never /auth/register; refresh; revocation', async () => {
    const { path, url } = serve('sdk', (self) => metadataFor(self, { client_name: 'SDK document client', scope: 'hooks:read hooks:write' }), { 'cache-control': 'max-age=3600' })
    const fixture = await userFixture(server, url)
    const provider = new DocumentClientProvider(server, fixture, url)

    const first = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider })
    await expect(new Client({ name: 'agent', version: '1.0.0' }).connect(first)).rejects.toBeInstanceOf(UnauthorizedError)
    // The SDK took the URL as its client_id because the server's metadata says it may.
    expect(provider.client?.client_id).toBe(url)
    // The consent page names the client as its document says, where the document came from, and that it runs on the device (a loopback redirect).
    expect(provider.consentPage).toContain('SDK document client')
    expect(provider.consentPage).toContain(`<span class="host">${new URL(url).host}</span>`)
    expect(provider.consentPage).toContain('This app runs on your device.')
    // Looking the client up wrote nothing; the user's approval gave it its row.
    const row = await storedClient(server, url)
    expect(row).toMatchObject({ id: url, clientName: 'SDK document client', redirectUris: [REDIRECT_URI], tokenEndpointAuthMethod: 'none', scope: 'hooks:read hooks:write' })
    await first.finishAuth(provider.code!)
    const firstTokens = provider.saved!
    expect(firstTokens.access_token).toBeString()

    const client = new Client({ name: 'agent', version: '1.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider }))
    const created = (await client.callTool({ name: 'create_webhook', arguments: { event: 'message.inbound', target_url: 'https://hooks.example.com/cimd' } })) as ToolResult
    expect(created.isError).toBeFalsy()
    expect(created.structuredContent).toMatchObject({ account_id: fixture.accountId, event: 'message.inbound' })
    const listed = (await client.callTool({ name: 'list_webhooks', arguments: {} })) as ToolResult
    expect(listed.structuredContent.data.map((hook: { id: string }) => hook.id)).toEqual([created.structuredContent.id])
    await client.close()

    // The token says whose it is: client_id is the URL, in the JWT and at /auth/session.
    const claims = JSON.parse(Buffer.from(firstTokens.access_token.split('.')[1]!, 'base64url').toString()) as { client_id: string }
    expect(claims.client_id).toBe(url)
    const session = await server.fetch('/v0/auth/session', { headers: { authorization: `Bearer ${firstTokens.access_token}` } })
    expect(session.status).toBe(200)
    expect(((await session.json()) as { client_id: string }).client_id).toBe(url)

    // Refresh, the SDK's way: its access token refused, it refreshes with the URL as client_id and retries.
    provider.saved = { ...firstTokens, access_token: 'no-longer-valid' }
    const again = new Client({ name: 'agent', version: '1.0.0' })
    await again.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider }))
    expect(((await again.callTool({ name: 'list_webhooks', arguments: {} })) as ToolResult).isError).toBeFalsy()
    await again.close()
    expect(provider.authorizations).toBe(1)
    expect(provider.saved!.refresh_token).not.toBe(firstTokens.refresh_token)
    expect(requestsTo(server, '/v0/auth/token').filter((line) => line.status === 200)).toHaveLength(2)

    // Revocation by the client: the grant's tokens stop working, the refresh token too.
    const refreshed = provider.saved!
    const revoked = await postForm(server, '/v0/auth/revoke', { token: refreshed.refresh_token!, client_id: url })
    expect(revoked.status).toBe(200)
    expect((await server.fetch('/v0/auth/session', { headers: { authorization: `Bearer ${refreshed.access_token}` } })).status).toBe(401)
    const afterRevoke = await postForm(server, '/v0/auth/token', { grant_type: 'refresh_token', refresh_token: refreshed.refresh_token!, client_id: url })
    expect(afterRevoke.status).toBe(400)
    expect(((await afterRevoke.json()) as { error: string }).error).toBe('invalid_grant')

    // Never registered; the document fetched once for the whole flow (max-age=3600).
    expect(requestsTo(server, '/v0/auth/register')).toHaveLength(0)
    expect(requestsTo(server, '/v0/auth/authorize').length).toBeGreaterThan(0)
    expect(fetchesOf(path)).toBe(1)
    expect(documents.received.find((request) => request.path === path)!.headers['user-agent']).toContain('messaging-service')
  })

  test('a client revokes its grant even when its document is gone: revocation does not depend on it', async () => {
    const { path, url } = serve('revoke', (self) => metadataFor(self), { 'cache-control': 'max-age=60' })
    const fixture = await userFixture(server, url)
    const { response, verifier } = await approve(server, fixture)
    expect(response.status).toBe(200)
    const { code } = (await response.json()) as { code: string }
    const redeemed = await postForm(server, '/v0/auth/token', { grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI, code_verifier: verifier, client_id: url })
    expect(redeemed.status).toBe(200)
    const tokens = (await redeemed.json()) as { refresh_token: string }

    answers.set(path, () => new Response('gone', { status: 404 }))
    setSystemTime(new Date(Date.now() + 2 * 3_600_000))
    const revoked = await postForm(server, '/v0/auth/revoke', { token: tokens.refresh_token, client_id: url })
    expect(revoked.status).toBe(200)
    const [grant] = await server.database.handle.db.select().from(grants).where(eq(grants.clientId, url))
    expect(grant!.revokedAt).not.toBeNull()
  })

  test('the authorization server metadata says documents are supported', async () => {
    const metadata = (await (await server.fetch('/.well-known/oauth-authorization-server/v0')).json()) as Record<string, unknown>
    expect(metadata.client_id_metadata_document_supported).toBe(true)
    expect(metadata.registration_endpoint).toBe(`${server.config.baseUrl}/auth/register`)
  })
})

describe('documents refused: an error page at the authorize endpoint, invalid_client at the token endpoint', () => {
  test('a document whose client_id is not its own URL', async () => {
    const { url } = serve('impostor', (self) => metadataFor(self, { client_id: urlOf('/clients/someone-else.json') }))
    await expectRefused(server, url, `The client metadata document at ${url} says client_id "${urlOf('/clients/someone-else.json')}", not its own URL.`)
  })

  test('a document over 10 KB, declared or streamed, is refused; 10 KB exactly is accepted', async () => {
    const padded = (url: string, size: number) => {
      const base = JSON.stringify(metadataFor(url, { padding: '' }))
      return JSON.stringify(metadataFor(url, { padding: 'x'.repeat(size - base.length) }))
    }
    const exact = serve('exact', (self) => padded(self, 10 * 1024))
    expect(Buffer.byteLength(padded(exact.url, 10 * 1024))).toBe(10 * 1024)
    expect((await getAuthorize(server, exact.url)).status).toBe(200)

    const declared = serve('declared', (self) => padded(self, 10 * 1024 + 1))
    await expectRefused(server, declared.url, `The client metadata document at ${declared.url} is larger than 10 KB.`)

    const path = newPath('streamed')
    answers.set(path, () => {
      const chunk = new TextEncoder().encode(' '.repeat(4096))
      let sent = 0
      // No Content-Length: only counting what arrives can refuse it.
      return new Response(new ReadableStream({ pull(controller) { sent++ < 5 ? controller.enqueue(chunk) : controller.close() } }), { headers: { 'content-type': 'application/json' } })
    })
    await expectRefused(server, urlOf(path), `The client metadata document at ${urlOf(path)} is larger than 10 KB.`)
  })

  test('a document that does not answer within 5 s', async () => {
    const path = newPath('slow')
    answers.set(path, async (request) => {
      await Bun.sleep(30_000)
      return Response.json(metadataFor(urlOf(request.path)))
    })
    const started = performance.now()
    await expectRefused(server, urlOf(path), `The client metadata document at ${urlOf(path)} did not answer within 5 s.`)
    // The page came after the 5 s and long before the answer; the token endpoint answered from the failure kept in cache.
    expect(performance.now() - started).toBeGreaterThanOrEqual(4_900)
    expect(performance.now() - started).toBeLessThan(15_000)
    expect(fetchesOf(path)).toBe(1)
  }, 25_000)

  test('a document on a private address, with WEBHOOK_ALLOW_PRIVATE_TARGETS off', async () => {
    const strict = await startTestServer({ env: { WEBHOOK_CA_FILE: documents.caFile }, database: server.database, deliverWebhooks: false })
    const { path, url } = serve('private', (self) => metadataFor(self))
    await expectRefused(
      strict,
      url,
      `The client metadata document at ${url} cannot be fetched: localhost resolves to 127.0.0.1, which is not a public address (WEBHOOK_ALLOW_PRIVATE_TARGETS=true allows it, for local development).`,
    )
    expect(fetchesOf(path)).toBe(0)
    // The same document is fine where private targets are allowed.
    expect((await getAuthorize(server, url)).status).toBe(200)
    await strict.stop()
  })

  test('token_endpoint_auth_method client_secret_basic, or a client secret', async () => {
    const basic = serve('basic', (self) => metadataFor(self, { token_endpoint_auth_method: 'client_secret_basic' }))
    await expectRefused(server, basic.url, `The client metadata document at ${basic.url} asks for token_endpoint_auth_method "client_secret_basic"; a metadata document describes a public client`)
    const secret = serve('secret', (self) => metadataFor(self, { client_secret: 'hunter2' }))
    await expectRefused(server, secret.url, 'contains a client secret')
  })

  test('grants this service does not offer (device_code, jwt-bearer, as VS Code and claude.ai list them) are ignored; authorization_code is still required', async () => {
    const listed = ['authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:device_code', 'urn:ietf:params:oauth:grant-type:jwt-bearer']
    const { url } = serve('extra-grants', (self) => metadataFor(self, { grant_types: listed, client_uri: 'https://example.com', logo_uri: 'https://example.com/logo.png' }))
    expect((await getAuthorize(server, url)).status).toBe(200)
    const fixture = await userFixture(server, url)
    expect((await approve(server, fixture)).response.status).toBe(200)
    expect((await storedClient(server, url))?.grantTypes).toEqual(['authorization_code', 'refresh_token'])
    const deviceOnly = serve('device-only', (self) => metadataFor(self, { grant_types: ['refresh_token', 'urn:ietf:params:oauth:grant-type:device_code'] }))
    await expectRefused(server, deviceOnly.url, 'grant_types: must include authorization_code')
  })

  test('a javascript: redirect URI, and the other registration rules', async () => {
    const script = serve('script', (self) => metadataFor(self, { redirect_uris: [REDIRECT_URI, 'javascript:alert(1)'] }))
    await expectRefused(server, script.url, `The client metadata document at ${script.url} is not valid client metadata: redirect_uris/1 must not use the javascript: scheme.`)
    const grant = serve('grant', (self) => metadataFor(self, { grant_types: ['client_credentials'] }))
    await expectRefused(server, grant.url, `The client metadata document at ${grant.url} is not valid client metadata: grant_types/0`)
    const scope = serve('scope', (self) => metadataFor(self, { scope: 'hooks:read admin' }))
    await expectRefused(server, scope.url, 'scope: unknown scope')
    const name = serve('name', (self) => metadataFor(self, { client_name: 'Bad\u0007name' }))
    await expectRefused(server, name.url, `The client metadata document at ${name.url} is not valid client metadata: client_name`)
    const none = serve('none', (self) => ({ client_id: self }))
    await expectRefused(server, none.url, `The client metadata document at ${none.url} has no redirect_uris.`)
  })

  test('not JSON, not an object, not 200, a redirect (not followed), a URL without a path', async () => {
    const text = serve('text', () => '<html>hello</html>')
    await expectRefused(server, text.url, `The client metadata document at ${text.url} is not JSON`)
    const array = serve('array', (self) => [metadataFor(self)])
    await expectRefused(server, array.url, `The client metadata document at ${array.url} is not a JSON object.`)
    await expectRefused(server, urlOf(newPath('missing')), 'answered HTTP 404, not 200.')

    const target = serve('redirect-target', (self) => metadataFor(self))
    const moved = newPath('moved')
    answers.set(moved, () => new Response(null, { status: 302, headers: { location: target.url } }))
    await expectRefused(server, urlOf(moved), `The client metadata document at ${urlOf(moved)} answered HTTP 302 (a redirect to ${target.url}); redirects are not followed`)
    expect(fetchesOf(target.path)).toBe(0)

    await expectRefused(server, `${documents.origin}/`, 'must have a path')
  })
})

describe('the cache', () => {
  test('a second authorization within max-age does not fetch again; after it, the document is fetched again and its row follows', async () => {
    let name = 'Cached client'
    const { path, url } = serve('cached', (self) => metadataFor(self, { client_name: name }), { 'cache-control': 'public, max-age=120' })
    expect((await getAuthorize(server, url)).status).toBe(200)
    expect(fetchesOf(path)).toBe(1)
    expect(await storedClient(server, url)).toBeUndefined()
    const fixture = await userFixture(server, url)
    expect((await approve(server, fixture)).response.status).toBe(200)
    expect((await storedClient(server, url))?.clientName).toBe('Cached client')
    expect(fetchesOf(path)).toBe(1)

    name = 'Renamed client'
    setSystemTime(new Date(Date.now() + 110_000))
    expect(await (await getAuthorize(server, url)).text()).toContain('Cached client')
    expect(fetchesOf(path)).toBe(1)
    setSystemTime(new Date(Date.now() + 20_000))
    expect(await (await getAuthorize(server, url)).text()).toContain('Renamed client')
    expect(fetchesOf(path)).toBe(2)
    expect((await storedClient(server, url))?.clientName).toBe('Renamed client')
  })

  test('no max-age (or a shorter one) keeps a document 60 s; a failure is kept 10 s', async () => {
    const { path, url } = serve('short', (self) => metadataFor(self), { 'cache-control': 'max-age=5' })
    expect((await getAuthorize(server, url)).status).toBe(200)
    setSystemTime(new Date(Date.now() + 50_000))
    expect((await getAuthorize(server, url)).status).toBe(200)
    expect(fetchesOf(path)).toBe(1)
    setSystemTime(new Date(Date.now() + 11_000))
    expect((await getAuthorize(server, url)).status).toBe(200)
    expect(fetchesOf(path)).toBe(2)

    setSystemTime()
    let broken = true
    const flaky = newPath('flaky')
    answers.set(flaky, (request) => (broken ? new Response('down', { status: 503 }) : Response.json(metadataFor(urlOf(request.path)))))
    expect((await getAuthorize(server, urlOf(flaky))).status).toBe(400)
    broken = false
    expect((await getAuthorize(server, urlOf(flaky))).status).toBe(400)
    expect(fetchesOf(flaky)).toBe(1)
    setSystemTime(new Date(Date.now() + 11_000))
    expect((await getAuthorize(server, urlOf(flaky))).status).toBe(200)
    expect(fetchesOf(flaky)).toBe(2)
  })

  test('concurrent lookups of one document share one fetch', async () => {
    const path = newPath('concurrent')
    answers.set(path, async (request) => {
      await Bun.sleep(200)
      return Response.json(metadataFor(urlOf(request.path)))
    })
    const pages = await Promise.all(Array.from({ length: 5 }, () => getAuthorize(server, urlOf(path))))
    expect(pages.map((page) => page.status)).toEqual([200, 200, 200, 200, 200])
    expect(fetchesOf(path)).toBe(1)
  })
})

describe('the rules, one by one', () => {
  test('a client_id URL: https, a path, no fragment, no userinfo, written in its normal form', () => {
    expect(clientIdUrlProblem('https://app.example.com/oauth/client.json')).toBeNull()
    expect(clientIdUrlProblem('https://app.example.com:8443/client?v=2')).toBeNull()
    expect(clientIdUrlProblem('https://app.example.com/')).toContain('must have a path')
    expect(clientIdUrlProblem('https://app.example.com')).toContain('must have a path')
    expect(clientIdUrlProblem('https://app.example.com/client#x')).toContain('fragment')
    expect(clientIdUrlProblem('https://me@app.example.com/client')).toContain('userinfo')
    expect(clientIdUrlProblem('https://app.example.com/a/../client')).toBe('must be written as https://app.example.com/client (its normal form: lower-case host, no default port, no . or .. segments)')
    expect(clientIdUrlProblem('https://App.Example.com/client')).toContain('https://app.example.com/client')
    expect(clientIdUrlProblem('https://app.example.com:443/client')).toContain('https://app.example.com/client')
    expect(clientIdUrlProblem('https://app.example.com/a b')).toContain('must be written as')
  })

  test('Cache-Control: max-age within [60 s, 24 h]; no-store, no-cache or none: 60 s', () => {
    expect(documentCacheSeconds('max-age=3600')).toBe(3600)
    expect(documentCacheSeconds('public, max-age=120, must-revalidate')).toBe(120)
    expect(documentCacheSeconds('max-age=5')).toBe(60)
    expect(documentCacheSeconds('max-age=999999')).toBe(86_400)
    expect(documentCacheSeconds('no-store')).toBe(60)
    expect(documentCacheSeconds('no-cache, max-age=600')).toBe(60)
    expect(documentCacheSeconds(null)).toBe(60)
    expect(documentCacheSeconds('s-maxage=600')).toBe(60)
  })

  test('the timeout covers the body: a document whose body stalls fails when the time is up', async () => {
    const path = newPath('stalled')
    answers.set(path, () => new Response(new ReadableStream({ async start(controller) { controller.enqueue(new TextEncoder().encode('{"client_id":')); await Bun.sleep(2_000); controller.close() } })))
    const started = performance.now()
    await expect(fetchMetadataDocument(urlOf(path), { policy: { allowPrivate: true, ca: documents.caPem }, timeoutMs: 300 })).rejects.toThrow(`The client metadata document at ${urlOf(path)} did not answer within 300 ms.`)
    expect(performance.now() - started).toBeLessThan(1_000)
  })

  test('TLS is verified against the name: a CA the service does not trust fails the fetch', async () => {
    const { url } = serve('untrusted', (self) => metadataFor(self))
    await expect(fetchMetadataDocument(url, { policy: { allowPrivate: true } })).rejects.toThrow(`The client metadata document at ${url} could not be fetched (connection failed:`)
    await expect(fetchMetadataDocument(url, { policy: { allowPrivate: true, ca: documents.caPem } })).resolves.toMatchObject({ metadata: { client_name: 'Metadata document client' } })
  })
})
