import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { connect, type Channel, type ChannelModel, type GetMessage } from 'amqplib'
import { Webhook } from 'standardwebhooks'
import { startTestServer } from '../../support/server.ts'
import { until } from '../../support/until.ts'

setDefaultTimeout(30_000)

// The machine's RabbitMQ (README, "Test"): every name here is this run's own.
const run = crypto.randomUUID().slice(0, 8)
const exchange = `events-${run}`
const queue = `inbound-${run}`
let broker: ChannelModel
let channel: Channel

beforeAll(async () => {
  broker = await connect('amqp://guest:guest@127.0.0.1:5672')
  channel = await broker.createChannel()
  await channel.assertExchange(exchange, 'topic', { durable: false, autoDelete: true })
  await channel.assertQueue(queue, { durable: false, autoDelete: false, exclusive: false })
  await channel.bindQueue(queue, exchange, 'message.#')
})
afterAll(async () => {
  await channel.deleteQueue(queue).catch(() => {})
  await broker.close().catch(() => {})
})

const server = await startTestServer({
  env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_TIMEOUT_MS: '2000', WEBHOOK_RETRY_SCHEDULE: '0,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms' },
})
const owner = await server.createAccountWithKey()

async function subscribe(target: string, event = 'message.inbound') {
  const response = await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event, target_url: target }),
  })
  return { status: response.status, body: (await response.json()) as any }
}

async function inbound(body = 'hello') {
  const response = await server.fetch(`/v0/account/${owner.accountId}/sandbox/inbound?key=${owner.secret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ from: '+447700900300', body }),
  })
  expect(response.status).toBe(201)
  return (await response.json()) as { id: string }
}

/** The next message on the queue whose event is of this type (others, from earlier tests' subscriptions, are skipped). */
async function nextMessage(from: string, timeoutMs = 10_000, type?: string): Promise<GetMessage> {
  const until = Date.now() + timeoutMs
  while (Date.now() < until) {
    const message = await channel.get(from, { noAck: true })
    if (message && (type === undefined || JSON.parse(message.content.toString()).type === type)) return message
    if (message) continue
    await Bun.sleep(50)
  }
  throw new Error(`nothing arrived on ${from} within ${timeoutMs} ms`)
}

describe('a RabbitMQ destination', () => {
  test('a message event reaches a bound queue, signed as Standard Webhooks, confirmed, and listed as delivered', async () => {
    const created = await subscribe(`amqp://guest:guest@127.0.0.1:5672/?exchange=${exchange}&routing_key=message.inbound`)
    expect(created.status).toBe(201)
    expect(created.body.target_url).toBe(`amqp://guest:***@127.0.0.1:5672/?exchange=${exchange}&routing_key=message.inbound`)
    await inbound('to the queue')
    const message = await nextMessage(queue)
    const body = message.content.toString()
    const headers = message.properties.headers as Record<string, string>
    expect(() => new Webhook(created.body.secret).verify(body, headers)).not.toThrow()
    const event = JSON.parse(body)
    expect(event.type).toBe('message.inbound')
    expect(message.properties.messageId).toBe(event.id)
    expect(message.properties.contentType).toBe('application/json')
    expect(message.properties.deliveryMode).toBe(2)
    const listed = await until(
      async () => (await (await server.fetch(`/v0/account/${owner.accountId}/hooks/${created.body.id}/deliveries?key=${owner.secret}`)).json()) as { data: { event_id: string; state: string; last_attempt: { status_code: number | null; error: string | null } | null }[] },
      (page) => page.data[0]?.state === 'succeeded',
    )
    expect(listed.data).toHaveLength(1)
    expect(listed.data[0]).toMatchObject({ event_id: event.id, state: 'succeeded', last_attempt: { status_code: null, error: null } })
  })
})

