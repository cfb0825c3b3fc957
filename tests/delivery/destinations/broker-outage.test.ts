import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { connect, type Channel, type ChannelModel, type GetMessage } from 'amqplib'
import { startTestServer } from '../../support/server.ts'
import { until } from '../../support/until.ts'

setDefaultTimeout(120_000)

// The machine's RabbitMQ, stopped and started again (`rabbitmqctl stop_app` / `start_app`): the
// exchange and the queue here are durable, so they and the messages confirmed into them outlive it.
const BROKER = 'amqp://guest:guest@127.0.0.1:5672'
const run = crypto.randomUUID().slice(0, 8)
const exchange = `outage-${run}`
const queue = `outage-${run}`

async function rabbitmqctl(command: 'stop_app' | 'start_app'): Promise<void> {
  const child = Bun.spawn(['rabbitmqctl', command], { stdout: 'pipe', stderr: 'pipe' })
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  if (code !== 0) throw new Error(`rabbitmqctl ${command} exited with ${code}: ${out}${err}`)
}

/** Resolves once the broker takes an AMQP connection again (after start_app it recovers its durable state first). */
async function brokerUp(timeoutMs = 60_000): Promise<ChannelModel> {
  const until = Date.now() + timeoutMs
  for (;;) {
    try {
      return await connect(BROKER)
    } catch (error) {
      if (Date.now() > until) throw new Error(`RabbitMQ did not accept a connection within ${timeoutMs} ms: ${String(error)}`)
      await Bun.sleep(250)
    }
  }
}

let stopped = false
async function startBroker() {
  if (!stopped) return
  await rabbitmqctl('start_app')
  stopped = false
  await (await brokerUp()).close()
}

let admin: ChannelModel
let channel: Channel
beforeAll(async () => {
  admin = await connect(BROKER)
  // stop_app closes it (CONNECTION_FORCED): expected here.
  admin.on('error', () => {})
  channel = await admin.createChannel()
  channel.on('error', () => {})
  await channel.assertExchange(exchange, 'topic', { durable: true, autoDelete: false })
  await channel.assertQueue(queue, { durable: true, autoDelete: false, exclusive: false })
  await channel.bindQueue(queue, exchange, 'message.#')
})
afterAll(async () => {
  // Whatever happened above, the machine's broker is left running.
  await startBroker()
  const cleanup = await brokerUp()
  const cleanupChannel = await cleanup.createChannel()
  await cleanupChannel.deleteQueue(queue).catch(() => {})
  await cleanupChannel.deleteExchange(exchange).catch(() => {})
  await cleanup.close().catch(() => {})
})

const server = await startTestServer({
  env: {
    WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
    WEBHOOK_TIMEOUT_MS: '2000',
    // Long enough, with the circuit's probes, to outlast the broker's restart.
    WEBHOOK_RETRY_SCHEDULE: ['0', ...Array(60).fill('300ms')].join(','),
  },
})
// Each test's account of its own: an inbound message fans out to every subscription of its account.
let owner = await server.createAccountWithKey()

async function call(method: string, path: string, body?: unknown) {
  const base = `/v0/account/${owner.accountId}`
  const response = await server.fetch(`${base}${path}${path.includes('?') ? '&' : '?'}key=${owner.secret}`, {
    method,
    ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
  })
  return { status: response.status, body: (response.status === 204 ? null : await response.json()) as any }
}

const deliveriesOf = async (hookId: string): Promise<any[]> => (await call('GET', `/hooks/${hookId}/deliveries?limit=100`)).body.data
const circuitOf = async (hookId: string) => (await call('GET', `/hooks/${hookId}`)).body.circuit

async function inbound(count: number, label: string) {
  for (let n = 0; n < count; n++) expect((await call('POST', '/sandbox/inbound', { from: '+447700900500', body: `${label} ${n}` })).status).toBe(201)
}

/** Every message in the queue, taken off it. */
async function drain(from: Channel): Promise<GetMessage[]> {
  const messages: GetMessage[] = []
  for (;;) {
    const message = await from.get(queue, { noAck: true })
    if (!message) return messages
    messages.push(message)
  }
}

