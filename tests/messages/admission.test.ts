import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { createAdmission, HOLD_RETRY_AFTER_SECONDS } from '../../src/messages/admission.ts'
import { ApiError } from '../../src/lib/http/errors.ts'
import { startTestServer } from '../support/server.ts'
import { startReceiver } from '../support/receiver.ts'

setDefaultTimeout(30_000)

describe('holding messages while deliveries are behind', () => {
  test('an account not behind is admitted at once; one behind waits until it is not, and others are not held for it', async () => {
    const held: [number, boolean][] = []
    const admission = createAdmission({ holdMs: 5_000, onHeld: (waitedMs, accepted) => held.push([waitedMs, accepted]) })
    await admission.admit('acc_a')
    admission.setBehind(['acc_a'])
    let admitted = false
    const waiting = admission.admit('acc_a').then(() => (admitted = true))
    await admission.admit('acc_b')
    await Bun.sleep(30)
    expect(admitted).toBe(false)
    admission.setBehind([])
    await waiting
    expect(admitted).toBe(true)
    expect(held).toHaveLength(1)
    expect(held[0]![0]).toBeGreaterThanOrEqual(25)
    expect(held[0]![1]).toBe(true)
  })

  test('after the hold, a 429 deliveries_behind with Retry-After; the account still behind refuses each request after its own hold', async () => {
    const held: boolean[] = []
    const admission = createAdmission({ holdMs: 50, onHeld: (_waitedMs, accepted) => held.push(accepted) })
    admission.setBehind(['acc_a'])
    const refusals = await Promise.all([admission.admit('acc_a').catch((error) => error), admission.admit('acc_a').catch((error) => error)])
    for (const refusal of refusals) {
      expect(refusal).toBeInstanceOf(ApiError)
      expect(refusal).toMatchObject({ status: 429, problemCode: 'deliveries_behind', options: { headers: { 'retry-after': String(HOLD_RETRY_AFTER_SECONDS) } } })
    }
    expect(held).toEqual([false, false])
    // The account stops being behind: nothing left over is released twice, and it is admitted at once.
    admission.setBehind([])
    await admission.admit('acc_a')
    expect(held).toEqual([false, false])
  })

  test('a new list replaces the old: an account left off it is released, one still on it keeps waiting', async () => {
    const admission = createAdmission({ holdMs: 5_000 })
    admission.setBehind(['acc_a', 'acc_b'])
    const order: string[] = []
    const a = admission.admit('acc_a').then(() => order.push('acc_a'))
    const b = admission.admit('acc_b').then(() => order.push('acc_b'))
    admission.setBehind(['acc_b'])
    await a
    await Bun.sleep(10)
    expect(order).toEqual(['acc_a'])
    admission.setBehind([])
    await b
    expect(order).toEqual(['acc_a', 'acc_b'])
  })
})

// One attempt in flight per subscription and a receiver that answers in 40 ms: about 20 deliveries a second,
// so a burst of messages leaves a backlog that takes a second or more to drain.
const receiver = startReceiver(async (request) => {
  if (request.path === '/paced') await Bun.sleep(40)
  return new Response(null, { status: 204 })
})
const server = await startTestServer({
  env: {
    WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
    WEBHOOK_CA_FILE: receiver.caFile,
    WEBHOOK_MAX_IN_FLIGHT_PER_SUBSCRIPTION: '1',
    WEBHOOK_BACKLOG_LIMIT_MS: '100',
    MESSAGE_HOLD_MS: '300',
    API_RATE_LIMIT: '0',
    // The series are read from the instance (the listener is the entry point's; tests/ops/metrics.test.ts).
    METRICS_PORT: '9',
  },
})

describe('POST …/messages while the account\'s deliveries are behind (real worker, real receiver)', () => {
  test('a burst past what the worker sends is held, then refused with 429 deliveries_behind and Retry-After; another account is not held; once drained, accepted again; nothing accepted is lost', async () => {
    const alice = await server.createAccountWithKey('Paced')
    const bob = await server.createAccountWithKey('Neighbour')
    const send = (owner: { accountId: string; secret: string }, body: string) =>
      server.fetch(`/v0/account/${owner.accountId}/messages?key=${owner.secret}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ to: '+14155550123', body }) })
    for (const [owner, path] of [[alice, '/paced'], [bob, '/neighbour']] as const) {
      const created = await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ event: 'message.delivered', target_url: `${receiver.origin}${path}` }),
      })
      expect(created.status).toBe(201)
    }
    // The receiver must have answered quickly once before the account can be behind.
    expect((await send(alice, 'first')).status).toBe(202)
    await receiver.waitFor((received) => received.some((request) => request.path === '/paced'))

    let accepted = 1
    let refusal: Response | undefined
    for (let tries = 0; tries < 20 && !refusal; tries++) {
      const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => send(alice, `burst ${tries}.${i}`)))
      for (const answer of answers) {
        if (answer.status === 202) accepted++
        else if (!refusal) refusal = answer
        else expect(answer.status).toBe(429)
      }
      if (!refusal) {
        // Meanwhile another account sends and is answered at once.
        expect((await send(bob, `beside ${tries}`)).status).toBe(202)
      }
    }
    expect(refusal).toBeDefined()
    expect(refusal!.status).toBe(429)
    expect(refusal!.headers.get('retry-after')).toBe(String(HOLD_RETRY_AFTER_SECONDS))
    expect(refusal!.headers.get('content-type')).toContain('application/problem+json')
    expect(await refusal!.json()).toMatchObject({ status: 429, code: 'deliveries_behind', type: expect.stringContaining('/docs/errors#deliveries_behind') })
    expect((await send(bob, 'while alice waits')).status).toBe(202)
    const series = await server.instance.metrics!.render()
    expect(Number(/^messaging_message_hold_duration_seconds_count\{outcome="refused"\} (\S+)$/m.exec(series)?.[1])).toBeGreaterThanOrEqual(1)

    // Every accepted message is delivered, none twice, and the refused ones never were messages.
    const pacedDeliveries = () => receiver.received.filter((request) => request.path === '/paced')
    await receiver.waitFor(() => pacedDeliveries().length >= accepted, 20_000)
    expect(new Set(pacedDeliveries().map((request) => request.headers['webhook-id'])).size).toBe(accepted)
    const events = await server.fetch(`/v0/account/${alice.accountId}/events?type=message.delivered&limit=100&key=${alice.secret}`)
    const listed = ((await events.json()) as { data: unknown[] }).data
    expect(listed.length).toBe(Math.min(accepted, 100))

    // Drained: the account is accepted again.
    expect((await send(alice, 'after')).status).toBe(202)
    expect(await server.instance.metrics!.render()).toMatch(/^messaging_webhook_accounts_behind 0$/m)
  })
})
