import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { jetstream, jetstreamManager, type JetStreamManager, type StoredMsg } from '@nats-io/jetstream'
import { Webhook } from 'standardwebhooks'
import { startTestServer } from '../../support/server.ts'
import { startPrivateNatsServer, type NatsUser, type PrivateNatsServer } from '../../support/nats-server.ts'
import { until } from '../../support/until.ts'

setDefaultTimeout(60_000)

// The machine's NATS (README, "Test") for what needs no credentials; a nats-server of this file's
// own for users, permissions and a restart. Every stream and subject here is this run's own.
const run = crypto.randomUUID().slice(0, 8)
const streams: { jsm: JetStreamManager; name: string }[] = []
let streamCount = 0
let shared: NatsConnection
let sharedJsm: JetStreamManager

const writer: NatsUser = { user: 'writer', password: `pw-${crypto.randomUUID()}` }
const limited: NatsUser = { user: 'limited', password: `pw-${crypto.randomUUID()}`, denyPublish: [`denied-${run}.>`] }
let privateServer: PrivateNatsServer
let privateConnection: NatsConnection
let privateJsm: JetStreamManager

beforeAll(async () => {
  shared = await connect({ servers: '127.0.0.1:4222' })
  sharedJsm = await jetstreamManager(shared)
  privateServer = await startPrivateNatsServer([writer, limited])
  privateConnection = await privateServer.connect()
  privateJsm = await jetstreamManager(privateConnection)
})
afterAll(async () => {
  for (const { jsm, name } of streams) await jsm.streams.delete(name).catch(() => {})
  await shared?.close().catch(() => {})
  await privateConnection?.close().catch(() => {})
  await privateServer?.stop()
})

async function addStream(jsm: JetStreamManager, subject: string): Promise<string> {
  const name = `webhooks-${run}-${streamCount++}`
  await jsm.streams.add({ name, subjects: [subject] })
  // The private server's store goes with its directory.
  if (jsm === sharedJsm) streams.push({ jsm, name })
  return name
}

/** Every message the stream holds, oldest first. */
async function stored(jsm: JetStreamManager, stream: string): Promise<StoredMsg[]> {
  const { state } = await jsm.streams.info(stream)
  const messages: StoredMsg[] = []
  for (let seq = state.first_seq; seq <= state.last_seq && state.messages > 0; seq++) {
    const message = await jsm.streams.getMessage(stream, { seq })
    if (message) messages.push(message)
  }
  return messages
}

const server = await startTestServer({
  env: {
    WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
    WEBHOOK_TIMEOUT_MS: '2000',
    // Long enough, with the circuit's probes (5 s and more apart), to outlast a broker restart.
    WEBHOOK_RETRY_SCHEDULE: ['0', ...Array(40).fill('300ms')].join(','),
  },
})

/** An account of the test's own: an inbound message fans out to every subscription of its account. */
async function account() {
  const owner = await server.createAccountWithKey()
  const base = `/v0/account/${owner.accountId}`
  const key = `key=${owner.secret}`
  const call = async (method: string, path: string, body?: unknown) => {
    const response = await server.fetch(`${base}${path}${path.includes('?') ? '&' : '?'}${key}`, {
      method,
      ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
    })
    return { status: response.status, body: (response.status === 204 ? null : await response.json()) as any }
  }
  return {
    call,
    async subscribe(target: string) {
      const created = await call('POST', '/hooks', { event: 'message.inbound', target_url: target })
      expect(created.status).toBe(201)
      return created.body as { id: string; secret: string; target_url: string }
    },
    async inbound(body = 'hello'): Promise<string> {
      const sent = await call('POST', '/sandbox/inbound', { from: '+447700900300', body })
      expect(sent.status).toBe(201)
      return sent.body.id
    },
    async deliveries(hookId: string): Promise<any[]> {
      const listed = await call('GET', `/hooks/${hookId}/deliveries?limit=100`)
      expect(listed.status).toBe(200)
      return listed.body.data
    },
    async delivery(id: string) {
      return (await call('GET', `/deliveries/${id}`)).body
    },
    async failures(hookId: string): Promise<Record<string, number>> {
      const stats = await call('GET', `/hooks/${hookId}/stats?interval=minute&since=${new Date(Date.now() - 3_600_000).toISOString()}`)
      expect(stats.status).toBe(200)
      return stats.body.totals.failures
    },
  }
}