async function attemptErrors(hookId: string): Promise<(string | null)[]> {
  const page = (await (await server.fetch(`/v0/account/${owner.accountId}/hooks/${hookId}/deliveries?key=${owner.secret}`)).json()) as { data: { id: string }[] }
  const errors: (string | null)[] = []
  for (const delivery of page.data) {
    const detail = (await (await server.fetch(`/v0/account/${owner.accountId}/hooks/${hookId}/deliveries/${delivery.id}?key=${owner.secret}`)).json()) as { attempt_log: { error: string | null }[] }
    errors.push(...detail.attempt_log.map((attempt) => attempt.error))
  }
  return errors
}

async function failuresOf(hookId: string): Promise<Record<string, number>> {
  const stats = (await (await server.fetch(`/v0/account/${owner.accountId}/hooks/${hookId}/stats?interval=minute&key=${owner.secret}`)).json()) as { totals: { failures: Record<string, number> } }
  return stats.totals.failures
}

describe('a RabbitMQ destination that cannot take the message', () => {
  test('unroutable (no queue bound to the routing key) is a failed attempt with its reason, retried, and delivered once a queue is bound', async () => {
    const routingKey = `nobody.${run}`
    const created = await subscribe(`amqp://guest:guest@127.0.0.1:5672/?exchange=${exchange}&routing_key=${routingKey}`, 'message.inbound')
    expect(created.status).toBe(201)
    await inbound('nobody listens yet')
    const errors = await until(() => attemptErrors(created.body.id), (list) => list.length >= 2)
    expect(errors[0]).toContain(`unroutable: no queue is bound to exchange '${exchange}' with routing key '${routingKey}'`)
    expect((await failuresOf(created.body.id)).unroutable).toBeGreaterThanOrEqual(2)
    const late = `late-${run}`
    await channel.assertQueue(late, { durable: false, autoDelete: true })
    await channel.bindQueue(late, exchange, routingKey)
    const message = await nextMessage(late, 15_000)
    expect(JSON.parse(message.content.toString()).data.message.body).toBe('nobody listens yet')
    await channel.deleteQueue(late)
  })

  test('an exchange that does not exist fails with the broker\'s words, and other subscriptions on the same broker keep delivering', async () => {
    const missing = await subscribe(`amqp://guest:guest@127.0.0.1:5672/?exchange=missing-${run}&routing_key=x`, 'message.inbound')
    expect(missing.status).toBe(201)
    await inbound('two subscriptions')
    const errors = await until(() => attemptErrors(missing.body.id), (list) => list.length >= 1)
    expect(errors[0]).toContain(`no exchange 'missing-${run}'`)
    expect((await failuresOf(missing.body.id)).unroutable).toBeGreaterThanOrEqual(1)
    let delivered = await nextMessage(queue)
    while (JSON.parse(delivered.content.toString()).data.message.body !== 'two subscriptions') delivered = await nextMessage(queue)
    await server.fetch(`/v0/account/${owner.accountId}/hooks/${missing.body.id}?key=${owner.secret}`, { method: 'DELETE' })
  })

  test('a vhost that does not exist is denied, not a lost connection', async () => {
    const created = await subscribe(`amqp://guest:guest@127.0.0.1:5672/no-such-vhost-${run}?exchange=${exchange}&routing_key=x`, 'message.failed')
    expect(created.status).toBe(201)
    const test = await server.fetch(`/v0/account/${owner.accountId}/hooks/${created.body.id}/test?key=${owner.secret}`, { method: 'POST' })
    expect(((await test.json()) as { error: string }).error).toBe('connecting: the broker refused the vhost (it does not exist, or the user has no access to it)')
    expect((await failuresOf(created.body.id)).denied).toBe(1)
    await server.fetch(`/v0/account/${owner.accountId}/hooks/${created.body.id}?key=${owner.secret}`, { method: 'DELETE' })
  })

  test('a wrong password is denied; the password is shown as *** and never written to a response or a log line', async () => {
    const password = `wrong-${run}-pw`
    const created = await subscribe(`amqp://guest:${password}@127.0.0.1:5672/?exchange=${exchange}&routing_key=message.x`, 'message.delivered')
    expect(created.status).toBe(201)
    expect(JSON.stringify(created.body)).not.toContain(password)
    const test = await server.fetch(`/v0/account/${owner.accountId}/hooks/${created.body.id}/test?key=${owner.secret}`, { method: 'POST' })
    const result = (await test.json()) as { status_code: number | null; error: string }
    expect(result.status_code).toBeNull()
    expect(result.error).toContain('access refused')
    expect((await failuresOf(created.body.id)).denied).toBe(1)
    const read = await (await server.fetch(`/v0/account/${owner.accountId}/hooks/${created.body.id}?key=${owner.secret}`)).text()
    const list = await (await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`)).text()
    for (const text of [read, list, ...server.rawLogs]) expect(text).not.toContain(password)
    expect(read).toContain('guest:***@127.0.0.1')
    await server.fetch(`/v0/account/${owner.accountId}/hooks/${created.body.id}?key=${owner.secret}`, { method: 'DELETE' })
  })
})

describe('testing a RabbitMQ destination', () => {
  test('POST …/test publishes one signed example event to the exchange now and answers from that attempt', async () => {
    const created = await subscribe(`amqp://guest:guest@127.0.0.1:5672/?exchange=${exchange}&routing_key=message.delivered`, 'message.delivered')
    const response = await server.fetch(`/v0/account/${owner.accountId}/hooks/${created.body.id}/test?key=${owner.secret}`, { method: 'POST' })
    expect(response.status).toBe(200)
    const result = (await response.json()) as { status_code: number | null; error: string | null }
    expect(result).toMatchObject({ status_code: null, error: null })
    const message = await nextMessage(queue, 10_000, 'message.delivered')
    expect(() => new Webhook(created.body.secret).verify(message.content.toString(), message.properties.headers as Record<string, string>)).not.toThrow()
    expect(message.properties.type).toBe('message.delivered')
  })
})

describe('what a RabbitMQ target may be', () => {
  const refused = async (target: string) => {
    const { status, body } = await subscribe(target)
    expect(status).toBe(422)
    return body.errors[0] as { path: string; message: string }
  }

  test('names the exchange, takes only exchange and routing_key, and routing_key names the queue on the default exchange', async () => {
    expect((await refused('amqp://127.0.0.1:5672/?routing_key=x')).message).toContain('names the exchange')
    expect((await refused('amqp://127.0.0.1/?exchange=x&queue=y')).message).toContain('unknown parameter "queue"')
    expect((await refused('amqp://127.0.0.1/?exchange=')).message).toContain('routing_key names the queue')
    expect((await refused('amqp://127.0.0.1/?exchange=a%20b')).path).toBe('/target_url')
    expect((await refused('amqp://127.0.0.1/?exchange=amq.rabbitmq.log')).message).toContain("the broker's own")
    expect((await refused(`amqp://127.0.0.1/?exchange=x&routing_key=${'k'.repeat(256)}`)).message).toContain('255 bytes')
  })

  test('to the default exchange, routing_key names the queue', async () => {
    const created = await subscribe(`amqp://127.0.0.1:5672?exchange=&routing_key=${queue}`, 'message.failed')
    expect(created.status).toBe(201)
    const response = await server.fetch(`/v0/account/${owner.accountId}/hooks/${created.body.id}/test?key=${owner.secret}`, { method: 'POST' })
    expect(((await response.json()) as { error: string | null }).error).toBeNull()
    expect((await nextMessage(queue, 10_000, 'message.failed')).properties.type).toBe('message.failed')
  })
})

describe('changing a RabbitMQ destination', () => {
  const patch = (hookId: string, body: unknown) =>
    server.fetch(`/v0/account/${owner.accountId}/hooks/${hookId}?key=${owner.secret}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  const testSend = async (hookId: string) =>
    ((await (await server.fetch(`/v0/account/${owner.accountId}/hooks/${hookId}/test?key=${owner.secret}`, { method: 'POST' })).json()) as { error: string | null }).error

  test('sending back the URL as shown (*** for the password) keeps the stored credentials; a new URL replaces them', async () => {
    const created = await subscribe(`amqp://guest:guest@127.0.0.1:5672/?exchange=${exchange}&routing_key=message.patched`, 'message.failed')
    expect(created.status).toBe(201)
    const unchanged = await patch(created.body.id, { target_url: created.body.target_url, rate_limit_per_s: 50 })
    expect(unchanged.status).toBe(200)
    expect(await testSend(created.body.id)).toBeNull()
    const wrong = await patch(created.body.id, { target_url: `amqp://guest:not-the-password@127.0.0.1:5672/?exchange=${exchange}&routing_key=message.patched` })
    expect(((await wrong.json()) as { target_url: string }).target_url).toBe(created.body.target_url)
    expect(await testSend(created.body.id)).toContain('access refused')
  })

  test('a changed URL that still shows *** (a new routing key) keeps the stored password; to another broker or user it must carry the password itself', async () => {
    const created = await subscribe(`amqp://guest:guest@127.0.0.1:5672/?exchange=${exchange}&routing_key=message.before`, 'message.failed')
    const changed = created.body.target_url.replace('message.before', 'message.after')
    const renamed = await patch(created.body.id, { target_url: changed })
    expect(renamed.status).toBe(200)
    expect(((await renamed.json()) as { target_url: string }).target_url).toBe(changed)
    expect(await testSend(created.body.id)).toBeNull()
    let received = await nextMessage(queue, 10_000, 'message.failed')
    while (received.fields.routingKey !== 'message.after') received = await nextMessage(queue, 10_000, 'message.failed')
    for (const elsewhere of [changed.replace('127.0.0.1:5672', 'localhost:5672'), changed.replace('guest:***', 'other:***'), changed.replace(':5672', ':5673')]) {
      const refused = await patch(created.body.id, { target_url: elsewhere })
      expect(refused.status).toBe(422)
      expect(((await refused.json()) as { errors: { path: string; message: string }[] }).errors).toEqual([
        { path: '/target_url', message: 'shows the password as ***: give the password itself to reach another broker, port or user' },
      ])
    }
    const fresh = await subscribe(changed.replace('message.after', 'message.new'), 'message.failed')
    expect(fresh.status).toBe(422)
  })

  test('the URL exactly as shown and nothing else changes nothing (200, not an error)', async () => {
    const created = await subscribe(`amqp://guest:guest@127.0.0.1:5672/?exchange=${exchange}&routing_key=message.same`, 'message.failed')
    const same = await patch(created.body.id, { target_url: created.body.target_url })
    expect(same.status).toBe(200)
    expect(await same.json()).toEqual((({ secret: _secret, ...rest }) => rest)(created.body))
    expect(await testSend(created.body.id)).toBeNull()
  })
})

