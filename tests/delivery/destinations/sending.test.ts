import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import type { Socket } from 'bun'
import { createDestinations, type DestinationRequest, type Destinations } from '../../../src/delivery/destinations/index.ts'
import type { SendOptions } from '../../../src/delivery/send.ts'
import { freePort } from '../../support/process.ts'

setDefaultTimeout(30_000)

// Sending alone, without the service around it: the outbound guard, a broker that never answers, one connection reused.
const opened: Destinations[] = []
const destinationsWith = (options: SendOptions) => {
  const destinations = createDestinations(options)
  opened.push(destinations)
  return destinations
}
afterAll(() => Promise.all(opened.map((destinations) => destinations.close())))

const request = (url: string): DestinationRequest => ({ url, id: `evt_${crypto.randomUUID()}`, eventType: 'message.delivered', subscriptionId: 'hook_sending', body: '{"ok":true}', keys: { scheme: 'hmac', current: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' } })
const local: SendOptions = { timeoutMs: 1_000, allowPrivate: true }

describe('the outbound guard, for brokers as for HTTPS', () => {
  test('a broker name that resolves to a private address is refused before any connection, unless private targets are allowed', async () => {
    const destinations = destinationsWith({ timeoutMs: 1_000, allowPrivate: false, lookup: async () => ['10.0.0.7'] })
    for (const url of ['amqps://app:pw@mq.example.com/?exchange=e', 'tls://nats.example.com?subject=a']) {
      const result = await destinations.send(request(url))
      expect(result).toMatchObject({ ok: false, status: null, failure: 'refused' })
      expect(result.error).toContain('resolves to 10.0.0.7, which is not a public address')
      expect(result.error).not.toContain('pw')
    }
  })

  test('without TLS, a name that resolves to a public address is refused even with private targets allowed', async () => {
    const result = await destinationsWith({ ...local, lookup: async () => ['93.184.215.14'] }).send(request('amqp://mq.example.com/?exchange=e'))
    expect(result).toMatchObject({ ok: false, failure: 'refused' })
    expect(result.error).toContain('a connection without TLS is allowed only to loopback and private addresses')
  })
})

describe('a broker that does not answer', () => {
  // Accepts connections and never writes a byte: a hung broker.
  const silent = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
  afterAll(() => silent.stop(true))

  test.each([
    ['RabbitMQ', `amqp://127.0.0.1:${silent.port}/?exchange=e`],
    ['NATS', `nats://127.0.0.1:${silent.port}?subject=a`],
  ])('%s: the attempt ends as a timeout within WEBHOOK_TIMEOUT_MS', async (_kind, url) => {
    const started = performance.now()
    const result = await destinationsWith(local).send(request(url))
    expect(result).toMatchObject({ ok: false, status: null, failure: 'timeout' })
    expect(performance.now() - started).toBeLessThan(2_000)
  })

  test.each([
    ['RabbitMQ', 'amqp://127.0.0.1:PORT/?exchange=e'],
    ['NATS', 'nats://127.0.0.1:PORT?subject=a'],
  ])('%s: a port where nothing listens is a connection failure, at once', async (_kind, template) => {
    const result = await destinationsWith(local).send(request(template.replace('PORT', String(freePort()))))
    expect(result).toMatchObject({ ok: false, status: null, failure: 'connection' })
    expect(result.durationMs).toBeLessThan(1_000)
  })
})

/** A TCP relay in front of a broker that counts the connections made through it. */
function countingRelay(port: number) {
  const counted = { accepted: 0, open: 0 }
  const peers = new Map<Socket<unknown>, Promise<Socket<unknown>>>()
  const clients = new Set<Socket<unknown>>()
  const relay = Bun.listen({
    hostname: '127.0.0.1',
    port: 0,
    socket: {
      open(client) {
        clients.add(client)
        counted.accepted++
        counted.open++
        peers.set(client, Bun.connect({ hostname: '127.0.0.1', port, socket: { data: (_upstream, data) => void client.write(data), close: () => void client.end() } }))
      },
      data: (client, data) => void peers.get(client)?.then((upstream) => upstream.write(data)),
      close(client) {
        counted.open--
        clients.delete(client)
        void peers.get(client)?.then((upstream) => upstream.end())
        peers.delete(client)
      },
    },
  })
  // A network cut: every connection through the relay ends at once, as a broker restart ends them.
  const cut = () => {
    for (const client of clients) client.terminate()
  }
  return { port: relay.port, counted, cut, stop: () => relay.stop(true) }
}

describe('pooled connections', () => {
  test.each([
    ['RabbitMQ', 5672, 'amqp://guest:guest@127.0.0.1:PORT/?exchange=amq.topic&routing_key=nobody.at.all', 'unroutable'],
    ['NATS', 4222, 'nats://127.0.0.1:PORT?subject=nobody.at.all', 'unroutable'],
  ])('%s: attempts to one broker share one connection, closed with the pool', async (_kind, brokerPort, template, failure) => {
    const relay = countingRelay(brokerPort)
    const destinations = destinationsWith(local)
    const url = template.replace('PORT', String(relay.port))
    // Nothing takes these (amq.topic exists and nothing binds the key; no stream has the subject): each answer still comes over the one connection.
    const results = await Promise.all(Array.from({ length: 20 }, () => destinations.send(request(url))))
    expect(results.map((result) => String(result.failure))).toEqual(Array<string>(20).fill(failure))
    expect(String((await destinations.send(request(url))).failure)).toBe(failure)
    expect(relay.counted.accepted).toBe(1)
    await destinations.close()
    for (let i = 0; i < 50 && relay.counted.open > 0; i++) await Bun.sleep(20)
    expect(relay.counted.open).toBe(0)
    relay.stop()
  })
})

describe('a connection lost while publishes wait for their confirmation', () => {
  test('RabbitMQ: each fails as a lost connection (not a nack) and the next attempt connects again', async () => {
    const relay = countingRelay(5672)
    const destinations = destinationsWith({ ...local, timeoutMs: 5_000 })
    const url = `amqp://guest:guest@127.0.0.1:${relay.port}/?exchange=amq.topic&routing_key=nobody.at.all`
    expect((await destinations.send(request(url))).failure).toBe('unroutable')
    const sending = Array.from({ length: 200 }, () => destinations.send(request(url)))
    relay.cut()
    const results = await Promise.all(sending)
    const reasons = new Set(results.map((result) => result.failure))
    expect(reasons.has('connection')).toBe(true)
    expect([...reasons].filter((reason) => reason !== 'connection' && reason !== 'unroutable')).toEqual([])
    expect(results.find((result) => result.failure === 'connection')!.error).toContain('closed before it confirmed the message')
    expect((await destinations.send(request(url))).failure).toBe('unroutable')
    expect(relay.counted.accepted).toBe(2)
    relay.stop()
  })
})
