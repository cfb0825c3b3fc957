import { beforeEach, describe, expect, test } from 'bun:test'
import { randomUUID } from 'node:crypto'
import { like } from 'drizzle-orm'
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK } from 'jose'
import { Client, StreamableHTTPClientTransport, UnauthorizedError, createPrivateKeyJwtAuth } from '@modelcontextprotocol/client'
import { rateLimits } from '../../src/lib/db/schema.ts'
import { startTestServer, type TestServer } from '../support/server.ts'
import { TestOAuthProvider } from '../support/mcp.ts'
import { REDIRECT_URI, authorizationCode, flowFixture, postJson, type Fixture } from './support.ts'

/**
 * Confidential clients at the token and revocation endpoints (SPEC §5, docs/oauth.md#confidential-clients),
 * over real sockets: each method through the whole flow, then every refusal one by one.
 * Keys are inline (`jwks`); a `jwks_uri` is fetched in tests/oauth/client-keys.test.ts.
 */

const server = await startTestServer()
const db = server.database.handle.db
const issuer = server.config.baseUrl
const tokenEndpoint = `${issuer}/auth/token`
const ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'

// More clients are registered here than one address may register in an hour.
beforeEach(async () => {
  await db.delete(rateLimits).where(like(rateLimits.key, 'register:ip:%'))
})

interface Registration {
  client_id: string
  client_secret?: string
  token_endpoint_auth_method: string
}

async function register(body: Record<string, unknown>): Promise<Registration> {
  const response = await postJson(server, '/v0/auth/register', { client_name: 'Confidential test client', redirect_uris: [REDIRECT_URI], ...body })
  expect(response.status).toBe(201)
  return response.json()
}

interface SigningKey {
  privateKey: CryptoKey
  jwk: JWK
}

async function signingKey(alg: 'ES256' | 'RS256' | 'EdDSA' = 'ES256'): Promise<SigningKey> {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true })
  return { privateKey, jwk: { ...(await exportJWK(publicKey)), kid: randomUUID(), alg, use: 'sig' } }
}

const nowSeconds = () => Math.floor(Date.now() / 1000)
const claimsFor = (clientId: string, overrides: Record<string, unknown> = {}) => ({ iss: clientId, sub: clientId, aud: issuer, iat: nowSeconds(), exp: nowSeconds() + 60, jti: randomUUID(), ...overrides })

function sign(key: SigningKey, claims: Record<string, unknown>, header: Record<string, unknown> = {}) {
  return new SignJWT(claims).setProtectedHeader({ alg: String(key.jwk.alg), kid: key.jwk.kid, ...header }).sign(key.privateKey)
}

const basic = (clientId: string, secret: string) => ({ authorization: `Basic ${btoa(`${encodeURIComponent(clientId)}:${encodeURIComponent(secret)}`)}` })

const postForm = (path: string, body: Record<string, string>, headers: Record<string, string> = {}) =>
  server.fetch(path, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: new URLSearchParams(body).toString() })

/** How one request authenticates: body parameters and headers, made fresh for each request (an assertion is used once). */
type Authenticate = () => Promise<{ params: Record<string, string>; headers?: Record<string, string> }>

async function expectInvalidClient(response: Response, description: string | RegExp) {
  expect(response.status).toBe(401)
  const body = await response.json()
  expect(body.error).toBe('invalid_client')
  if (typeof description === 'string') expect(body.error_description).toContain(description)
  else expect(body.error_description).toMatch(description)
  return response
}

