import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eq, sql } from 'drizzle-orm'
import postgres from 'postgres'
import { Webhook } from 'standardwebhooks'
import type { Server } from 'bun'
import { startTestServer } from '../support/server.ts'
import { makeCertificates } from '../../fixtures/tls.ts'
import { deliveries, hooks } from '../../src/lib/db/schema.ts'
import { CONTINUOUS_FAILURE_DISABLES_AFTER_MS, claimDueDeliveries, recordDeliveryAttempts, type HookBacklog } from '../../src/delivery/store.ts'
import { KEYED_PLAN_SETTINGS } from '../../src/lib/db/keyed-plans.ts'
import { explainedConnection, isSuperuser, nodesOf, type PlanNode } from '../support/plans.ts'
import { decideAfterAttempt, type DeliveryDecision } from '../../src/delivery/policy.ts'
import { markHooksDueUnlessHeld, targetOrigin } from '../../src/delivery/queue.ts'
import { sendWebhook, type AttemptResult } from '../../src/delivery/send.ts'
import { postgresClient, postgresDatabase, preparedDrizzle, queryRows } from '../../src/lib/db/client.ts'

/** The deliveries a claim leased. */
const claimRows = async (...args: Parameters<typeof claimDueDeliveries>) => (await claimDueDeliveries(...args)).deliveries

// No delivery worker: these tests drive claim, send and record by hand.
const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' }, deliverWebhooks: false })
const db = server.database.handle.db
const schedule = [0, 1_000, 60_000]

const dir = mkdtempSync(join(tmpdir(), 'store-tls-'))
const tls = makeCertificates(dir)
const received: { headers: Record<string, string>; body: string; path: string }[] = []
let receiver: Server<undefined>
beforeAll(() => {
  receiver = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    tls: { key: tls.key, cert: tls.cert },
    async fetch(request) {
      const path = new URL(request.url).pathname
      received.push({ path, headers: Object.fromEntries(request.headers), body: await request.text() })
      if (path === '/gone') return new Response('gone', { status: 410 })
      if (path === '/broken') return new Response('broken', { status: 500 })
      return new Response('thanks')
    },
  })
})
afterAll(() => {
  receiver.stop(true)
  rmSync(dir, { recursive: true, force: true })
})

/** An account with one subscription at `path` on the receiver, and one event fanned out to it. */
async function eventFor(path: string) {
  const owner = await server.createAccountWithKey()
  const created = await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event: 'message.inbound', target_url: `https://localhost:${receiver.port}${path}` }),
  })
  const hook = await created.json()
  await server.fetch(`/v0/account/${owner.accountId}/sandbox/inbound?key=${owner.secret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ from: '+447700900200', body: `to ${path}` }),
  })
  return { owner, hook }
}

async function moreInbound(owner: { accountId: string; secret: string }, count: number) {
  for (let i = 0; i < count; i++) {
    const response = await server.fetch(`/v0/account/${owner.accountId}/sandbox/inbound?key=${owner.secret}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ from: '+447700900200', body: `more ${i}` }),
    })
    expect(response.status).toBe(201)
  }
}

/** One claim-send-record round, as the worker will run it. */
async function deliverOnce(claimedFor: string) {
  const claimed = (await claimRows(db, { limit: 100, leaseMs: 30_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })).filter((item) => item.hookId === claimedFor)
  for (const item of claimed) {
    const secret = await server.instance.secretBox.open(item.secretCiphertext)
    const result = await sendWebhook({ url: item.targetUrl, id: item.eventId, body: item.payload, keys: { scheme: item.signatureScheme, current: secret } }, { timeoutMs: 2_000, allowPrivate: true, ca: tls.ca })
    await recordDeliveryAttempts(db, [{ deliveryId: item.id, hookId: item.hookId, accountId: item.accountId, result, decision: decideAfterAttempt(result, item.attempts + 1, schedule) }])
  }
  return claimed
}

describe('claim, send, record', () => {
  test('a delivery reaches the receiver signed with the subscription secret, and is logged', async () => {
    const { owner, hook } = await eventFor('/ok')
    const [claimed] = await deliverOnce(hook.id)
    expect(claimed).toBeDefined()
    const hit = received.find((item) => item.headers['webhook-id'] === claimed!.eventId)!
    expect(JSON.parse(hit.body)).toMatchObject({ id: claimed!.eventId, type: 'message.inbound', account_id: owner.accountId })
    expect(new Webhook(hook.secret).verify(hit.body, hit.headers)).toMatchObject({ id: claimed!.eventId })
    const [row] = await db.select().from(deliveries).where(eq(deliveries.id, claimed!.id))
    expect([row!.status, row!.attempts, row!.leasedUntil]).toEqual(['delivered', 1, null])
    const log = await (await server.fetch(`/v0/account/${owner.accountId}/hooks/${hook.id}/deliveries?key=${owner.secret}`)).json()
    expect(log.data).toEqual([
      expect.objectContaining({ id: claimed!.id, event_id: claimed!.eventId, state: 'succeeded', attempts: 1, next_attempt_at: null, last_attempt: expect.objectContaining({ status_code: 200, error: null }) }),
    ])
    const detail = await (await server.fetch(`/v0/account/${owner.accountId}/deliveries/${claimed!.id}?key=${owner.secret}`)).json()
    expect(detail.attempt_log).toEqual([expect.objectContaining({ status_code: 200, error: null, response_snippet: 'thanks' })])
    expect(await deliverOnce(hook.id)).toHaveLength(0)
  })

  test('a 500 is scheduled again with the same event id; a 410 disables the subscription', async () => {
    const broken = await eventFor('/broken')
    const [first] = await deliverOnce(broken.hook.id)
    const [row] = await db.select().from(deliveries).where(eq(deliveries.id, first!.id))
    expect([row!.status, row!.attempts]).toEqual(['pending', 1])
    expect(row!.nextAttemptAt.getTime()).toBeGreaterThan(Date.now())
    await db.update(deliveries).set({ nextAttemptAt: sql`now()` }).where(eq(deliveries.id, first!.id))
    const [second] = await deliverOnce(broken.hook.id)
    expect(second!.eventId).toBe(first!.eventId)
    expect(received.filter((item) => item.headers['webhook-id'] === first!.eventId)).toHaveLength(2)

    const gone = await eventFor('/gone')
    await moreInbound(gone.owner, 2)
    // Two are claimed (maxPerHook 2); the first 410 disables the subscription and cancels the one still waiting.
    await deliverOnce(gone.hook.id)
    const [hook] = await db.select().from(hooks).where(eq(hooks.id, gone.hook.id))
    expect([hook!.status, hook!.disabledReason]).toEqual(['disabled', 'The receiver answered 410 Gone.'])
    const states = (await db.select().from(deliveries).where(eq(deliveries.hookId, gone.hook.id))).map((row) => row.status).sort()
    expect(states).toEqual(['canceled', 'failed', 'failed'])
    const read = await (await server.fetch(`/v0/account/${gone.owner.accountId}/hooks/${gone.hook.id}?key=${gone.owner.secret}`)).json()
    expect(read.status).toBe('disabled')
  })

  test('the last failure of the schedule leaves the delivery failed', async () => {
    const broken = await eventFor('/broken')
    const due = () => db.update(deliveries).set({ nextAttemptAt: sql`now()` }).where(eq(deliveries.hookId, broken.hook.id))
    for (let i = 0; i < schedule.length; i++) {
      await due()
      await deliverOnce(broken.hook.id)
    }
    const [row] = await db.select().from(deliveries).where(eq(deliveries.hookId, broken.hook.id))
    expect([row!.status, row!.attempts]).toEqual(['failed', 3])
  })
})

