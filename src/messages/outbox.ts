import { sql, type SQL } from 'drizzle-orm'
import type { Static } from 'elysia'
import { newId } from '../lib/db/ids.ts'
import { markDue, targetOrigin } from '../delivery/queue.ts'
import { eventRollups } from '../stats/rollups.ts'
import type { EventType } from './event-types.ts'
import type { EventSchema, MessageSchema } from './schemas.ts'

export type EventPayload = Static<typeof EventSchema>

/** An event about to be stored: its payload is the exact JSON body every delivery of it sends. */
export interface PendingEvent {
  id: string
  accountId: string
  type: EventType
  payload: string
}

export function buildEvent(input: { accountId: string; type: EventType; message: Static<typeof MessageSchema> }): { event: EventPayload; pending: PendingEvent } {
  const id = newId('evt')
  const event: EventPayload = { id, type: input.type, timestamp: new Date().toISOString(), account_id: input.accountId, data: { message: input.message } }
  return { event, pending: { id, accountId: input.accountId, type: input.type, payload: JSON.stringify(event) } }
}

// A settlement that makes more subscriptions due than this is a fan-out: its subscriptions wait for the walk like everyone's.
export const NARROW_FAN_OUT = 16

/**
 * SQL: subscription `h` (hooks) gets an event of this account, type and contact (SQL expressions):
 * active or paused (a paused one's deliveries wait for it to resume), not expired, and with no
 * filter or one that holds the contact (docs/api.md#filters). The one rule for an event's first
 * statement and each chunk of its fan-out (src/messages/fan-out.ts).
 */
export const subscriptionGetsEvent = (event: { accountId: SQL; type: SQL; contact: SQL }): SQL => sql`h.account_id = ${event.accountId} and h.event = ${event.type}
  and h.status in ('active', 'paused')
  and (h.expires_at is null or h.expires_at > now())
  and (h.filter_contacts is null or ${event.contact} = any(h.filter_contacts))`

/**
 * SQL: a new delivery id for the event `eventId` (an expression), made in the statement because
 * how many there are is only known there: `dlv_`, the event id's 10 time characters (so
 * deliveries sort by their event's time), and 64 random bits as 16 hex digits (all valid in the
 * id alphabet).
 */
export const newDeliveryId = (eventId: SQL): SQL => sql`'dlv_' || substr(${eventId}, 5, 10) || substr(replace(gen_random_uuid()::text, '-', ''), 1, 16)`

/**
 * The tail of a statement that stores events: given an earlier member `stored_events(id,
 * account_id, type, payload, contact, trace_context)` of the caller's `WITH`, it inserts those events and one pending
 * delivery per active or paused subscription of their account and type (a paused one's wait
 * for it to resume: the claim takes active subscriptions' only), and selects how many deliveries
 * it made. The change that caused the events, the events and their deliveries are then one
 * statement: they commit together or not at all, so a committed event is never without its
 * deliveries, at the cost of one round trip. The same statement marks their subscriptions due
 * in the queue's index (src/delivery/queue.ts), and selects them too when they are no more than
 * NARROW_FAN_OUT (null otherwise), for the worker to look at first (src/delivery/dispatcher.ts):
 * a message's delivery then does not wait for the claims to walk past every subscription due
 * before it, such as another account's thousand failing ones (docs/performance.md, issue 37,
 * thirteenth pass). Subscriptions made later do not see the event.
 * A subscription with a filter gets a delivery only when the filter holds the event's contact
 * (docs/api.md#filters): a filtered-out event costs no row.
 *
 * An event that fans out to more than `chunk` subscriptions gets the deliveries of its first
 * `chunk` (in subscription id order) here, and a `fan_outs` row in the same statement: the rest
 * are written by continueFanOut (src/messages/fan-out.ts), a chunk per statement, so that no
 * statement of a wide fan-out holds the database for longer than another account's delivery
 * takes (docs/performance.md, issue 37, twenty-fourth pass). The statement selects those events'
 * ids.
 */
export const storeEventsAndDeliveries = (chunk: number): SQL => sql`,
  new_events as (
    insert into events (id, account_id, type, payload, contact, trace_context)
    select id, account_id, type, payload, contact, trace_context from stored_events
    returning id, account_id, type, contact
  ),
  targets as (
    -- From new_events alone, joined to no other member: with hash joins off (src/lib/db/keyed-plans.ts)
    -- such a join is a nested loop that reads one member again for every row of the other. Each event's
    -- subscriptions are read in id order from hooks_account_id_idx, no more than one past the chunk: a
    -- fan-out to 5,000 costs its first statement what one to a chunk does.
    select e.id as event_id, h.id as hook_id, h.account_id, h.status, h.target_url,
      row_number() over by_hook as rank, lag(h.id) over by_hook as previous_hook_id
    from new_events e cross join lateral (
      select h.id, h.account_id, h.status, h.target_url from hooks h
      where ${subscriptionGetsEvent({ accountId: sql`e.account_id`, type: sql`e.type`, contact: sql`e.contact` })}
      order by h.id
      limit ${chunk + 1}
    ) h
    window by_hook as (partition by e.id order by h.id)
  ),
  written as (
    select event_id, hook_id, account_id, status, ${targetOrigin(sql`target_url`)} as origin from targets where rank <= ${chunk}
  ),
  new_deliveries as (
    insert into deliveries (id, event_id, hook_id)
    select ${newDeliveryId(sql`w.event_id`)}, w.event_id, w.hook_id
    from written w
    returning hook_id
  ),
  new_fan_outs as (
    insert into fan_outs (event_id, account_id, after_hook_id)
    -- Resumes after the last subscription written, when there is one more than the chunk.
    select event_id, account_id, previous_hook_id from targets where rank = ${chunk} + 1
    returning event_id
  ),
  queued as (
    -- From the subscriptions found above, not by joining hooks again: a prepared statement's plan made while
    -- hooks was small looped over all of it once per delivery (365 ms for 100 deliveries at 10,000 subscriptions).
    ${markDue(sql`select hook_id, account_id, origin from written where status = 'active'`)}
  )${eventRollups('new_events', ['new_deliveries'])}
  select (select count(*) from new_deliveries)::int as delivery_count,
         (select coalesce(jsonb_agg(event_id), '[]') from new_fan_outs)::text as fan_outs,
         (select case when count(*) <= ${NARROW_FAN_OUT} then coalesce(jsonb_agg(x.hook_id), '[]') end
          from (select distinct hook_id from written where status = 'active') x)::text as due_hooks`

/** What a statement of storeEventsAndDeliveries selects. */
export interface QueuedDeliveries {
  delivery_count: number
  /** JSON: the events whose fan-outs go on in chunks (their `fan_outs` rows). */
  fan_outs: string
  /** JSON: the subscriptions it made due, when they are no more than NARROW_FAN_OUT; null otherwise. */
  due_hooks: string | null
}

/** Deliveries queued by a statement, and the subscriptions they made due when these are few (empty otherwise). */
export interface Queued {
  count: number
  dueHooks: string[]
  /** The events whose deliveries are written on in chunks (continueFanOut). */
  fanOuts: string[]
}

export const queuedFrom = (row: QueuedDeliveries | undefined): Queued => ({
  count: Number(row?.delivery_count ?? 0),
  dueHooks: row?.due_hooks ? (JSON.parse(row.due_hooks) as string[]) : [],
  fanOuts: row?.fan_outs ? (JSON.parse(row.fan_outs) as string[]) : [],
})
