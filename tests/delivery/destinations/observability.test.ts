import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { connect, type Channel, type ChannelModel, type GetMessage } from 'amqplib'
import { startTestServer } from '../../support/server.ts'
import { startOtlpReceiver } from '../../support/otlp-receiver.ts'
import { connectWithToken, tokenFor } from '../../support/mcp.ts'
import { flowFixture } from '../../oauth/support.ts'

// A broker destination as an operator and an agent see it: its attempts are spans of the message's
// trace in OpenTelemetry's messaging terms, the consumer continues the trace, and its password is
// in no span, no tool result and no log line (docs/webhooks.md#destinations, docs/operations.md#traces).
setDefaultTimeout(60_000)

const run = randomBytes(4).toString('hex')
const user = `webhooks-${run}`
const password = `pw-${randomBytes(12).toString('hex')}`
const exchange = `traced-${run}`
const queue = `traced-${run}`
let broker: ChannelModel
let channel: Channel
const rabbitmqctl = (...args: string[]) => {
  const done = Bun.spawnSync(['rabbitmqctl', '-q', ...args], { timeout: 30_000 })
  if (done.exitCode !== 0) throw new Error(`rabbitmqctl ${args[0]}: ${done.stderr.toString()}`)
}

beforeAll(async () => {
  // A user of this run's own, so that its password is a string found nowhere else.
  rabbitmqctl('add_user', user, password)
  rabbitmqctl('set_permissions', '-p', '/', user, `^${exchange}$`, `^${exchange}$`, `^${exchange}$`)
  broker = await connect('amqp://guest:guest@127.0.0.1:5672')
  channel = await broker.createChannel()
  await channel.assertExchange(exchange, 'topic', { durable: false, autoDelete: false })
  await channel.assertQueue(queue, { durable: false })
  await channel.bindQueue(queue, exchange, '#')
})
afterAll(async () => {
  await channel.deleteQueue(queue).catch(() => {})
  await channel.deleteExchange(exchange).catch(() => {})
  await broker.close().catch(() => {})
  rabbitmqctl('delete_user', user)
})

const otlp = startOtlpReceiver()
const server = await startTestServer({
  env: {
    OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '50',
    WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
    WEBHOOK_RETRY_SCHEDULE: '0,200ms',
  },
})
const target = `amqp://${user}:${password}@127.0.0.1:5672/?exchange=${exchange}&routing_key=message.delivered`
const shown = `amqp://${user}:***@127.0.0.1:5672/?exchange=${exchange}&routing_key=message.delivered`

async function nextMessage(): Promise<GetMessage> {
  for (let i = 0; i < 200; i++) {
    const message = await channel.get(queue, { noAck: true })
    if (message) return message
    await Bun.sleep(50)
  }
  throw new Error('nothing arrived')
}

describe('a RabbitMQ destination, observed', () => {
  test("an attempt is a PRODUCER span 'publish <exchange>' of the message's trace, the consumer gets its traceparent, and the password is in no span", async () => {
    const { accountId, secret: key } = await server.createAccountWithKey('Traced broker')
    const created = await server.fetch(`/v0/account/${accountId}/hooks?key=${key}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ event: 'message.delivered', target_url: target }),
    })
    expect(created.status).toBe(201)
    const traceId = randomBytes(16).toString('hex')
    const sent = await server.fetch(`/v0/account/${accountId}/messages?key=${key}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01` },
      body: JSON.stringify({ to: '+15550001234', body: 'traced to a queue' }),
    })
    expect(sent.status).toBe(202)
    const message = await nextMessage()
    await otlp.waitFor(() => otlp.trace(traceId).some((span) => span.name === `publish ${exchange}`))
    const spans = otlp.trace(traceId)
    const publish = spans.find((span) => span.name === `publish ${exchange}`)!
    expect(publish.kind).toBe(4) // PRODUCER on the wire (SpanKind + 1)
    expect(publish.attributes).toMatchObject({
      'messaging.system': 'rabbitmq',
      'messaging.operation.type': 'send',
      'messaging.destination.name': exchange,
      'messaging.rabbitmq.destination.routing_key': 'message.delivered',
      'server.address': '127.0.0.1',
      'server.port': 5672,
    })
    expect(publish.status.code).not.toBe(2)
    const traceparent = String((message.properties.headers as Record<string, unknown>).traceparent)
    expect(traceparent).toBe(`00-${traceId}-${publish.spanId}-01`)
    expect(JSON.stringify(spans)).not.toContain(password)
    for (const line of server.rawLogs) expect(line).not.toContain(password)
  })

  test('an agent creates and lists it through MCP and sees the URL with ***, never the password', async () => {
    const fixture = await flowFixture(server)
    const client = await connectWithToken(server, await tokenFor(server, fixture, {}))
    const created = (await client.callTool({ name: 'create_webhook', arguments: { event: 'message.failed', target_url: target } })) as unknown as { isError?: boolean; content: { text: string }[]; structuredContent: { id: string; target_url: string } }
    expect(created.isError).toBeFalsy()
    expect(created.structuredContent.target_url).toBe(shown)
    const listed = await client.callTool({ name: 'list_webhooks', arguments: {} })
    const read = await client.callTool({ name: 'get_webhook', arguments: { hook_id: created.structuredContent.id } })
    for (const result of [created, listed, read]) expect(JSON.stringify(result)).not.toContain(password)
    expect(JSON.stringify(read)).toContain(shown)
    await client.close()
  })
})
