import { describe, expect, test } from 'bun:test'
import { startTestServer } from '../support/server.ts'
import { authorizeAndRedeem, flowFixture } from '../oauth/support.ts'
import { idempotencyKeys } from '../../src/lib/db/schema.ts'

const server = await startTestServer()
const alice = await server.createAccountWithKey('Alice')
const bob = await server.createAccountWithKey('Bob')
const hooksPath = (accountId: string, key: string, suffix = '') => `/v0/account/${accountId}/hooks${suffix}?key=${key}`
const create = (body: unknown, owner = alice) =>
  server.fetch(hooksPath(owner.accountId, owner.secret), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })

describe('subscriptions', () => {
  test('create returns the subscription and its signing secret once; read and list do not show the secret', async () => {
    const response = await create({ event: 'message.delivered', target_url: 'https://hooks.example.com/delivered' })
    expect(response.status).toBe(201)
    const hook = await response.json()
    expect(hook.id).toMatch(/^hook_/)
    expect([hook.account_id, hook.event, hook.target_url, hook.status]).toEqual([alice.accountId, 'message.delivered', 'https://hooks.example.com/delivered', 'active'])
    expect(hook.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
    const read = await (await server.fetch(hooksPath(alice.accountId, alice.secret, `/${hook.id}`))).json()
    expect(read).toEqual({ id: hook.id, account_id: alice.accountId, event: 'message.delivered', target_url: 'https://hooks.example.com/delivered', status: 'active', rate_limit_per_s: null, filter: null, circuit: { state: 'closed', consecutive_failures: 0, opened_at: null, next_probe_at: null }, signature: 'hmac', public_key: null, previous_public_key: null, previous_public_key_expires_at: null, created_at: hook.created_at })
    const listed = await (await server.fetch(hooksPath(alice.accountId, alice.secret))).json()
    expect(JSON.stringify(listed)).not.toContain(hook.secret)
  })

  test('the same event and URL twice is 409', async () => {
    const body = { event: 'message.failed', target_url: 'https://hooks.example.com/twice' }
    expect((await create(body)).status).toBe(201)
    const again = await create(body)
    expect(again.status).toBe(409)
    expect((await again.json()).code).toBe('conflict')
    expect((await create(body, bob)).status).toBe(201)
  })

  test('lists page newest first with next_cursor', async () => {
    const owner = await server.createAccountWithKey('Pager')
    const created: string[] = []
    for (let i = 0; i < 5; i++) created.push((await (await create({ event: 'message.inbound', target_url: `https://hooks.example.com/${i}` }, owner)).json()).id)
    const first = await (await server.fetch(`${hooksPath(owner.accountId, owner.secret)}&limit=2`)).json()
    expect(first.data.map((hook: { id: string }) => hook.id)).toEqual([created[4], created[3]])
    const second = await (await server.fetch(`${hooksPath(owner.accountId, owner.secret)}&limit=2&cursor=${first.next_cursor}`)).json()
    expect(second.data.map((hook: { id: string }) => hook.id)).toEqual([created[2], created[1]])
    const third = await (await server.fetch(`${hooksPath(owner.accountId, owner.secret)}&limit=2&cursor=${second.next_cursor}`)).json()
    expect(third).toEqual({ data: [expect.objectContaining({ id: created[0] })], next_cursor: null })
    for (const query of ['limit=0', 'limit=101', 'limit=abc', 'cursor=bogus']) {
      const response = await server.fetch(`${hooksPath(owner.accountId, owner.secret)}&${query}`)
      expect([400, 422]).toContain(response.status)
    }
  })

  test('delete answers 204, then the subscription is gone', async () => {
    const hook = await (await create({ event: 'message.delivered', target_url: 'https://hooks.example.com/gone' })).json()
    const deleted = await server.fetch(hooksPath(alice.accountId, alice.secret, `/${hook.id}`), { method: 'DELETE' })
    expect(deleted.status).toBe(204)
    expect((await server.fetch(hooksPath(alice.accountId, alice.secret, `/${hook.id}`))).status).toBe(404)
    expect((await server.fetch(hooksPath(alice.accountId, alice.secret, `/${hook.id}`), { method: 'DELETE' })).status).toBe(404)
  })
})

describe('another account', () => {
  test("another account's id in the path is 404, for every operation", async () => {
    const hook = await (await create({ event: 'message.delivered', target_url: 'https://hooks.example.com/alice-only' })).json()
    const asBob = (suffix: string, init?: RequestInit) => server.fetch(`/v0/account/${alice.accountId}/hooks${suffix}?key=${bob.secret}`, init)
    expect((await asBob('')).status).toBe(404)
    expect((await asBob(`/${hook.id}`)).status).toBe(404)
    expect((await asBob(`/${hook.id}`, { method: 'DELETE' })).status).toBe(404)
    expect((await asBob('', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ event: 'message.failed', target_url: 'https://x.example.com' }) })).status).toBe(404)
    expect((await server.fetch(`/v0/account/${bob.accountId}/hooks/${hook.id}?key=${bob.secret}`)).status).toBe(404)
    expect((await server.fetch(hooksPath(alice.accountId, alice.secret, `/${hook.id}`))).status).toBe(200)
  })
})