describe('leases', () => {
  test('a leased delivery is not claimed again until its lease runs out', async () => {
    const { hook } = await eventFor('/lease')
    const mine = <T extends { hookId: string }>(items: T[]) => items.filter((item) => item.hookId === hook.id)
    expect(mine(await claimRows(db, { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 }))).toHaveLength(1)
    expect(mine(await claimRows(db, { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 }))).toHaveLength(0)
    await db.update(deliveries).set({ leasedUntil: sql`now() - interval '1 second'` }).where(eq(deliveries.hookId, hook.id))
    // The queue had it due when the lease ends (src/delivery/queue.ts): ending the lease by hand brings that forward too.
    await markHooksDueUnlessHeld(db, [hook.id])
    expect(mine(await claimRows(db, { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 }))).toHaveLength(1)
  })

  test.if(!!server.database.url)('claimers on separate connections never get the same delivery', async () => {
    const owner = await server.createAccountWithKey()
    await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ event: 'message.inbound', target_url: `https://localhost:${receiver.port}/many` }),
    })
    for (let i = 0; i < 200; i++) {
      await server.fetch(`/v0/account/${owner.accountId}/sandbox/inbound?key=${owner.secret}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ from: '+447700900201', body: `n${i}` }),
      })
    }
    const claimers = Array.from({ length: 4 }, () => postgresDatabase(server.database.url!, { max: 1 }))
    try {
      const claimed: string[] = []
      for (let round = 0; round < 20; round++) {
        const batches = await Promise.all(claimers.map((claimer) => claimRows(claimer.db, { limit: 7, leaseMs: 60_000, allowances: {}, defaultAllowance: 1000, maxPerHook: 1000, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })))
        for (const batch of batches) claimed.push(...batch.map((item) => item.id))
      }
      const many = await db.select({ id: deliveries.id }).from(deliveries).innerJoin(hooks, eq(hooks.id, deliveries.hookId)).where(eq(hooks.accountId, owner.accountId))
      const mineClaimed = claimed.filter((id) => many.some((row) => row.id === id))
      expect(mineClaimed).toHaveLength(200)
      expect(new Set(mineClaimed).size).toBe(200)
    } finally {
      await Promise.all(claimers.map((claimer) => claimer.close()))
    }
  })
})

/** `count` more events for an existing subscription's account. */
async function moreEvents(owner: { accountId: string; secret: string }, count: number) {
  for (let i = 0; i < count; i++) {
    await server.fetch(`/v0/account/${owner.accountId}/sandbox/inbound?key=${owner.secret}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ from: '+447700900202', body: `more ${i}` }),
    })
  }
}

const failedAttempt = { ok: false, status: 500, durationMs: 3, error: 'HTTP 500', failure: 'http_5xx' as const, responseSnippet: '', retryAfterSeconds: null }
const okAttempt = { ok: true, status: 200, durationMs: 3, error: null, failure: null, responseSnippet: 'ok', retryAfterSeconds: null }

describe('recording a batch', () => {
  test('two attempts of one delivery in one batch (leased again after its lease ran out) are both logged and both counted', async () => {
    const { hook } = await eventFor('/twice')
    const [claimed] = (await claimRows(db, { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })).filter((item) => item.hookId === hook.id)
    const attempt = { deliveryId: claimed!.id, hookId: claimed!.hookId, accountId: claimed!.accountId }
    await recordDeliveryAttempts(db, [
      { ...attempt, result: { ...okAttempt, ok: false, status: 500, failure: 'http_5xx' as const, error: 'HTTP 500' }, decision: { kind: 'retry', delayMs: 60_000 } },
      { ...attempt, result: okAttempt, decision: { kind: 'delivered' } },
    ])
    const [delivery] = await queryRows<{ status: string; attempts: number; logged: number; counted: number }>(
      db,
      sql`select d.status, d.attempts, (select count(*)::int from delivery_attempts a where a.delivery_id = d.id) as logged,
            (select attempts from hook_stats s where s.hook_id = d.hook_id and s.unit = 'day' order by bucket desc limit 1) as counted
          from deliveries d where d.id = ${claimed!.id}`,
    )
    expect(delivery).toEqual({ status: 'delivered', attempts: 2, logged: 2, counted: 2 })
  })
})