const headersOf = (message: StoredMsg | { headers?: Iterable<[string, string[]]> }): Record<string, string> => {
  const source = 'header' in message ? message.header : message.headers
  return Object.fromEntries([...(source ?? [])].map(([name, values]) => [name, values[0]!]))
}

describe('a NATS JetStream destination', () => {
  test('an inbound message reaches a JetStream consumer, signed as Standard Webhooks, Nats-Msg-Id the event and subscription ids, and listed as succeeded', async () => {
    const subject = `events-${run}.inbound`
    const stream = await addStream(sharedJsm, subject)
    const owner = await account()
    const hook = await owner.subscribe(`nats://127.0.0.1:4222?subject=${subject}`)
    expect(hook.target_url).toBe(`nats://127.0.0.1:4222?subject=${subject}`)
    await owner.inbound('to the stream')

    const consumer = await jetstream(shared).consumers.get(stream)
    const message = await consumer.next({ expires: 10_000 })
    expect(message).not.toBeNull()
    const body = message!.string()
    const headers = headersOf(message!)
    expect(() => new Webhook(hook.secret).verify(body, headers)).not.toThrow()
    const event = JSON.parse(body)
    expect(event.type).toBe('message.inbound')
    expect(headers['Nats-Msg-Id']).toBe(`${event.id}:${hook.id}`)
    expect(headers['webhook-id']).toBe(event.id)
    expect(headers['content-type']).toBe('application/json')
    expect(headers['webhook-event-type']).toBe('message.inbound')

    const [delivery] = await until(() => owner.deliveries(hook.id), (list) => list[0]?.state === 'succeeded', 5_000, 'the delivery succeeded')
    expect(delivery).toMatchObject({ event_id: event.id, state: 'succeeded', attempts: 1, last_attempt: { status_code: null, error: null } })
    const detail = await owner.delivery(delivery.id)
    expect(JSON.parse(detail.attempt_log[0].response_snippet)).toEqual({ stream, seq: 1, duplicate: false })
  })

  test('the same event published twice is stored once by the stream, and the second attempt still counts as delivered', async () => {
    const subject = `events-${run}.twice`
    const stream = await addStream(sharedJsm, subject)
    const owner = await account()
    const hook = await owner.subscribe(`nats://127.0.0.1:4222?subject=${subject}`)
    await owner.inbound('once')
    const [first] = await until(() => owner.deliveries(hook.id), (list) => list[0]?.state === 'succeeded', 5_000, 'the first attempt')

    expect((await owner.call('POST', `/deliveries/${first.id}/retry`)).status).toBe(202)
    const again = await until(() => owner.delivery(first.id), (detail) => detail.attempts === 2 && detail.state === 'succeeded', 5_000, 'the second attempt')
    expect(again.attempt_log.map((attempt: any) => attempt.error)).toEqual([null, null])
    expect(JSON.parse(again.attempt_log[1].response_snippet)).toEqual({ stream, seq: 1, duplicate: true })

    const messages = await stored(sharedJsm, stream)
    expect(messages.map((message) => headersOf(message)['Nats-Msg-Id'])).toEqual([`${first.event_id}:${hook.id}`])
    expect(Object.values(await owner.failures(hook.id)).reduce((sum, count) => sum + count, 0)).toBe(0)
  })

  test('the same event sent by two subscriptions into one stream is kept twice: the duplicate window drops re-sends, not the other subscription\'s', async () => {
    const stream = await addStream(sharedJsm, `events-${run}.pair.>`)
    const owner = await account()
    const first = await owner.subscribe(`nats://127.0.0.1:4222?subject=events-${run}.pair.first`)
    const second = await owner.subscribe(`nats://127.0.0.1:4222?subject=events-${run}.pair.second`)
    await owner.inbound('to both')
    for (const hook of [first, second]) await until(() => owner.deliveries(hook.id), (list) => list[0]?.state === 'succeeded', 5_000, 'delivered')
    const messages = await stored(sharedJsm, stream)
    expect(messages.map((message) => message.subject).sort()).toEqual([`events-${run}.pair.first`, `events-${run}.pair.second`])
    expect(new Set(messages.map((message) => headersOf(message)['webhook-id'])).size).toBe(1)
  })

  test('no stream captures the subject: failed attempts, "unroutable" in the attempt log and the figures; once the stream exists the retries deliver it', async () => {
    const subject = `events-${run}.nostream`
    const owner = await account()
    const hook = await owner.subscribe(`nats://127.0.0.1:4222?subject=${subject}`)
    const eventMessage = await owner.inbound('nowhere yet')

    const [pending] = await until(() => owner.deliveries(hook.id), (list) => list[0]?.attempts >= 2, 10_000, 'two failed attempts')
    expect(pending.state).toBe('pending')
    const detail = await owner.delivery(pending.id)
    for (const attempt of detail.attempt_log) {
      expect(attempt.status_code).toBeNull()
      expect(attempt.error).toBe(`no stream captures subject "${subject}"`)
      // No stream answers at once: not a wait for the timeout.
      expect(attempt.duration_ms).toBeLessThan(1_000)
    }
    expect((await owner.failures(hook.id)).unroutable).toBeGreaterThanOrEqual(2)

    const stream = await addStream(sharedJsm, subject)
    // The circuit may have opened meanwhile: its probe comes at most 5 s after it opened (and the 1 s poll).
    const [delivered] = await until(() => owner.deliveries(hook.id), (list) => list[0]?.state === 'succeeded', 15_000, 'delivered once the stream exists')
    const messages = await stored(sharedJsm, stream)
    expect(messages).toHaveLength(1)
    expect(headersOf(messages[0]!)['Nats-Msg-Id']).toBe(`${delivered.event_id}:${hook.id}`)
    expect((JSON.parse(new TextDecoder().decode(messages[0]!.data)) as any).data.message.id).toBe(eventMessage)
  })

  test('a wrong password, and a user without permission to publish on the subject, are failed attempts "denied", not timeouts', async () => {
    const owner = await account()
    const allowedSubject = `allowed-${run}.inbound`
    const deniedSubject = `denied-${run}.inbound`
    await addStream(privateJsm, allowedSubject)
    const deniedStream = await addStream(privateJsm, deniedSubject)
    const wrongPassword = `wrong-${crypto.randomUUID()}`
    const badLogin = await owner.subscribe(`nats://${writer.user}:${wrongPassword}@127.0.0.1:${privateServer.port}?subject=${allowedSubject}`)
    const noPermission = await owner.subscribe(`nats://${limited.user}:${limited.password}@127.0.0.1:${privateServer.port}?subject=${deniedSubject}`)
    await owner.inbound('not for you')

    for (const [hook, error] of [
      [badLogin, 'connecting: the server refused the credentials (authorization violation)'],
      [noPermission, `permission denied to publish "${deniedSubject}"`],
    ] as const) {
      const [delivery] = await until(() => owner.deliveries(hook.id), (list) => list[0]?.attempts >= 2, 10_000, `two attempts of ${hook.target_url}`)
      expect(delivery.state).toBe('pending')
      const detail = await owner.delivery(delivery.id)
      for (const attempt of detail.attempt_log) {
        expect(attempt.error).toBe(error)
        expect(attempt.duration_ms).toBeLessThan(1_500)
      }
      const failures = await owner.failures(hook.id)
      expect(failures.denied).toBeGreaterThanOrEqual(2)
      expect(failures.timeout ?? 0).toBe(0)
    }
    expect(await stored(privateJsm, deniedStream)).toHaveLength(0)
    expect(server.rawLogs.some((line) => line.includes(wrongPassword) || line.includes(limited.password))).toBe(false)
  })

  test('the server killed while messages are sent: failed attempts (connection); restarted on the same port and store, every event is in the stream exactly once', async () => {
    const owner = await account()
    const subject = `outage-${run}.inbound`
    const stream = await addStream(privateJsm, subject)
    const hook = await owner.subscribe(`nats://${writer.user}:${writer.password}@127.0.0.1:${privateServer.port}?subject=${subject}`)

    for (let n = 0; n < 5; n++) await owner.inbound(`before ${n}`)
    const before = await until(() => owner.deliveries(hook.id), (list) => list.length === 5 && list.every((delivery) => delivery.state === 'succeeded'), 10_000, 'five delivered before the kill')

    await privateConnection.close()
    await privateServer.kill()
    try {
      for (let n = 0; n < 5; n++) await owner.inbound(`during ${n}`)
      // Three failures in a row open the circuit (src/delivery/circuit.ts): the rest wait for its probe, pending.
      const opened = await until(() => owner.call('GET', `/hooks/${hook.id}`), (read) => read.body.circuit.state !== 'closed', 10_000, 'the circuit opens')
      expect(opened.body.circuit.consecutive_failures).toBeGreaterThanOrEqual(3)
      const during = await owner.deliveries(hook.id)
      expect(during).toHaveLength(10)
      expect(during.filter((delivery) => delivery.state === 'pending')).toHaveLength(5)
      const failed = during.filter((delivery) => delivery.attempts > 0 && delivery.state === 'pending')
      expect(failed.length).toBeGreaterThanOrEqual(1)
      for (const delivery of failed) expect(delivery.last_attempt.error).toMatch(/^(publishing|connecting): /)
      expect((await owner.failures(hook.id)).connection).toBeGreaterThanOrEqual(3)
    } finally {
      await privateServer.restart()
      privateConnection = await privateServer.connect()
      privateJsm = await jetstreamManager(privateConnection)
    }

    const after = await until(() => owner.deliveries(hook.id), (list) => list.length === 10 && list.every((delivery) => delivery.state === 'succeeded'), 30_000, 'all ten delivered after the restart')
    // A delivery made before the kill, sent again: the stream's duplicate window outlived the restart.
    const resent = before[before.length - 1]
    expect((await owner.call('POST', `/deliveries/${resent.id}/retry`)).status).toBe(202)
    const again = await until(() => owner.delivery(resent.id), (detail) => detail.attempts === 2 && detail.state === 'succeeded', 10_000, 'the resend')
    expect(JSON.parse(again.attempt_log[1].response_snippet)).toMatchObject({ stream, duplicate: true })

    const ids = (await stored(privateJsm, stream)).map((message) => headersOf(message)['Nats-Msg-Id'])
    expect(ids).toHaveLength(10)
    expect(new Set(ids)).toEqual(new Set(after.map((delivery) => `${delivery.event_id}:${hook.id}`)))
    expect((await owner.call('GET', `/hooks/${hook.id}`)).body.circuit.state).toBe('closed')
  })

  test('a target URL with a password is shown as user:***@ in every response, and the password is in no log line', async () => {
    const owner = await account()
    const subject = `secret-${run}.inbound`
    const stream = await addStream(privateJsm, subject)
    // With the path "/": the URL parser writes it so when there are credentials, and shows it so.
    const shown = `nats://${writer.user}:***@127.0.0.1:${privateServer.port}?subject=${subject}`
    const hook = await owner.subscribe(`nats://${writer.user}:${writer.password}@127.0.0.1:${privateServer.port}/?subject=${subject}`)
    expect(hook.target_url).toBe(shown)
    const read = await owner.call('GET', `/hooks/${hook.id}`)
    expect(read.body.target_url).toBe(shown)
    const listed = await owner.call('GET', '/hooks')
    expect(listed.body.data.map((entry: any) => entry.target_url)).toEqual([shown])

    await owner.inbound('sealed credentials')
    const [delivery] = await until(() => owner.deliveries(hook.id), (list) => list[0]?.state === 'succeeded', 10_000, 'delivered with the sealed password')
    expect(await stored(privateJsm, stream)).toHaveLength(1)
    const detail = await owner.delivery(delivery.id)
    for (const response of [hook, read.body, listed.body, detail]) expect(JSON.stringify(response)).not.toContain(writer.password)
    expect(server.rawLogs.length).toBeGreaterThan(0)
    expect(server.rawLogs.filter((line) => line.includes(writer.password))).toEqual([])
  })
})