test('RabbitMQ stopped: attempts fail (connection) and the circuit opens; started again: a retry closes it and every event is in the durable queue, none confirmed sent twice', async () => {
  const created = await call('POST', '/hooks', { event: 'message.inbound', target_url: `${BROKER}/?exchange=${exchange}&routing_key=message.inbound` })
  expect(created.status).toBe(201)
  const hookId = created.body.id as string

  await inbound(5, 'before')
  const before = await until(() => deliveriesOf(hookId), (list) => list.length === 5 && list.every((delivery) => delivery.state === 'succeeded'), 10_000, 'five delivered before the stop')
  // Confirmations are answers: five in a row leave the circuit closed.
  expect(await circuitOf(hookId)).toEqual({ state: 'closed', consecutive_failures: 0, opened_at: null, next_probe_at: null })

  let during: any[]
  stopped = true
  await rabbitmqctl('stop_app')
  try {
    await inbound(5, 'during')
    // Three failures in a row open it (src/delivery/circuit.ts); the other deliveries wait for its probe.
    const opened = await until(() => circuitOf(hookId), (circuit) => circuit.state !== 'closed', 15_000, 'the circuit opens')
    expect(opened.consecutive_failures).toBeGreaterThanOrEqual(3)
    during = (await deliveriesOf(hookId)).filter((delivery) => delivery.state === 'pending')
    expect(during).toHaveLength(5)
    const tried = during.filter((delivery) => delivery.attempts > 0)
    expect(tried.length).toBeGreaterThanOrEqual(1)
    for (const delivery of tried) {
      expect(delivery.last_attempt.status_code).toBeNull()
      expect(delivery.last_attempt.error).toMatch(/^(connecting|publishing): |the connection to the broker closed/)
    }
    const stats = await call('GET', `/hooks/${hookId}/stats?interval=minute&since=${new Date(Date.now() - 3_600_000).toISOString()}`)
    expect(stats.body.totals.failures.connection).toBeGreaterThanOrEqual(3)
  } finally {
    await startBroker()
  }

  // The owner says the broker is back: the retry goes out at once as the probe, and closes the circuit.
  const first = during[during.length - 1]
  expect((await call('POST', `/deliveries/${first.id}/retry`)).status).toBe(202)
  await until(() => circuitOf(hookId), (circuit) => circuit.state === 'closed', 10_000, 'the retry closes the circuit')
  const after = await until(() => deliveriesOf(hookId), (list) => list.length === 10 && list.every((delivery) => delivery.state === 'succeeded'), 20_000, 'all ten delivered')

  const reader = await brokerUp()
  try {
    const readChannel = await reader.createChannel()
    const copies = new Map<string, number>()
    for (const message of await drain(readChannel)) copies.set(String(message.properties.messageId), (copies.get(String(message.properties.messageId)) ?? 0) + 1)
    // At least once: every event is there; the ones confirmed before the stop were not sent again.
    for (const delivery of after) expect(copies.get(delivery.event_id) ?? 0).toBeGreaterThanOrEqual(1)
    for (const delivery of before) expect(copies.get(delivery.event_id)).toBe(1)
    expect([...copies.keys()].sort()).toEqual(after.map((delivery) => delivery.event_id).sort())
    console.log(`broker outage: ${[...copies.values()].reduce((sum, n) => sum + n, 0)} messages for ${copies.size} events; attempts ${after.map((delivery) => delivery.attempts).join(',')}`)
  } finally {
    await reader.close()
  }
})

test('RabbitMQ stopped and started again with nobody retrying: the circuit\'s own probe closes it and the backlog drains, each event once', async () => {
  owner = await server.createAccountWithKey()
  const created = await call('POST', '/hooks', { event: 'message.inbound', target_url: `${BROKER}/?exchange=${exchange}&routing_key=message.inbound` })
  expect(created.status).toBe(201)
  const hookId = created.body.id as string

  stopped = true
  await rabbitmqctl('stop_app')
  try {
    await inbound(8, 'probe')
    const opened = await until(() => circuitOf(hookId), (circuit) => circuit.state !== 'closed', 15_000, 'the circuit opens')
    expect(opened.next_probe_at).not.toBeNull()
  } finally {
    await startBroker()
  }
  // The probe is due 5 s after the circuit opened (src/delivery/circuit.ts), claimed at the next one-second poll.
  const after = await until(() => deliveriesOf(hookId), (list) => list.length === 8 && list.every((delivery) => delivery.state === 'succeeded'), 20_000, 'all eight delivered')
  expect(await circuitOf(hookId)).toEqual({ state: 'closed', consecutive_failures: 0, opened_at: null, next_probe_at: null })
  // Attempt lines reach the log up to 50 ms after the attempt (src/delivery/worker.ts), and the backlog may drain sooner.
  await until(async () => server.rawLogs.some((line) => line.includes('"circuit":"probe"') && line.includes(hookId)), Boolean, 2_000, "the probe's attempt line")

  const reader = await brokerUp()
  try {
    const ids = (await drain(await reader.createChannel())).map((message) => String(message.properties.messageId))
    // No attempt reached the stopped broker, so none was sent twice.
    expect(ids.sort()).toEqual(after.map((delivery) => delivery.event_id).sort())
  } finally {
    await reader.close()
  }
})
