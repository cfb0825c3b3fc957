import { describe, expect, test } from 'bun:test'
import { eq } from 'drizzle-orm'
import { startTestServer } from '../support/server.ts'
import { authorizeAndRedeem, flowFixture } from '../oauth/support.ts'
import { hooks } from '../../src/lib/db/schema.ts'

const server = await startTestServer()
const alice = await server.createAccountWithKey('Alice')
const bob = await server.createAccountWithKey('Bob')
const db = server.database.handle.db
const DAY_MS = 24 * 60 * 60 * 1000
const SECRET = /^whsec_[A-Za-z0-9+/]{43}=$/

type Owner = { accountId: string; secret: string }
const hookPath = (hookId: string, suffix = '', owner: Owner = alice) => `/v0/account/${owner.accountId}/hooks/${hookId}${suffix}?key=${owner.secret}`

let targets = 0
async function createHook(owner: Owner = alice): Promise<{ id: string; secret: string; created_at: string }> {
  const response = await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event: 'message.delivered', target_url: `https://hooks.example.com/rotate-${targets++}` }),
  })
  expect(response.status).toBe(201)
  return response.json()
}

const rotate = (hookId: string, init: RequestInit = {}, owner: Owner = alice) => server.fetch(hookPath(hookId, '/secret/rotate', owner), { method: 'POST', ...init })
const enable = (hookId: string, init: RequestInit = {}, owner: Owner = alice) => server.fetch(hookPath(hookId, '/enable', owner), { method: 'POST', ...init })

async function storedSecrets(hookId: string) {
  const [row] = await db.select().from(hooks).where(eq(hooks.id, hookId))
  const open = (sealed: string | null) => (sealed === null ? null : server.instance.secretBox.open(sealed))
  return { current: await open(row!.secretCiphertext), previous: await open(row!.previousSecretCiphertext), previousExpiresAt: row!.previousSecretExpiresAt, row: row! }
}

describe('POST …/hooks/{hook_id}/secret/rotate', () => {
  test('answers the subscription with a new secret, shown once; the old one is kept as the previous secret for 24 h', async () => {
    const hook = await createHook()
    const before = await (await server.fetch(hookPath(hook.id))).json()
    const started = Date.now()
    const response = await rotate(hook.id)
    expect(response.status).toBe(200)
    const rotated = await response.json()
    expect(rotated.secret).toMatch(SECRET)
    expect(rotated.secret).not.toBe(hook.secret)
    const { secret, previous_secret_expires_at, ...resource } = rotated
    expect(resource).toEqual(before)
    expect(Math.abs(Date.parse(previous_secret_expires_at) - (started + DAY_MS))).toBeLessThan(60_000)

    const stored = await storedSecrets(hook.id)
    expect(stored.current).toBe(secret)
    expect(stored.previous).toBe(hook.secret)
    expect(stored.previousExpiresAt!.toISOString()).toBe(previous_secret_expires_at)

    const read = await (await server.fetch(hookPath(hook.id))).json()
    expect(read).toEqual(before)
    const listed = await (await server.fetch(`/v0/account/${alice.accountId}/hooks?key=${alice.secret}&limit=100`)).text()
    expect(listed).not.toContain(secret)
    expect(listed).not.toContain(hook.secret)
  })

  test('rotating again keeps only the last two secrets', async () => {
    const hook = await createHook()
    const first = await (await rotate(hook.id)).json()
    const second = await (await rotate(hook.id)).json()
    expect(new Set([hook.secret, first.secret, second.secret]).size).toBe(3)
    const stored = await storedSecrets(hook.id)
    expect([stored.current, stored.previous]).toEqual([second.secret, first.secret])
    expect(Date.parse(second.previous_secret_expires_at)).toBeGreaterThanOrEqual(Date.parse(first.previous_secret_expires_at))
    expect(JSON.stringify(stored.row)).not.toContain(hook.secret)
  })

  test('a disabled subscription can be rotated and stays disabled', async () => {
    const hook = await createHook()
    await db.update(hooks).set({ status: 'disabled', disabledReason: 'The receiver answered 410 Gone.' }).where(eq(hooks.id, hook.id))
    const rotated = await (await rotate(hook.id)).json()
    expect([rotated.status, rotated.disabled_reason]).toEqual(['disabled', 'The receiver answered 410 Gone.'])
  })

  test('Idempotency-Key: a retried rotation replays the first answer, secret included, and rotates once', async () => {
    const hook = await createHook()
    const withKey = (hookId: string) => rotate(hookId, { headers: { 'idempotency-key': 'rotate-1' } })
    const first = await withKey(hook.id)
    expect(first.status).toBe(200)
    expect(first.headers.get('idempotent-replayed')).toBeNull()
    const again = await withKey(hook.id)
    expect(again.status).toBe(200)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    const [a, b] = [await first.json(), await again.json()]
    expect(b).toEqual(a)
    const stored = await storedSecrets(hook.id)
    expect([stored.current, stored.previous]).toEqual([a.secret, hook.secret])

    // The same key for another subscription is another request.
    const other = await withKey((await createHook()).id)
    expect(other.status).toBe(422)
    expect((await other.json()).code).toBe('idempotency_key_reused')
    // A failed rotation leaves no record: the key can be used again.
    const missing = await rotate('hook_01jd3m9x2qk7r5v8w4y6z0abcd', { headers: { 'idempotency-key': 'rotate-2' } })
    expect(missing.status).toBe(404)
    expect((await rotate(hook.id, { headers: { 'idempotency-key': 'rotate-2' } })).status).toBe(200)
    expect((await rotate(hook.id, { headers: { 'idempotency-key': 'has space' } })).status).toBe(400)
  })
})

