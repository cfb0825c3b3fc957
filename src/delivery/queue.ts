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
 * Each account's first subscription (in hook id order) that one statement marks due is due
 * this much earlier than now, the rest now. The claim walks the queue oldest due_at first, and
 * a fan-out marks an account's thousand subscriptions due together: without a head start, a
 * subscription of another account marked due a moment later waited behind all thousand, three
 * or four claims of 40–100 ms under load (docs/performance.md, issue 37, eighth pass). With it,
 * every statement that gives an account work puts one of its subscriptions at the head of the
 * line, ahead of what was marked in the last second, so one account's burst stands in front of
 * another's next message for one row, not a thousand. A second is longer than a pass over the
 * due line under load, and bounds how long a row marked due can be overtaken by later heads.
 * due_at only orders the claim's walk and says when a subscription may be looked at; the claim
 * checks each delivery's own time (src/delivery/store.ts), so an earlier due_at sends nothing
 * early.
 */
const HEAD_START = sql`interval '1 second'`

const dueAtByPlace = (place: SQL): SQL => sql`case when ${place} = 1 then now() - ${HEAD_START} else now() end`

/**
 * SQL: marks the subscriptions that `subscriptions` (a query of two columns: hook id, account
 * id) yields due now (each account's first a second early: HEAD_START), unless due sooner.
 * Rows are written in hook id order, so that two writers marking the same subscriptions never
 * wait on each other in a circle.
 */
export const markDue = (subscriptions: SQL): SQL => sql`insert into hook_queues (hook_id, due_at)
  select hook_id, ${dueAtByPlace(sql`row_number() over (partition by account_id order by hook_id)`)}
  from (select distinct hook_id, account_id from (${subscriptions}) as marked(hook_id, account_id)) as distinct_marked
  order by hook_id
  on conflict (hook_id) do update set due_at = least(hook_queues.due_at, excluded.due_at)`

/**
 * Marks these subscriptions due now (each account's first a second early: HEAD_START; one
 * deleted meanwhile is left out), passing over a queue row another transaction holds: a writer
 * holding it is marking it due itself, and a claim holding it is done within milliseconds, so
 * the rows passed over are tried once more after RETRY_HELD_MS and then left.
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
          select h.id, h.account_id from hooks h where h.id in (select value from jsonb_array_elements_text(${JSON.stringify(hookIds)}::jsonb)) for key share of h
        ),
        placed as (
          select id, row_number() over (partition by account_id order by id) as place from wanted
        ),
        free as (
          select q.hook_id, w.place from hook_queues q join placed w on w.id = q.hook_id order by q.hook_id for update of q skip locked
        ),
        marked as (
          update hook_queues q set due_at = least(q.due_at, ${dueAtByPlace(sql`f.place`)}) from free f where q.hook_id = f.hook_id returning q.hook_id
        ),
        added as (
          insert into hook_queues (hook_id, due_at)
          select w.id, ${dueAtByPlace(sql`w.place`)} from placed w where not exists (select 1 from hook_queues q where q.hook_id = w.id) order by w.id
          on conflict (hook_id) do nothing
          returning hook_id
        )
        select id as hook_id from wanted where id not in (select hook_id from marked union all select hook_id from added)`,
  )
  return rows.map((row) => row.hook_id)
}