describe('an Ed25519-signed RabbitMQ destination', () => {
  test('the message carries webhook-signature v1a, which the public key verifies (Web Crypto)', async () => {
    const response = await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ event: 'message.delivered', target_url: `amqp://guest:guest@127.0.0.1:5672/?exchange=${exchange}&routing_key=message.signed`, signature: 'ed25519' }),
    })
    expect(response.status).toBe(201)
    const created = (await response.json()) as { id: string; public_key: string; secret?: string }
    expect(created.secret).toBeUndefined()
    await server.fetch(`/v0/account/${owner.accountId}/hooks/${created.id}/test?key=${owner.secret}`, { method: 'POST' })
    const message = await nextMessage(queue, 10_000, 'message.delivered')
    const headers = message.properties.headers as Record<string, string>
    const [version, signature] = headers['webhook-signature']!.split(',')
    expect(version).toBe('v1a')
    const bytes = (base64: string) => Uint8Array.from(atob(base64), (char) => char.charCodeAt(0))
    const key = await crypto.subtle.importKey('raw', bytes(created.public_key.slice('whpk_'.length)), 'Ed25519', false, ['verify'])
    const signed = new TextEncoder().encode(`${headers['webhook-id']}.${headers['webhook-timestamp']}.${message.content.toString()}`)
    expect(await crypto.subtle.verify('Ed25519', key, bytes(signature!), signed)).toBe(true)
  })
})