describe('in flight per subscription', () => {
  test('at most perHook deliveries of one subscription are leased at once; recording one frees its slot', async () => {
    const { owner, hook } = await eventFor('/bounded')
    await moreEvents(owner, 4)
    const mine = <T extends { hookId: string }>(items: T[]) => items.filter((item) => item.hookId === hook.id)
    const first = mine(await claimRows(db, { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 }))
    expect(first).toHaveLength(2)
    expect(mine(await claimRows(db, { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 }))).toHaveLength(0)
    await recordDeliveryAttempts(db, [{ deliveryId: first[0]!.id, hookId: first[0]!.hookId, accountId: first[0]!.accountId, result: okAttempt, decision: { kind: 'delivered' } }])
    expect(mine(await claimRows(db, { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 }))).toHaveLength(1)
  })

  test('an attempt the sender has ended but not yet recorded holds no slot: its delivery stays leased, and is not claimed again', async () => {
    const { owner, hook } = await eventFor('/ended-unrecorded')
    await moreEvents(owner, 4)
    const mine = <T extends { hookId: string }>(items: T[]) => items.filter((item) => item.hookId === hook.id)
    const options = { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 }
    const first = mine(await claimRows(db, options))
    expect(first).toHaveLength(2)
    // A new event marks the subscription due (recording would, too).
    await moreEvents(owner, 1)
    expect(mine(await claimRows(db, options))).toHaveLength(0)
    await moreEvents(owner, 1)
    // Another sender's ended attempts, or ids that are not leased, free nothing.
    expect(mine(await claimRows(db, { ...options, endedUnrecorded: ['dlv_not_leased'] }))).toHaveLength(0)
    await moreEvents(owner, 1)
    const freed = mine(await claimRows(db, { ...options, endedUnrecorded: [first[0]!.id] }))
    expect(freed).toHaveLength(1)
    expect(first.map((item) => item.id)).not.toContain(freed[0]!.id)
    // Now three are leased, one of them ended: the maximum is reached again.
    await moreEvents(owner, 1)
    expect(mine(await claimRows(db, { ...options, endedUnrecorded: [first[0]!.id] }))).toHaveLength(0)
  })

  test("one subscription's backlog does not hide another's due delivery from the next claim", async () => {
    const slow = await eventFor('/backlog')
    await moreEvents(slow.owner, 80)
    const other = await eventFor('/other')
    const first = await claimRows(db, { limit: 10, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })
    const second = await claimRows(db, { limit: 10, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })
    expect([...first, ...second].filter((item) => item.hookId === slow.hook.id)).toHaveLength(2)
    expect([...first, ...second].filter((item) => item.hookId === other.hook.id)).toHaveLength(1)
  })

  test("a subscription the claim is woken for is found by key, though another account's due subscriptions fill the walk ahead of it", async () => {
    await db.execute(sql`update deliveries set status = 'delivered' where status = 'pending'`)
    await db.execute(sql`update hook_queues set due_at = null`)
    const wide = await server.createAccountWithKey()
    for (let i = 0; i < 40; i++) {
      const created = await server.fetch(`/v0/account/${wide.accountId}/hooks?key=${wide.secret}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ event: 'message.inbound', target_url: `https://localhost:${receiver.port}/wide-${i}` }),
      })
      expect(created.status).toBe(201)
    }
    await moreInbound(wide, 1)
    const narrow = await eventFor('/woken')
    await moreInbound(narrow.owner, 1)
    // The wide account may start 4: its rows have room, so a walk of 16 (the least) stops among its 40.
    const options = { limit: 16, leaseMs: 60_000, allowances: {}, defaultAllowance: 1, maxPerHook: 64, accountAllowances: { [wide.accountId]: 4 }, defaultAccountAllowance: 1000, suspectAllowance: 1000 }
    const walked = await claimDueDeliveries(db, options)
    expect(walked.deliveries.map((item) => item.accountId)).toEqual(Array(4).fill(wide.accountId))
    expect(walked.more).toBe(true)
    // Without the walk: only what it names (one, its allowance), and no sign of more to walk.
    const wokenOnly = await claimDueDeliveries(db, { ...options, woken: [narrow.hook.id], walk: false })
    expect(wokenOnly.deliveries.map((item) => item.hookId)).toEqual([narrow.hook.id])
    expect(wokenOnly.more).toBe(false)
    await markHooksDueUnlessHeld(db, [narrow.hook.id])
    const woken = await claimDueDeliveries(db, { ...options, woken: [narrow.hook.id] })
    expect(woken.deliveries.filter((item) => item.hookId === narrow.hook.id)).toHaveLength(1)
    expect(woken.deliveries.filter((item) => item.accountId === wide.accountId)).toHaveLength(4)
    // Naming it again finds nothing left.
    expect((await claimDueDeliveries(db, { ...options, accountAllowances: { [wide.accountId]: 0 }, woken: [narrow.hook.id] })).deliveries).toHaveLength(0)
  })
})

describe('origins', () => {
  test("a target's origin is its scheme, host and port, without a broker's user name", async () => {
    const originOf = async (url: string) => (await queryRows<{ origin: string }>(db, sql`select ${targetOrigin(sql`${url}`)} as origin`))[0]!.origin
    expect(await originOf('https://example.com/hooks?a=1#b')).toBe('https://example.com')
    expect(await originOf('https://example.com:8443/')).toBe('https://example.com:8443')
    expect(await originOf('http://[::1]:8080/x')).toBe('http://[::1]:8080')
    expect(await originOf('amqp://user:***@broker.example:5672/vhost')).toBe('amqp://broker.example:5672')
    expect(await originOf('nats://***@nats.example:4222')).toBe('nats://nats.example:4222')
  })

  test('the claim starts no more attempts to an origin than its allowance, all its subscriptions together; a new target moves the subscription to its origin', async () => {
    const owner = await server.createAccountWithKey()
    const numeric = `https://127.0.0.1:${receiver.port}`
    const named = `https://localhost:${receiver.port}`
    const hookIds: string[] = []
    for (const target of [`${numeric}/o-1`, `${numeric}/o-2`, `${numeric}/o-3`, `${named}/o-4`]) {
      const created = await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ event: 'message.inbound', target_url: target }),
      })
      expect(created.status).toBe(201)
      hookIds.push((await created.json()).id)
    }
    await moreInbound(owner, 1)
    const queued = await queryRows<{ hook_id: string; origin: string }>(db, sql`select hook_id, origin from hook_queues where hook_id in (${sql.join(hookIds.map((id) => sql`${id}`), sql`, `)}) order by hook_id`)
    expect(Object.fromEntries(queued.map((row) => [row.hook_id, row.origin]))).toEqual({ [hookIds[0]!]: numeric, [hookIds[1]!]: numeric, [hookIds[2]!]: numeric, [hookIds[3]!]: named })
    const mine = (claimed: { hookId: string; origin: string }[]) => claimed.filter((item) => hookIds.includes(item.hookId))
    const options = { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000, defaultOriginAllowance: 1000 }
    const first = mine(await claimRows(db, { ...options, originAllowances: { [numeric]: 2 } }))
    expect(first.filter((item) => item.origin === numeric)).toHaveLength(2)
    expect(first.filter((item) => item.origin === named)).toHaveLength(1)
    // No room at the origin: its third subscription gets nothing, and is set aside for 5 s rather than looked at by every claim.
    const left = hookIds.filter((id) => !first.some((item) => item.hookId === id))
    expect(left).toHaveLength(1)
    expect(mine(await claimRows(db, { ...options, originAllowances: { [numeric]: 0 } }))).toHaveLength(0)
    const [setAside] = await queryRows<{ wait_s: number }>(db, sql`select extract(epoch from due_at - now())::float8 as wait_s from hook_queues where hook_id = ${left[0]!}`)
    expect(setAside!.wait_s).toBeGreaterThan(4)
    expect(setAside!.wait_s).toBeLessThanOrEqual(5)
    expect(mine(await claimRows(db, { ...options, originAllowances: { [numeric]: 1 } }))).toHaveLength(0)
    // Marked due again (a new event, or its own attempt recorded), it is taken once its origin has room.
    await markHooksDueUnlessHeld(db, left)
    const third = mine(await claimRows(db, { ...options, originAllowances: { [numeric]: 1 } }))
    expect(third.map((item) => item.hookId)).toEqual(left)
    const moved = await server.fetch(`/v0/account/${owner.accountId}/hooks/${hookIds[0]}?key=${owner.secret}`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ target_url: `${named}/o-1` }),
    })
    expect(moved.status).toBe(200)
    const [row] = await queryRows<{ origin: string }>(db, sql`select origin from hook_queues where hook_id = ${hookIds[0]!}`)
    expect(row!.origin).toBe(named)
  })
})