/** Code → tokens → an API call → refresh at both addresses → revocation, each request authenticated by `authenticate`. */
async function completeFlow(target: TestServer, fixture: Fixture, authenticate: Authenticate) {
  const send = async (path: string, body: Record<string, string>) => {
    const { params, headers } = await authenticate()
    return target.fetch(path, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
      body: new URLSearchParams({ ...body, ...params }).toString(),
    })
  }
  const { code, verifier } = await authorizationCode(target, fixture)
  const issued = await send('/v0/auth/token', { grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI, code_verifier: verifier })
  expect(issued.status).toBe(200)
  const tokens = await issued.json()
  expect(tokens.token_type).toBe('Bearer')
  const account = await target.fetch('/v0/account', { headers: { authorization: `Bearer ${tokens.access_token}` } })
  expect(account.status).toBe(200)

  const refreshedHere = await send('/v0/auth/token/refresh', { refresh_token: tokens.refresh_token })
  expect(refreshedHere.status).toBe(200)
  const second = await refreshedHere.json()
  const refreshedThere = await send('/v0/auth/token', { grant_type: 'refresh_token', refresh_token: second.refresh_token })
  expect(refreshedThere.status).toBe(200)
  const third = await refreshedThere.json()

  const revoked = await send('/v0/auth/revoke', { token: third.refresh_token })
  expect(revoked.status).toBe(200)
  const afterRevocation = await send('/v0/auth/token', { grant_type: 'refresh_token', refresh_token: third.refresh_token })
  expect(afterRevocation.status).toBe(400)
  expect((await afterRevocation.json()).error).toBe('invalid_grant')
  expect((await target.fetch('/v0/account', { headers: { authorization: `Bearer ${third.access_token}` } })).status).toBe(401)
  return tokens as { access_token: string; refresh_token: string }
}

describe('each method through the authorization code flow, refresh and revocation', () => {
  test('client_secret_basic: id and secret in HTTP Basic, nothing in the body', async () => {
    const registration = await register({ token_endpoint_auth_method: 'client_secret_basic' })
    const fixture = await flowFixture(server, { clientId: registration.client_id })
    await completeFlow(server, fixture, async () => ({ params: {}, headers: basic(registration.client_id, registration.client_secret!) }))
  })

  test('client_secret_basic with client_id repeated in the body, as some libraries send it', async () => {
    const registration = await register({ token_endpoint_auth_method: 'client_secret_basic' })
    const fixture = await flowFixture(server, { clientId: registration.client_id })
    await completeFlow(server, fixture, async () => ({ params: { client_id: registration.client_id }, headers: basic(registration.client_id, registration.client_secret!) }))
  })

  test('client_secret_post: client_id and client_secret in the body', async () => {
    const registration = await register({ token_endpoint_auth_method: 'client_secret_post' })
    const fixture = await flowFixture(server, { clientId: registration.client_id })
    await completeFlow(server, fixture, async () => ({ params: { client_id: registration.client_id, client_secret: registration.client_secret! } }))
  })

  for (const alg of ['ES256', 'RS256', 'EdDSA'] as const) {
    test(`private_key_jwt with an ${alg} key: a fresh assertion per request, aud the issuer or the token endpoint`, async () => {
      const key = await signingKey(alg)
      const registration = await register({ token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [key.jwk] } })
      expect(registration.client_secret).toBeUndefined()
      const fixture = await flowFixture(server, { clientId: registration.client_id })
      let request = 0
      await completeFlow(server, fixture, async () => ({
        params: {
          client_id: registration.client_id,
          client_assertion_type: ASSERTION_TYPE,
          client_assertion: await sign(key, claimsFor(registration.client_id, { aud: request++ % 2 === 0 ? issuer : tokenEndpoint })),
        },
      }))
    })
  }

  test('private_key_jwt without client_id: the assertion names the client (RFC 7521 §4.2), and keys without a kid are each tried', async () => {
    const [first, second] = [await signingKey(), await signingKey()]
    const withoutKid = (key: SigningKey) => ({ ...key.jwk, kid: undefined })
    const registration = await register({ token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [withoutKid(first), withoutKid(second)] } })
    const fixture = await flowFixture(server, { clientId: registration.client_id })
    await completeFlow(server, fixture, async () => ({
      params: { client_assertion_type: ASSERTION_TYPE, client_assertion: await sign(second, claimsFor(registration.client_id), { kid: undefined }) },
    }))
  })

  test('public clients are unchanged: client_id alone, and an empty client_secret is still ignored', async () => {
    const registration = await register({ token_endpoint_auth_method: 'none' })
    const fixture = await flowFixture(server, { clientId: registration.client_id })
    await completeFlow(server, fixture, async () => ({ params: { client_id: registration.client_id, client_secret: '' } }))
  })
})

