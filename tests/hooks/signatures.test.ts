import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { eq } from 'drizzle-orm'
import { Webhook } from 'standardwebhooks'
import { hooks } from '../../src/lib/db/schema.ts'
import { startTestServer } from '../support/server.ts'
import { startReceiver, type ReceivedWebhook } from '../support/receiver.ts'

setDefaultTimeout(30_000)

// docs/webhooks.md#signatures, over real sockets: the service signs, a receiver verifies with what the API shows.
const receiver = startReceiver(() => new Response('ok'))
const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile, WEBHOOK_TIMEOUT_MS: '2000' } })
type Owner = { accountId: string; secret: string }
const alice = await server.createAccountWithKey('Alice')
const bob = await server.createAccountWithKey('Bob')
const db = server.database.handle.db
const DAY_MS = 24 * 60 * 60 * 1000
const PUBLIC_KEY = /^whpk_[A-Za-z0-9+/]{43}=$/

const call = (owner: Owner, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
  server.fetch(`/v0/account/${owner.accountId}${path}${path.includes("?") ? "&" : "?"}key=${owner.secret}`, {
    method,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
const json = async (response: Response) => (await response.json()) as any

async function subscribe(path: string, extra: Record<string, unknown> = { signature: 'ed25519' }, owner: Owner = alice) {
  const created = await call(owner, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}${path}`, ...extra })
  expect(created.status).toBe(201)
  return json(created)
}

/** One inbound message, and the delivery it makes to `path` (the `nth` one there). */
async function deliveredTo(path: string, nth: number, owner: Owner = alice): Promise<ReceivedWebhook> {
  expect((await call(owner, 'POST', '/sandbox/inbound', { from: '+447700900800', body: `to ${path}` })).status).toBe(201)
  await receiver.waitFor((received) => received.filter((request) => request.path === path).length >= nth)
  return receiver.received.filter((request) => request.path === path)[nth - 1]!
}

/** What a receiver does with a v1a signature: Web Crypto, the whpk_ key and `webhook-id.webhook-timestamp.body`. */
async function verifiesWith(publicKey: string, signature: string, request: ReceivedWebhook): Promise<boolean> {
  const [version, value] = signature.split(',')
  expect(version).toBe('v1a')
  const key = await crypto.subtle.importKey('raw', Buffer.from(publicKey.slice('whpk_'.length), 'base64'), 'Ed25519', false, ['verify'])
  const signed = new TextEncoder().encode(`${request.headers['webhook-id']}.${request.headers['webhook-timestamp']}.${request.body}`)
  return crypto.subtle.verify('Ed25519', key, Buffer.from(value!, 'base64'), signed)
}
const signaturesOf = (request: ReceivedWebhook) => request.headers['webhook-signature']!.split(' ')

describe('signature: "ed25519"', () => {
  test('create answers the public key and no secret; read and list show the same key; a delivery verifies with it', async () => {
    const hook = await subscribe('/ed25519')
    expect(hook.secret).toBeUndefined()
    expect(hook.public_key).toMatch(PUBLIC_KEY)
    expect([hook.signature, hook.previous_public_key, hook.previous_public_key_expires_at]).toEqual(['ed25519', null, null])
    expect(await json(await call(alice, 'GET', `/hooks/${hook.id}`))).toEqual(hook)
    const listed = (await json(await call(alice, 'GET', '/hooks?limit=100'))).data.find((each: any) => each.id === hook.id)
    expect(listed).toEqual(hook)

    // Not stored in the clear: the private key is sealed like a secret; the public key is public.
    const [row] = await db.select().from(hooks).where(eq(hooks.id, hook.id))
    expect(row!.signatureScheme).toBe('ed25519')
    expect(await server.instance.secretBox.open(row!.secretCiphertext)).toMatch(/^whsk_[A-Za-z0-9+/]{86}==$/)

    const request = await deliveredTo('/ed25519', 1)
    const [signature, ...more] = signaturesOf(request)
    expect(more).toEqual([])
    const { public_key } = await json(await call(alice, 'GET', `/hooks/${hook.id}`))
    expect(await verifiesWith(public_key, signature!, request)).toBe(true)
    // Another key, or another body, does not verify.
    expect(await verifiesWith((await subscribe('/ed25519-other')).public_key, signature!, request)).toBe(false)
    expect(await verifiesWith(public_key, signature!, { ...request, body: `${request.body} ` })).toBe(false)
  })

  test('a test event is signed the same way', async () => {
    const hook = await subscribe('/ed25519-test')
    const result = await json(await call(alice, 'POST', `/hooks/${hook.id}/test`))
    expect(result.status_code).toBe(200)
    const [request] = receiver.received.filter((each) => each.path === '/ed25519-test')
    expect(signaturesOf(request!)).toHaveLength(1)
    expect(await verifiesWith(hook.public_key, signaturesOf(request!)[0]!, request!)).toBe(true)
  })

  test('rotation: a new public key, the old one shown as previous for 24 h; deliveries carry both signatures, each verifying with its key', async () => {
    const hook = await subscribe('/ed25519-rotate')
    const started = Date.now()
    const response = await call(alice, 'POST', `/hooks/${hook.id}/secret/rotate`)
    expect(response.status).toBe(200)
    const rotated = await json(response)
    expect(rotated.secret).toBeUndefined()
    expect(rotated.previous_secret_expires_at).toBeUndefined()
    expect(rotated.public_key).toMatch(PUBLIC_KEY)
    expect(rotated.public_key).not.toBe(hook.public_key)
    expect(rotated.previous_public_key).toBe(hook.public_key)
    expect(Math.abs(Date.parse(rotated.previous_public_key_expires_at) - (started + DAY_MS))).toBeLessThan(60_000)
    expect(await json(await call(alice, 'GET', `/hooks/${hook.id}`))).toEqual(rotated)

    const request = await deliveredTo('/ed25519-rotate', 1)
    const [current, previous, ...more] = signaturesOf(request)
    expect(more).toEqual([])
    expect(await verifiesWith(rotated.public_key, current!, request)).toBe(true)
    expect(await verifiesWith(rotated.previous_public_key, previous!, request)).toBe(true)
    expect(await verifiesWith(rotated.previous_public_key, current!, request)).toBe(false)

    // Rotating again keeps two keys: the first one is gone.
    const again = await json(await call(alice, 'POST', `/hooks/${hook.id}/secret/rotate`))
    expect([again.previous_public_key, new Set([hook.public_key, rotated.public_key, again.public_key]).size]).toEqual([rotated.public_key, 3])

    // Once the overlap is over, the previous key is no longer shown and no longer signs.
    await db.update(hooks).set({ previousSecretExpiresAt: new Date(Date.now() - 1000) }).where(eq(hooks.id, hook.id))
    const after = await json(await call(alice, 'GET', `/hooks/${hook.id}`))
    expect([after.public_key, after.previous_public_key, after.previous_public_key_expires_at]).toEqual([again.public_key, null, null])
    const later = await deliveredTo('/ed25519-rotate', 2)
    expect(signaturesOf(later)).toHaveLength(1)
    expect(await verifiesWith(again.public_key, signaturesOf(later)[0]!, later)).toBe(true)
  })

  test('a replayed create (Idempotency-Key) answers the same public key', async () => {
    const body = { event: 'message.inbound', target_url: `${receiver.origin}/ed25519-replayed`, signature: 'ed25519' }
    const first = await json(await call(alice, 'POST', '/hooks', body, { 'idempotency-key': 'ed25519-create' }))
    const again = await call(alice, 'POST', '/hooks', body, { 'idempotency-key': 'ed25519-create' })
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect((await json(again)).public_key).toBe(first.public_key)
  })
})

describe('signature: "hmac" (the default)', () => {
  test('left out or given, the subscription has a secret and no public key, and its deliveries carry v1 signatures', async () => {
    const implicit = await subscribe('/hmac-default', {})
    const explicit = await subscribe('/hmac-explicit', { signature: 'hmac' })
    for (const hook of [implicit, explicit]) {
      expect(hook.secret).toMatch(/^whsec_/)
      expect([hook.signature, hook.public_key, hook.previous_public_key, hook.previous_public_key_expires_at]).toEqual(['hmac', null, null, null])
    }
    const request = await deliveredTo('/hmac-default', 1)
    expect(new Webhook(implicit.secret).verify(request.body, request.headers)).toBeTruthy()
    const rotated = await json(await call(alice, 'POST', `/hooks/${implicit.id}/secret/rotate`))
    expect(rotated.secret).toMatch(/^whsec_/)
    expect(Date.parse(rotated.previous_secret_expires_at)).toBeGreaterThan(Date.now())
    expect([rotated.signature, rotated.public_key, rotated.previous_public_key]).toEqual(['hmac', null, null])
  })
})

describe('bad inputs', () => {
  test('an unknown signature is 422 naming the field', async () => {
    for (const signature of ['rsa', 'ED25519', 'v1a', '', null, 1]) {
      const response = await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/bad`, signature })
      expect(response.status).toBe(422)
      const problem = await json(response)
      expect(problem.code).toBe('validation_failed')
      expect(problem.errors.map((error: { path: string }) => error.path)).toContain('/signature')
    }
  })

  test('a secret with ed25519 is 422 naming the secret, and nothing is created', async () => {
    const secret = `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`
    const response = await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/with-secret`, signature: 'ed25519', secret })
    expect(response.status).toBe(422)
    const problem = await json(response)
    expect(problem.errors).toEqual([{ path: '/secret', message: expect.stringContaining('ed25519') }])
    const listed = (await json(await call(alice, 'GET', '/hooks?limit=100'))).data
    expect(listed.some((hook: { target_url: string }) => hook.target_url.endsWith('/with-secret'))).toBe(false)
  })

  test("another account's ed25519 subscription is 404 to read and to rotate, and its key is unchanged", async () => {
    const hook = await subscribe('/bobs', { signature: 'ed25519' }, bob)
    expect((await call(alice, 'GET', `/hooks/${hook.id}`)).status).toBe(404)
    const rotate = await call(alice, 'POST', `/hooks/${hook.id}/secret/rotate`)
    expect(rotate.status).toBe(404)
    expect(await rotate.text()).not.toContain('whpk_')
    const read = await json(await call(bob, 'GET', `/hooks/${hook.id}`))
    expect([read.public_key, read.previous_public_key]).toEqual([hook.public_key, null])
  })
})