describe('recording', () => {
  test('failures start the failure clock, a success stops it, five days of failures disable the subscription', async () => {
    const { owner, hook } = await eventFor('/clock')
    await moreEvents(owner, 2)
    const failOne = async () => {
      const [item] = (await claimRows(db, { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 1, maxPerHook: 1, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })).filter((claimed) => claimed.hookId === hook.id)
      await recordDeliveryAttempts(db, [{ deliveryId: item!.id, hookId: item!.hookId, accountId: item!.accountId, result: failedAttempt, decision: { kind: 'retry', delayMs: 0 } }])
      return item!
    }
    const read = async () => (await db.select().from(hooks).where(eq(hooks.id, hook.id)))[0]!

    await failOne()
    const failing = await read()
    expect(failing.failingSince).toBeInstanceOf(Date)
    const again = await failOne()
    expect((await read()).failingSince!.getTime()).toBe(failing.failingSince!.getTime())

    const [next] = (await claimRows(db, { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 1, maxPerHook: 1, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })).filter((claimed) => claimed.hookId === hook.id)
    await recordDeliveryAttempts(db, [{ deliveryId: next!.id, hookId: next!.hookId, accountId: next!.accountId, result: okAttempt, decision: { kind: 'delivered' } }])
    expect((await read()).failingSince).toBeNull()

    await failOne()
    const longAgo = new Date(Date.now() - CONTINUOUS_FAILURE_DISABLES_AFTER_MS - 60_000)
    await db.update(hooks).set({ failingSince: longAgo }).where(eq(hooks.id, hook.id))
    expect((await read()).status).toBe('active')
    await failOne()
    const disabled = await read()
    expect(disabled.status).toBe('disabled')
    expect(disabled.disabledReason).toContain('5 days')
    expect(again.eventId).toMatch(/^evt_/)
  })

  test("an attempt for a delivery deleted meanwhile (its subscription was deleted) is dropped, the others in the batch are stored", async () => {
    const gone = await eventFor('/deleted-meanwhile')
    const kept = await eventFor('/kept')
    const claimed = (await claimRows(db, { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })).filter((item) => [gone.hook.id, kept.hook.id].includes(item.hookId))
    expect(claimed).toHaveLength(2)
    await db.delete(hooks).where(eq(hooks.id, gone.hook.id))
    await recordDeliveryAttempts(db, claimed.map((item) => ({ deliveryId: item.id, hookId: item.hookId, accountId: item.accountId, result: okAttempt, decision: { kind: 'delivered' as const } })))
    const [row] = await db.select().from(deliveries).where(eq(deliveries.hookId, kept.hook.id))
    expect(row!.status).toBe('delivered')
    expect(await db.select().from(deliveries).where(eq(deliveries.hookId, gone.hook.id))).toHaveLength(0)
  })

  test.if(!!server.database.url)('a subscription deleted while its attempt waits to be recorded: the batch is stored, the deleted one is dropped', async () => {
    const gone = await eventFor('/deleted-during-record')
    const kept = await eventFor('/kept-during-record')
    const claimed = (await claimRows(db, { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 2, maxPerHook: 2, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })).filter((item) => [gone.hook.id, kept.hook.id].includes(item.hookId))
    expect(claimed).toHaveLength(2)
    const deleter = postgres(server.database.url!, { max: 1, onnotice: () => {} })
    try {
      let recording: Promise<void> | undefined
      await deleter.begin(async (tx) => {
        // What deleting a subscription does (src/hooks/service.ts): its deliveries in flight first, then the row.
        await tx`select id from deliveries where hook_id = ${gone.hook.id} and leased_until is not null for update`
        // The record starts now, so its snapshot still holds the subscription the delete is about to remove.
        recording = recordDeliveryAttempts(db, claimed.map((item) => ({ deliveryId: item.id, hookId: item.hookId, accountId: item.accountId, result: okAttempt, decision: { kind: 'delivered' as const } })))
        await Bun.sleep(300)
        await tx`delete from hooks where id = ${gone.hook.id}`
      })
      await recording
    } finally {
      await deleter.end({ timeout: 5 })
    }
    const [row] = await db.select().from(deliveries).where(eq(deliveries.hookId, kept.hook.id))
    expect(row!.status).toBe('delivered')
    const logged = await queryRows<{ hook_id: string }>(db, sql`select hook_id from delivery_attempts where hook_id in (${gone.hook.id}, ${kept.hook.id})`)
    expect(logged.map((attempt) => attempt.hook_id)).toEqual([kept.hook.id])
    const counted = await queryRows<{ attempts: number }>(db, sql`select attempts from hook_stats where hook_id = ${kept.hook.id} and unit = 'minute'`)
    expect(counted.map((bucket) => bucket.attempts)).toEqual([1])
  })
})

describe('flow control in the claim', () => {
  // Only the subscriptions a test names may be claimed: the others' leftovers are set aside first.
  const setAsideOthers = () => db.execute(sql`update deliveries set status = 'delivered' where status = 'pending'`)
  const claim = (allowances: Record<string, number>, limit = 100, maxPerHook = 64) =>
    claimRows(db, { limit, leaseMs: 60_000, allowances, defaultAllowance: 1, maxPerHook, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })
  const count = (items: { hookId: string }[], hookId: string) => items.filter((item) => item.hookId === hookId).length
  async function twoBacklogs(size: number) {
    const a = await eventFor('/flow-a')
    const b = await eventFor('/flow-b')
    await Promise.all([moreEvents(a.owner, size - 1), moreEvents(b.owner, size - 1)])
    return { a: a.hook.id as string, b: b.hook.id as string }
  }

  test('subscriptions are served round-robin within their allowances, the one with the least in flight first', async () => {
    await setAsideOthers()
    const { a, b } = await twoBacklogs(12)
    const first = await claim({ [a]: 10, [b]: 10 }, 6)
    expect([count(first, a), count(first, b)]).toEqual([3, 3])
    const second = await claim({ [a]: 1, [b]: 10 }, 8)
    expect([count(second, a), count(second, b)]).toEqual([1, 7])
    // a has 4 in flight, b 10: a's rows come first.
    const third = await claim({ [a]: 10, [b]: 10 }, 2)
    expect([count(third, a), count(third, b)]).toEqual([2, 0])
    expect(await claim({ [a]: 0, [b]: 0 })).toHaveLength(0)
  })

  test('the maximum in flight holds across claimers, whatever their allowances', async () => {
    await setAsideOthers()
    const { a } = await twoBacklogs(10)
    // On PostgreSQL the other claimer is another connection, as another process would be.
    const other = server.database.url ? postgresDatabase(server.database.url, { max: 1 }) : undefined
    try {
      const [mine, theirs] = await Promise.all([
        claim({ [a]: 10 }, 100, 4),
        claimRows(other?.db ?? db, { limit: 100, leaseMs: 60_000, allowances: { [a]: 10 }, defaultAllowance: 1, maxPerHook: 4, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 }),
      ])
      expect(count(mine, a) + count(theirs, a)).toBe(4)
    } finally {
      await other?.close()
    }
  })

  test('rate_limit_per_s: no more attempts start in a clock second than the limit, across claims', async () => {
    await setAsideOthers()
    const { a } = await twoBacklogs(30)
    await db.update(hooks).set({ rateLimitPerS: 3 }).where(eq(hooks.id, a))
    const perSecond = new Map<number, number>()
    const started = Date.now()
    while (Date.now() - started < 2_500) {
      const claimed = count(await claim({ [a]: 100 }), a)
      expect(claimed).toBeLessThanOrEqual(3)
      // Counted in the second the claim ran in, by the database's clock, as the claim counts them.
      const [row] = await db.select({ second: hooks.rateWindowStartedAt }).from(hooks).where(eq(hooks.id, a))
      if (claimed > 0) perSecond.set(row!.second!.getTime(), (perSecond.get(row!.second!.getTime()) ?? 0) + claimed)
      await Bun.sleep(25)
    }
    const total = [...perSecond.values()].reduce((sum, n) => sum + n, 0)
    expect(Math.max(...perSecond.values())).toBeLessThanOrEqual(3)
    expect(total).toBeGreaterThanOrEqual(6)
  })

  test('a 429 or 503 with Retry-After pauses the whole subscription that long, in every claimer', async () => {
    await setAsideOthers()
    const { a } = await twoBacklogs(5)
    const [item] = (await claim({ [a]: 1 })).filter((claimed) => claimed.hookId === a)
    const tooMany = { ok: false, status: 429, durationMs: 2, error: 'HTTP 429', failure: 'http_4xx' as const, responseSnippet: '', retryAfterSeconds: 120 }
    await recordDeliveryAttempts(db, [{ deliveryId: item!.id, hookId: item!.hookId, accountId: item!.accountId, result: tooMany, decision: decideAfterAttempt(tooMany, 1, schedule) }])
    const [paused] = await db.select().from(hooks).where(eq(hooks.id, a))
    expect(paused!.throttledUntil!.getTime()).toBeGreaterThan(Date.now() + 110_000)
    expect(count(await claim({ [a]: 10 }), a)).toBe(0)
    await db.update(hooks).set({ throttledUntil: new Date(Date.now() - 1000) }).where(eq(hooks.id, a))
    await markHooksDueUnlessHeld(db, [a])
    expect(count(await claim({ [a]: 10 }), a)).toBe(4)
  })
})

