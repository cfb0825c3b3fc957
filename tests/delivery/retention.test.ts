import { describe, expect, test } from 'bun:test'
import { eq, inArray } from 'drizzle-orm'
import { startTestServer } from '../support/server.ts'
import { accountStats, deliveries, deliveryAttempts, events, hookStats, messages } from '../../src/lib/db/schema.ts'
import { claimDueDeliveries, recordDeliveryAttempts } from '../../src/delivery/store.ts'
import { deleteExpiredEvents } from '../../src/delivery/retention.ts'

/** The deliveries a claim leased. */
const claimRows = async (...args: Parameters<typeof claimDueDeliveries>) => (await claimDueDeliveries(...args)).deliveries

// No worker: the test settles deliveries by hand.
const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' }, deliverWebhooks: false })
const db = server.database.handle.db
const DAY = 86_400_000

describe('event retention', () => {
  test('events older than the retention go with their deliveries, attempts and health rollups; one with a pending delivery stays, and so do messages', async () => {
    const owner = await server.createAccountWithKey()
    const created = await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ event: 'message.inbound', target_url: 'https://127.0.0.1:9/retention' }),
    })
    const hook = (await created.json()) as { id: string }
    for (let i = 0; i < 3; i++) {
      const sent = await server.fetch(`/v0/account/${owner.accountId}/sandbox/inbound?key=${owner.secret}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ from: '+447700900600', body: `kept or not ${i}` }),
      })
      expect(sent.status).toBe(201)
    }
    const claimed = (await claimRows(db, { limit: 10, leaseMs: 60_000, allowances: { [hook.id]: 2 }, defaultAllowance: 0, maxPerHook: 64, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000 })).filter((item) => item.hookId === hook.id)
    expect(claimed).toHaveLength(2)
    const ok = { ok: true, status: 200, durationMs: 3, error: null, failure: null, responseSnippet: 'ok', retryAfterSeconds: null }
    await recordDeliveryAttempts(db, claimed.map((item) => ({ deliveryId: item.id, hookId: item.hookId, accountId: item.accountId, result: ok, decision: { kind: 'delivered' as const } })))
    const eventsOf = () => db.select({ id: events.id }).from(events).where(eq(events.accountId, owner.accountId))
    expect(await eventsOf()).toHaveLength(3)
    // The health rollups of those attempts and events: a minute's, an hour's and a day's row each.
    const hookRollups = () => db.select({ unit: hookStats.unit, attempts: hookStats.attempts }).from(hookStats).where(eq(hookStats.hookId, hook.id))
    const accountRollups = () => db.select({ unit: accountStats.unit, kind: accountStats.kind }).from(accountStats).where(eq(accountStats.accountId, owner.accountId))
    expect((await hookRollups()).map((row) => [row.unit, row.attempts]).sort()).toEqual([['day', 2], ['hour', 2], ['minute', 2]])
    expect((await accountRollups()).map((row) => `${row.kind} ${row.unit}`).sort()).toEqual(['attempts day', 'attempts hour', 'attempts minute', 'events day', 'events hour', 'events minute'])

    // 29 days on: nothing has expired.
    expect(await deleteExpiredEvents(db, { retentionDays: 30, now: Date.now() + 29 * DAY })).toBe(0)
    expect(await hookRollups()).toHaveLength(3)
    expect(await accountRollups()).toHaveLength(6)
    // 31 days on: the two settled events go, the one still pending stays.
    expect(await deleteExpiredEvents(db, { retentionDays: 30, now: Date.now() + 31 * DAY })).toBeGreaterThanOrEqual(2)
    const left = await eventsOf()
    expect(left).toHaveLength(1)
    expect(await db.select().from(deliveries).where(inArray(deliveries.eventId, claimed.map((item) => item.eventId)))).toHaveLength(0)
    expect(await db.select().from(deliveryAttempts).where(inArray(deliveryAttempts.deliveryId, claimed.map((item) => item.id)))).toHaveLength(0)
    const [pending] = await db.select().from(deliveries).where(eq(deliveries.hookId, hook.id))
    expect(pending).toMatchObject({ eventId: left[0]!.id, status: 'pending' })
    expect(await db.select().from(messages).where(eq(messages.accountId, owner.accountId))).toHaveLength(3)
    // The rollups went with the log they counted: every bucket ended before the cutoff.
    expect(await hookRollups()).toHaveLength(0)
    expect(await accountRollups()).toHaveLength(0)
  })
})
