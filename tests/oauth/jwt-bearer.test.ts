import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { createUser } from '../../src/accounts/service.ts'
import { startTestServer } from '../support/server.ts'
import { startTestIdentityProvider, type TestIdentityProvider } from '../support/identity-provider.ts'
import { connectWithToken, type ToolResult } from '../support/mcp.ts'
import { flowFixture, postForm, postJson } from './support.ts'
import { currentNonce, dpopProof, proofKey, type ProofKey } from '../support/dpop.ts'

// The JWT bearer grant with ID-JAGs (SPEC §5 "Enterprise-managed authorization",
// docs/oauth.md#enterprise-managed-authorization-cross-app-access), over real sockets: identity
// providers the test runs (tests/support/identity-provider.ts) sign ID-JAGs with their own keys,
// an account registers them over the API, and the token endpoint exchanges them. Every refusal
// is checked one by one: an invalid_grant (400) naming what failed, never a 5xx.

setDefaultTimeout(30_000)

const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer'
const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' } })
const issuer = server.config.baseUrl
const idp = await startTestIdentityProvider()
const fixture = await flowFixture(server)

/** The secret of each agent registered below: the grant is for confidential clients, which authenticate (client_secret_post here). */
const secrets = new Map<string, string>()
const credentials = (clientId: string) => ({ client_id: clientId, client_secret: secrets.get(clientId) ?? '' })

async function registerClient(extra: Record<string, unknown> = {}): Promise<string> {
  const response = await postJson(server, '/v0/auth/register', {
    client_name: 'Enterprise agent',
    redirect_uris: [],
    grant_types: [JWT_BEARER],
    token_endpoint_auth_method: 'client_secret_post',
    ...extra,
  })
  expect(response.status).toBe(201)
  const { client_id, client_secret } = await response.json()
  secrets.set(client_id, client_secret)
  return client_id
}

async function trust(accountId: string, apiKey: string, body: Record<string, unknown>): Promise<{ id: string }> {
  const response = await postJson(server, `/v0/account/${accountId}/identity-providers?key=${apiKey}`, body)
  expect(response.status).toBe(201)
  return response.json()
}

/** The account trusts `provider`, mapping users by email, for `clients`. */
const trustByEmail = (provider: TestIdentityProvider, clients: string[], account = fixture) =>
  trust(account.accountId, account.apiKey, { issuer: provider.issuer, jwks_uri: provider.jwksUri, allowed_client_ids: clients, subject_mapping: 'email' })

const agentId = await registerClient()
const trusted = await trustByEmail(idp, [agentId])

/** An ID-JAG of the test provider for the fixture's user and `agentId`, `overrides` replacing claims. */
const idJagFor = (overrides: Record<string, unknown> = {}, base: Partial<Parameters<TestIdentityProvider['idJag']>[0]> = {}, provider = idp) =>
  provider.idJag({ audience: issuer, clientId: agentId, subject: 'U019488227', email: fixture.email, scope: 'hooks:read hooks:write', ...base }, overrides)

const exchange = (assertion: string, extra: Record<string, string> = {}) => postForm(server, '/v0/auth/token', { grant_type: JWT_BEARER, assertion, ...credentials(agentId), ...extra })