describe("the claim's backlog report (src/delivery/backlog.ts)", () => {
  const setAsideOthers = () => db.execute(sql`update deliveries set status = 'delivered' where status = 'pending'`)
  const claim = (allowances: Record<string, number>, limit = 100) =>
    claimDueDeliveries(db, { limit, leaseMs: 60_000, allowances, defaultAllowance: 1, maxPerHook: 64, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })
  const reportOf = (claimed: { backlog: HookBacklog[] }, hookId: string) => claimed.backlog.find((entry) => entry.hookId === hookId)
  // The subscription's pending deliveries fell due `ms` ago.
  const dueAgo = (hookId: string, ms: number) =>
    db.execute(sql`update deliveries set next_attempt_at = now() - make_interval(secs => ${ms / 1000}) where hook_id = ${hookId} and status = 'pending'`)

  test('a subscription the claim may leave deliveries of reports how long the oldest it found had been due; one it empties reports 0', async () => {
    await setAsideOthers()
    const { owner, hook } = await eventFor('/backlog-report')
    await moreEvents(owner, 4)
    await dueAgo(hook.id, 3_000)
    const first = await claim({ [hook.id]: 2 })
    expect(first.deliveries.filter((delivery) => delivery.hookId === hook.id)).toHaveLength(2)
    expect(reportOf(first, hook.id)).toEqual({ hookId: hook.id, accountId: owner.accountId, waitedMs: expect.any(Number) })
    expect(reportOf(first, hook.id)!.waitedMs).toBeGreaterThanOrEqual(3_000)
    expect(reportOf(first, hook.id)!.waitedMs).toBeLessThan(60_000)
    await markHooksDueUnlessHeld(db, [hook.id])
    const rest = await claim({ [hook.id]: 10 })
    expect(rest.deliveries.filter((delivery) => delivery.hookId === hook.id)).toHaveLength(3)
    expect(reportOf(rest, hook.id)).toEqual({ hookId: hook.id, accountId: owner.accountId, waitedMs: 0 })
  })

  test('a suspect subscription, or one held back by its rate limit, is not reported: its backlog is its receiver\'s pace', async () => {
    await setAsideOthers()
    const suspect = await eventFor('/backlog-suspect')
    const limited = await eventFor('/backlog-limited')
    await Promise.all([moreEvents(suspect.owner, 3), moreEvents(limited.owner, 3)])
    await Promise.all([dueAgo(suspect.hook.id, 3_000), dueAgo(limited.hook.id, 3_000)])
    await db.update(hooks).set({ consecutiveFailures: 1 }).where(eq(hooks.id, suspect.hook.id))
    await db.update(hooks).set({ rateLimitPerS: 1 }).where(eq(hooks.id, limited.hook.id))
    const claimed = await claim({ [suspect.hook.id]: 1, [limited.hook.id]: 10 })
    expect(claimed.deliveries.map((delivery) => delivery.hookId).sort()).toEqual([suspect.hook.id, limited.hook.id].sort())
    expect(reportOf(claimed, suspect.hook.id)).toBeUndefined()
    expect(reportOf(claimed, limited.hook.id)).toBeUndefined()
  })
})

