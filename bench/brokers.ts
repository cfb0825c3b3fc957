/**
 * The machine's RabbitMQ and NATS JetStream for bench/webhooks.ts (docs/webhooks.md#destinations):
 * what a scenario publishes to (a topic exchange with a durable queue bound, a stream capturing a
 * subject), made here and deleted at the end whatever happens. The deletion is registered before
 * the making and uses a connection of its own, so that a half-made setup or a connection lost
 * meanwhile leaves nothing behind.
 */
import { jetstreamManager } from '@nats-io/jetstream'
import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node'
import { connect as amqpConnect, type ChannelModel } from 'amqplib'
import { fail, onCleanup } from './harness.ts'

async function withRabbitMq<T>(url: URL, use: (model: ChannelModel) => Promise<T>): Promise<T> {
  let model: ChannelModel
  try {
    model = await amqpConnect(url.href)
  } catch (error) {
    fail(`cannot reach RabbitMQ at ${url.host} (${(error as Error).message}); is it running?`)
  }
  try {
    return await use(model)
  } finally {
    await model.close().catch(() => {})
  }
}

async function withNats<T>(url: URL, use: (nc: NatsConnection) => Promise<T>): Promise<T> {
  let nc: NatsConnection
  try {
    nc = await natsConnect({ servers: url.host })
  } catch (error) {
    fail(`cannot reach NATS at ${url.host} (${(error as Error).message}); is it running?`)
  }
  try {
    return await use(nc)
  } finally {
    await nc.close().catch(() => {})
  }
}

/**
 * Topic exchange `exchange` (made if missing) and durable queue `queue` bound to it with `binding`:
 * a durable queue, as a consumer that must not lose events has, so the broker stores the service's
 * persistent messages before it confirms them. Answers the broker's version.
 */
export async function rabbitMqQueue(url: URL, exchange: string, queue: string, binding: string): Promise<string> {
  onCleanup(() =>
    withRabbitMq(url, async (model) => {
      const channel = await model.createChannel()
      await channel.deleteQueue(queue)
      await channel.deleteExchange(exchange)
    }),
  )
  return withRabbitMq(url, async (model) => {
    const channel = await model.createChannel()
    await channel.assertExchange(exchange, 'topic', { durable: false })
    await channel.assertQueue(queue, { durable: true })
    await channel.bindQueue(queue, exchange, binding)
    return `RabbitMQ ${String(model.connection.serverProperties.version ?? '?')}`
  })
}

/** JetStream stream `name` capturing `subjects` (file storage, the default). Answers the server's version. */
export async function natsStream(url: URL, name: string, subjects: string[]): Promise<string> {
  onCleanup(() => withNats(url, async (nc) => void (await (await jetstreamManager(nc)).streams.delete(name).catch(() => false))))
  return withNats(url, async (nc) => {
    await (await jetstreamManager(nc)).streams.add({ name, subjects })
    return `NATS ${nc.info?.version ?? '?'} (JetStream)`
  })
}
