import { describe, expect, test } from 'bun:test'
import { createUser } from '../../src/accounts/service.ts'
import { checkIssuer, checkJwksUri } from '../../src/identity-providers/service.ts'
import { ApiError } from '../../src/lib/http/errors.ts'
import { startTestServer } from '../support/server.ts'
import { authorizeAndRedeem, flowFixture, postJson } from '../oauth/support.ts'

// docs/api.md#identity-providers over HTTP: the providers an account trusts, their subject links,
// who may see and change them, and what is refused. WEBHOOK_ALLOW_PRIVATE_TARGETS lets a provider
// on loopback be registered, as the JWT bearer tests (tests/oauth/jwt-bearer.test.ts) need.
const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' } })
const fixture = await flowFixture(server)
const other = await server.createAccountWithKey('Another account')
// The agents a provider may allow: confidential clients of the JWT bearer grant (docs/oauth.md).
const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer'
async function registerAgent(): Promise<string> {
  const response = await postJson(server, '/v0/auth/register', { client_name: 'Enterprise agent', redirect_uris: [], grant_types: [JWT_BEARER], token_endpoint_auth_method: 'client_secret_basic' })
  expect(response.status).toBe(201)
  return ((await response.json()) as { client_id: string }).client_id
}
const agentId = await registerAgent()
const path = (accountId = fixture.accountId) => `/v0/account/${accountId}/identity-providers`
const withKey = (url: string, key = fixture.apiKey) => `${url}${url.includes('?') ? '&' : '?'}key=${key}`
let issuers = 0
const newIssuer = () => `https://idp-${++issuers}.example.com`

function provider(overrides: Record<string, unknown> = {}) {
  const issuer = newIssuer()
  return { issuer, jwks_uri: `${issuer}/oauth2/v1/keys`, allowed_client_ids: [agentId], subject_mapping: 'email', ...overrides }
}