describe('the circuit breaker in the claim and the record (src/delivery/circuit.ts)', () => {
  const options = { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 10, maxPerHook: 64, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 }
  const serverError = { ok: false, status: 503, durationMs: 2, error: 'HTTP 503', failure: 'http_5xx' as const, responseSnippet: '', retryAfterSeconds: null }
  const retryNow = { kind: 'retry', delayMs: 0 } as const
  const setAsideOthers = () => db.execute(sql`update deliveries set status = 'delivered' where status = 'pending'`)
  const hookRow = async (id: string) => (await db.select().from(hooks).where(eq(hooks.id, id)))[0]!
  const mine = <T extends { hookId: string }>(items: T[], hookId: string) => items.filter((item) => item.hookId === hookId)
  const record = (items: { id: string; hookId: string; accountId: string }[], result: AttemptResult, decision: DeliveryDecision) =>
    recordDeliveryAttempts(db, items.map((item) => ({ deliveryId: item.id, hookId: item.hookId, accountId: item.accountId, result, decision })))
  /** The probe's time comes (as the clock would bring it): its due_at moves with it. */
  const probeTimeComes = async (hookId: string) => {
    await db.update(hooks).set({ circuitProbeAt: sql`now() - interval '1 second'` }).where(eq(hooks.id, hookId))
    await markHooksDueUnlessHeld(db, [hookId])
  }
  const shown = async (owner: { accountId: string; secret: string }, hookId: string) =>
    (await (await server.fetch(`/v0/account/${owner.accountId}/hooks/${hookId}?key=${owner.secret}`)).json()).circuit

  test('three failures in a row open it; its deliveries wait; one probe at a time once its time comes; a success closes it and the backlog drains; nothing is lost', async () => {
    await setAsideOthers()
    const { owner, hook } = await eventFor('/circuit')
    await moreInbound(owner, 5)
    expect(await shown(owner, hook.id)).toEqual({ state: 'closed', consecutive_failures: 0, opened_at: null, next_probe_at: null })

    const first = mine(await claimRows(db, { ...options, defaultAllowance: 3 }), hook.id)
    expect(first.map((item) => [item.suspect, item.probe])).toEqual([[false, false], [false, false], [false, false]])
    await record(first, serverError, retryNow)
    let row = await hookRow(hook.id)
    expect(row.consecutiveFailures).toBe(3)
    expect(row.circuitOpenedAt).not.toBeNull()
    expect(row.circuitProbeAt!.getTime() - Date.now()).toBeGreaterThan(3_000)
    expect(await shown(owner, hook.id)).toMatchObject({ state: 'open', consecutive_failures: 3 })

    // Six deliveries are due (three retries, three never tried): none goes out while it is open.
    expect(mine(await claimRows(db, options), hook.id)).toHaveLength(0)

    await probeTimeComes(hook.id)
    expect((await shown(owner, hook.id)).state).toBe('half_open')
    const probe = mine(await claimRows(db, options), hook.id)
    expect(probe.map((item) => [item.suspect, item.probe])).toEqual([[true, true]])
    // While the probe is in flight nothing else goes, even if the probe time comes again.
    await probeTimeComes(hook.id)
    expect(mine(await claimRows(db, options), hook.id)).toHaveLength(0)

    // A failed probe keeps it open, the next probe at least the minimum interval away.
    await record(probe, serverError, retryNow)
    row = await hookRow(hook.id)
    expect([row.consecutiveFailures, row.circuitOpenedAt !== null]).toEqual([4, true])
    expect(row.circuitProbeAt!.getTime() - Date.now()).toBeGreaterThan(3_000)
    expect(mine(await claimRows(db, options), hook.id)).toHaveLength(0)

    await probeTimeComes(hook.id)
    const secondProbe = mine(await claimRows(db, options), hook.id)
    expect(secondProbe).toHaveLength(1)
    await record(secondProbe, okAttempt, { kind: 'delivered' })
    row = await hookRow(hook.id)
    expect([row.consecutiveFailures, row.circuitOpenedAt, row.circuitProbeAt]).toEqual([0, null, null])
    expect(await shown(owner, hook.id)).toEqual({ state: 'closed', consecutive_failures: 0, opened_at: null, next_probe_at: null })

    // Closed: the five left go out at once, and every delivery ends delivered.
    const rest = mine(await claimRows(db, options), hook.id)
    expect(rest.map((item) => item.suspect)).toEqual([false, false, false, false, false])
    await record(rest, okAttempt, { kind: 'delivered' })
    const states = await db.select({ status: deliveries.status }).from(deliveries).where(eq(deliveries.hookId, hook.id))
    expect(states.map((item) => item.status)).toEqual(Array(6).fill('delivered'))
  })

  test('an answer that is not a failure (a 400) closes it as well; a 429 counts as a failure', async () => {
    await setAsideOthers()
    const { owner, hook } = await eventFor('/circuit-400')
    await moreInbound(owner, 3)
    const tooMany = { ...serverError, status: 429, error: 'HTTP 429' }
    await record(mine(await claimRows(db, { ...options, defaultAllowance: 3 }), hook.id), tooMany, retryNow)
    expect((await hookRow(hook.id)).circuitOpenedAt).not.toBeNull()
    await probeTimeComes(hook.id)
    const probe = mine(await claimRows(db, options), hook.id)
    const badRequest = { ...serverError, status: 400, error: 'HTTP 400' }
    await record(probe, badRequest, decideAfterAttempt(badRequest, probe[0]!.attempts + 1, schedule))
    const row = await hookRow(hook.id)
    expect([row.consecutiveFailures, row.circuitOpenedAt]).toEqual([0, null])
  })

  test("a broker's confirmation (no status code) is an answer: confirmations in a row leave it closed, and one closes an open circuit", async () => {
    await setAsideOthers()
    const { owner, hook } = await eventFor('/circuit-broker')
    await moreInbound(owner, 3)
    const confirmed = { ok: true, status: null, durationMs: 2, error: null, failure: null, responseSnippet: '{"stream":"events","seq":1,"duplicate":false}', retryAfterSeconds: null }
    await record(mine(await claimRows(db, { ...options, defaultAllowance: 3 }), hook.id), confirmed, { kind: 'delivered' })
    expect(await shown(owner, hook.id)).toEqual({ state: 'closed', consecutive_failures: 0, opened_at: null, next_probe_at: null })

    const unconfirmed = { ...serverError, status: null, error: 'publishing: ECONNREFUSED', failure: 'connection' as const }
    await moreInbound(owner, 3)
    await record(mine(await claimRows(db, { ...options, defaultAllowance: 3 }), hook.id), unconfirmed, retryNow)
    expect((await shown(owner, hook.id)).state).toBe('open')
    await probeTimeComes(hook.id)
    await record(mine(await claimRows(db, options), hook.id), confirmed, { kind: 'delivered' })
    expect(await shown(owner, hook.id)).toEqual({ state: 'closed', consecutive_failures: 0, opened_at: null, next_probe_at: null })
  })

  test('a new target URL, or re-enabling, starts with a closed circuit', async () => {
    await setAsideOthers()
    const { owner, hook } = await eventFor('/circuit-moved')
    await moreInbound(owner, 2)
    await record(mine(await claimRows(db, { ...options, defaultAllowance: 3 }), hook.id), serverError, retryNow)
    expect((await shown(owner, hook.id)).state).toBe('open')
    const moved = await server.fetch(`/v0/account/${owner.accountId}/hooks/${hook.id}?key=${owner.secret}`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ target_url: `https://localhost:${receiver.port}/circuit-moved-here` }),
    })
    expect((await moved.json()).circuit).toEqual({ state: 'closed', consecutive_failures: 0, opened_at: null, next_probe_at: null })
    // Due at once: the claim finds its three deliveries without waiting for the old probe time.
    expect(mine(await claimRows(db, options), hook.id)).toHaveLength(3)
  })
})

