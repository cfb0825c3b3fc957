import { afterEach, describe, expect, setSystemTime, test } from 'bun:test'
import { randomBytes, randomUUID } from 'node:crypto'
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK } from 'jose'
import { ClientLookupError } from '../../src/oauth/client-model.ts'
import { CLIENT_JWKS_MAX_BYTES, JWKS_REFETCH_COOLDOWN_SECONDS, fetchClientKeySet } from '../../src/oauth/client-keys.ts'
import { startReceiver, type ReceivedWebhook } from '../support/receiver.ts'
import { startTestServer } from '../support/server.ts'
import { REDIRECT_URI, authorizationCode, flowFixture, postJson } from './support.ts'

/**
 * A `private_key_jwt` client whose keys are at its `jwks_uri` (docs/oauth.md#confidential-clients),
 * over real sockets: the sets are served by a local HTTPS server whose CA the service trusts
 * through WEBHOOK_CA_FILE, reachable because WEBHOOK_ALLOW_PRIVATE_TARGETS=true (it listens on
 * loopback). How a private address is refused without that switch: the last tests.
 */

type Answer = (request: ReceivedWebhook) => Response
const answers = new Map<string, Answer>()
const keyServer = startReceiver((request) => (answers.get(request.path) ?? (() => new Response('no such set', { status: 404 })))(request))
const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: keyServer.caFile } })
const issuer = server.config.baseUrl
const ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'

afterEach(() => setSystemTime())

interface SigningKey {
  privateKey: CryptoKey
  jwk: JWK
}
async function signingKey(): Promise<SigningKey> {
  const { publicKey, privateKey } = await generateKeyPair('ES256', { extractable: true })
  return { privateKey, jwk: { ...(await exportJWK(publicKey)), kid: randomUUID(), alg: 'ES256' } }
}

/** Serves what `body()` returns at a new path (a JWK set as JSON unless it is a string or a Response); its URL and path. */
function publish(body: () => unknown, headers: Record<string, string> = {}) {
  const path = `/keys/${randomBytes(4).toString('hex')}.json`
  answers.set(path, () => {
    const value = body()
    if (value instanceof Response) return value
    return new Response(typeof value === 'string' ? value : JSON.stringify(value), { headers: { 'content-type': 'application/json', ...headers } })
  })
  return { path, url: `${keyServer.origin}${path}` }
}
const fetchesOf = (path: string) => keyServer.received.filter((request) => request.path === path).length

async function registerWithJwksUri(jwksUri: string): Promise<string> {
  const response = await postJson(server, '/v0/auth/register', { client_name: 'Published keys', redirect_uris: [REDIRECT_URI], token_endpoint_auth_method: 'private_key_jwt', jwks_uri: jwksUri })
  expect(response.status).toBe(201)
  return (await response.json()).client_id
}

const assertionFor = (clientId: string, key: SigningKey, claims: Record<string, unknown> = {}) => {
  const now = Math.floor(Date.now() / 1000)
  return new SignJWT({ iss: clientId, sub: clientId, aud: issuer, iat: now, exp: now + 60, jti: randomUUID(), ...claims }).setProtectedHeader({ alg: 'ES256', kid: key.jwk.kid }).sign(key.privateKey)
}

/** A refresh with a made-up token: 400 invalid_grant means the client authenticated, 401 invalid_client that it did not. */
const refreshAs = async (clientId: string, assertion: string) =>
  postJson(server, '/v0/auth/token', { grant_type: 'refresh_token', refresh_token: 'rt_made-up', client_id: clientId, client_assertion_type: ASSERTION_TYPE, client_assertion: assertion })

async function expectAuthenticated(response: Response) {
  expect(response.status).toBe(400)
  expect((await response.json()).error).toBe('invalid_grant')
}
async function expectRefused(response: Response, description: string) {
  expect(response.status).toBe(401)
  const body = await response.json()
  expect(body.error).toBe('invalid_client')
  expect(body.error_description).toContain(description)
}

