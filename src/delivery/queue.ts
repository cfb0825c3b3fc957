import { sql, type SQL } from 'drizzle-orm'
import { queryRows, type Database } from '../lib/db/client.ts'

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
 * moves due_at later, and only on the row version its snapshot read: a writer's version, which
 * the claim may not have seen the work of, is never moved. A delivery is never left behind a
 * due_at that is too late. The claim holds the rows it looks at for its few milliseconds (and
 * passes over rows a writer holds), so a writer waits at most that long for it.
 */

/**
 * SQL: the origin of a stored target URL (`url`, an expression): its scheme, host and port, without
 * a broker URL's user name. Stored URLs are normalized when they are written (src/hooks/service.ts),
 * so one origin reads the same in each of them. The claim bounds attempts in flight per origin
 * (docs/webhooks.md#when-an-endpoint-keeps-failing); drizzle/0031_hook_queues_origin.sql repeats the pattern.
 */
export const targetOrigin = (url: SQL): SQL => sql`regexp_replace(${url}, '^([a-z][a-z0-9+.-]*://)([^@/?#]*@)?([^/?#]*).*$', '\\1\\3')`

/**
 * SQL: marks the subscriptions that `hooks` (a query of three columns: a subscription's id, its
 * account's, and its target's origin, `targetOrigin`) yields due now, unless due sooner, and keeps
 * the origin the queue row holds. Rows are written in hook id order, so that two writers marking the
 * same subscriptions never wait on each other in a circle.
 */
export const markDue = (hooks: SQL): SQL => sql`insert into hook_queues (hook_id, account_id, origin, due_at)
  select distinct hook_id, account_id, origin, now() from (${hooks}) as marked(hook_id, account_id, origin) order by hook_id
  on conflict (hook_id) do update set due_at = least(hook_queues.due_at, excluded.due_at), origin = excluded.origin`

/**
 * Marks these subscriptions due now (one deleted meanwhile is left out), passing over a queue
 * row another transaction holds: a writer holding it is marking it due itself, and a claim
 * holding it is done within milliseconds, so the rows passed over are tried once more after
 * RETRY_HELD_MS and then left.
 * For recording, which must not wait behind a fan-out that holds a thousand queue rows for
 * seconds (docs/performance.md, the storm): its batches are the only way slots free up.
 */
export async function markHooksDueUnlessHeld(db: Database, hookIds: readonly string[]): Promise<void> {
  let left = await markUnlessHeld(db, hookIds)
  if (left.length === 0) return
  await new Promise((resolve) => setTimeout(resolve, RETRY_HELD_MS))
  left = await markUnlessHeld(db, left)
}

const RETRY_HELD_MS = 20

async function markUnlessHeld(db: Database, hookIds: readonly string[]): Promise<string[]> {
  if (hookIds.length === 0) return []
  const rows = await queryRows<{ hook_id: string }>(
    db,
    sql`with wanted as (
          -- One deleted meanwhile is left out; the key-share lock keeps the rest from going before the rows below are written.
          select h.id, h.account_id, ${targetOrigin(sql`h.target_url`)} as origin from hooks h where h.id in (select value from jsonb_array_elements_text(${JSON.stringify(hookIds)}::jsonb)) for key share of h
        ),
        free as (
          select q.hook_id from hook_queues q join wanted w on w.id = q.hook_id order by q.hook_id for update of q skip locked
        ),
        marked as (
          update hook_queues q set due_at = least(q.due_at, now()) from free f where q.hook_id = f.hook_id returning q.hook_id
        ),
        added as (
          insert into hook_queues (hook_id, account_id, origin, due_at)
          select w.id, w.account_id, w.origin, now() from wanted w where not exists (select 1 from hook_queues q where q.hook_id = w.id) order by w.id
          on conflict (hook_id) do nothing
          returning hook_id
        )
        select id as hook_id from wanted where id not in (select hook_id from marked union all select hook_id from added)`,
  )
  return rows.map((row) => row.hook_id)
}
