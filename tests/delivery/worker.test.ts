import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { eq } from 'drizzle-orm'
import { Webhook } from 'standardwebhooks'
import { startTestServer } from '../support/server.ts'
import { startReceiver } from '../support/receiver.ts'
import { deliveries, hooks } from '../../src/lib/db/schema.ts'
import { CONTINUOUS_FAILURE_DISABLES_AFTER_MS } from '../../src/delivery/store.ts'

setDefaultTimeout(30_000)

let downIsUp = false
// /slow answers once the test opens this gate: no wall clock decides what arrived first.
let slowAnswers = { opened: Promise.resolve(), open: () => {} }
// /tiring answers in answerMs; it notes how many of its attempts were in flight as each arrived.
const tiring = { answerMs: 5, inFlight: 0, peak: 0, inFlightAtArrival: [] as number[] }
const receiver = startReceiver(async (request, nth) => {
  switch (request.path) {
    case '/tiring': {
      tiring.inFlight++
      tiring.peak = Math.max(tiring.peak, tiring.inFlight)
      tiring.inFlightAtArrival.push(tiring.inFlight)
      await Bun.sleep(tiring.answerMs)
      tiring.inFlight--
      return new Response('ok')
    }
    case '/flaky':
      // A 500, then a timeout, then success: three attempts of one delivery.
      if (nth === 1) return new Response('oops', { status: 500 })
      if (nth === 2) await Bun.sleep(1_500)
      return new Response('ok')
    case '/gone':
      return new Response('gone', { status: 410 })
    case '/redirect':
      return new Response(null, { status: 302, headers: { location: '/landing' } })
    case '/slow':
      await slowAnswers.opened
      return new Response('slowly')
    case '/refuse':
      return new Response('not now', { status: 503 })
    case '/down':
      return downIsUp ? new Response('back') : new Response('down', { status: 503 })
    default:
      return new Response('thanks')
  }
})

// The worker as the Bun entry runs it, with a schedule short enough for a test.
const server = await startTestServer({
  env: {
    WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
    WEBHOOK_CA_FILE: receiver.caFile,
    WEBHOOK_TIMEOUT_MS: '1000',
    WEBHOOK_RETRY_SCHEDULE: '0,100ms,100ms,100ms,100ms,100ms,100ms,100ms,100ms',
  },
})

async function subscribe(owner: { accountId: string; secret: string }, event: string, path: string, on = server) {
  const response = await on.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event, target_url: `${receiver.origin}${path}` }),
  })
  expect(response.status).toBe(201)
  return (await response.json()) as { id: string; secret: string }
}

