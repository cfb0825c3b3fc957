import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { connect, type Channel, type ChannelModel } from 'amqplib'
import { createTestDatabase } from '../../support/database.ts'
import { freshDataDir, runCli, startServerProcess, type RunningProcess } from '../../support/process.ts'

// The server as it runs in production (bun src/main.ts), killed with SIGKILL while it publishes
// to the machine's RabbitMQ: tests/delivery/crash.test.ts with a broker for the receiver.
setDefaultTimeout(120_000)

const BROKER = 'amqp://guest:guest@127.0.0.1:5672'
const run = crypto.randomUUID().slice(0, 8)
const exchange = `crash-${run}`
const queue = `crash-${run}`
/** Copies of each message that reached the queue, by message id (the event id). */
const copies = new Map<string, number>()
let broker: ChannelModel
let channel: Channel

beforeAll(async () => {
  broker = await connect(BROKER)
  channel = await broker.createChannel()
  await channel.assertExchange(exchange, 'topic', { durable: true, autoDelete: false })
  await channel.assertQueue(queue, { durable: true, autoDelete: false, exclusive: false })
  await channel.bindQueue(queue, exchange, 'message.#')
  await channel.consume(queue, (message) => {
    if (message) copies.set(String(message.properties.messageId), (copies.get(String(message.properties.messageId)) ?? 0) + 1)
  }, { noAck: true })
})
afterAll(async () => {
  await channel.deleteQueue(queue).catch(() => {})
  await channel.deleteExchange(exchange).catch(() => {})
  await broker.close().catch(() => {})
})

const database = await createTestDatabase()
afterAll(() => database.drop())
const env: Record<string, string> = {
  ...(database.url ? { DATABASE_URL: database.url } : {}),
  DATA_DIR: freshDataDir(),
  ENCRYPTION_KEY: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url'),
  WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
  WEBHOOK_TIMEOUT_MS: '2000',
  WEBHOOK_RETRY_SCHEDULE: ['0', ...Array(30).fill('200ms')].join(','),
  API_RATE_LIMIT: '0',
}
if (database.url) await database.handle.close()

const EVENTS = 600

test('kill -9 while events are published to RabbitMQ, restart on the same database: every event arrives in the queue', async () => {
  const demo = JSON.parse((await runCli(['demo', '--json'], env)).stdout) as { account: { id: string }; api_key: { secret: string } }
  const account = demo.account.id
  const key = demo.api_key.secret

  let server: RunningProcess = await startServerProcess(['bun', 'src/main.ts'], env)
  const hook = await fetch(`${server.origin}/v0/account/${account}/hooks?key=${key}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event: 'message.inbound', target_url: `${BROKER}/?exchange=${exchange}&routing_key=message.inbound` }),
  })
  expect(hook.status).toBe(201)
  const hookId = ((await hook.json()) as { id: string }).id

  let acknowledged = 0
  let next = 0
  const sendEvents = async (origin: string, until: number) => {
    const senders = Array.from({ length: 16 }, async () => {
      while (next < until) {
        const n = next++
        try {
          const response = await fetch(`${origin}/v0/account/${account}/sandbox/inbound?key=${key}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ from: '+447700900600', body: `event ${n}` }),
          })
          if (response.status === 201) acknowledged++
          else next = Math.min(next, n)
        } catch {
          // Killed under this request: it may or may not have committed.
          return
        }
      }
    })
    await Promise.all(senders)
  }

  const sending = sendEvents(server.origin, EVENTS)
  // Kill once publishing is well under way: messages are being confirmed, others are in flight.
  while (acknowledged < EVENTS / 2 || copies.size < 20) await Bun.sleep(5)
  server.process.kill('SIGKILL')
  await sending
  await server.process.exited
  const beforeRestart = { acknowledged, arrived: copies.size }
  expect(acknowledged).toBeLessThan(EVENTS)

  server = await startServerProcess(['bun', 'src/main.ts'], env)
  try {
    next = acknowledged
    await sendEvents(server.origin, EVENTS)
    expect(acknowledged).toBe(EVENTS)

    // Every event in the log (acknowledged, or committed under the kill) reaches the queue.
    const logged: string[] = []
    let cursor: string | null = null
    do {
      const page = (await (await fetch(`${server.origin}/v0/account/${account}/events?key=${key}&limit=100${cursor ? `&cursor=${cursor}` : ''}`)).json()) as {
        data: { id: string }[]
        next_cursor: string | null
      }
      logged.push(...page.data.map((event) => event.id))
      cursor = page.next_cursor
    } while (cursor)
    expect(logged.length).toBeGreaterThanOrEqual(EVENTS)
    const deadline = Date.now() + 60_000
    while (!logged.every((id) => copies.has(id)) && Date.now() < deadline) await Bun.sleep(100)
    expect(logged.filter((id) => !copies.has(id))).toEqual([])
    // Nothing but this run's events.
    expect([...copies.keys()].every((id) => logged.includes(id))).toBe(true)

    // Each delivery ends succeeded: the broker confirmed it (the attempts cut off by the kill were made again).
    const states = async () => {
      const found: string[] = []
      let page: string | null = null
      do {
        const read = (await (await fetch(`${server.origin}/v0/account/${account}/hooks/${hookId}/deliveries?key=${key}&limit=100${page ? `&cursor=${page}` : ''}`)).json()) as {
          data: { state: string }[]
          next_cursor: string | null
        }
        found.push(...read.data.map((delivery) => delivery.state))
        page = read.next_cursor
      } while (page)
      return found
    }
    let found = await states()
    for (const settled = Date.now() + 30_000; found.some((state) => state !== 'succeeded') && Date.now() < settled; found = await states()) await Bun.sleep(200)
    expect(found).toEqual(Array(logged.length).fill('succeeded'))
    const twice = [...copies.values()].filter((n) => n > 1).length
    console.log(
      `broker crash test: ${beforeRestart.acknowledged} acknowledged and ${beforeRestart.arrived} in the queue at the kill, ${logged.length} events logged, ${copies.size} arrived, ${twice} more than once`,
    )
  } finally {
    await server.stop()
  }
})
