import { sql, type SQL } from 'drizzle-orm'
import type { Database } from '../lib/db/client.ts'

/**
 * The delivery queue's index: hook_queues has one row per subscription that may have work, with
 * when its next delivery may be claimed (due_at; null: nothing to do). The claim
 * (src/delivery/store.ts) reads the due subscriptions from it in due_at order instead of
 * searching the deliveries table, so its cost follows the work it leases, not the number of
 * subscriptions or the table's history (docs/architecture.md#webhook-delivery).
 *
 * The rule that keeps it correct: whoever makes a delivery due (a new event, a retry, a resumed
 * subscription, a finished attempt that frees a slot) writes the subscription's row in the
 * transaction that makes the delivery due, moving due_at earlier, never later, and always
 * writing a new row version even when due_at stays (a subscription already due). Only the claim
 * moves due_at later, and only on the row version it read: a writer's version, which the claim
 * may not have seen the work of, is never moved. A delivery is never left behind a due_at that
 * is too late, and no writer waits for a claim to finish.
 */

/**
 * SQL: marks the subscriptions that `hookIds` (a query with one column) yields due now, unless
 * due sooner. Rows are written in hook id order, so that two writers marking the same
 * subscriptions never wait on each other in a circle.
 */
export const markDue = (hookIds: SQL): SQL => sql`insert into hook_queues (hook_id, due_at)
  select distinct hook_id, now() from (${hookIds}) as marked(hook_id) order by hook_id
  on conflict (hook_id) do update set due_at = least(hook_queues.due_at, excluded.due_at)`

/** Marks these subscriptions due now (see markDue); one deleted meanwhile is left out. */
export async function markHooksDue(db: Database, hookIds: readonly string[]): Promise<void> {
  if (hookIds.length === 0) return
  await db.execute(markDue(sql`select h.id from hooks h where h.id in (select value from jsonb_array_elements_text(${JSON.stringify(hookIds)}::jsonb)) for key share of h`))
}
