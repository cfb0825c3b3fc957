import { expect, test } from 'bun:test'
import { startTestServer } from '../support/server.ts'
import { authorizeAndRedeem, flowFixture, postJson } from './support.ts'

const server = await startTestServer()
const fixture = await flowFixture(server)
const other = await server.createAccountWithKey('Another account')
const grantsPath = (accountId = fixture.accountId) => `/v0/account/${accountId}/grants`
const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
type Listed = { id: string; client_id: string; client_name: string | null; scope: string; user_id: string; created_at: string; last_used_at: string | null }

async function listed(): Promise<Listed[]> {
  const response = await server.fetch(`${grantsPath()}?key=${fixture.apiKey}`)
  expect(response.status).toBe(200)
  return (await response.json()).data
}

test("GET …/grants: each app that holds access, with its name, scope, who allowed it and when it was last used", async () => {
  const { tokens } = await authorizeAndRedeem(server, fixture, { scope: 'hooks:read' })
  let grant = (await listed()).find((item) => item.client_id === fixture.clientId)!
  expect(grant).toEqual({
    id: expect.stringMatching(/^grt_/),
    client_id: fixture.clientId,
    client_name: 'Flow test client',
    scope: 'hooks:read',
    user_id: fixture.userId,
    created_at: expect.any(String),
    last_used_at: null,
  })
  expect((await server.fetch(`/v0/account/${fixture.accountId}/hooks`, { headers: bearer(tokens.access_token) })).status).toBe(200)
  for (let tries = 0; tries < 40 && !grant.last_used_at; tries++) {
    await Bun.sleep(50)
    grant = (await listed()).find((item) => item.id === grant.id)!
  }
  expect(Date.parse(grant.last_used_at!)).toBeGreaterThanOrEqual(Date.parse(grant.created_at))
})

test('DELETE …/grants/{id}: its access token is refused at once and its refresh token is dead; it leaves the list', async () => {
  const { tokens } = await authorizeAndRedeem(server, fixture, { scope: 'account:read' })
  expect((await server.fetch('/v0/account', { headers: bearer(tokens.access_token) })).status).toBe(200)
  const grant = (await listed()).find((item) => item.scope === 'account:read')!

  const { tokens: owner } = await authorizeAndRedeem(server, fixture, { scope: 'grants:read grants:write' })
  const revoked = await server.fetch(`${grantsPath()}/${grant.id}`, { method: 'DELETE', headers: bearer(owner.access_token) })
  expect(revoked.status).toBe(204)
  expect(server.logs).toContainEqual(expect.objectContaining({ msg: 'audit', action: 'grant.revoked', grant_id: grant.id, by_client_id: fixture.clientId }))

  const refused = await server.fetch('/v0/account', { headers: bearer(tokens.access_token) })
  expect(refused.status).toBe(401)
  const refreshed = await postJson(server, '/v0/auth/token', { grant_type: 'refresh_token', refresh_token: tokens.refresh_token, client_id: fixture.clientId })
  expect(refreshed.status).toBe(400)
  expect((await refreshed.json()).error).toBe('invalid_grant')
  expect((await listed()).map((item) => item.id)).not.toContain(grant.id)
  expect((await server.fetch(`${grantsPath()}/${grant.id}?key=${fixture.apiKey}`, { method: 'DELETE' })).status).toBe(404)
})

test('grants:read and grants:write are needed, never granted by default', async () => {
  const { tokens } = await authorizeAndRedeem(server, fixture)
  expect(tokens.scope.split(' ').filter((scope) => scope.startsWith('grants:') || scope.startsWith('keys:'))).toEqual([])
  const refused = await server.fetch(grantsPath(), { headers: bearer(tokens.access_token) })
  expect(refused.status).toBe(403)
  expect(refused.headers.get('www-authenticate')).toContain('scope="grants:read"')
  const { tokens: reader } = await authorizeAndRedeem(server, fixture, { scope: 'grants:read' })
  const grant = (await listed())[0]!
  expect((await server.fetch(`${grantsPath()}/${grant.id}`, { method: 'DELETE', headers: bearer(reader.access_token) })).status).toBe(403)
})

test("another account's grants read as missing", async () => {
  const grant = (await listed())[0]!
  expect((await server.fetch(`${grantsPath(other.accountId)}?key=${fixture.apiKey}`)).status).toBe(404)
  expect((await server.fetch(`${grantsPath()}/${grant.id}?key=${other.secret}`, { method: 'DELETE' })).status).toBe(404)
  expect((await server.fetch(`${grantsPath(other.accountId)}/${grant.id}?key=${other.secret}`, { method: 'DELETE' })).status).toBe(404)
  expect((await listed()).map((item) => item.id)).toContain(grant.id)
  expect((await server.fetch(`${grantsPath()}/grt_nope?key=${fixture.apiKey}`, { method: 'DELETE' })).status).toBe(404)
})

test('a grant revoked on one instance is refused by another within 5 seconds', async () => {
  // Behind one load balancer: the same PUBLIC_URL, so the same issuer and audience.
  const second = await startTestServer({ database: server.database, deliverWebhooks: false, env: { PUBLIC_URL: server.origin } })
  const { tokens } = await authorizeAndRedeem(server, fixture, { scope: 'hooks:read' })
  const onSecond = () => second.fetch(`/v0/account/${fixture.accountId}/hooks`, { headers: bearer(tokens.access_token) })
  expect((await onSecond()).status).toBe(200)
  const grant = (await listed()).find((item) => item.scope === 'hooks:read')!
  expect((await server.fetch(`${grantsPath()}/${grant.id}?key=${fixture.apiKey}`, { method: 'DELETE' })).status).toBe(204)
  const revokedAt = Date.now()
  let status = 200
  while (status === 200 && Date.now() - revokedAt < 5_000) {
    await Bun.sleep(100)
    status = (await onSecond()).status
  }
  expect(status).toBe(401)
  await second.stop()
})