async function expectRefused(response: Response, description: string | RegExp, error = 'invalid_grant') {
  const body = await response.json()
  expect({ status: response.status, error: body.error }).toEqual({ status: 400, error })
  if (typeof description === 'string') expect(body.error_description).toBe(description)
  else expect(body.error_description).toMatch(description)
  expect(response.headers.get('cache-control')).toBe('no-store')
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
const connectedApps = async () =>
  (await (await server.fetch(`/v0/account/${fixture.accountId}/grants?key=${fixture.apiKey}`)).json()).data as { id: string; client_id: string; user_id: string; scope: string }[]

describe('an accepted ID-JAG', () => {
  test('gets an access token (no refresh token) that works on the REST API and on MCP, and the agent is a connected app', async () => {
    const response = await exchange(await idJagFor())
    expect(response.status).toBe(200)
    expect(response.headers.get('cache-control')).toBe('no-store')
    const tokens = await response.json()
    expect(tokens).toEqual({ access_token: expect.any(String), token_type: 'Bearer', expires_in: 900, scope: 'hooks:read hooks:write' })

    expect((await server.fetch(`/v0/account/${fixture.accountId}/hooks`, { headers: bearer(tokens.access_token) })).status).toBe(200)
    const session = await (await server.fetch('/v0/auth/session', { headers: bearer(tokens.access_token) })).json()
    expect(session).toMatchObject({ active: true, sub: fixture.userId, account_id: fixture.accountId, client_id: agentId, scope: 'hooks:read hooks:write' })
    expect([...session.aud].sort()).toEqual([issuer, `${issuer}/mcp`])

    const mcp = await connectWithToken(server, tokens.access_token)
    expect((await mcp.listTools()).tools.map((tool) => tool.name)).toContain('list_webhooks')
    const listed = (await mcp.callTool({ name: 'list_webhooks', arguments: {} })) as ToolResult
    expect(listed.structuredContent).toEqual({ data: [], next_cursor: null })
    await mcp.close()

    const apps = (await connectedApps()).filter((app) => app.client_id === agentId)
    expect(apps).toEqual([expect.objectContaining({ client_id: agentId, user_id: fixture.userId, scope: 'hooks:read hooks:write' })])
    expect(server.logs).toContainEqual(
      expect.objectContaining({ msg: 'audit', action: 'grant.id_jag_accepted', grant_id: apps[0]!.id, identity_provider_id: trusted.id, client_id: agentId, user_id: fixture.userId }),
    )
  })

  test("the agent's next ID-JAG lands on the same grant, with that ID-JAG's scope; the request's scope and resource narrow it", async () => {
    const before = (await connectedApps()).filter((app) => app.client_id === agentId)
    const response = await exchange(await idJagFor({ resource: `${issuer}/mcp` }), { scope: 'hooks:read messages:send' })
    expect(response.status).toBe(200)
    const tokens = await response.json()
    expect(tokens.scope).toBe('hooks:read')
    const after = (await connectedApps()).filter((app) => app.client_id === agentId)
    expect(after.map((app) => [app.id, app.scope])).toEqual([[before[0]!.id, 'hooks:read']])
    // The ID-JAG's resource is the token's audience: MCP only (the extension §5.1).
    expect((await server.fetch(`/v0/account/${fixture.accountId}/hooks`, { headers: bearer(tokens.access_token) })).status).toBe(401)
    const mcp = await connectWithToken(server, tokens.access_token)
    expect((await mcp.listTools()).tools.length).toBeGreaterThan(0)
    await mcp.close()
    // A request's resource outside the ID-JAG's is not widened to.
    await expectRefused(await exchange(await idJagFor({ resource: `${issuer}/mcp` }), { resource: issuer }), `resource must be one the ID-JAG grants: ${issuer}/mcp.`, 'invalid_target')
  })

  test('revoking the grant under Connected apps stops its token; the provider can vouch again with a new ID-JAG', async () => {
    const tokens = await (await exchange(await idJagFor())).json()
    const grant = (await connectedApps()).find((app) => app.client_id === agentId)!
    expect((await server.fetch(`/v0/account/${fixture.accountId}/grants/${grant.id}?key=${fixture.apiKey}`, { method: 'DELETE' })).status).toBe(204)
    expect((await server.fetch(`/v0/account/${fixture.accountId}/hooks`, { headers: bearer(tokens.access_token) })).status).toBe(401)
    const again = await exchange(await idJagFor())
    expect(again.status).toBe(200)
    const regranted = (await connectedApps()).filter((app) => app.client_id === agentId)
    expect(regranted.map((app) => app.id)).not.toContain(grant.id)
    expect(regranted).toHaveLength(1)
  })

  test('a provider that maps by subject: the linked subject is the user; unlinking refuses it and revokes its grant', async () => {
    const provider = await startTestIdentityProvider({ alg: 'RS256' })
    const account = await flowFixture(server, { clientId: agentId })
    const registered = await trust(account.accountId, account.apiKey, { issuer: provider.issuer, jwks_uri: provider.jwksUri, allowed_client_ids: [agentId], subject_mapping: 'subject' })
    const subjects = `/v0/account/${account.accountId}/identity-providers/${registered.id}/subjects?key=${account.apiKey}`
    const link = await (await postJson(server, subjects, { subject: 'okta|00u1', email: account.email })).json()
    const assertion = () => provider.idJag({ audience: issuer, clientId: agentId, subject: 'okta|00u1', scope: 'hooks:read' })

    const response = await exchange(await assertion())
    expect(response.status).toBe(200)
    const tokens = await response.json()
    expect((await server.fetch(`/v0/account/${account.accountId}/hooks`, { headers: bearer(tokens.access_token) })).status).toBe(200)

    const unlinked = await server.fetch(subjects.replace('/subjects?', `/subjects/${link.id}?`), { method: 'DELETE' })
    expect(unlinked.status).toBe(204)
    expect((await server.fetch(`/v0/account/${account.accountId}/hooks`, { headers: bearer(tokens.access_token) })).status).toBe(401)
    await expectRefused(await exchange(await assertion()), `The ID-JAG's subject "okta|00u1" is linked to no user of the account that trusts ${provider.issuer}.`)
  })

  test('two accounts trusting one issuer: the subject decides which account the token is for', async () => {
    const provider = await startTestIdentityProvider()
    const first = await flowFixture(server, { clientId: agentId })
    const second = await flowFixture(server, { clientId: agentId })
    await trustByEmail(provider, [agentId], first)
    await trustByEmail(provider, [agentId], second)
    for (const account of [first, second]) {
      const tokens = await (await exchange(await idJagFor({}, { email: account.email }, provider))).json()
      const session = await (await server.fetch('/v0/auth/session', { headers: bearer(tokens.access_token) })).json()
      expect({ account: session.account_id, user: session.sub }).toEqual({ account: account.accountId, user: account.userId })
    }
  })
})

describe('refused, each an invalid_grant saying why', () => {
  test('an issuer no account trusts', async () => {
    const stranger = await startTestIdentityProvider()
    await expectRefused(
      await exchange(await idJagFor({}, {}, stranger)),
      `The ID-JAG's issuer "${stranger.issuer}" is not an identity provider this server trusts: an account owner registers it under /account/{account_id}/identity-providers.`,
    )
  })

  test('a wrong aud, or several', async () => {
    await expectRefused(await exchange(await idJagFor({ aud: 'https://other-as.example.com' })), /^The ID-JAG's aud is "https:\/\/other-as.example.com"; it must be this authorization server's issuer/)
    await expectRefused(await exchange(await idJagFor({ aud: [issuer, 'https://other-as.example.com'] })), /it must be this authorization server's issuer, .+, alone\.$/)
    expect((await exchange(await idJagFor({ aud: [issuer] }))).status).toBe(200)
  })

  test('a client_id other than the authenticated client', async () => {
    const otherAgent = await registerClient()
    await expectRefused(await exchange(await idJagFor({ client_id: otherAgent })), `The ID-JAG was issued for the client "${otherAgent}", not for the client making this request (${agentId}).`)
  })

  test('a client the provider does not allow', async () => {
    const otherAgent = await registerClient()
    const response = await postForm(server, '/v0/auth/token', { grant_type: JWT_BEARER, assertion: await idJagFor({ client_id: otherAgent }), ...credentials(otherAgent) })
    await expectRefused(response, `The identity provider ${idp.issuer} does not allow the client ${otherAgent} to act for its users (its allowed_client_ids).`)
  })

  test('expired, too long-lived, issued in the future, not yet valid', async () => {
    const now = Math.floor(Date.now() / 1000)
    await expectRefused(await exchange(await idJagFor({ iat: now - 400, exp: now - 100 })), /^The ID-JAG expired at .+: ask the identity provider for a new one\.$/)
    await expectRefused(await exchange(await idJagFor({ exp: now + 3600 })), 'The ID-JAG lives 3600 s (exp - iat); this server accepts ID-JAGs of at most 300 s.')
    await expectRefused(await exchange(await idJagFor({ iat: now + 600, exp: now + 800 })), /^The ID-JAG's iat \(.+\) is in the future\.$/)
    await expectRefused(await exchange(await idJagFor({ nbf: now + 200 })), 'The ID-JAG is not valid yet (nbf).')
    await expectRefused(await exchange(await idJagFor({ exp: undefined })), 'The ID-JAG has no exp claim (a number of seconds since the epoch).')
    await expectRefused(await exchange(await idJagFor({ iat: undefined })), 'The ID-JAG has no iat claim (a number of seconds since the epoch).')
  })

  test('a replayed jti; and none', async () => {
    const assertion = await idJagFor({ jti: 'once-only' })
    expect((await exchange(assertion)).status).toBe(200)
    await expectRefused(await exchange(assertion), 'The ID-JAG was already used (jti "once-only"): ask the identity provider for a new one.')
    await expectRefused(await exchange(await idJagFor({ jti: undefined })), 'The ID-JAG has no jti claim of 1 to 256 characters (each ID-JAG is accepted once).')
  })

  test('a wrong typ, or none', async () => {
    const claims = { iss: idp.issuer, sub: 'U019488227', aud: issuer, client_id: agentId, jti: randomBytes(8).toString('hex'), iat: Math.floor(Date.now() / 1000), exp: Math.floor(Date.now() / 1000) + 60 }
    await expectRefused(await exchange(await idp.sign(claims, { typ: 'JWT' })), 'The assertion\'s typ is "JWT", not oauth-id-jag+jwt: only an ID-JAG is accepted by this grant.')
    await expectRefused(await exchange(await idp.sign(claims, { typ: 'at+jwt' })), /^The assertion's typ is "at\+jwt"/)
    await expectRefused(await exchange(await idp.sign(claims, { typ: null })), /^The assertion's typ is null/)
    expect((await exchange(await idp.sign({ ...claims, email: fixture.email }, { typ: 'application/oauth-id-jag+jwt' }))).status).toBe(200)
  })

  test('a bad signature, alg none, an HMAC', async () => {
    const signed = await idJagFor()
    const [header, payload] = signed.split('.')
    await expectRefused(await exchange(await idp.sign(JSON.parse(Buffer.from(payload!, 'base64url').toString()), { key: 'unpublished' })), `The ID-JAG's signature does not verify with the identity provider's keys (${idp.jwksUri}).`)
    const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(payload!, 'base64url').toString()), sub: 'someone-else' })).toString('base64url')
    await expectRefused(await exchange(`${header}.${forged}.${signed.split('.')[2]}`), /signature does not verify/)
    const unsigned = `${Buffer.from(JSON.stringify({ alg: 'none', typ: 'oauth-id-jag+jwt' })).toString('base64url')}.${payload}.`
    await expectRefused(await exchange(unsigned), /^The ID-JAG is signed with alg "none"; accepted are the asymmetric RS256, .+ \(never none, never HMAC\)\.$/)
    const hmac = `${Buffer.from(JSON.stringify({ alg: 'HS256', typ: 'oauth-id-jag+jwt' })).toString('base64url')}.${payload}.c2lnbmF0dXJl`
    await expectRefused(await exchange(hmac), /^The ID-JAG is signed with alg "HS256"/)
    await expectRefused(await exchange(await idp.sign({ iss: idp.issuer }, { kid: 'no-such-key' })), /has no key for kid "no-such-key" and alg "ES256"\.$/)
  })

  test('a subject that maps to no user of the account', async () => {
    await expectRefused(await exchange(await idJagFor({}, { email: 'stranger@example.com' })), `The ID-JAG's email is not the sign-in email of any user of the account that trusts ${idp.issuer}.`)
    await expectRefused(await exchange(await idJagFor({ email: undefined })), `The ID-JAG has no email claim, and the identity provider ${idp.issuer} maps users by email.`)
    // A user of another account, with an email the provider vouches for: not this account's.
    const elsewhere = await server.createAccountWithKey('Elsewhere')
    const user = await createUser(server.database.handle.db, { accountId: elsewhere.accountId, email: `elsewhere-${randomBytes(4).toString('hex')}@example.com`, password: 'correct horse battery staple' })
    await expectRefused(await exchange(await idJagFor({}, { email: user.email })), /is not the sign-in email of any user/)
  })

  test("scopes beyond the client's, unknown scopes, account administration scopes, none of those asked for", async () => {
    const narrowAgent = await registerClient({ scope: 'hooks:read' })
    const provider = await startTestIdentityProvider()
    await trustByEmail(provider, [narrowAgent, agentId])
    const forNarrow = (scope: string) =>
      provider.idJag({ audience: issuer, clientId: narrowAgent, subject: 'U1', email: fixture.email, scope }).then((assertion) =>
        postForm(server, '/v0/auth/token', { grant_type: JWT_BEARER, assertion, ...credentials(narrowAgent) }),
      )
    await expectRefused(await forNarrow('hooks:read hooks:write'), `The ID-JAG grants hooks:write, beyond what the client ${narrowAgent} may ask for (hooks:read).`)
    expect((await (await forNarrow('hooks:read')).json()).scope).toBe('hooks:read')
    await expectRefused(await exchange(await idJagFor({}, { scope: 'hooks:read admin' })), /^The ID-JAG grants "admin", not scopes of this server/)
    await expectRefused(
      await exchange(await idJagFor({}, { scope: 'hooks:read keys:write' })),
      "The ID-JAG grants keys:write: account administration scopes are never granted by an ID-JAG, only with the account owner's consent.",
    )
    await expectRefused(await exchange(await idJagFor(), { scope: 'messages:send' }), 'None of the scopes asked for (messages:send) is granted by the ID-JAG (hooks:read hooks:write).')
    await expectRefused(await exchange(await idJagFor({}, { scope: '' })), 'The ID-JAG grants no scope.')
  })

  test('a resource that is not ours', async () => {
    await expectRefused(await exchange(await idJagFor({ resource: 'https://mcp.other.example.com/' })), /^The ID-JAG's resource "https:\/\/mcp.other.example.com\/" is not one of this server's/)
  })

  test('an ID-JAG bound to a key (cnf.jkt): refused without a DPoP proof of that key or with another key’s, and not used up by those refusals; with its proof, a DPoP-bound token', async () => {
    const key = await proofKey()
    const other = await proofKey()
    const assertion = await idJagFor({ cnf: { jkt: key.jkt } })
    const bound = async () => assertion
    await expectRefused(await exchange(await bound()), /^The ID-JAG is bound to a key \(cnf\.jkt\): present it with a DPoP proof/)
    const nonce = await currentNonce(server)
    const withProof = async (proofBy: ProofKey) =>
      server.fetch('/v0/auth/token', {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', dpop: await dpopProof(proofBy, { htm: 'POST', htu: `${issuer}/auth/token`, nonce }) },
        body: new URLSearchParams({ grant_type: JWT_BEARER, assertion: await bound(), ...credentials(agentId) }).toString(),
      })
    await expectRefused(await withProof(other), 'The ID-JAG is bound to another key (cnf.jkt) than the one that signed the DPoP proof.')
    const accepted = await withProof(key)
    expect(accepted.status).toBe(200)
    const tokens = await accepted.json()
    expect(tokens.token_type).toBe('DPoP')
    expect(tokens.refresh_token).toBeUndefined()
    // Bound to the proof's key: presented as Bearer it is refused.
    const asBearer = await server.fetch(`/v0/account/${fixture.accountId}/hooks`, { headers: bearer(tokens.access_token) })
    expect(asBearer.status).toBe(401)
  })

  test('only a confidential client that registered the grant may use it: a public client, or one without the grant, is unauthorized_client', async () => {
    const publicResponse = await postJson(server, '/v0/auth/register', { client_name: 'Public agent', redirect_uris: ['http://127.0.0.1:8765/callback'] })
    const publicClient = (await publicResponse.json()).client_id
    await expectRefused(
      await postForm(server, '/v0/auth/token', { grant_type: JWT_BEARER, assertion: await idJagFor({ client_id: publicClient }), client_id: publicClient }),
      /^This client did not register the urn:ietf:params:oauth:grant-type:jwt-bearer grant/,
      'unauthorized_client',
    )
    const codeOnly = await registerClient({ grant_types: ['authorization_code', 'refresh_token'], redirect_uris: ['http://127.0.0.1:8765/callback'] })
    await expectRefused(
      await postForm(server, '/v0/auth/token', { grant_type: JWT_BEARER, assertion: await idJagFor({ client_id: codeOnly }), ...credentials(codeOnly) }),
      /^This client did not register/,
      'unauthorized_client',
    )
    // The secret is checked before the grant: a wrong one is invalid_client.
    const wrong = await postForm(server, '/v0/auth/token', { grant_type: JWT_BEARER, assertion: await idJagFor(), client_id: agentId, client_secret: 'cs_wrong' })
    expect({ status: wrong.status, error: (await wrong.json()).error }).toEqual({ status: 401, error: 'invalid_client' })
  })

  test('what is not an ID-JAG at all; a missing assertion; an unknown client', async () => {
    await expectRefused(await exchange('not-a-jwt'), /^The assertion is not a signed JWT/)
    await expectRefused(await exchange('a.b.c'), 'The assertion is not a JWT: its header is not base64url-encoded JSON.')
    await expectRefused(await exchange('x'.repeat(17_000)), /^assertion: /, 'invalid_request')
    await expectRefused(await postForm(server, '/v0/auth/token', { grant_type: JWT_BEARER, ...credentials(agentId) }), 'assertion is required: the ID-JAG from your identity provider.', 'invalid_request')
    const unknown = await postForm(server, '/v0/auth/token', { grant_type: JWT_BEARER, assertion: await idJagFor(), client_id: 'cli_00000000000000000000000000' })
    expect(unknown.status).toBe(401)
    expect((await unknown.json()).error).toBe('invalid_client')
  })

  test('a removed provider: refused at once, and the tokens its ID-JAGs got stop', async () => {
    const provider = await startTestIdentityProvider()
    const account = await flowFixture(server, { clientId: agentId })
    const registered = await trustByEmail(provider, [agentId], account)
    const assertion = () => provider.idJag({ audience: issuer, clientId: agentId, subject: 'U2', email: account.email, scope: 'hooks:read' })
    const tokens = await (await exchange(await assertion())).json()
    expect((await server.fetch(`/v0/account/${account.accountId}/hooks`, { headers: bearer(tokens.access_token) })).status).toBe(200)

    expect((await server.fetch(`/v0/account/${account.accountId}/identity-providers/${registered.id}?key=${account.apiKey}`, { method: 'DELETE' })).status).toBe(204)
    expect(server.logs).toContainEqual(expect.objectContaining({ action: 'identity_provider.deleted', identity_provider_id: registered.id, revoked_grant_ids: expect.stringMatching(/^grt_/) }))
    expect((await server.fetch(`/v0/account/${account.accountId}/hooks`, { headers: bearer(tokens.access_token) })).status).toBe(401)
    await expectRefused(await exchange(await assertion()), /is not an identity provider this server trusts/)
  })

  test('no refusal is a 5xx, whatever the claims hold', async () => {
    const odd: Record<string, unknown>[] = [
      { sub: 42 },
      { sub: '' },
      { aud: null },
      { aud: [] },
      { client_id: { id: agentId } },
      { exp: '9999999999' },
      { iat: Number.MAX_VALUE },
      { resource: [] },
      { resource: [42] },
      { scope: ['hooks:read'] },
      { cnf: 'x' },
      { email: 42 },
      { jti: 'j'.repeat(300) },
    ]
    for (const overrides of odd) {
      const response = await exchange(await idJagFor(overrides))
      expect({ overrides, status: response.status }).toEqual({ overrides, status: 400 })
    }
    const notObject = await idp.sign({ iss: idp.issuer })
    const [header, , signature] = notObject.split('.')
    expect((await exchange(`${header}.${Buffer.from('[1,2]').toString('base64url')}.${signature}`)).status).toBe(400)
    expect((await exchange(`${header}.!!!.${signature}`)).status).toBe(400)
  })
})

test('the AS metadata advertises the grant and the ID-JAG profile', async () => {
  const metadata = await (await server.fetch('/.well-known/oauth-authorization-server/v0')).json()
  expect(metadata.grant_types_supported).toContain(JWT_BEARER)
  expect(metadata.authorization_grant_profiles_supported).toEqual(['urn:ietf:params:oauth:grant-profile:id-jag'])
})