describe('POST …/hooks/{hook_id}/enable', () => {
  test('makes a disabled subscription active again and clears its reason and failure clock', async () => {
    const hook = await createHook()
    await db
      .update(hooks)
      .set({ status: 'disabled', disabledReason: 'Deliveries failed for 5 days.', failingSince: new Date(Date.now() - 6 * DAY_MS) })
      .where(eq(hooks.id, hook.id))
    const disabled = await (await server.fetch(hookPath(hook.id))).json()
    expect([disabled.status, disabled.disabled_reason]).toEqual(['disabled', 'Deliveries failed for 5 days.'])

    const response = await enable(hook.id)
    expect(response.status).toBe(200)
    const enabled = await response.json()
    const { disabled_reason, ...rest } = disabled
    expect(enabled).toEqual({ ...rest, status: 'active' })
    expect(await (await server.fetch(hookPath(hook.id))).json()).toEqual(enabled)
    const { row } = await storedSecrets(hook.id)
    expect([row.status, row.disabledReason, row.failingSince]).toEqual(['active', null, null])
  })

  test('enabling an active subscription is a no-op that answers 200', async () => {
    const hook = await createHook()
    const before = await storedSecrets(hook.id)
    for (let i = 0; i < 2; i++) {
      const response = await enable(hook.id)
      expect(response.status).toBe(200)
      expect(await response.json()).toEqual(await (await server.fetch(hookPath(hook.id))).json())
    }
    const after = await storedSecrets(hook.id)
    expect(after.row).toEqual(before.row)
  })

  test("enabling an active subscription that keeps failing does not restart its failure clock", async () => {
    const hook = await createHook()
    const failingSince = new Date(Date.now() - 4 * DAY_MS)
    await db.update(hooks).set({ failingSince }).where(eq(hooks.id, hook.id))
    expect((await enable(hook.id)).status).toBe(200)
    expect((await storedSecrets(hook.id)).row.failingSince).toEqual(failingSince)
  })
})

describe('missing and foreign subscriptions', () => {
  for (const [name, call] of [
    ['rotate', rotate],
    ['enable', enable],
  ] as const) {
    test(`${name}: an unknown id, a malformed id and another account's subscription are 404`, async () => {
      const hook = await createHook()
      await db.update(hooks).set({ status: 'disabled', disabledReason: 'kept' }).where(eq(hooks.id, hook.id))
      for (const hookId of ['hook_01jd3m9x2qk7r5v8w4y6z0abcd', 'nope', 'hook_!!', 'msg_01jd3m9x2qk7r5v8w4y6z0abcd']) {
        const response = await call(hookId)
        expect(response.status).toBe(404)
        expect((await response.json()).code).toBe('not_found')
      }
      // Bob naming Alice's account, and Bob naming his own account with Alice's hook.
      const asBob = await server.fetch(`/v0/account/${alice.accountId}/hooks/${hook.id}/${name === 'rotate' ? 'secret/rotate' : 'enable'}?key=${bob.secret}`, { method: 'POST' })
      expect(asBob.status).toBe(404)
      expect((await call(hook.id, {}, bob)).status).toBe(404)
      const stored = await storedSecrets(hook.id)
      expect([stored.current, stored.previous, stored.row.status, stored.row.disabledReason]).toEqual([hook.secret, null, 'disabled', 'kept'])
    })
  }
})