describe('bad input', () => {
  const refused: [string, unknown][] = [
    ['http', { event: 'message.delivered', target_url: 'http://hooks.example.com/x' }],
    ['not a URL', { event: 'message.delivered', target_url: 'hooks.example.com/x' }],
    ['credentials', { event: 'message.delivered', target_url: 'https://user:pw@hooks.example.com/x' }],
    ['loopback literal', { event: 'message.delivered', target_url: 'https://127.0.0.1/x' }],
    ['private literal', { event: 'message.delivered', target_url: 'https://10.0.0.1/x' }],
    ['metadata address', { event: 'message.delivered', target_url: 'https://169.254.169.254/latest' }],
    ['IPv6 loopback', { event: 'message.delivered', target_url: 'https://[::1]/x' }],
    ['IPv4-mapped loopback', { event: 'message.delivered', target_url: 'https://[::ffff:127.0.0.1]/x' }],
    ['localhost', { event: 'message.delivered', target_url: 'https://localhost/x' }],
    ['too long', { event: 'message.delivered', target_url: `https://hooks.example.com/${'a'.repeat(2048)}` }],
    ['unknown event', { event: 'message.read', target_url: 'https://hooks.example.com/x' }],
    ['missing event', { target_url: 'https://hooks.example.com/x' }],
    ['wrong type', { event: 'message.delivered', target_url: 42 }],
    ['a secret that is not whsec_', { event: 'message.delivered', target_url: 'https://hooks.example.com/x', secret: 'mine' }],
    ['unknown field', { event: 'message.delivered', target_url: 'https://hooks.example.com/x', colour: 'blue' }],
  ]
  for (const [name, body] of refused) {
    test(`${name}: 422 naming the field`, async () => {
      const response = await create(body)
      expect(response.status).toBe(422)
      const problem = await response.json()
      expect(problem.code).toBe('validation_failed')
      expect(problem.errors.length).toBeGreaterThan(0)
    })
  }
})

test('an unknown event or status is refused naming the values allowed', async () => {
  const response = await create({ event: 'message.read', target_url: 'https://hooks.example.com/x' })
  expect((await response.json()).errors).toEqual([{ path: '/event', message: 'must be one of "message.delivered", "message.failed", "message.inbound"' }])
  const created = await (await create({ event: 'message.inbound', target_url: 'https://hooks.example.com/status' })).json()
  const patched = await server.fetch(`/v0/account/${alice.accountId}/hooks/${created.id}?key=${alice.secret}`, {
    method: 'PATCH',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ status: 'disabled' }),
  })
  expect((await patched.json()).errors).toEqual([{ path: '/status', message: 'must be one of "active", "paused"' }])
})

describe('private targets without WEBHOOK_ALLOW_PRIVATE_TARGETS', () => {
  test('the refusal names the setting that lifts it, for https and plain http alike', async () => {
    for (const target_url of ['https://127.0.0.1:8443/hook', 'http://127.0.0.1:8080/hook', 'http://localhost:8080/hook']) {
      const response = await create({ event: 'message.delivered', target_url })
      expect(response.status).toBe(422)
      const [error] = (await response.json()).errors
      expect(error.path).toBe('/target_url')
      expect(error.message).toContain('WEBHOOK_ALLOW_PRIVATE_TARGETS=true')
    }
  })
})