async function create(body: Record<string, unknown>, key = fixture.apiKey, accountId = fixture.accountId) {
  return server.fetch(withKey(path(accountId), key), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
}

async function created(body: Record<string, unknown> = provider()): Promise<{ id: string; issuer: string }> {
  const response = await create(body)
  expect(response.status).toBe(201)
  return response.json()
}

const refusal = (error: unknown) => (error instanceof ApiError ? error.options.errors?.[0]?.message : String(error))
function refused(check: () => unknown): string | undefined {
  try {
    check()
  } catch (error) {
    return refusal(error)
  }
  return undefined
}

describe('the issuer and key set URLs (plain functions)', () => {
  test('an issuer is an https URL without query or fragment, kept exactly as written', () => {
    expect(checkIssuer('https://acme.okta.com', false)).toBe('https://acme.okta.com')
    expect(checkIssuer('https://login.example.com/tenant-1/v2.0/', false)).toBe('https://login.example.com/tenant-1/v2.0/')
    expect(refused(() => checkIssuer('acme.okta.com', false))).toBe('must be an absolute URL')
    expect(refused(() => checkIssuer('http://acme.okta.com', true))).toBe('must use https')
    expect(refused(() => checkIssuer('http://127.0.0.1:8080', false))).toStartWith('must use https (plain http to a local address needs WEBHOOK_ALLOW_PRIVATE_TARGETS=true')
    expect(checkIssuer('http://127.0.0.1:8080', true)).toBe('http://127.0.0.1:8080')
    expect(refused(() => checkIssuer('https://idp.example.com/?tenant=1', false))).toBe('must not have a query (RFC 8414 §2)')
    expect(refused(() => checkIssuer('https://idp.example.com/#x', false))).toBe('must not have a fragment (RFC 8414 §2)')
    expect(refused(() => checkIssuer('https://user:pw@idp.example.com', false))).toBe('must not carry credentials')
    expect(refused(() => checkIssuer(' https://idp.example.com', false))).toBe('must not start or end with white space')
    expect(refused(() => checkIssuer('javascript:alert(1)', true))).toBe('must use https')
  })

  test('a key set URL follows the webhook target rules: https, no private address unless allowed', () => {
    expect(checkJwksUri('https://acme.okta.com/oauth2/v1/keys', false)).toBe('https://acme.okta.com/oauth2/v1/keys')
    expect(refused(() => checkJwksUri('https://10.0.0.5/keys', false))).toStartWith('must not point at a private, loopback or link-local address')
    expect(refused(() => checkJwksUri('https://169.254.169.254/latest/meta-data', false))).toStartWith('must not point at a private')
    expect(refused(() => checkJwksUri('https://localhost/keys', false))).toStartWith('must not point at a private')
    expect(checkJwksUri('http://127.0.0.1:9/keys', true)).toBe('http://127.0.0.1:9/keys')
    expect(refused(() => checkJwksUri('http://keys.example.com/keys', true))).toBe('must use https')
    expect(refused(() => checkJwksUri('https://a:b@keys.example.com/', false))).toBe('must not carry credentials')
    expect(refused(() => checkJwksUri('https://keys.example.com/#k', false))).toBe('must not have a fragment')
    expect(refused(() => checkJwksUri('file:///etc/passwd', true))).toBe('must use https')
  })
})

test('POST creates a provider (201), audited; GET lists and reads it', async () => {
  const body = provider({ subject_mapping: 'subject' })
  const response = await create(body)
  expect(response.status).toBe(201)
  const idp = await response.json()
  expect(idp).toEqual({
    id: expect.stringMatching(/^idp_/),
    issuer: body.issuer,
    jwks_uri: body.jwks_uri,
    allowed_client_ids: [agentId],
    subject_mapping: 'subject',
    created_at: expect.any(String),
  })
  expect(server.logs).toContainEqual(
    expect.objectContaining({ msg: 'audit', action: 'identity_provider.created', identity_provider_id: idp.id, issuer: body.issuer, account_id: fixture.accountId, by_api_key_id: expect.any(String) }),
  )
  const listed = await (await server.fetch(withKey(path()))).json()
  expect(listed.data[0]).toEqual(idp)
  expect(listed.next_cursor).toBeNull()
  expect(await (await server.fetch(withKey(`${path()}/${idp.id}`))).json()).toEqual(idp)
})

test('duplicates among the allowed clients collapse', async () => {
  const second = await registerAgent()
  const idp = await (await create(provider({ allowed_client_ids: [second, agentId, agentId] }))).json()
  expect(idp.allowed_client_ids).toEqual([second, agentId])
})

test('what is refused: bad URLs, unknown clients, an empty list, unknown fields (422 naming the field)', async () => {
  const cases: [Record<string, unknown>, string, string][] = [
    [provider({ issuer: 'not a url' }), '/issuer', 'must be an absolute URL'],
    [provider({ issuer: 'http://idp.example.com' }), '/issuer', 'must use https'],
    [provider({ jwks_uri: 'ftp://idp.example.com/keys' }), '/jwks_uri', 'must use https'],
    [provider({ allowed_client_ids: ['cli_00000000000000000000000000'] }), '/allowed_client_ids/0', 'no client cli_00000000000000000000000000 is registered'],
    [provider({ allowed_client_ids: [agentId, 'my-agent'] }), '/allowed_client_ids/1', 'must be a registered client id (cli_…)'],
    [
      provider({ allowed_client_ids: ['https://agent.example.com/client.json'] }),
      '/allowed_client_ids/0',
      'a client ID metadata document describes a public client, which cannot use the JWT bearer grant: register the agent as a confidential client (docs/oauth.md#enterprise-managed-authorization-cross-app-access)',
    ],
    [
      provider({ allowed_client_ids: [agentId, fixture.clientId] }),
      '/allowed_client_ids/1',
      `the client ${fixture.clientId} is not a confidential client of the ${JWT_BEARER} grant: it could never use this provider's ID-JAGs`,
    ],
  ]
  for (const [body, field, message] of cases) {
    const response = await create(body)
    expect({ field, status: response.status }).toEqual({ field, status: 422 })
    expect((await response.json()).errors[0]).toEqual({ path: field, message })
  }
  for (const body of [provider({ allowed_client_ids: [] }), provider({ subject_mapping: 'name' }), provider({ tenant: 'x' }), { issuer: newIssuer() }]) {
    const response = await create(body)
    expect(response.status).toBe(422)
    expect((await response.json()).code).toBe('validation_failed')
  }
})

test('one provider per issuer per account (409); another account may trust the same issuer', async () => {
  const body = provider()
  await created(body)
  const again = await create({ ...body, jwks_uri: `${body.issuer}/other-keys` })
  expect(again.status).toBe(409)
  expect((await again.json()).detail).toBe(`This account already trusts the issuer ${body.issuer}: delete that identity provider first to register it again.`)
  expect((await create(body, other.secret, other.accountId)).status).toBe(201)
})

test("another account's provider reads as missing (404), and so does another account's path", async () => {
  const theirs = await (await create(provider(), other.secret, other.accountId)).json()
  expect((await server.fetch(withKey(`${path()}/${theirs.id}`))).status).toBe(404)
  expect((await server.fetch(withKey(`${path()}/${theirs.id}`), { method: 'DELETE' })).status).toBe(404)
  expect((await server.fetch(withKey(`${path()}/${theirs.id}/subjects`))).status).toBe(404)
  expect((await server.fetch(withKey(path(other.accountId)))).status).toBe(404)
  expect((await create(provider(), fixture.apiKey, other.accountId)).status).toBe(404)
  expect((await server.fetch(withKey(`${path(other.accountId)}/${theirs.id}`, other.secret))).status).toBe(200)
  expect((await server.fetch(withKey(`${path()}/idp_not-an-id`))).status).toBe(404)
})

test('bearer tokens need identity_providers:read / :write, which no default scope holds', async () => {
  const { tokens: plain } = await authorizeAndRedeem(server, fixture)
  expect(plain.scope).not.toContain('identity_providers')
  const forbidden = await server.fetch(path(), { headers: { authorization: `Bearer ${plain.access_token}` } })
  expect(forbidden.status).toBe(403)
  expect(forbidden.headers.get('www-authenticate')).toContain('scope="identity_providers:read"')

  const { tokens: reader } = await authorizeAndRedeem(server, fixture, { scope: 'identity_providers:read' })
  expect((await server.fetch(path(), { headers: { authorization: `Bearer ${reader.access_token}` } })).status).toBe(200)
  const write = await postJson(server, path(), provider(), { authorization: `Bearer ${reader.access_token}` })
  expect(write.status).toBe(403)

  const { tokens: owner } = await authorizeAndRedeem(server, fixture, { scope: 'identity_providers:read identity_providers:write' })
  const made = await postJson(server, path(), provider(), { authorization: `Bearer ${owner.access_token}` })
  expect(made.status).toBe(201)
  const { id } = await made.json()
  expect(server.logs).toContainEqual(expect.objectContaining({ action: 'identity_provider.created', identity_provider_id: id, by_client_id: fixture.clientId, by_user_id: fixture.userId }))
  expect((await server.fetch(path())).status).toBe(401)
})

test('Idempotency-Key: the same create replays its answer; another body with the key is refused', async () => {
  const body = provider()
  const send = (payload: Record<string, unknown>) =>
    server.fetch(withKey(path()), { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': `idp-${body.issuer}` }, body: JSON.stringify(payload) })
  const first = await send(body)
  const replay = await send(body)
  expect(first.status).toBe(201)
  expect(replay.status).toBe(201)
  expect(await replay.json()).toEqual(await first.json())
  expect((await send({ ...body, subject_mapping: 'subject' })).status).toBe(422)
})

test('subject links: made by email for a subject-mapping provider, listed, refused when wrong, removed', async () => {
  const idp = await created(provider({ subject_mapping: 'subject' }))
  const subjects = `${path()}/${idp.id}/subjects`
  const link = (body: Record<string, unknown>) => server.fetch(withKey(subjects), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })

  const made = await link({ subject: '00u8a9kq2zTr5vH3x697', email: fixture.email.toUpperCase() })
  expect(made.status).toBe(201)
  const linked = await made.json()
  expect(linked).toEqual({ id: expect.stringMatching(/^sbj_/), subject: '00u8a9kq2zTr5vH3x697', user_id: fixture.userId, email: fixture.email, created_at: expect.any(String) })
  expect(server.logs).toContainEqual(expect.objectContaining({ action: 'identity_provider.subject_linked', link_id: linked.id, user_id: fixture.userId }))
  expect((await (await server.fetch(withKey(subjects))).json()).data).toEqual([linked])

  const taken = await link({ subject: '00u8a9kq2zTr5vH3x697', email: fixture.email })
  expect(taken.status).toBe(409)
  const stranger = await link({ subject: 'someone', email: 'nobody@example.com' })
  expect(stranger.status).toBe(422)
  expect((await stranger.json()).errors).toEqual([{ path: '/email', message: 'no user of this account signs in with this email' }])
  const theirUser = await createUser(server.database.handle.db, { accountId: other.accountId, email: `their-${Date.now()}@example.com`, password: 'correct horse battery staple' })
  expect((await link({ subject: 'theirs', email: theirUser.email })).status).toBe(422)
  expect((await link({ subject: '', email: fixture.email })).status).toBe(422)

  const emailMapped = await created(provider())
  const wrongKind = await server.fetch(withKey(`${path()}/${emailMapped.id}/subjects`), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ subject: 'x', email: fixture.email }),
  })
  expect(wrongKind.status).toBe(409)

  expect((await server.fetch(withKey(`${subjects}/${linked.id}`), { method: 'DELETE' })).status).toBe(204)
  expect(server.logs).toContainEqual(expect.objectContaining({ action: 'identity_provider.subject_unlinked', link_id: linked.id, revoked_grant_ids: '' }))
  expect((await server.fetch(withKey(`${subjects}/${linked.id}`), { method: 'DELETE' })).status).toBe(404)
  expect((await (await server.fetch(withKey(subjects))).json()).data).toEqual([])
})