describe('isolation in the claim (src/delivery/dispatcher.ts)', () => {
  const options = { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 10, maxPerHook: 64, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 }
  const setAsideOthers = () => db.execute(sql`update deliveries set status = 'delivered' where status = 'pending'`)
  const count = (items: { hookId: string }[], hookId: string) => items.filter((item) => item.hookId === hookId).length

  test("an account gets no more than its allowance, whatever its subscriptions' own; suspect subscriptions no more than theirs together", async () => {
    await setAsideOthers()
    const a = await eventFor('/iso-a')
    const b = await eventFor('/iso-b')
    await Promise.all([moreInbound(a.owner, 5), moreInbound(b.owner, 5)])
    const first = await claimRows(db, { ...options, accountAllowances: { [a.owner.accountId]: 2 } })
    expect([count(first, a.hook.id), count(first, b.hook.id)]).toEqual([2, 6])
    expect(first.find((item) => item.hookId === a.hook.id)!.accountId).toBe(a.owner.accountId)

    // An account with no room is not even looked at; the others are served.
    await setAsideOthers()
    await Promise.all([moreInbound(a.owner, 3), moreInbound(b.owner, 3)])
    const blocked = await claimRows(db, { ...options, accountAllowances: { [a.owner.accountId]: 0 } })
    expect([count(blocked, a.hook.id), count(blocked, b.hook.id)]).toEqual([0, 3])

    // b's last attempt failed: it is a suspect, served within the suspects' allowance only.
    await db.update(hooks).set({ consecutiveFailures: 1 }).where(eq(hooks.id, b.hook.id))
    await setAsideOthers()
    await Promise.all([moreInbound(a.owner, 3), moreInbound(b.owner, 3)])
    const suspects = await claimRows(db, { ...options, suspectAllowance: 1 })
    expect([count(suspects, a.hook.id), count(suspects, b.hook.id)]).toEqual([3, 1])
    expect(suspects.filter((item) => item.suspect).map((item) => item.hookId)).toEqual([b.hook.id])
    expect(await claimRows(db, { ...options, suspectAllowance: 0 })).toHaveLength(0)
  })

  test("a busy account's newcomer allowance applies to its subscriptions the dispatcher names no allowance for; other accounts' get the default", async () => {
    await setAsideOthers()
    const a = await eventFor('/iso-newcomer-a')
    const b = await eventFor('/iso-newcomer-b')
    await Promise.all([moreInbound(a.owner, 5), moreInbound(b.owner, 5)])
    const claimed = await claimRows(db, { ...options, defaultAllowance: 4, accountNewcomerAllowances: { [a.owner.accountId]: 1 } })
    expect([count(claimed, a.hook.id), count(claimed, b.hook.id)]).toEqual([1, 4])
    // A subscription's own allowance comes before its account's.
    await setAsideOthers()
    await moreInbound(a.owner, 5)
    const named = await claimRows(db, { ...options, allowances: { [a.hook.id]: 3 }, accountNewcomerAllowances: { [a.owner.accountId]: 1 } })
    expect(count(named, a.hook.id)).toBe(3)
  })

  test('a subscription that stops being a suspect is served while the suspects have no room', async () => {
    await setAsideOthers()
    const { owner, hook } = await eventFor('/iso-no-longer-suspect')
    const recordFirst = async (result: AttemptResult, decision: DeliveryDecision) => {
      const [item] = (await claimRows(db, options)).filter((claimed) => claimed.hookId === hook.id)
      expect(item).toBeDefined()
      await recordDeliveryAttempts(db, [{ deliveryId: item!.id, hookId: item!.hookId, accountId: item!.accountId, result, decision }])
    }
    await recordFirst(failedAttempt, { kind: 'retry', delayMs: 0 })
    expect(count(await claimRows(db, { ...options, suspectAllowance: 0 }), hook.id)).toBe(0)
    // A success (taken while the suspects had room) ends it.
    await recordFirst(okAttempt, { kind: 'delivered' })
    await moreInbound(owner, 1)
    expect(count(await claimRows(db, { ...options, suspectAllowance: 0 }), hook.id)).toBe(1)

    // So does a new target URL.
    await moreInbound(owner, 1)
    await recordFirst(failedAttempt, { kind: 'retry', delayMs: 0 })
    expect(count(await claimRows(db, { ...options, suspectAllowance: 0 }), hook.id)).toBe(0)
    const moved = await server.fetch(`/v0/account/${owner.accountId}/hooks/${hook.id}?key=${owner.secret}`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ target_url: `https://localhost:${receiver.port}/iso-no-longer-suspect-moved` }),
    })
    expect(moved.status).toBe(200)
    expect(count(await claimRows(db, { ...options, suspectAllowance: 0 }), hook.id)).toBe(1)
  })

  test.if(!!server.database.url)('a queue row another transaction holds is passed over, not waited for; the others are served', async () => {
    await setAsideOthers()
    const a = await eventFor('/iso-held-a')
    const b = await eventFor('/iso-held-b')
    const holder = postgresDatabase(server.database.url!, { max: 1 })
    try {
      let release!: () => void
      const released = new Promise<void>((resolve) => (release = resolve))
      let locked!: () => void
      const isLocked = new Promise<void>((resolve) => (locked = resolve))
      const holding = holder.db.transaction(async (tx) => {
        await tx.execute(sql`select 1 from hook_queues where hook_id = ${a.hook.id} for update`)
        locked()
        await released
      })
      await isLocked
      const claimed = await claimRows(db, options)
      expect([count(claimed, a.hook.id), count(claimed, b.hook.id)]).toEqual([0, 1])
      release()
      await holding
      // Its due_at was left as it was: once free, it is served.
      expect(count(await claimRows(db, options), a.hook.id)).toBe(1)
    } finally {
      await holder.close()
    }
  })
})

const superuser = server.database.url ? await isSuperuser(db) : false
/** The executed plans of the worker's claim and of its record, among those an explained connection collected. */
const claimPlan = (plans: { query: string; plan: PlanNode }[]) => plans.find((item) => item.query.includes('rescheduled as ('))
const recordPlan = (plans: { query: string; plan: PlanNode }[]) => plans.find((item) => item.query.includes('insert into delivery_attempts'))
/** The plan nodes that read rows of a table. */
const ROW_SCANS = new Set(['Seq Scan', 'Index Scan', 'Index Only Scan', 'Bitmap Heap Scan', 'Tid Scan'])