describe('scopes', () => {
  test('a hooks:read token cannot rotate or enable; a hooks:write token can', async () => {
    const fixture = await flowFixture(server)
    const owner = { accountId: fixture.accountId, secret: fixture.apiKey }
    const hook = await createHook(owner)
    const base = `/v0/account/${fixture.accountId}/hooks/${hook.id}`
    const post = (suffix: string, token: string) => server.fetch(`${base}${suffix}`, { method: 'POST', headers: { authorization: `Bearer ${token}` } })

    const readOnly = (await authorizeAndRedeem(server, fixture, { scope: 'hooks:read' })).tokens.access_token
    expect((await server.fetch(base, { headers: { authorization: `Bearer ${readOnly}` } })).status).toBe(200)
    for (const suffix of ['/secret/rotate', '/enable']) {
      const denied = await post(suffix, readOnly)
      expect(denied.status).toBe(403)
      expect(denied.headers.get('www-authenticate')).toContain('scope="hooks:write"')
    }
    expect((await storedSecrets(hook.id)).current).toBe(hook.secret)

    const writer = (await authorizeAndRedeem(server, fixture, { scope: 'hooks:write' })).tokens.access_token
    const rotated = await post('/secret/rotate', writer)
    expect(rotated.status).toBe(200)
    expect((await rotated.json()).secret).toMatch(SECRET)
    expect((await post('/enable', writer)).status).toBe(200)
    expect((await server.fetch(`${base}/enable`, { method: 'POST' })).status).toBe(401)
  })
})

describe('request bodies', () => {
  // Both routes take no body. Like DELETE, they ignore a JSON body and refuse what every route
  // refuses: JSON that does not parse (400), another content type (415).
  const cases: [string, RequestInit, number][] = [
    ['no body, no content type', {}, 200],
    ['Content-Length: 0', { headers: { 'content-length': '0' } }, 200],
    ['a JSON content type and no body', { headers: { 'content-type': 'application/json' } }, 200],
    ['a JSON content type and an empty body', { headers: { 'content-type': 'application/json' }, body: '' }, 200],
    ['an empty JSON object', { headers: { 'content-type': 'application/json' }, body: '{}' }, 200],
    ['unexpected JSON fields (ignored)', { headers: { 'content-type': 'application/json' }, body: '{"secret":"whsec_mine","status":"disabled"}' }, 200],
    ['malformed JSON', { headers: { 'content-type': 'application/json' }, body: '{' }, 400],
    ['a text body', { headers: { 'content-type': 'text/plain' }, body: 'rotate' }, 415],
  ]
  for (const [name, init, status] of cases) {
    test(`${name}: ${status}`, async () => {
      const hook = await createHook()
      const rotated = await rotate(hook.id, init)
      expect(rotated.status).toBe(status)
      const enabled = await enable(hook.id, init)
      expect(enabled.status).toBe(status)
      if (status === 200) {
        const body = await rotated.json()
        expect(body.secret).toMatch(SECRET)
        expect(body.secret).not.toBe('whsec_mine')
        expect((await enabled.json()).status).toBe('active')
      } else {
        expect(rotated.headers.get('content-type')).toContain('application/problem+json')
        expect((await storedSecrets(hook.id)).current).toBe(hook.secret)
      }
    })
  }
})

describe('OpenAPI document', () => {
  test('lists both routes with their scope and response schema', async () => {
    const document = await (await server.fetch('/v0/openapi.json')).json()
    const rotatePath = document.paths['/v0/account/{account_id}/hooks/{hook_id}/secret/rotate'].post
    expect(rotatePath.security).toEqual([{ apiKey: [] }, { oauth2: ['hooks:write'] }])
    expect(rotatePath.summary).toBeString()
    expect(rotatePath.responses['200'].content['application/json'].schema).toEqual({ $ref: '#/components/schemas/RotatedHook' })
    const rotatedSchema = document.components.schemas.RotatedHook
    expect(rotatedSchema.required).toEqual(expect.arrayContaining(['id', 'status', 'signature', 'public_key', 'previous_public_key', 'previous_public_key_expires_at']))
    // Only an hmac rotation answers a secret; an ed25519 one answers its new public key (docs/webhooks.md#signatures).
    expect(rotatedSchema.required).not.toContain('secret')
    expect(Object.keys(rotatedSchema.properties)).toEqual(expect.arrayContaining(['secret', 'previous_secret_expires_at']))
    const enablePath = document.paths['/v0/account/{account_id}/hooks/{hook_id}/enable'].post
    expect(enablePath.security).toEqual([{ apiKey: [] }, { oauth2: ['hooks:write'] }])
    expect(enablePath.responses['200']).toBeDefined()
  })
})