describe('keys at a jwks_uri', () => {
  test('the code flow with assertions verified by the published keys, fetched once for many requests', async () => {
    const key = await signingKey()
    const published = publish(() => ({ keys: [key.jwk] }), { 'cache-control': 'max-age=600' })
    const clientId = await registerWithJwksUri(published.url)
    // Registration does not fetch: an open endpoint must not make the service reach wherever it is told.
    expect(fetchesOf(published.path)).toBe(0)
    const fixture = await flowFixture(server, { clientId })
    const { code, verifier } = await authorizationCode(server, fixture)
    const issued = await postJson(server, '/v0/auth/token', {
      grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI, code_verifier: verifier,
      client_id: clientId, client_assertion_type: ASSERTION_TYPE, client_assertion: await assertionFor(clientId, key),
    })
    expect(issued.status).toBe(200)
    const tokens = await issued.json()
    const refreshed = await postJson(server, '/v0/auth/token/refresh', { refresh_token: tokens.refresh_token, client_id: clientId, client_assertion_type: ASSERTION_TYPE, client_assertion: await assertionFor(clientId, key) })
    expect(refreshed.status).toBe(200)
    const revoked = await postJson(server, '/v0/auth/revoke', { token: (await refreshed.json()).refresh_token, client_id: clientId, client_assertion_type: ASSERTION_TYPE, client_assertion: await assertionFor(clientId, key) })
    expect(revoked.status).toBe(200)
    expect(fetchesOf(published.path)).toBe(1)
    expect(keyServer.received.find((request) => request.path === published.path)!.headers['user-agent']).toContain('messaging-service')
  })

  test('a rotated key: an assertion naming a kid the cached set lacks fetches the set again, once past the cooldown', async () => {
    const [old, next] = [await signingKey(), await signingKey()]
    let keys = [old.jwk]
    const published = publish(() => ({ keys }), { 'cache-control': 'max-age=3600' })
    const clientId = await registerWithJwksUri(published.url)
    await expectAuthenticated(await refreshAs(clientId, await assertionFor(clientId, old)))
    keys = [old.jwk, next.jwk]
    // Within the cooldown the cached set answers: a stream of unknown kids cannot make the service fetch at will.
    await expectRefused(await refreshAs(clientId, await assertionFor(clientId, next)), 'No key of this client')
    expect(fetchesOf(published.path)).toBe(1)
    setSystemTime(new Date(Date.now() + (JWKS_REFETCH_COOLDOWN_SECONDS + 1) * 1000))
    await expectAuthenticated(await refreshAs(clientId, await assertionFor(clientId, next)))
    expect(fetchesOf(published.path)).toBe(2)
    await expectAuthenticated(await refreshAs(clientId, await assertionFor(clientId, old)))
    expect(fetchesOf(published.path)).toBe(2)
  })

  test('an assertion that fails its claims never makes the service fetch the keys', async () => {
    const key = await signingKey()
    const published = publish(() => ({ keys: [key.jwk] }))
    const clientId = await registerWithJwksUri(published.url)
    await expectRefused(await refreshAs(clientId, 'not.a.jwt'), 'is not a signed JWT')
    await expectRefused(await refreshAs(clientId, await assertionFor(clientId, key, { aud: 'https://elsewhere.example.com' })), 'aud must be')
    await expectRefused(await refreshAs(clientId, await assertionFor(clientId, key, { exp: Math.floor(Date.now() / 1000) - 600 })), 'has expired')
    expect(fetchesOf(published.path)).toBe(0)
  })
})

describe('a published set that cannot be used: 401 invalid_client saying why, never a 5xx', () => {
  const big = { keys: [{ kty: 'EC', crv: 'P-256', x: 'x', y: 'y', x5c: ['A'.repeat(CLIENT_JWKS_MAX_BYTES)] }] }
  const cases: [string, () => unknown, string][] = [
    ['not found', () => new Response('gone', { status: 404 }), 'answered HTTP 404, not 200'],
    ['a redirect', () => new Response(null, { status: 302, headers: { location: 'https://keys.example.com/jwks.json' } }), 'redirects are not followed: publish the keys at the jwks_uri itself'],
    ['not JSON', () => '<html>keys</html>', 'is not JSON'],
    ['not a key set', () => ({ keys: 'none' }), 'is not a JWK set of public signing keys: keys'],
    ['a private key in the set', () => ({ keys: [{ kty: 'EC', crv: 'P-256', x: 'eA', y: 'eQ', d: 'ZA' }] }), 'holds the private key member "d"'],
    ['an HMAC key in the set', () => ({ keys: [{ kty: 'oct', k: 'c2VjcmV0' }] }), 'keys/0/kty'],
    ['larger than 16 KB', () => big, 'is larger than 16 KB'],
  ]
  for (const [name, body, description] of cases) {
    test(name, async () => {
      const key = await signingKey()
      const published = publish(body)
      const clientId = await registerWithJwksUri(published.url)
      await expectRefused(await refreshAs(clientId, await assertionFor(clientId, key)), description)
      // The failure is remembered for a few seconds: a client retrying costs no new fetch.
      await expectRefused(await refreshAs(clientId, await assertionFor(clientId, key)), description)
      expect(fetchesOf(published.path)).toBe(1)
    })
  }
})

describe('a jwks_uri that leads to a private address', () => {
  // A literal private address is refused at registration (tests/oauth/register.test.ts); a name is resolved, and checked, at every fetch.
  test('a name resolving to a private address is refused at the fetch, nothing sent', async () => {
    for (const address of ['10.0.0.7', '127.0.0.1', '169.254.169.254', 'fd00::1']) {
      const failure = await fetchClientKeySet('https://keys.example.com/jwks.json', { policy: { allowPrivate: false, lookup: async () => [address] } }).then(
        () => null,
        (error: unknown) => error,
      )
      expect(failure).toBeInstanceOf(ClientLookupError)
      expect((failure as Error).message).toContain(`keys.example.com resolves to ${address}, which is not a public address`)
    }
  })
})