describe("the worker's plans (PostgreSQL)", () => {
  const options = { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 10, maxPerHook: 64, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 }
  test.if(superuser)('plans made while the table was small still reach rows by key once it holds 20,000 more', async () => {
    // The executed plans of the worker's own statements: the table's counters in pg_stat_user_tables also
    // take the other sessions' reads, which each session reports up to seconds later, so they measured
    // whatever a pooled connection reported in between.
    const { connection: worker, plans } = explainedConnection(server.database.url!, KEYED_PLAN_SETTINGS)
    const workerDb = preparedDrizzle(worker)
    try {
      await db.execute(sql`update deliveries set status = 'delivered' where status = 'pending'`)
      const { owner, hook } = await eventFor('/plans')
      const roundTrip = async () => {
        const claimed = (await claimDueDeliveries(workerDb, options)).deliveries
        await recordDeliveryAttempts(workerDb, claimed.map((item) => ({ deliveryId: item.id, hookId: item.hookId, accountId: item.accountId, result: okAttempt, decision: { kind: 'delivered' as const } })))
        return claimed
      }
      // The plans are made here, on the table as it is now (prepared statements keep them).
      expect((await roundTrip()).length).toBe(1)
      const other = await eventFor('/plans-other')
      await db.execute(sql`update deliveries set status = 'delivered' where hook_id = ${other.hook.id}`)
      const [event] = await queryRows<{ event_id: string }>(db, sql`select event_id from deliveries where hook_id = ${other.hook.id} limit 1`)
      await db.execute(sql`insert into deliveries (id, event_id, hook_id, status, next_attempt_at)
        select 'dlv_plans' || g, ${event!.event_id}, ${other.hook.id}, case when g % 2 = 0 then 'delivered' else 'pending' end, now() + interval '1 day'
        from generate_series(1, 20000) g`)
      await moreInbound(owner, 3)
      plans.length = 0
      expect((await roundTrip()).map((item) => item.hookId)).toEqual([hook.id, hook.id, hook.id])
      const scans = plans.flatMap(({ query, plan }) =>
        nodesOf(plan)
          .filter((node) => node['Relation Name'] === 'deliveries' && ROW_SCANS.has(node['Node Type']))
          .map((node) => ({ statement: query.trim().slice(0, 60), scan: node['Node Type'], index: node['Index Name'], read: (node['Actual Rows'] + (node['Rows Removed by Filter'] ?? 0)) * node['Actual Loops'] })),
      )
      // Both the claim's plan and the record's were seen.
      expect([claimPlan(plans), recordPlan(plans)]).toEqual([expect.anything(), expect.anything()])
      expect(scans.filter((item) => item.scan === 'Seq Scan')).toEqual([])
      // A claim and a record of three deliveries read tens of rows, not the table.
      expect(scans.reduce((sum, item) => sum + item.read, 0), JSON.stringify(scans)).toBeLessThan(500)
    } finally {
      await worker.end({ timeout: 5 })
    }
  })

  test.if(!!server.database.url)("a claim counts a subscription's leases from the live ones: a lease its record ended is passed over once seen", async () => {
    const worker = postgresClient(server.database.url!, { max: 1, settings: KEYED_PLAN_SETTINGS })
    const workerDb = preparedDrizzle(worker)
    /** Entries of the leases index the worker's statements have read, as PostgreSQL counts them. */
    const leaseEntriesRead = async () => {
      await worker`select pg_stat_force_next_flush()`
      const [row] = await queryRows<{ n: string }>(db, sql`select idx_tup_read as n from pg_stat_user_indexes where indexrelname = 'deliveries_leased_idx'`)
      return Number(row!.n)
    }
    const roundTrip = async () => {
      const claimed = (await claimDueDeliveries(workerDb, options)).deliveries
      await recordDeliveryAttempts(workerDb, claimed.map((item) => ({ deliveryId: item.id, hookId: item.hookId, accountId: item.accountId, result: okAttempt, decision: { kind: 'delivered' as const } })))
      return claimed.length
    }
    try {
      // A vacuum would remove the ended leases' entries for a bitmap scan too: none runs during this test.
      await db.execute(sql`alter table deliveries set (autovacuum_enabled = false)`)
      await db.execute(sql`update deliveries set status = 'delivered' where status = 'pending'`)
      const { hook } = await eventFor('/leases-ended')
      const pending = (count: number, prefix: string) =>
        db.execute(sql`insert into deliveries (id, event_id, hook_id, status, next_attempt_at)
          select ${prefix} || g, (select event_id from deliveries where hook_id = ${hook.id} limit 1), ${hook.id}, 'pending', now() from generate_series(1, ${count}::int) g`)
      await pending(299, 'dlv_leases_ended')
      // 300 leases taken and ended by their records: their entries stay in the index until a vacuum.
      for (let delivered = 0, rounds = 0; delivered < 300; rounds++) {
        expect(rounds).toBeLessThan(100)
        delivered += await roundTrip()
      }
      // An index scan marks an ended lease's entry dead only once no transaction of the database may still see
      // the lease: any transaction in progress at that moment puts it off to a later claim.
      // A bitmap scan would read all 300 ended leases again on every claim (docs/performance.md, issue 37).
      let read = Infinity
      for (let round = 0; round < 10 && read >= 30; round++) {
        await pending(1, `dlv_leases_next_${round}_`)
        const before = await leaseEntriesRead()
        expect(await roundTrip()).toBe(1)
        read = (await leaseEntriesRead()) - before
      }
      expect(read).toBeLessThan(30)
    } finally {
      await db.execute(sql`alter table deliveries reset (autovacuum_enabled)`)
      await worker.end({ timeout: 5 })
    }
  })
})

describe("what the worker's statements read (PostgreSQL)", () => {
  test.if(superuser)('a claim of 40 subscriptions and its record scan no WITH member again for each row of another', async () => {
    const { connection: worker, plans } = explainedConnection(server.database.url!, KEYED_PLAN_SETTINGS)
    try {
      await db.execute(sql`update deliveries set status = 'delivered' where status = 'pending'`)
      const owner = await server.createAccountWithKey()
      for (let i = 0; i < 40; i++) {
        const created = await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ event: 'message.inbound', target_url: `https://localhost:${receiver.port}/members-${i}` }),
        })
        expect(created.status).toBe(201)
      }
      await moreInbound(owner, 1)
      const workerDb = preparedDrizzle(worker)
      const claimed = (await claimDueDeliveries(workerDb, { limit: 100, leaseMs: 60_000, allowances: {}, defaultAllowance: 10, maxPerHook: 64, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })).deliveries
      expect(claimed).toHaveLength(40)
      await recordDeliveryAttempts(workerDb, claimed.map((item) => ({ deliveryId: item.id, hookId: item.hookId, accountId: item.accountId, result: okAttempt, decision: { kind: 'delivered' as const } })))
      const claim = claimPlan(plans)
      const record = recordPlan(plans)
      expect(claim).toBeDefined()
      expect(record).toBeDefined()
      // With hash joins off a join of two members is a nested loop that scans one of them again for
      // every row of the other: 40 × 40 rows here, 57 × 57 in each claim of the storm (docs/performance.md).
      const rescanned = (plan: PlanNode) => nodesOf(plan).filter((node) => node['Node Type'] === 'CTE Scan' && node['Actual Loops'] > 1).map((node) => `${node['CTE Name']} × ${node['Actual Loops']}`)
      expect(rescanned(claim!.plan)).toEqual([])
      expect(rescanned(record!.plan)).toEqual([])
    } finally {
      await worker.end({ timeout: 5 })
    }
  }, 30_000)

  test.if(superuser)("a claim passes over another account's due subscriptions with no room without reading them", async () => {
    const { connection: worker, plans } = explainedConnection(server.database.url!, KEYED_PLAN_SETTINGS)
    const crowd = await eventFor('/crowd-no-room-0')
    try {
      await db.execute(sql`update deliveries set status = 'delivered' where status = 'pending'`)
      await db.execute(sql`update hook_queues set due_at = null`)
      await db.execute(sql`insert into hooks (id, account_id, event, target_url, secret_ciphertext)
        select id || '_' || g, account_id, event, target_url || '-' || g, secret_ciphertext from hooks, generate_series(1, 199) g where id = ${crowd.hook.id}`)
      await moreInbound(crowd.owner, 1)
      const other = await eventFor('/behind-crowd-no-room')
      const claimed = (await claimDueDeliveries(preparedDrizzle(worker), { limit: 16, leaseMs: 60_000, allowances: {}, defaultAllowance: 10, maxPerHook: 64, accountAllowances: { [crowd.owner.accountId]: 0 }, defaultAccountAllowance: 1000, suspectAllowance: 1000 })).deliveries
      expect(claimed.map((item) => item.hookId)).toEqual([other.hook.id])
      const claim = claimPlan(plans)
      expect(claim).toBeDefined()
      // Each subscription the walk reads is one loop of its scan of hooks: the crowd's 200 and the other's,
      // before hook_queues held the account (docs/performance.md, issue 37, eighth pass).
      const walk = nodesOf(claim!.plan).filter((node) => node['Relation Name'] === 'hooks').map((node) => node['Actual Loops'])
      expect(Math.max(...walk)).toBeLessThanOrEqual(2)
    } finally {
      await db.execute(sql`delete from hooks where account_id = ${crowd.owner.accountId}`)
      await worker.end({ timeout: 5 })
    }
  }, 30_000)
})
