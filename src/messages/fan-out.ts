import { sql } from 'drizzle-orm'
import { queryRows, type Database } from '../lib/db/client.ts'
import { markDue, targetOrigin } from '../delivery/queue.ts'
import { newDeliveryId, subscriptionGetsEvent } from './outbox.ts'

/** A wide fan-out's event, and the account whose settlement lane writes its chunks. */
export interface FanOut {
  eventId: string
  accountId: string
}

/** What one chunk of a fan-out did. */
export interface FanOutChunk {
  /** Deliveries it wrote. */
  count: number
  /** More are left: the fan-out goes on with another chunk. */
  more: boolean
}

/**
 * Writes the next chunk of an event's fan-out (src/messages/outbox.ts, storeEventsAndDeliveries):
 * the deliveries of at most `chunk` more of its subscriptions, in id order after the last one
 * written, marking the active ones due, and moves the fan-out's position past them, or ends it
 * with its last chunk; one statement, so a chunk is written with its position or not at all.
 *
 * The subscriptions are those the event's first statement would have found, as they are now
 * (subscriptionGetsEvent), and made no later than the event (its created_at), so that a
 * subscription made after the event does not see it. One deleted, paused or refiltered between
 * two chunks is judged as it is when its chunk is written (docs/webhooks.md#wide-fan-outs).
 *
 * The fan-out's row is locked for the statement and one another transaction holds is passed
 * over (no chunk, `more` false): two processes that both resume a fan-out never write a
 * subscription's delivery twice, and the one passed over leaves it to the other.
 */
export async function continueFanOut(db: Database, eventId: string, chunk: number): Promise<FanOutChunk> {
  const [row] = await queryRows<{ delivery_count: number; more: boolean }>(
    db,
    sql`with fan_out as (
          select event_id, after_hook_id from fan_outs where event_id = ${eventId} for update skip locked
        ),
        event as (
          select e.id, e.account_id, e.type, e.contact, e.created_at from events e where e.id = (select event_id from fan_out)
        ),
        next as (
          -- Walks hooks_account_id_idx (account_id, id) from the position: a chunk reads about as many subscriptions as it
          -- writes. The position as a row of both columns is a range only that index has; with "h.id >" alone, the plan
          -- walked the primary key from the position and passed over every other account's subscription made since.
          select h.id as hook_id, h.account_id, h.status, ${targetOrigin(sql`h.target_url`)} as origin
          from hooks h
          where ${subscriptionGetsEvent({ accountId: sql`(select account_id from event)`, type: sql`(select type from event)`, contact: sql`(select contact from event)` })}
            and (h.account_id, h.id) > ((select account_id from event), (select after_hook_id from fan_out))
            and h.created_at <= (select created_at from event)
          order by h.account_id, h.id
          limit ${chunk + 1}
        ),
        written as (
          select * from next order by hook_id limit ${chunk}
        ),
        new_deliveries as (
          insert into deliveries (id, event_id, hook_id)
          select ${newDeliveryId(sql`e.id`)}, e.id, w.hook_id
          from written w cross join event e
          returning hook_id
        ),
        queued as (
          ${markDue(sql`select hook_id, account_id, origin from written where status = 'active'`)}
        ),
        moved as (
          update fan_outs set after_hook_id = (select max(hook_id) from written), moved_at = now()
          where event_id = (select event_id from fan_out) and (select count(*) from next) > ${chunk}
          returning 1
        ),
        ended as (
          delete from fan_outs where event_id = (select event_id from fan_out) and (select count(*) from next) <= ${chunk}
          returning 1
        )
        select (select count(*) from new_deliveries)::int as delivery_count, exists (select 1 from moved) as more`,
  )
  return { count: Number(row?.delivery_count ?? 0), more: row?.more === true }
}

/**
 * Fan-outs that have not moved for `stalledSeconds`: their process stopped, or lost its database,
 * between two chunks. Oldest first, at most `limit`; those this process is writing are left out.
 */
export async function findStalledFanOuts(db: Database, stalledSeconds: number, exceptEventIds: Iterable<string>, limit: number): Promise<FanOut[]> {
  return queryRows<FanOut>(
    db,
    sql`select event_id as "eventId", account_id as "accountId" from fan_outs
        where moved_at < now() - make_interval(secs => ${stalledSeconds})
          and event_id <> all(array(select jsonb_array_elements_text(${JSON.stringify([...exceptEventIds])}::jsonb)))
        order by moved_at limit ${limit}`,
  )
}
