import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { Webhook } from 'standardwebhooks'
import { Value } from '@sinclair/typebox/value'
import { EventSchema } from '../../src/messages/schemas.ts'
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
// Every message.inbound subscription of the account gets each event: `path` tells them apart.
const arrivedFor = (messageId: string, path: string) =>
  receiver.received.filter((request) => request.path === path && (JSON.parse(request.body) as { data: { message: { id: string } } }).data.message.id === messageId)
const ownSecret = (bytes: number) => `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString('base64')}`

describe('create with a secret of your own and a rate limit', () => {
  test('the deliveries are signed with the secret given; the subscription shows its rate limit', async () => {
    const secret = ownSecret(32)
    const created = await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/own-secret`, secret, rate_limit_per_s: 50 })
    expect(created.status).toBe(201)
    const hook = await created.json()
    expect(hook).toMatchObject({ secret, rate_limit_per_s: 50, status: 'active' })
    const messageId = await inbound(alice, 'signed with mine')
    await receiver.waitFor(() => arrivedFor(messageId, '/own-secret').length === 1)
    const [request] = arrivedFor(messageId, '/own-secret')
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
    await receiver.waitFor(() => arrivedFor(messageId, '/after-move').length === 1)
    const [request] = arrivedFor(messageId, '/after-move')
    expect(new Webhook(created.secret).verify(request!.body, request!.headers)).toBeTruthy()
    expect(arrivedFor(messageId, '/before-move')).toHaveLength(0)
  })

  test('paused holds the deliveries, which are still recorded; active sends them', async () => {
    const owner = await server.createAccountWithKey('Pauser')
    const created = await (await call(owner, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/paused` })).json()
    const paused = await call(owner, 'PATCH', `/hooks/${created.id}`, { status: 'paused' })
    expect(paused.status).toBe(200)
    expect((await paused.json()).status).toBe('paused')
    const held = [await inbound(owner, 'held 1'), await inbound(owner, 'held 2')]
    await Bun.sleep(1_500)
    expect(held.flatMap((id) => arrivedFor(id, '/paused'))).toHaveLength(0)
    const resumed = await call(owner, 'PATCH', `/hooks/${created.id}`, { status: 'active' })
    expect((await resumed.json()).status).toBe('active')
    await receiver.waitFor(() => held.every((id) => arrivedFor(id, '/paused').length >= 1))
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

describe('local development (WEBHOOK_ALLOW_PRIVATE_TARGETS=true)', () => {
  test('plain http to a loopback receiver is accepted and delivered, signed; plain http to a public host is still refused', async () => {
    const received: { body: string; headers: Record<string, string> }[] = []
    const plain = Bun.serve({
      port: 0,
      hostname: '127.0.0.1',
      async fetch(request) {
        received.push({ body: await request.text(), headers: Object.fromEntries(request.headers) })
        return new Response('ok')
      },
    })
    try {
      const created = await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `http://127.0.0.1:${plain.port}/hook` })
      expect(created.status).toBe(201)
      const hook = await created.json()
      const messageId = await inbound(alice, 'over plain http')
      for (let i = 0; i < 200 && !received.some((request) => request.body.includes(messageId)); i++) await Bun.sleep(25)
      const request = received.find((item) => item.body.includes(messageId))!
      expect(new Webhook(hook.secret).verify(request.body, request.headers)).toBeTruthy()

      const publicHttp = await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: 'http://hooks.example.com/plain' })
      expect(publicHttp.status).toBe(422)
      expect((await publicHttp.json()).errors).toEqual([{ path: '/target_url', message: 'must use https' }])
    } finally {
      plain.stop(true)
    }
  })
})

describe('the attempt log line', () => {
  test('one info line per attempt: subscription, event, delivery, status, duration; never a secret', async () => {
    const created = await (await call(alice, 'POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/logged` })).json()
    const messageId = await inbound(alice, 'logged')
    await receiver.waitFor(() => arrivedFor(messageId, '/logged').length === 1)
    const eventId = arrivedFor(messageId, '/logged')[0]!.headers['webhook-id']
    let line: Record<string, unknown> | undefined
    for (let i = 0; i < 100 && !line; i++) {
      line = server.logs.find((entry) => entry.msg === 'delivery attempt' && entry.event_id === eventId && entry.hook_id === created.id)
      if (!line) await Bun.sleep(20)
    }
    expect(line).toMatchObject({ level: 'info', hook_id: created.id, event_id: eventId, delivery_id: expect.stringMatching(/^dlv_/), attempt: 1, status: 200, duration_ms: expect.any(Number), outcome: 'delivered' })
    expect(JSON.stringify(server.logs)).not.toContain(created.secret.slice(6))
  })
})

describe('GET /event-types', () => {
  test('each type with its description, the JSON Schema of its body and an example built like a real event; a credential is needed', async () => {
    const response = await server.fetch(`/v0/event-types?key=${alice.secret}`)
    expect(response.status).toBe(200)
    const { data } = (await response.json()) as { data: { type: string; description: string; schema: Record<string, any>; example: Record<string, any> }[] }
    expect(data.map((item) => item.type)).toEqual(['message.delivered', 'message.failed', 'message.inbound'])
    for (const item of data) {
      expect(item.description.length).toBeGreaterThan(0)
      expect(item.schema.$schema).toBe('https://json-schema.org/draft/2020-12/schema')
      expect(item.schema.properties.type.const).toBe(item.type)
      expect([...item.schema.required].sort()).toEqual(['account_id', 'data', 'id', 'timestamp', 'type'])
      expect(JSON.stringify(item.schema)).not.toContain('$id')
      expect(Value.Check(EventSchema, item.example)).toBe(true)
      expect(item.example.type).toBe(item.type)
      expect(Object.keys(item.example).sort()).toEqual(Object.keys(item.schema.properties).sort())
    }
    // The example has the shape of what a receiver gets.
    const messageId = await inbound(alice, 'shape check')
    await receiver.waitFor(() => arrivedFor(messageId, '/own-secret').length === 1)
    const real = JSON.parse(arrivedFor(messageId, '/own-secret')[0]!.body)
    const example = data.find((item) => item.type === 'message.inbound')!.example
    expect(Object.keys(real).sort()).toEqual(Object.keys(example).sort())
    expect(Object.keys(real.data.message).sort()).toEqual(Object.keys(example.data.message).sort())

    expect((await server.fetch('/v0/event-types')).status).toBe(401)
  })
})
