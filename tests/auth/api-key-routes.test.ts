import { expect, test } from 'bun:test'
import { startTestServer } from '../support/server.ts'
import { authorizeAndRedeem, flowFixture, postJson } from '../oauth/support.ts'

const server = await startTestServer()
const fixture = await flowFixture(server)
const other = await server.createAccountWithKey('Another account')
const keysPath = (accountId = fixture.accountId) => `/v0/account/${accountId}/keys`
const withKey = (path: string, key = fixture.apiKey) => `${path}${path.includes('?') ? '&' : '?'}key=${key}`
const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

async function createKey(name: string, headers: Record<string, string> = {}, via = withKey(keysPath())) {
  return server.fetch(via, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ name }) })
}

test('POST …/keys: 201 with the secret once; the key works; the list shows it without its secret; DELETE revokes it at once', async () => {
  const created = await createKey('  billing server  ')
  expect(created.status).toBe(201)
  const key = await created.json()
  expect(key).toEqual({
    id: expect.stringMatching(/^key_/),
    name: 'billing server',
    secret_prefix: key.secret.slice(0, 12),
    secret: expect.stringMatching(/^sk_live_/),
    created_at: expect.any(String),
    last_used_at: null,
  })
  expect((await server.fetch(withKey('/v0/account', key.secret))).status).toBe(200)

  // last_used_at is written after the answer, never on its path: look until it is there.
  let listed = await (await server.fetch(withKey(keysPath()))).json()
  for (let tries = 0; tries < 40 && !listed.data.find((item: { id: string }) => item.id === key.id).last_used_at; tries++) {
    await Bun.sleep(50)
    listed = await (await server.fetch(withKey(keysPath()))).json()
  }
  const entry = listed.data.find((item: { id: string }) => item.id === key.id)
  expect(entry).toEqual({ id: key.id, name: 'billing server', secret_prefix: key.secret_prefix, created_at: key.created_at, last_used_at: expect.any(String) })
  expect(JSON.stringify(listed)).not.toContain(key.secret)
  expect(server.rawLogs.join('\n')).not.toContain(key.secret)
  expect(server.logs).toContainEqual(expect.objectContaining({ msg: 'audit', action: 'api_key.created', api_key_id: key.id, account_id: fixture.accountId }))

  const revoked = await server.fetch(withKey(`${keysPath()}/${key.id}`), { method: 'DELETE' })
  expect(revoked.status).toBe(204)
  expect((await server.fetch(withKey('/v0/account', key.secret))).status).toBe(401)
  expect((await (await server.fetch(withKey(keysPath()))).json()).data.map((item: { id: string }) => item.id)).not.toContain(key.id)
  expect((await server.fetch(withKey(`${keysPath()}/${key.id}`), { method: 'DELETE' })).status).toBe(404)
  expect(server.logs).toContainEqual(expect.objectContaining({ msg: 'audit', action: 'api_key.revoked', api_key_id: key.id }))
})

test('a bearer token needs keys:read to list and keys:write to create or revoke; keys:* are never granted by default', async () => {
  const { tokens: plain } = await authorizeAndRedeem(server, fixture)
  expect(plain.scope.split(' ')).not.toContain('keys:read')
  const refused = await server.fetch(keysPath(), { headers: bearer(plain.access_token) })
  expect(refused.status).toBe(403)
  expect(refused.headers.get('www-authenticate')).toContain('scope="keys:read"')

  const { tokens: reader } = await authorizeAndRedeem(server, fixture, { scope: 'keys:read' })
  expect((await server.fetch(keysPath(), { headers: bearer(reader.access_token) })).status).toBe(200)
  expect((await createKey('from a reader', bearer(reader.access_token), keysPath())).status).toBe(403)

  const { tokens: writer } = await authorizeAndRedeem(server, fixture, { scope: 'keys:read keys:write' })
  const made = await createKey('from the dashboard', bearer(writer.access_token), keysPath())
  expect(made.status).toBe(201)
  const { id } = await made.json()
  expect(server.logs).toContainEqual(expect.objectContaining({ action: 'api_key.created', api_key_id: id, by_client_id: fixture.clientId, by_user_id: fixture.userId }))
  expect((await server.fetch(`${keysPath()}/${id}`, { method: 'DELETE', headers: bearer(writer.access_token) })).status).toBe(204)
})

test("another account's keys read as missing, whoever asks", async () => {
  expect((await server.fetch(withKey(keysPath(other.accountId)))).status).toBe(404)
  expect((await createKey('intruder', {}, withKey(keysPath(other.accountId)))).status).toBe(404)
  const theirs = await server.fetch(withKey(`${keysPath()}/${other.keyId}`), { method: 'DELETE' })
  expect(theirs.status).toBe(404)
  expect((await server.fetch(withKey('/v0/account', other.secret))).status).toBe(200)
  expect((await server.fetch(withKey(`${keysPath()}/not-a-key`), { method: 'DELETE' })).status).toBe(404)
})

test('bad names are 422 validation_failed; an Idempotency-Key repeats the first answer, secret included, without a second key', async () => {
  for (const body of [{}, { name: '' }, { name: '   ' }, { name: 'x'.repeat(101) }, { name: 'two\nlines' }, { name: 5 }, { name: 'ok', extra: true }]) {
    const response = await server.fetch(withKey(keysPath()), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    expect({ body, status: response.status }).toEqual({ body, status: 422 })
    expect((await response.json()).code).toBe('validation_failed')
  }
  const first = await createKey('retried', { 'idempotency-key': 'key-create-1' })
  const again = await createKey('retried', { 'idempotency-key': 'key-create-1' })
  expect(again.headers.get('idempotent-replayed')).toBe('true')
  expect(await again.json()).toEqual(await first.json())
  const named = (await (await server.fetch(withKey(`${keysPath()}?limit=100`))).json()).data.filter((item: { name: string }) => item.name === 'retried')
  expect(named).toHaveLength(1)
})

test('the list pages newest first', async () => {
  const { accountId, secret } = await server.createAccountWithKey('Paged')
  for (const name of ['a', 'b', 'c']) await postJson(server, `/v0/account/${accountId}/keys?key=${secret}`, { name })
  const first = await (await server.fetch(`/v0/account/${accountId}/keys?key=${secret}&limit=2`)).json()
  expect(first.data.map((item: { name: string }) => item.name)).toEqual(['c', 'b'])
  const second = await (await server.fetch(`/v0/account/${accountId}/keys?key=${secret}&limit=2&cursor=${first.next_cursor}`)).json()
  expect(second.data.map((item: { name: string | null }) => item.name)).toEqual(['a', null])
  expect(second.next_cursor).toBeNull()
})