describe('refused, each 401 invalid_client with a description that says why', () => {
  const secretClient = register({ token_endpoint_auth_method: 'client_secret_basic' })
  const postClient = register({ token_endpoint_auth_method: 'client_secret_post' })
  const publicClient = register({ token_endpoint_auth_method: 'none' })
  const key = signingKey()
  const jwtClient = key.then((signing) => register({ token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [signing.jwk] } }))

  /** A refresh with a token that does not exist: authentication comes first, so the answer says only how it failed. */
  const refreshWith = (params: Record<string, string>, headers: Record<string, string> = {}) =>
    postForm('/v0/auth/token', { grant_type: 'refresh_token', refresh_token: 'rt_not-a-token', ...params }, headers)
  const withAssertion = async (claims: (clientId: string) => Record<string, unknown>, header: Record<string, unknown> = {}, signer?: SigningKey) => {
    const client = await jwtClient
    return refreshWith({ client_id: client.client_id, client_assertion_type: ASSERTION_TYPE, client_assertion: await sign(signer ?? (await key), claims(client.client_id), header) })
  }

  test('a wrong secret in HTTP Basic, with the Basic challenge (RFC 6749 §5.2)', async () => {
    const client = await secretClient
    const response = await expectInvalidClient(await refreshWith({}, basic(client.client_id, `${client.client_secret}x`)), 'The client secret is wrong.')
    expect(response.headers.get('www-authenticate')).toStartWith('Basic realm=')
  })

  test('a wrong secret in the body, without a Basic challenge', async () => {
    const client = await postClient
    const response = await expectInvalidClient(await refreshWith({ client_id: client.client_id, client_secret: 'cs_wrong' }), 'The client secret is wrong.')
    expect(response.headers.get('www-authenticate')).toBeNull()
  })

  test('HTTP Basic for a client_secret_post client', async () => {
    const client = await postClient
    const response = await expectInvalidClient(await refreshWith({}, basic(client.client_id, client.client_secret!)), 'registered with token_endpoint_auth_method client_secret_post')
    expect(response.headers.get('www-authenticate')).toStartWith('Basic')
  })

  test('the secret in the body for a client_secret_basic client', async () => {
    const client = await secretClient
    await expectInvalidClient(await refreshWith({ client_id: client.client_id, client_secret: client.client_secret! }), 'registered with token_endpoint_auth_method client_secret_basic')
  })

  test('a secret for a private_key_jwt client', async () => {
    const client = await jwtClient
    await expectInvalidClient(await refreshWith({ client_id: client.client_id, client_secret: 'cs_anything' }), 'registered with token_endpoint_auth_method private_key_jwt')
  })

  test('client_id alone for a confidential client', async () => {
    for (const client of [await secretClient, await postClient, await jwtClient]) {
      await expectInvalidClient(await refreshWith({ client_id: client.client_id }), `registered with token_endpoint_auth_method ${client.token_endpoint_auth_method}`)
    }
  })

  test('a secret, an assertion or HTTP Basic from a public client', async () => {
    const client = await publicClient
    await expectInvalidClient(await refreshWith({ client_id: client.client_id, client_secret: 'cs_made-up' }), 'registered with token_endpoint_auth_method none')
    await expectInvalidClient(await refreshWith({}, basic(client.client_id, 'made-up')), 'registered with token_endpoint_auth_method none')
    await expectInvalidClient(await refreshWith({ client_id: client.client_id, client_assertion_type: ASSERTION_TYPE, client_assertion: await sign(await key, claimsFor(client.client_id)) }), 'registered with token_endpoint_auth_method none')
  })

  test('an unknown client in HTTP Basic', async () => {
    const response = await expectInvalidClient(await refreshWith({}, basic('cli_00000000000000000000000000', 'cs_x')), 'Unknown client_id')
    expect(response.headers.get('www-authenticate')).toStartWith('Basic')
  })

  test('malformed HTTP Basic credentials', async () => {
    const client = await secretClient
    for (const [authorization, why] of [
      ['Basic', 'is not Basic credentials'],
      ['Basic !!!', 'is not Basic credentials'],
      [`Basic ${btoa(client.client_id)}`, 'has no colon'],
      [`Basic ${btoa(`${client.client_id}:`)}`, 'empty'],
      [`Basic ${btoa(`${client.client_id}:%E0%A4%A`)}`, 'percent-encoding'],
      [`Basic ${Buffer.from([0x63, 0x3a, 0xff]).toString('base64')}`, 'UTF-8'],
    ] as const) {
      const response = await expectInvalidClient(await refreshWith({}, { authorization }), why)
      expect(response.headers.get('www-authenticate')).toStartWith('Basic')
    }
  })

  test('a client_id in the body that is not the one in HTTP Basic', async () => {
    const client = await secretClient
    await expectInvalidClient(await refreshWith({ client_id: (await postClient).client_id }, basic(client.client_id, client.client_secret!)), 'not the one in the Authorization header')
  })

  test('two ways at once is a malformed request: 400 invalid_request (RFC 6749 §5.2)', async () => {
    const client = await secretClient
    const response = await refreshWith({ client_id: client.client_id, client_secret: client.client_secret! }, basic(client.client_id, client.client_secret!))
    expect(response.status).toBe(400)
    expect((await response.json()).error).toBe('invalid_request')
  })

  test('an assertion whose aud is another server', async () => {
    await expectInvalidClient(await withAssertion((id) => claimsFor(id, { aud: 'https://other.example.com' })), 'aud must be this authorization server')
  })

  test('an expired assertion', async () => {
    await expectInvalidClient(await withAssertion((id) => claimsFor(id, { iat: nowSeconds() - 600, exp: nowSeconds() - 120 })), 'has expired')
  })

  test('an assertion that lives too long', async () => {
    await expectInvalidClient(await withAssertion((id) => claimsFor(id, { exp: nowSeconds() + 3600 })), 'more than 300 seconds ahead')
  })

  test('an assertion without exp or without jti', async () => {
    await expectInvalidClient(await withAssertion((id) => ({ ...claimsFor(id), exp: undefined })), 'has no exp')
    await expectInvalidClient(await withAssertion((id) => ({ ...claimsFor(id), jti: undefined })), 'needs a jti')
  })

  test('a replayed assertion: its jti is accepted once', async () => {
    const client = await jwtClient
    const assertion = await sign(await key, claimsFor(client.client_id))
    const params = { client_id: client.client_id, client_assertion_type: ASSERTION_TYPE, client_assertion: assertion }
    // The first use authenticates (the refresh token is what fails), the second does not.
    const first = await refreshWith(params)
    expect(first.status).toBe(400)
    expect((await first.json()).error).toBe('invalid_grant')
    await expectInvalidClient(await refreshWith(params), 'was used before')
  })

  test('an assertion signed by a key the client did not register', async () => {
    const stranger = await signingKey()
    await expectInvalidClient(await withAssertion((id) => claimsFor(id), { kid: (await key).jwk.kid }, stranger), "signature does not verify with this client's keys")
    await expectInvalidClient(await withAssertion((id) => claimsFor(id), {}, stranger), 'No key of this client')
  })

  test('an HS256 assertion (a shared secret, not a key pair)', async () => {
    const client = await jwtClient
    const assertion = await new SignJWT(claimsFor(client.client_id)).setProtectedHeader({ alg: 'HS256' }).sign(new TextEncoder().encode('a secret of thirty-two bytes or more, shared'))
    await expectInvalidClient(await refreshWith({ client_id: client.client_id, client_assertion_type: ASSERTION_TYPE, client_assertion: assertion }), 'signed with alg "HS256"')
  })

  test('an unsigned assertion (alg none)', async () => {
    const client = await jwtClient
    const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
    const assertion = `${encode({ alg: 'none', typ: 'JWT' })}.${encode(claimsFor(client.client_id))}.`
    await expectInvalidClient(await refreshWith({ client_id: client.client_id, client_assertion_type: ASSERTION_TYPE, client_assertion: assertion }), 'signed with alg "none"')
  })

  test('an assertion whose iss is not its sub, or not the client', async () => {
    const other = await postClient
    await expectInvalidClient(await withAssertion((id) => claimsFor(id, { iss: other.client_id })), 'iss and sub both equal to the client_id')
    await expectInvalidClient(await withAssertion((id) => claimsFor(id, { sub: other.client_id })), 'iss and sub both equal to the client_id')
  })

  test('another kind of JWT in its place (typ at+jwt)', async () => {
    await expectInvalidClient(await withAssertion((id) => claimsFor(id), { typ: 'at+jwt' }), 'has typ "at+jwt"')
  })

  test('a wrong or missing client_assertion_type, and garbage for an assertion', async () => {
    const client = await jwtClient
    const assertion = await sign(await key, claimsFor(client.client_id))
    await expectInvalidClient(await refreshWith({ client_id: client.client_id, client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:saml2-bearer', client_assertion: assertion }), 'client_assertion_type must be')
    await expectInvalidClient(await refreshWith({ client_id: client.client_id, client_assertion: assertion }), 'client_assertion_type must be')
    await expectInvalidClient(await refreshWith({ client_id: client.client_id, client_assertion_type: ASSERTION_TYPE, client_assertion: 'not.a.jwt' }), 'is not a signed JWT')
    await expectInvalidClient(await refreshWith({ client_assertion_type: ASSERTION_TYPE, client_assertion: 'garbage' }), 'Unknown client_id')
    // Without client_id the assertion's sub names the client; one that is not a string names none (it was a 500).
    const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
    const numericSub = `${encode({ alg: 'ES256' })}.${encode({ sub: 123 })}.c2ln`
    await expectInvalidClient(await refreshWith({ client_assertion_type: ASSERTION_TYPE, client_assertion: numericSub }), 'Unknown client_id')
    await expectInvalidClient(await postForm('/v0/auth/revoke', { token: 'anything', client_assertion_type: ASSERTION_TYPE, client_assertion: numericSub }), 'Unknown client_id')
  })

  test('the revocation endpoint refuses the same way', async () => {
    const client = await secretClient
    const response = await expectInvalidClient(await postForm('/v0/auth/revoke', { token: 'anything' }, basic(client.client_id, 'cs_wrong')), 'The client secret is wrong.')
    expect(response.headers.get('www-authenticate')).toStartWith('Basic')
    await expectInvalidClient(await postForm('/v0/auth/revoke', { token: 'anything', client_id: client.client_id }), 'registered with token_endpoint_auth_method client_secret_basic')
  })

  test('a code redeemed with a wrong secret is refused before the code is looked at, and stays usable', async () => {
    const client = await postClient
    const fixture = await flowFixture(server, { clientId: client.client_id })
    const { code, verifier } = await authorizationCode(server, fixture)
    const redeem = (secret: string) => postForm('/v0/auth/token', { grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI, code_verifier: verifier, client_id: client.client_id, client_secret: secret })
    await expectInvalidClient(await redeem('cs_guess'), 'The client secret is wrong.')
    expect((await redeem(client.client_secret!)).status).toBe(200)
  })
})

describe('the MCP SDK 2.x client as a confidential client: registers, authenticates at the token endpoint, calls tools', () => {
  const mcpUrl = `${issuer}/mcp`

  /** TestOAuthProvider registering with another token_endpoint_auth_method (and, for private_key_jwt, its keys and assertions). */
  class ConfidentialProvider extends TestOAuthProvider {
    addClientAuthentication?: ReturnType<typeof createPrivateKeyJwtAuth>
    constructor(
      fixture: Fixture,
      private readonly method: 'client_secret_basic' | 'private_key_jwt',
      private readonly key?: SigningKey,
    ) {
      super(server, fixture)
      if (key) {
        // The SDK's own private_key_jwt signer; its issuer and subject are the client_id the registration returns.
        this.addClientAuthentication = async (headers, params, url, metadata) => {
          const jwk = { ...(await exportJWK(key.privateKey)), kid: key.jwk.kid }
          await createPrivateKeyJwtAuth({ issuer: this.client!.client_id, subject: this.client!.client_id, privateKey: jwk, alg: 'ES256', lifetimeSeconds: 60 })(headers, params, url, metadata)
        }
      }
    }
    override get clientMetadata() {
      return { ...super.clientMetadata, token_endpoint_auth_method: this.method, ...(this.key ? { jwks: { keys: [this.key.jwk] } } : {}) }
    }
  }

  for (const method of ['client_secret_basic', 'private_key_jwt'] as const) {
    test(method, async () => {
      const fixture = await flowFixture(server)
      const provider = new ConfidentialProvider(fixture, method, method === 'private_key_jwt' ? await signingKey() : undefined)
      const first = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider })
      await expect(new Client({ name: 'confidential agent', version: '1.0.0' }).connect(first)).rejects.toBeInstanceOf(UnauthorizedError)
      expect(provider.client?.client_id).toMatch(/^cli_/)
      if (method === 'client_secret_basic') expect((provider.client as { client_secret?: string }).client_secret).toStartWith('cs_')
      await first.finishAuth(provider.callback!)
      const client = new Client({ name: 'confidential agent', version: '1.0.0' })
      await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider }))
      const { tools } = await client.listTools()
      expect(tools.map((tool) => tool.name)).toContain('list_webhooks')
      await client.close()
    })
  }
})