test('DELETE removes the provider (204, audited), then it is gone', async () => {
  const idp = await created()
  expect((await server.fetch(withKey(`${path()}/${idp.id}`), { method: 'DELETE' })).status).toBe(204)
  expect(server.logs).toContainEqual(expect.objectContaining({ action: 'identity_provider.deleted', identity_provider_id: idp.id, issuer: idp.issuer, revoked_grant_ids: '' }))
  expect((await server.fetch(withKey(`${path()}/${idp.id}`))).status).toBe(404)
  expect((await server.fetch(withKey(`${path()}/${idp.id}`), { method: 'DELETE' })).status).toBe(404)
})

test('lists page, newest first', async () => {
  const account = await server.createAccountWithKey('Paging account')
  const ids: string[] = []
  for (let i = 0; i < 3; i++) ids.push((await (await create(provider({ allowed_client_ids: [agentId] }), account.secret, account.accountId)).json()).id)
  const first = await (await server.fetch(withKey(`${path(account.accountId)}?limit=2`, account.secret))).json()
  expect(first.data.map((item: { id: string }) => item.id)).toEqual([ids[2], ids[1]])
  const second = await (await server.fetch(withKey(`${path(account.accountId)}?limit=2&cursor=${first.next_cursor}`, account.secret))).json()
  expect(second.data.map((item: { id: string }) => item.id)).toEqual([ids[0]])
  expect(second.next_cursor).toBeNull()
})
