import { and, desc, eq, lt, sql } from 'drizzle-orm'
import { queryRows, type Database } from '../lib/db/client.ts'
import { deliveries, deliveryAttempts, hooks } from '../lib/db/schema.ts'
import { newId } from '../lib/ids.ts'
import { decodeCursor, toPage, type Page } from '../lib/pagination.ts'
import type { DeliveryDecision } from './policy.ts'
import type { AttemptResult } from './send.ts'

/** A delivery leased to one sender, with everything needed to send it. */
export interface ClaimedDelivery {
  id: string
  eventId: string
  hookId: string
  /** Attempts made before this one. */
  attempts: number
  payload: string
  targetUrl: string
  secretCiphertext: string
}

/**
 * Leases up to `limit` due deliveries of active subscriptions in one short statement. Rows
 * another sender holds are skipped, not waited for (`SKIP LOCKED`), so several processes drain
 * one table together without sending a delivery twice at once; a lease that runs out (its sender
 * died) makes the row due again.
 */
export async function claimDueDeliveries(db: Database, options: { limit: number; leaseMs: number }): Promise<ClaimedDelivery[]> {
  const rows = await queryRows<{ id: string; event_id: string; hook_id: string; attempts: number; payload: string; target_url: string; secret_ciphertext: string }>(
    db,
    sql`with due as (
          select d.id from deliveries d
          join hooks h on h.id = d.hook_id and h.status = 'active'
          where d.status = 'pending' and d.next_attempt_at <= now() and (d.leased_until is null or d.leased_until < now())
          order by d.next_attempt_at
          limit ${options.limit}
          for update of d skip locked
        )
        update deliveries d set leased_until = now() + make_interval(secs => ${options.leaseMs / 1000})
        from due, events e, hooks h
        where d.id = due.id and e.id = d.event_id and h.id = d.hook_id
        returning d.id, d.event_id, d.hook_id, d.attempts, e.payload, h.target_url, h.secret_ciphertext`,
  )
  return rows.map((row) => ({
    id: row.id,
    eventId: row.event_id,
    hookId: row.hook_id,
    attempts: Number(row.attempts),
    payload: row.payload,
    targetUrl: row.target_url,
    secretCiphertext: row.secret_ciphertext,
  }))
}

/** Logs the attempt and moves the delivery (and, for a 410, its subscription) on, in one short transaction. */
export async function recordDeliveryAttempt(db: Database, claimed: ClaimedDelivery, result: AttemptResult, decision: DeliveryDecision): Promise<void> {
  await db.transaction(async (tx) => {
    await tx.insert(deliveryAttempts).values({
      id: newId('att'),
      deliveryId: claimed.id,
      hookId: claimed.hookId,
      eventId: claimed.eventId,
      statusCode: result.status,
      durationMs: Math.round(result.durationMs),
      error: result.error,
      responseSnippet: result.responseSnippet,
    })
    const attempts = claimed.attempts + 1
    const delivery = eq(deliveries.id, claimed.id)
    switch (decision.kind) {
      case 'delivered':
        await tx.update(deliveries).set({ status: 'delivered', attempts, leasedUntil: null }).where(delivery)
        break
      case 'retry':
        await tx
          .update(deliveries)
          .set({ attempts, leasedUntil: null, nextAttemptAt: sql`now() + make_interval(secs => ${decision.delayMs / 1000})` })
          .where(delivery)
        break
      case 'exhausted':
        await tx.update(deliveries).set({ status: 'failed', attempts, leasedUntil: null }).where(delivery)
        break
      case 'disable_hook':
        await tx.update(deliveries).set({ status: 'failed', attempts, leasedUntil: null }).where(delivery)
        await tx.update(hooks).set({ status: 'disabled', disabledReason: decision.reason }).where(eq(hooks.id, claimed.hookId))
        break
    }
  })
}

export interface DeliveryAttemptResource {
  id: string
  delivery_id: string
  event_id: string
  attempted_at: string
  status_code: number | null
  duration_ms: number
  error: string | null
  response_snippet: string
}

/** A subscription's attempt log, newest first (the caller has checked the subscription is the account's). */
export async function listDeliveryAttempts(db: Database, hookId: string, page: { limit?: number; cursor?: string }): Promise<Page<DeliveryAttemptResource>> {
  const limit = page.limit ?? 20
  const before = decodeCursor(page.cursor, 'att')
  const rows = await db
    .select()
    .from(deliveryAttempts)
    .where(before ? and(eq(deliveryAttempts.hookId, hookId), lt(deliveryAttempts.id, before)) : eq(deliveryAttempts.hookId, hookId))
    .orderBy(desc(deliveryAttempts.id))
    .limit(limit + 1)
  return toPage(rows, limit, (row) => ({
    id: row.id,
    delivery_id: row.deliveryId,
    event_id: row.eventId,
    attempted_at: row.attemptedAt.toISOString(),
    status_code: row.statusCode,
    duration_ms: row.durationMs,
    error: row.error,
    response_snippet: row.responseSnippet,
  }))
}