describe('scopes', () => {
  test('a hooks:read token can list but not create or delete; a token without hooks scopes can do neither', async () => {
    const fixture = await flowFixture(server)
    const readOnly = (await authorizeAndRedeem(server, fixture, { scope: 'hooks:read' })).tokens.access_token
    const path = `/v0/account/${fixture.accountId}/hooks`
    const auth = (token: string) => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' })
    expect((await server.fetch(path, { headers: auth(readOnly) })).status).toBe(200)
    const denied = await server.fetch(path, { method: 'POST', headers: auth(readOnly), body: JSON.stringify({ event: 'message.failed', target_url: 'https://hooks.example.com/t' }) })
    expect(denied.status).toBe(403)
    expect(denied.headers.get('www-authenticate')).toContain('scope="hooks:write"')
    const accountOnly = (await authorizeAndRedeem(server, fixture, { scope: 'account:read' })).tokens.access_token
    expect((await server.fetch(path, { headers: auth(accountOnly) })).status).toBe(403)
    const writer = (await authorizeAndRedeem(server, fixture, { scope: 'hooks:read hooks:write' })).tokens.access_token
    expect((await server.fetch(path, { method: 'POST', headers: auth(writer), body: JSON.stringify({ event: 'message.failed', target_url: 'https://hooks.example.com/t' }) })).status).toBe(201)
  })
})

describe('Idempotency-Key', () => {
  const createWithKey = (key: string, body: unknown, owner = alice) =>
    server.fetch(hooksPath(owner.accountId, owner.secret), {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
    })

  test('the same key and body replay the first response, secret included; one subscription exists', async () => {
    const body = { event: 'message.inbound', target_url: 'https://hooks.example.com/idem' }
    const first = await createWithKey('key-1', body)
    expect(first.status).toBe(201)
    const second = await createWithKey('key-1', body)
    expect(second.status).toBe(201)
    expect(second.headers.get('idempotent-replayed')).toBe('true')
    const [a, b] = [await first.json(), await second.json()]
    expect(b).toEqual(a)
    const listed = await (await server.fetch(`${hooksPath(alice.accountId, alice.secret)}&limit=100`)).json()
    expect(listed.data.filter((hook: { target_url: string }) => hook.target_url === body.target_url)).toHaveLength(1)
  })

  test('the same key with another body is 422 idempotency_key_reused', async () => {
    await createWithKey('key-2', { event: 'message.inbound', target_url: 'https://hooks.example.com/idem-2' })
    const reused = await createWithKey('key-2', { event: 'message.failed', target_url: 'https://hooks.example.com/idem-2' })
    expect(reused.status).toBe(422)
    expect((await reused.json()).code).toBe('idempotency_key_reused')
  })

  test('keys belong to an account: another account may use the same key', async () => {
    const body = { event: 'message.inbound', target_url: 'https://hooks.example.com/idem-3' }
    expect((await createWithKey('shared-key', body)).status).toBe(201)
    const other = await createWithKey('shared-key', body, bob)
    expect(other.status).toBe(201)
    expect(other.headers.get('idempotent-replayed')).toBeNull()
  })

  test('a failed request leaves no record: the same key can be retried', async () => {
    const bad = await createWithKey('key-4', { event: 'message.inbound', target_url: 'https://127.0.0.1/x' })
    expect(bad.status).toBe(422)
    const duplicate = { event: 'message.delivered', target_url: 'https://hooks.example.com/delivered' }
    const conflict = await createWithKey('key-5', duplicate)
    expect(conflict.status).toBe(409)
    expect((await createWithKey('key-5', { event: 'message.delivered', target_url: 'https://hooks.example.com/after-409' })).status).toBe(201)
  })

  test('concurrent requests with one key create one subscription; the others replay or are told to retry', async () => {
    const body = { event: 'message.failed', target_url: 'https://hooks.example.com/concurrent' }
    const responses = await Promise.all(Array.from({ length: 5 }, () => createWithKey('key-concurrent', body)))
    for (const response of responses) expect([201, 409]).toContain(response.status)
    const listed = await (await server.fetch(`${hooksPath(alice.accountId, alice.secret)}&limit=100`)).json()
    expect(listed.data.filter((hook: { target_url: string }) => hook.target_url === body.target_url)).toHaveLength(1)
  })

  test('a malformed key is 400', async () => {
    for (const key of ['x'.repeat(256), 'has space']) {
      const response = await createWithKey(key, { event: 'message.inbound', target_url: 'https://hooks.example.com/k' })
      expect(response.status).toBe(400)
      expect((await response.json()).code).toBe('invalid_idempotency_key')
    }
  })

  test('the stored response does not hold the secret in clear', async () => {
    const created = await (await createWithKey('key-6', { event: 'message.inbound', target_url: 'https://hooks.example.com/sealed' })).json()
    const rows = await server.database.handle.db.select().from(idempotencyKeys)
    expect(JSON.stringify(rows)).not.toContain(created.secret)
  })
})
