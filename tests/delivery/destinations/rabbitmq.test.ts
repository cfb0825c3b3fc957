import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { connect, type Channel, type ChannelModel, type ConsumeMessage } from 'amqplib'
import { Webhook } from 'standardwebhooks'
import { startTestServer } from '../../support/server.ts'

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

async function nextMessage(from: string, timeoutMs = 10_000): Promise<ConsumeMessage> {
  const until = Date.now() + timeoutMs
  while (Date.now() < until) {
    const message = await channel.get(from, { noAck: true })
    if (message) return message
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
  })
})