async function inbound(owner: { accountId: string; secret: string }, body = 'hello', on = server) {
  const response = await on.fetch(`/v0/account/${owner.accountId}/sandbox/inbound?key=${owner.secret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ from: '+447700900300', body }),
  })
  expect(response.status).toBe(201)
  return (await response.json()) as { id: string }
}

const onPath = (path: string) => receiver.received.filter((request) => request.path === path)
const eventOf = (body: string) => JSON.parse(body) as { id: string; type: string; data: { message: { id: string } } }

async function hookResource(owner: { accountId: string; secret: string }, hookId: string) {
  return (await (await server.fetch(`/v0/account/${owner.accountId}/hooks/${hookId}?key=${owner.secret}`)).json()) as { status: string; disabled_reason?: string }
}

/** Every attempt of the subscription's deliveries, newest first, read through the API as an integrator would. */
async function attemptLog(owner: { accountId: string; secret: string }, hookId: string) {
  const page = (await (await server.fetch(`/v0/account/${owner.accountId}/hooks/${hookId}/deliveries?key=${owner.secret}`)).json()) as { data: { id: string }[] }
  const attempts: { event_id: string; id: string; status_code: number | null; error: string | null }[] = []
  for (const delivery of page.data) {
    const detail = (await (await server.fetch(`/v0/account/${owner.accountId}/hooks/${hookId}/deliveries/${delivery.id}?key=${owner.secret}`)).json()) as {
      event_id: string
      attempt_log: { id: string; status_code: number | null; error: string | null }[]
    }
    attempts.push(...detail.attempt_log.map((attempt) => ({ ...attempt, event_id: detail.event_id })))
  }
  return attempts.sort((a, b) => (a.id < b.id ? 1 : -1))
}

describe('the delivery worker', () => {
  test('every event type reaches its subscriber, signed so that standardwebhooks verifies it', async () => {
    const owner = await server.createAccountWithKey()
    const delivered = await subscribe(owner, 'message.delivered', '/all/delivered')
    const failed = await subscribe(owner, 'message.failed', '/all/failed')
    const replies = await subscribe(owner, 'message.inbound', '/all/inbound')
    const send = (to: string) =>
      server.fetch(`/v0/account/${owner.accountId}/messages?key=${owner.secret}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ to, body: 'hi' }),
      })
    const ok = (await (await send('+14155550123')).json()) as { id: string }
    const bounced = (await (await send('+14155550000')).json()) as { id: string }
    const reply = await inbound(owner)

    await receiver.waitFor(() => ['/all/delivered', '/all/failed', '/all/inbound'].every((path) => onPath(path).length === 1))
    const cases = [
      { path: '/all/delivered', secret: delivered.secret, type: 'message.delivered', messageId: ok.id },
      { path: '/all/failed', secret: failed.secret, type: 'message.failed', messageId: bounced.id },
      { path: '/all/inbound', secret: replies.secret, type: 'message.inbound', messageId: reply.id },
    ]
    for (const { path, secret, type, messageId } of cases) {
      const [request] = onPath(path)
      const event = new Webhook(secret).verify(request!.body, request!.headers) as ReturnType<typeof eventOf>
      expect([event.type, event.data.message.id]).toEqual([type, messageId])
      expect(request!.headers['webhook-id']).toBe(event.id)
      expect(request!.headers['content-type']).toBe('application/json')
    }
    // The same event is what GET /events shows.
    const events = (await (await server.fetch(`/v0/account/${owner.accountId}/events?key=${owner.secret}`)).json()) as { data: { id: string }[] }
    expect(events.data.map((event) => event.id).sort()).toEqual(cases.map(({ path }) => eventOf(onPath(path)[0]!.body).id).sort())
  })

  test('a 500 and a timeout are retried with the same webhook-id until a 2xx; the attempt log shows all three', async () => {
    const owner = await server.createAccountWithKey()
    const hook = await subscribe(owner, 'message.inbound', '/flaky')
    await inbound(owner)
    await receiver.waitFor(() => onPath('/flaky').length === 3)
    const ids = new Set(onPath('/flaky').map((request) => request.headers['webhook-id']!))
    expect(ids.size).toBe(1)
    let log: Awaited<ReturnType<typeof attemptLog>> = []
    for (let tries = 0; tries < 100 && log.length < 3; tries++) {
      log = await attemptLog(owner, hook.id)
      await Bun.sleep(20)
    }
    expect(log.map((attempt) => attempt.status_code)).toEqual([200, null, 500])
    expect(log[1]!.error).toBe('timed out after 1000 ms')
    expect(new Set(log.map((attempt) => attempt.event_id))).toEqual(ids)
  })

  test('a 410 disables the subscription; later events are not sent to it', async () => {
    const owner = await server.createAccountWithKey()
    const hook = await subscribe(owner, 'message.inbound', '/gone')
    await inbound(owner)
    await receiver.waitFor(() => onPath('/gone').length === 1)
    let resource = await hookResource(owner, hook.id)
    for (let tries = 0; tries < 100 && resource.status !== 'disabled'; tries++) {
      await Bun.sleep(20)
      resource = await hookResource(owner, hook.id)
    }
    expect(resource).toMatchObject({ status: 'disabled', disabled_reason: 'The receiver answered 410 Gone.' })
    await inbound(owner)
    await Bun.sleep(1_500)
    expect(onPath('/gone')).toHaveLength(1)
  })

  test('a redirect is not followed: the target it names never hears from the worker', async () => {
    const owner = await server.createAccountWithKey()
    const hook = await subscribe(owner, 'message.inbound', '/redirect')
    await inbound(owner)
    await receiver.waitFor(() => onPath('/redirect').length >= 2)
    expect(onPath('/landing')).toHaveLength(0)
    const log = await attemptLog(owner, hook.id)
    expect(log.at(-1)).toMatchObject({ status_code: 302, error: 'redirect 302 not followed (to /landing)' })
  })

  test('a slow receiver does not delay another subscription', async () => {
    // Attempts that time out after longer than the test: a slow one ends only when the test answers it.
    const patient = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile, WEBHOOK_TIMEOUT_MS: '60000' } })
    let open!: () => void
    slowAnswers = { opened: new Promise<void>((resolve) => (open = resolve)), open: () => open() }
    const events = () => new Set(onPath('/slow').map((request) => request.headers['webhook-id'])).size
    try {
      const slowOwner = await patient.createAccountWithKey()
      await subscribe(slowOwner, 'message.inbound', '/slow', patient)
      for (let i = 0; i < 40; i++) await inbound(slowOwner, `slow ${i}`, patient)
      await receiver.waitFor(() => onPath('/slow').length >= 1)

      const quickOwner = await patient.createAccountWithKey()
      await subscribe(quickOwner, 'message.inbound', '/quick', patient)
      await inbound(quickOwner, 'hello', patient)
      // Arrives while every slow attempt is still waiting for its answer: it waited behind none of them.
      await receiver.waitFor(() => onPath('/quick').length === 1)
      expect(events()).toBeLessThan(40)
      slowAnswers.open()
      await receiver.waitFor(() => events() === 40, 20_000)
    } finally {
      slowAnswers.open()
      await patient.stop()
    }
  })

  test('a receiver that answers fast and well gets more than two attempts in flight; when it slows down, it gets fewer', async () => {
    const owner = await server.createAccountWithKey()
    await subscribe(owner, 'message.inbound', '/tiring')
    const burst = (label: string, count: number) => Promise.all(Array.from({ length: count }, (_, i) => inbound(owner, `${label} ${i}`)))

    await burst('fast', 60)
    await receiver.waitFor(() => onPath('/tiring').length === 60)
    const fastPeak = tiring.peak
    expect(fastPeak).toBeGreaterThan(2)

    tiring.answerMs = 300
    tiring.inFlightAtArrival = []
    await burst('slow', 100)
    await receiver.waitFor(() => onPath('/tiring').length === 160, 20_000)
    // The first slow round went out with the window the fast answers built; each round of slow
    // answers took a quarter off it, so the last attempts had far fewer companions.
    const firstRound = Math.max(...tiring.inFlightAtArrival)
    const lastRound = Math.max(...tiring.inFlightAtArrival.slice(-15))
    expect(firstRound).toBeGreaterThan(2)
    expect(lastRound).toBeLessThanOrEqual(firstRound * 0.8)
  })

  test("deleting a subscription cancels its pending deliveries: the receiver hears nothing more", async () => {
    const owner = await server.createAccountWithKey()
    const hook = await subscribe(owner, 'message.inbound', '/refuse')
    for (let i = 0; i < 3; i++) await inbound(owner, `refused ${i}`)
    await receiver.waitFor(() => onPath('/refuse').length >= 3)
    const deleted = await server.fetch(`/v0/account/${owner.accountId}/hooks/${hook.id}?key=${owner.secret}`, { method: 'DELETE' })
    expect(deleted.status).toBe(204)
    expect(await server.database.handle.db.select().from(deliveries).where(eq(deliveries.hookId, hook.id))).toHaveLength(0)
    // An attempt already in flight when the subscription went may still land (late on a busy machine); nothing after it.
    const atDelete = onPath('/refuse').length
    let afterDelete = atDelete
    for (let quiet = 0; quiet < 2; ) {
      await Bun.sleep(500)
      quiet = onPath('/refuse').length === afterDelete ? quiet + 1 : 0
      afterDelete = onPath('/refuse').length
      // At most one attempt of each of the three deliveries was in flight.
      expect(afterDelete - atDelete).toBeLessThanOrEqual(3)
    }
    await Bun.sleep(1_500)
    expect(onPath('/refuse').length).toBe(afterDelete)
  })

  test('after a secret rotation each delivery carries two signatures: the old secret and the new one both verify', async () => {
    const owner = await server.createAccountWithKey()
    const hook = await subscribe(owner, 'message.inbound', '/rotated')
    const rotated = await server.fetch(`/v0/account/${owner.accountId}/hooks/${hook.id}/secret/rotate?key=${owner.secret}`, { method: 'POST' })
    expect(rotated.status).toBe(200)
    const { secret: newSecret } = (await rotated.json()) as { secret: string }
    await inbound(owner)
    await receiver.waitFor(() => onPath('/rotated').length === 1)
    const [request] = onPath('/rotated')
    expect(request!.headers['webhook-signature']!.split(' ')).toHaveLength(2)
    for (const secret of [hook.secret, newSecret]) expect(new Webhook(secret).verify(request!.body, request!.headers)).toBeTruthy()
    expect(() => new Webhook(`whsec_${Buffer.from('someone else').toString('base64')}`).verify(request!.body, request!.headers)).toThrow()
  })

  test('five days of failures disable a subscription with its reason and cancel what was pending; re-enabled, recover sends it', async () => {
    const owner = await server.createAccountWithKey()
    const hook = await subscribe(owner, 'message.inbound', '/down')
    await inbound(owner)
    await receiver.waitFor(() => onPath('/down').length >= 1)
    // Five days compressed: the failure clock is moved back, the next failure disables.
    const db = server.database.handle.db
    await db.update(hooks).set({ failingSince: new Date(Date.now() - CONTINUOUS_FAILURE_DISABLES_AFTER_MS - 60_000) }).where(eq(hooks.id, hook.id))
    let resource = await hookResource(owner, hook.id)
    for (let tries = 0; tries < 300 && resource.status !== 'disabled'; tries++) {
      await Bun.sleep(20)
      resource = await hookResource(owner, hook.id)
    }
    expect(resource).toMatchObject({ status: 'disabled', disabled_reason: 'Every delivery attempt failed for 5 days.' })
    let [waiting] = await db.select().from(deliveries).where(eq(deliveries.hookId, hook.id))
    // The disabling attempt is recorded first, then its retry canceled: read until both have landed.
    for (let tries = 0; tries < 100 && waiting!.status !== 'canceled'; tries++) {
      await Bun.sleep(20)
      ;[waiting] = await db.select().from(deliveries).where(eq(deliveries.hookId, hook.id))
    }
    expect(waiting!.status).toBe('canceled')

    downIsUp = true
    const attemptsWhileDisabled = onPath('/down').length
    const enabled = await server.fetch(`/v0/account/${owner.accountId}/hooks/${hook.id}/enable?key=${owner.secret}`, { method: 'POST' })
    expect(((await enabled.json()) as { status: string }).status).toBe('active')
    await Bun.sleep(1_200)
    expect(onPath('/down')).toHaveLength(attemptsWhileDisabled)
    const recovered = await server.fetch(`/v0/account/${owner.accountId}/hooks/${hook.id}/recover?key=${owner.secret}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ since: new Date(Date.now() - 3_600_000).toISOString() }),
    })
    expect([recovered.status, await recovered.json()]).toEqual([202, { requeued: 1 }])
    await receiver.waitFor(() => onPath('/down').length === attemptsWhileDisabled + 1)
    // The attempt is recorded after the receiver answered.
    let log = await attemptLog(owner, hook.id)
    for (let tries = 0; tries < 100 && log[0]?.status_code !== 200; tries++) {
      await Bun.sleep(20)
      log = await attemptLog(owner, hook.id)
    }
    expect(log[0]!.status_code).toBe(200)
  })
})
