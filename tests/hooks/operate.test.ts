import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { Webhook } from 'standardwebhooks'
import { startTestServer } from '../support/server.ts'
import { startReceiver } from '../support/receiver.ts'

setDefaultTimeout(30_000)

const receiver = startReceiver(() => new Response('ok'))
const server = await startTestServer({
  env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile, WEBHOOK_TIMEOUT_MS: '1000' },
})
type Owner = { accountId: string; secret: string }
const alice = await server.createAccountWithKey('Alice')
const bob = await server.createAccountWithKey('Bob')

const call = (owner: Owner, method: string, path: string, body?: unknown) =>
  server.fetch(`/v0/account/${owner.accountId}${path}?key=${owner.secret}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
const inbound = async (owner: Owner, text: string) => {
  const response = await call(owner, 'POST', '/sandbox/inbound', { from: '+447700900700', body: text })
  expect(response.status).toBe(201)
  return ((await response.json()) as { id: string }).id
}
const arrivedFor = (messageId: string) => receiver.received.filter((request) => (JSON.parse(request.body) as { data: { message: { id: string } } }).data.message.id === messageId)
const ownSecret = (bytes: number) => `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString('base64')}`

describe('create with a secret of your own and a rate limit', () => {
  test('the deliveries are signed with the secret given; the subscription shows its rate limit', async () => {
    const secret = ownSecret(32)
    const created = await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/own-secret`, secret, rate_limit_per_s: 50 })
    expect(created.status).toBe(201)
    const hook = await created.json()
    expect(hook).toMatchObject({ secret, rate_limit_per_s: 50, status: 'active' })
    const messageId = await inbound(alice, 'signed with mine')
    await receiver.waitFor(() => arrivedFor(messageId).length === 1)
    const [request] = arrivedFor(messageId)
    expect(new Webhook(secret).verify(request!.body, request!.headers)).toBeTruthy()
    // Read back: the rate limit, never the secret.
    const read = await (await call(alice, 'GET', `/hooks/${hook.id}`)).json()
    expect(read.rate_limit_per_s).toBe(50)
    expect(read.secret).toBeUndefined()
  })

  test('one secret for several subscriptions of one receiver', async () => {
    const secret = ownSecret(24)
    for (const event of ['message.delivered', 'message.failed']) {
      const created = await call(alice, 'POST', '/hooks', { event, target_url: `${receiver.origin}/shared-secret`, secret })
      expect(created.status).toBe(201)
      expect((await created.json()).secret).toBe(secret)
    }
  })

  test('a secret that is not whsec_ and base64 of 24 to 64 bytes, or a rate limit out of range, is 422 naming the field', async () => {
    const refused = [
      [{ secret: 'not-a-secret' }, '/secret'],
      [{ secret: ownSecret(16) }, '/secret'],
      [{ secret: ownSecret(65) }, '/secret'],
      [{ secret: 'whsec_!!!!' }, '/secret'],
      [{ secret: 42 }, '/secret'],
      [{ rate_limit_per_s: 0 }, '/rate_limit_per_s'],
      [{ rate_limit_per_s: 1.5 }, '/rate_limit_per_s'],
      [{ rate_limit_per_s: 'fast' }, '/rate_limit_per_s'],
      [{ rate_limit_per_s: 10_001 }, '/rate_limit_per_s'],
    ] as const
    for (const [extra, path] of refused) {
      const response = await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/refused`, ...extra })
      expect(response.status).toBe(422)
      const problem = await response.json()
      expect(problem.code).toBe('validation_failed')
      expect(problem.errors.map((error: { path: string }) => error.path)).toContain(path)
    }
  })
})

describe('PATCH a subscription', () => {
  test('a new target URL keeps the secret: the next delivery goes there and verifies with the first secret', async () => {
    const created = await (await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/before-move` })).json()
    const patched = await call(alice, 'PATCH', `/hooks/${created.id}`, { target_url: `${receiver.origin}/after-move` })
    expect(patched.status).toBe(200)
    const hook = await patched.json()
    expect(hook).toMatchObject({ id: created.id, target_url: `${receiver.origin}/after-move`, status: 'active' })
    expect(hook.secret).toBeUndefined()
    const messageId = await inbound(alice, 'moved')
    await receiver.waitFor(() => arrivedFor(messageId).some((request) => request.path === '/after-move'))
    const request = arrivedFor(messageId).find((item) => item.path === '/after-move')!
    expect(new Webhook(created.secret).verify(request.body, request.headers)).toBeTruthy()
    expect(arrivedFor(messageId).some((item) => item.path === '/before-move')).toBe(false)
  })

  test('paused holds the deliveries, which are still recorded; active sends them', async () => {
    const owner = await server.createAccountWithKey('Pauser')
    const created = await (await call(owner, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/paused` })).json()
    const paused = await call(owner, 'PATCH', `/hooks/${created.id}`, { status: 'paused' })
    expect(paused.status).toBe(200)
    expect((await paused.json()).status).toBe('paused')
    const held = [await inbound(owner, 'held 1'), await inbound(owner, 'held 2')]
    await Bun.sleep(1_500)
    expect(held.flatMap(arrivedFor)).toHaveLength(0)
    const resumed = await call(owner, 'PATCH', `/hooks/${created.id}`, { status: 'active' })
    expect((await resumed.json()).status).toBe('active')
    await receiver.waitFor(() => held.every((id) => arrivedFor(id).length >= 1))
  })

  test('rate_limit_per_s is set and cleared with null', async () => {
    const created = await (await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/limited` })).json()
    expect(created.rate_limit_per_s).toBeNull()
    expect((await (await call(alice, 'PATCH', `/hooks/${created.id}`, { rate_limit_per_s: 5 })).json()).rate_limit_per_s).toBe(5)
    expect((await (await call(alice, 'PATCH', `/hooks/${created.id}`, { rate_limit_per_s: null })).json()).rate_limit_per_s).toBeNull()
  })

  test("bad input is 422; another account's subscription and an unknown id are 404; a URL another subscription of the event has is 409", async () => {
    const created = await (await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/patch-errors` })).json()
    const other = await (await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/patch-taken` })).json()
    for (const body of [{}, { status: 'disabled' }, { status: 'paused', secret: 'x' }, { target_url: 'http://example.com/' }, { rate_limit_per_s: 0 }, { target_url: 7 }]) {
      const response = await call(alice, 'PATCH', `/hooks/${created.id}`, body)
      expect(response.status).toBe(422)
      expect(response.headers.get('content-type')).toBe('application/problem+json')
    }
    expect((await call(bob, 'PATCH', `/hooks/${created.id}`, { status: 'paused' })).status).toBe(404)
    expect((await call(alice, 'PATCH', '/hooks/hook_01m00000000000000000000000', { status: 'paused' })).status).toBe(404)
    expect((await call(alice, 'PATCH', '/hooks/not-an-id', { status: 'paused' })).status).toBe(404)
    expect((await call(alice, 'PATCH', `/hooks/${created.id}`, { target_url: other.target_url })).status).toBe(409)
    // Nothing of it changed the subscription.
    expect(await (await call(alice, 'GET', `/hooks/${created.id}`)).json()).toMatchObject({ status: 'active', target_url: `${receiver.origin}/patch-errors`, rate_limit_per_s: null })
  })

  test('PATCH without credentials is 401', async () => {
    const created = await (await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/patch-scope` })).json()
    const response = await server.fetch(`/v0/account/${alice.accountId}/hooks/${created.id}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ status: 'paused' }) })
    expect(response.status).toBe(401)
  })
})
