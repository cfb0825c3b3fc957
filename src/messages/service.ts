import { and, desc, eq, gte, inArray, lt, sql } from 'drizzle-orm'
import type { Static } from 'elysia'
import { queryRows, type Database } from '../lib/db/client.ts'
import { createBatcher, createKeyedBatcher, type BatcherOptions } from './batcher.ts'
import { startPeriodicSweep } from '../lib/runtime/sweep.ts'
import { isDatabaseUnavailable } from '../lib/db/errors.ts'
import { events, messages } from '../lib/db/schema.ts'
import { isId, newId } from '../lib/db/ids.ts'
import type { Logger } from '../lib/runtime/logger.ts'
import { inSpan, type Tracing } from '../lib/runtime/tracing.ts'
import { SpanKind } from '@opentelemetry/api'
import { readPage, type Page } from '../lib/http/pagination.ts'
import type { EventType } from './event-types.ts'
import type { Carrier } from './carrier.ts'
import type { Admission } from './admission.ts'
import { buildEvent, queuedFrom, storeEventsAndDeliveries, type EventPayload, type Queued, type QueuedDeliveries } from './outbox.ts'
import { continueFanOut, findStalledFanOuts, type FanOut } from './fan-out.ts'
import { sentMessageRollups } from '../stats/rollups.ts'
import type { MessageSchema } from './schemas.ts'

export type Message = typeof messages.$inferSelect
export type MessageResource = Static<typeof MessageSchema>

export interface MessageDeps {
  db: Database
  carrier: Carrier
  logger: Logger
  /** Writes accepted messages in batches (createMessageStorer). */
  storeMessage: MessageStorer
  /** Writes carriers' outcomes in batches (createMessageSettler). */
  settleMessage: MessageSettler
  /** Writes wide fan-outs on, a chunk at a time (createMessageSettler). */
  fanOuts: FanOutWriter
  /** Called after a commit that queued deliveries: wakes this process's delivery worker, naming the subscriptions of a narrow one. */
  deliveriesQueued(hookIds?: readonly string[]): void
  /** Holds an account's new messages while its deliveries are behind (src/messages/admission.ts). */
  admission: Admission
  /** The messages this process is dispatching (dispatchMessage): renewDispatchLeases renews their leases before they lapse, however long their settlements wait in their lanes. */
  dispatching: Set<string>
  /** Set when traces are on (docs/operations.md#traces): accepting, dispatching and settling are spans of the request's trace. */
  tracing?: Tracing
}

export function toMessageResource(message: Message): MessageResource {
  return {
    id: message.id,
    account_id: message.accountId,
    direction: message.direction as 'outbound' | 'inbound',
    ...(message.direction === 'outbound' ? { to: message.contact } : { from: message.contact }),
    body: message.body,
    status: message.status as MessageResource['status'],
    ...(message.error ? { error: message.error } : {}),
    created_at: message.createdAt.toISOString(),
    updated_at: message.updatedAt.toISOString(),
  }
}

/** Stores one new message; resolves once it is committed. */
export type MessageStorer = (message: Message) => Promise<void>

/**
 * Stores outbound messages in batches (src/messages/batcher.ts): the messages accepted while one
 * batch is being written (or while the first waits: `storeLinger`) are inserted together, one
 * statement and one commit for all of them. Each request still answers only after its own
 * message is committed.
 */
export function createMessageStorer(db: Database, writes: MessageWrites = MESSAGE_WRITES.postgres): MessageStorer {
  const batcher = createBatcher<Message, void>(
    async (batch) => {
      const rows = batch.map((message) => ({
        id: message.id,
        account_id: message.accountId,
        contact: message.contact,
        body: message.body,
        created_at: message.createdAt.toISOString(),
        trace_context: message.traceContext,
      }))
      await db.execute(sql`with stored_messages as (
          insert into messages (id, account_id, direction, contact, body, status, created_at, updated_at, trace_context)
          select id, account_id, 'outbound', contact, body, 'queued', created_at, created_at, trace_context
          from jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) as i(id text, account_id text, contact text, body text, created_at timestamptz, trace_context text)
          returning account_id, created_at
        )${sentMessageRollups('stored_messages')}
        select 1`)
      return batch.map(() => undefined)
    },
    { maxBatch: 256, ...writes.storeLinger },
  )
  return batcher.submit
}

/**
 * Accepts an outbound message once its account may send (src/messages/admission.ts: held while
 * its webhook deliveries are behind); the carrier's outcome is recorded by `dispatchMessage`.
 */
export async function acceptMessage(deps: Pick<MessageDeps, 'storeMessage' | 'admission' | 'tracing'>, accountId: string, input: { to: string; body: string }): Promise<Message> {
  const id = newId('msg')
  return inSpan(deps.tracing, 'message accept', { attributes: { 'app.account.id': accountId, 'app.message.id': id } }, async (span) => {
    await deps.admission.admit(accountId)
    const now = new Date()
    const message: Message = {
      id, accountId, direction: 'outbound', contact: input.to, body: input.body, status: 'queued', error: null, createdAt: now, updatedAt: now, dispatchLeaseUntil: null,
      // Stored with the message: its dispatch continues this trace even in another process, after a restart.
      traceContext: span ? deps.tracing!.traceparentOf(span) : null,
    }
    await deps.storeMessage(message)
    return message
  })
}

/** A carrier's outcome for a queued message, with the event that reports it. */
interface Settlement {
  /** Settlements are batched per account (src/messages/batcher.ts, createKeyedBatcher). */
  account_id: string
  message_id: string
  status: 'delivered' | 'failed'
  error: string | null
  updated_at: string
  event_id: string
  event_type: EventType
  payload: string
  /** The settlement span's traceparent, stored with the event: its delivery attempts are spans of this trace. */
  trace_context: string | null
}

type Linger = Pick<BatcherOptions<unknown, unknown>, 'lingerMs' | 'lingerOnlyWithinMs'>

/**
 * How messages, events and deliveries are written, per database (docs/architecture.md, "A
 * statement holds the server's thread"; docs/performance.md, issue 37).
 *
 * PostgreSQL answers over the network: the messages accepted while a batch is in flight go in
 * the next one, and a settlement statement aims at 2,000 deliveries on a connection of its own,
 * beside everyone else's statements. An event wider than 100 subscriptions is written in chunks
 * of 100 (src/messages/fan-out.ts), about 4 ms each: shorter than another account's delivery
 * takes, where a statement of 1,000 or 5,000 held a core and the log for tens of milliseconds. An
 * account's wide fan-out is written back to back while no other account settles messages; while
 * another does (within the last second), its statements take a fifth of the time, so that they
 * do not hold one of the machine's cores through the other account's every step. With whole
 * fan-outs in a statement that share was a tenth (docs/performance.md, issue 37, sixteenth pass);
 * in chunks, a fifth writes the fan-out as fast as a tenth did, and a healthy subscription's p99
 * beside another account's storm five times the usual was 1.2 × its p99 alone, against 1.8 ×
 * (twenty-fourth pass).
 *
 * PGlite runs every statement on the server's one thread and answers before the event loop
 * turns, so no batch is ever in progress when the next request arrives: in a burst (the storm's
 * failing messages, 60 at a time) every message was a statement of its own, and the thread was
 * held for 300 ms at a time. There the storer's first message of a batch waits 1 ms for company
 * when the previous batch ended less than 5 ms ago (one after a quiet spell goes at once: waiting
 * always cost a healthy subscription 25 ms at its median). Settlements follow the same rule
 * within an account's lane, and a lane that has emptied starts afresh, so in practice they wait
 * only while their lane is busy. A fan-out's statements are smaller (chunks of 500 deliveries,
 * 20–30 ms) and take at most half of the time, so that the worker's claims and records and other
 * accounts' settlements get turns in between.
 *
 * On both, no pause makes a settlement wait more than SETTLE_PAUSED_WAIT_MS in all: a lane that
 * far behind writes back to back. A settlement waits in memory, and a message left queued for
 * STALE_QUEUED_SECONDS is dispatched again by another process's catch-up (dispatchStaleQueuedMessages).
 */
export interface MessageWrites {
  storeLinger: Linger
  settleLinger: Linger
  /** Deliveries one settlement statement aims to write at most, counting a fan-out as all the deliveries it will write. */
  rowsPerStatement: number
  /** Deliveries of one event written per statement at most: a wider fan-out goes on in chunks of this many (src/messages/fan-out.ts). */
  fanOutChunk: number
  /** The share of the time a wide fan-out's statements may take (src/messages/batcher.ts, `cost.share`); 1: back to back. */
  fanOutShare: number
  /** The share while another account settled messages within NEIGHBOUR_WITHIN_MS (`cost.besideOthers`). */
  fanOutShareBesideOthers: number
}

const NEIGHBOUR_WITHIN_MS = 1000
const SETTLE_PAUSED_WAIT_MS = 20_000

export const MESSAGE_WRITES: Record<'postgres' | 'pglite', MessageWrites> = {
  postgres: { storeLinger: {}, settleLinger: { lingerMs: 1 }, rowsPerStatement: 2000, fanOutChunk: 100, fanOutShare: 1, fanOutShareBesideOthers: 0.2 },
  pglite: { storeLinger: { lingerMs: 1, lingerOnlyWithinMs: 5 }, settleLinger: { lingerMs: 1, lingerOnlyWithinMs: 5 }, rowsPerStatement: 500, fanOutChunk: 500, fanOutShare: 0.5, fanOutShareBesideOthers: 0.5 },
}

/** Records one settlement; resolves to the deliveries its batch queued, and the subscriptions they made due when few. */
export type MessageSettler = (settlement: Settlement) => Promise<Queued>

/** Writes wide fan-outs on (src/messages/fan-out.ts), in their accounts' settlement lanes. */
export interface FanOutWriter {
  /** Deliveries of one event a statement writes at most (storeEventsAndDeliveries). */
  chunk: number
  /** Writes these fan-outs on to their ends, a chunk per statement; one this process is writing already is left to that. */
  continue(fanOuts: readonly FanOut[]): void
  /** The events whose fan-outs this process is writing. */
  writing: ReadonlySet<string>
}

type SettlerItem = { settlement: Settlement } | { fanOut: FanOut }

/**
 * Settles messages in batches (src/messages/batcher.ts), each batch one statement: the status
 * changes, their events and the events' deliveries (src/messages/outbox.ts). A message no
 * longer queued (another process settled it) is left alone and gets no event. One batch lane
 * per account: an account whose events fan out to a thousand subscriptions writes thousands of
 * rows per message, and another account's settlements are not made to wait for that statement.
 * `db` is the handle's `keyedDb` (src/lib/db/client.ts): every row is reached by key.
 *
 * An event wider than `writes.fanOutChunk` is written on in its account's lane, a chunk per
 * statement (src/messages/fan-out.ts), each chunk an item of its own that counts as a whole
 * statement's rows: it goes alone, and is paced as a wide fan-out is (`fanOutShareBesideOthers`).
 * `deliveriesQueued` is called after each chunk that wrote deliveries.
 */
export function createMessageSettler(db: Database, writes: MessageWrites = MESSAGE_WRITES.postgres, deliveriesQueued: () => void = () => {}): { settle: MessageSettler; fanOuts: FanOutWriter } {
  const writing = new Set<string>()

  // Called within a batch, before its items resolve: the lane holds the chunk before it can empty and forget its pace.
  const nextChunk = (fanOut: FanOut) => {
    writing.add(fanOut.eventId)
    batcher.submit({ fanOut }).then(
      (queued) => {
        if (queued.count > 0) deliveriesQueued()
      },
      // The fan-out's row stays: the catch-up resumes it (startQueuedCatchUp).
      () => writing.delete(fanOut.eventId),
    )
  }

  const settleBatch = async (settlements: Settlement[]): Promise<Queued> => {
    const input = settlements.map((settlement) => ({ ...settlement, from_status: 'queued' }))
    const statement = sql`with input as (
            select * from jsonb_to_recordset(${JSON.stringify(input)}::jsonb) as i(
              message_id text, from_status text, status text, error text, updated_at timestamptz, event_id text, event_type text, payload text, trace_context text)
          ),
          settled as (
            -- The status to leave comes with the input, not as the literal 'queued': a literal lets the plan read
            -- messages_queued_idx, which holds an entry for every message settled since the last vacuum, and a
            -- settlement of one message read 65,000 of them (docs/performance.md, issue 37). Each message is
            -- reached by its key, and its event's fields come back with it, so that no member joins another.
            update messages m set status = i.status, error = i.error, updated_at = i.updated_at
            from input i
            where m.id = i.message_id and m.status = i.from_status
            returning i.event_id as id, m.account_id, i.event_type as type, i.payload, m.contact, i.trace_context
          ),
          stored_events as (
            select id, account_id, type, payload, contact, trace_context from settled
          )${storeEventsAndDeliveries(writes.fanOutChunk)}`
    const [row] = await queryRows<QueuedDeliveries>(db, statement)
    const queued = queuedFrom(row)
    const accountOf = new Map(settlements.map((settlement) => [settlement.event_id, settlement.account_id]))
    for (const eventId of queued.fanOuts) nextChunk({ eventId, accountId: accountOf.get(eventId)! })
    return queued
  }

  const writeChunk = async (fanOut: FanOut): Promise<Queued> => {
    const { count, more } = await continueFanOut(db, fanOut.eventId, writes.fanOutChunk)
    if (more) nextChunk(fanOut)
    else writing.delete(fanOut.eventId)
    return { count, dueHooks: [], fanOuts: more ? [fanOut.eventId] : [] }
  }

  const batcher = createKeyedBatcher<SettlerItem, Queued>(
    (item) => ('fanOut' in item ? item.fanOut.accountId : item.settlement.account_id),
    async (batch) => {
      const settlements = batch.flatMap((item) => ('settlement' in item ? [item.settlement] : []))
      const settled = settlements.length > 0 ? await settleBatch(settlements) : undefined
      const results: Queued[] = []
      for (const item of batch) results.push('fanOut' in item ? await writeChunk(item.fanOut) : settled!)
      return results
    },
    // Nobody waits on a settlement (the API answered already): a millisecond gathers a busy moment's into one
    // statement. An account whose events fan out wide settles fewer messages per statement: each statement aims at
    // `rowsPerStatement` deliveries, and a chunk, or an event that goes on in chunks, counts as that many, so that it
    // goes alone. 200 messages to 1,000 subscriptions were two statements of 5 and 13 s (docs/performance.md, the
    // storm), whose locks and commits stalled everyone else's deliveries.
    {
      maxBatch: 256,
      ...writes.settleLinger,
      cost: {
        of: (items, results) => {
          const chunks = items.filter((item) => 'fanOut' in item).length
          const settled = results.find((_queued, index) => 'settlement' in items[index]!)
          return (chunks + (settled?.fanOuts.length ?? 0)) * writes.rowsPerStatement + (settled?.count ?? 0)
        },
        max: writes.rowsPerStatement,
        share: writes.fanOutShare,
        besideOthers: { share: writes.fanOutShareBesideOthers, withinMs: NEIGHBOUR_WITHIN_MS },
        maxPausedWaitMs: SETTLE_PAUSED_WAIT_MS,
      },
    },
  )
  return {
    settle: (settlement) => batcher.submit({ settlement }),
    fanOuts: {
      chunk: writes.fanOutChunk,
      continue(fanOuts) {
        for (const fanOut of fanOuts) if (!writing.has(fanOut.eventId)) nextChunk(fanOut)
      },
      writing,
    },
  }
}

/**
 * Hands a queued message to the carrier and records the outcome, its event and the event's
 * deliveries. With traces on, a `message dispatch` span (the carrier call) in the trace the
 * message was accepted in, as stored with it, and in it a `message settle` span whose context is
 * stored with the event.
 */
export async function dispatchMessage(deps: MessageDeps, message: Message): Promise<void> {
  deps.dispatching.add(message.id)
  try {
    await dispatchOnce(deps, message)
  } finally {
    deps.dispatching.delete(message.id)
  }
}

async function dispatchOnce(deps: MessageDeps, message: Message): Promise<void> {
  const ids = { 'app.account.id': message.accountId, 'app.message.id': message.id }
  const parent = deps.tracing?.contextFrom({ traceparent: message.traceContext })
  await inSpan(deps.tracing, 'message dispatch', { kind: SpanKind.CLIENT, attributes: ids, parent }, async (dispatchSpan) => {
    const outcome = await deps.carrier.deliver(message.contact, message.body)
    dispatchSpan?.setAttribute('app.message.status', outcome.delivered ? 'delivered' : 'failed')
    const settled: Message = {
      ...message,
      status: outcome.delivered ? 'delivered' : 'failed',
      error: outcome.delivered ? null : outcome.error,
      updatedAt: new Date(),
    }
    const type: EventType = outcome.delivered ? 'message.delivered' : 'message.failed'
    const { pending } = buildEvent({ accountId: message.accountId, type, message: toMessageResource(settled) })
    const queued = await inSpan(deps.tracing, 'message settle', { attributes: { ...ids, 'app.event.id': pending.id, 'app.event.type': type } }, async (settleSpan) => {
      const queued = await settleWhileDatabaseAway(deps.settleMessage, {
        account_id: message.accountId,
        message_id: message.id,
        status: settled.status as Settlement['status'],
        error: settled.error,
        updated_at: settled.updatedAt.toISOString(),
        event_id: pending.id,
        event_type: type,
        payload: pending.payload,
        trace_context: settleSpan ? deps.tracing!.traceparentOf(settleSpan) : null,
      })
      settleSpan?.setAttribute('app.deliveries.queued', queued.count)
      return queued
    })
    if (queued.count > 0) deps.deliveriesQueued(queued.dueHooks)
  })
}

// The carrier has acted, so its outcome is kept and written again while the database is away
// (calling the carrier again would send the message twice); past this, the periodic catch-up
// (dispatchStaleQueuedMessages) takes the message.
const SETTLE_RETRY_FOR_MS = 120_000

async function settleWhileDatabaseAway(settle: MessageSettler, settlement: Settlement): ReturnType<MessageSettler> {
  const started = Date.now()
  let delayMs = 250
  for (;;) {
    try {
      return await settle(settlement)
    } catch (error) {
      if (!isDatabaseUnavailable(error) || Date.now() - started > SETTLE_RETRY_FOR_MS) throw error
      await new Promise((resolve) => setTimeout(resolve, delayMs))
      delayMs = Math.min(delayMs * 2, 5000)
    }
  }
}

// A message queued this long ago, with no lease in force, is not being dispatched by any live process: longer than its
// settlement is retried while the database is away (SETTLE_RETRY_FOR_MS). A lease lasts as long. Each process looks at its
// own every LEASE_RENEW_INTERVAL_MS and renews those whose protection (the lease, or a message's age) would end within
// LEASE_RENEW_WITHIN_SECONDS: each look renews every message dispatched for more than 10 s, so that when the database goes
// away a dispatch has 150 s or more left (more than its settlement is retried), as when every look renewed all of them, and
// a dispatch of a few seconds is never written.
const STALE_QUEUED_SECONDS = 180
const LEASE_RENEW_INTERVAL_MS = 30_000
const LEASE_RENEW_WITHIN_SECONDS = 170

const leaseUntil = () => sql`now() + make_interval(secs => ${STALE_QUEUED_SECONDS})`

// Until when no other process's catch-up takes a queued message: a message is protected by its lease or, while it has
// none, by its age (it is not stale before STALE_QUEUED_SECONDS). The one rule of the renewal (renew before it ends) and
// of the catch-up (take once it has ended).
const protectedUntil = sql`coalesce(${messages.dispatchLeaseUntil}, ${messages.createdAt} + make_interval(secs => ${STALE_QUEUED_SECONDS}))`

/** The ids as a PostgreSQL text array, sent as one JSON parameter however many there are. */
const idArray = (ids: Iterable<string>) => sql`array(select jsonb_array_elements_text(${JSON.stringify([...ids])}::jsonb))`

/**
 * Renews the lease of each message this process is dispatching and that is still queued (its
 * settlement may wait in its account's lane behind a wide fan-out: createMessageSettler), so that
 * no other process's catch-up takes it, once what protects it (its lease, or while it has none its
 * age) would end within LEASE_RENEW_WITHIN_SECONDS. A dispatch that failed leaves its message
 * queued: its lease is renewed until the dispatch has left the set, and then runs out.
 */
export async function renewDispatchLeases(deps: Pick<MessageDeps, 'db' | 'dispatching'>): Promise<void> {
  if (deps.dispatching.size === 0) return
  await deps.db
    .update(messages)
    .set({ dispatchLeaseUntil: leaseUntil() })
    .where(
      and(
        eq(messages.status, 'queued'),
        sql`${messages.id} = any(${idArray(deps.dispatching)})`,
        lt(protectedUntil, sql`now() + make_interval(secs => ${LEASE_RENEW_WITHIN_SECONDS})`),
      ),
    )
}

/**
 * Dispatches messages left queued: by a process that stopped between accepting and dispatching,
 * or whose settlement could not be written for minutes. Runs at start and every minute
 * (startQueuedCatchUp), in every process. It takes the messages queued for STALE_QUEUED_SECONDS
 * whose lease has run out, leasing them in the same statement and passing over rows another
 * process is taking, so that two processes starting together never both call the carrier for one
 * message. A message this process is still dispatching is never taken again, whatever its lease.
 */
export async function dispatchStaleQueuedMessages(deps: MessageDeps): Promise<number> {
  // Read before the query: a dispatch that ends while the query runs may still be read as queued. Only this sweep dispatches
  // stale messages, and its runs never overlap (src/lib/runtime/sweep.ts), so none starts meanwhile.
  const ours = idArray(deps.dispatching)
  const stale = deps.db
    .select({ id: messages.id })
    .from(messages)
    .where(
      and(
        eq(messages.status, 'queued'),
        lt(protectedUntil, sql`now()`),
        // The rule above for a message without a lease, and implied for one with (a lease is set to now() +
        // STALE_QUEUED_SECONDS, after the message was created); stated on created_at itself so that the plan can scan
        // messages_queued_idx (created_at, of the queued messages only) for the range, which the coalesce cannot give it.
        lt(messages.createdAt, sql`now() - make_interval(secs => ${STALE_QUEUED_SECONDS})`),
        sql`${messages.id} <> all(${ours})`,
      ),
    )
    .limit(1000)
    .for('update', { skipLocked: true })
  const taken = await deps.db.update(messages).set({ dispatchLeaseUntil: leaseUntil() }).where(inArray(messages.id, stale)).returning()
  await Promise.all(taken.map((message) => dispatchMessage(deps, message)))
  return taken.length
}

/**
 * A contact writing back (the sandbox's stand-in for a carrier's inbound webhook): the
 * message, its event and the event's deliveries in one statement.
 */
export async function receiveInboundMessage(
  deps: Pick<MessageDeps, 'db' | 'deliveriesQueued' | 'fanOuts' | 'tracing'>,
  accountId: string,
  input: { from: string; body: string },
): Promise<Message> {
  const now = new Date()
  const id = newId('msg')
  return inSpan(deps.tracing, 'message receive', { attributes: { 'app.account.id': accountId, 'app.message.id': id } }, async (span) => {
    const traceContext = span ? deps.tracing!.traceparentOf(span) : null
    const message: Message = { id, accountId, direction: 'inbound', contact: input.from, body: input.body, status: 'received', error: null, createdAt: now, updatedAt: now, dispatchLeaseUntil: null, traceContext }
    const { pending } = buildEvent({ accountId, type: 'message.inbound', message: toMessageResource(message) })
    span?.setAttributes({ 'app.event.id': pending.id, 'app.event.type': pending.type })
    const [row] = await queryRows<QueuedDeliveries>(
      deps.db,
      sql`with stored_message as (
            insert into messages (id, account_id, direction, contact, body, status, created_at, updated_at, trace_context)
            values (${message.id}, ${accountId}, 'inbound', ${input.from}, ${input.body}, 'received', ${now.toISOString()}::timestamptz, ${now.toISOString()}::timestamptz, ${traceContext})
            returning account_id
          ),
          stored_events as (
            select ${pending.id}::text as id, account_id, ${pending.type}::text as type, ${pending.payload}::text as payload, ${input.from}::text as contact,
              ${traceContext}::text as trace_context
            from stored_message
          )${storeEventsAndDeliveries(deps.fanOuts.chunk)}`,
    )
    const queued = queuedFrom(row)
    span?.setAttribute('app.deliveries.queued', queued.count)
    if (queued.count > 0) deps.deliveriesQueued(queued.dueHooks)
    deps.fanOuts.continue(queued.fanOuts.map((eventId) => ({ eventId, accountId })))
    return message
  })
}

export async function findMessage(db: Database, accountId: string, messageId: string): Promise<Message | null> {
  if (!isId('msg', messageId)) return null
  const [message] = await db.select().from(messages).where(and(eq(messages.id, messageId), eq(messages.accountId, accountId)))
  return message ?? null
}

/** The event log for reconciliation, newest first. */
export async function listEvents(
  db: Database,
  accountId: string,
  query: { type?: EventType; since?: string; limit?: number; cursor?: string },
): Promise<Page<EventPayload>> {
  // Test events (POST …/hooks/{hook_id}/test) are examples, not the account's history.
  const conditions = [eq(events.accountId, accountId), eq(events.test, false)]
  if (query.type) conditions.push(eq(events.type, query.type))
  if (query.since) conditions.push(gte(events.createdAt, new Date(query.since)))
  return readPage(
    query,
    'evt',
    (before, take) =>
      db
        .select()
        .from(events)
        .where(and(...conditions, before ? lt(events.id, before) : undefined))
        .orderBy(desc(events.id))
        .limit(take),
    (row) => JSON.parse(row.payload) as EventPayload,
  )
}

const CATCH_UP_INTERVAL_MS = 60_000

// A fan-out whose last chunk was written this long ago is taken as left by a stopped process: in a live one its row moves
// each time its lane comes round to it, seconds apart even beside other accounts, unless the lane holds thousands of
// fan-outs at once. Two processes that both resume one never write a delivery twice (continueFanOut), so one taken from
// a live process that was only slow costs a few statements.
const FAN_OUT_STALLED_SECONDS = 60

/**
 * Resumes the fan-outs that have not moved for FAN_OUT_STALLED_SECONDS and that this process is
 * not writing: their process stopped, or lost its database, between two chunks. At most a thousand
 * a run; the next run takes the rest.
 */
export async function resumeStalledFanOuts(deps: Pick<MessageDeps, 'db' | 'fanOuts'>): Promise<number> {
  const stalled = await findStalledFanOuts(deps.db, FAN_OUT_STALLED_SECONDS, deps.fanOuts.writing, 1000)
  deps.fanOuts.continue(stalled)
  return stalled.length
}

/**
 * Runs `resumeStalledFanOuts` and `dispatchStaleQueuedMessages` at start and every minute, so no
 * fan-out stays unfinished and nothing stays queued without a restart, and `renewDispatchLeases`
 * every 30 s. The renewal is a sweep of its own: a catch-up run waits for the dispatches it
 * started, which may wait in their lanes for minutes, and the leases of everything this process
 * dispatches must not lapse meanwhile. `intervals`: shorter ones, for tests.
 */
export function startQueuedCatchUp(deps: MessageDeps, intervals = { catchUpMs: CATCH_UP_INTERVAL_MS, renewMs: LEASE_RENEW_INTERVAL_MS }): { stop(): Promise<void> } {
  const catchUp = startPeriodicSweep({
    sweep: async () => {
      const resumed = await resumeStalledFanOuts(deps)
      if (resumed > 0) deps.logger.info('resumed fan-outs left unfinished', { count: resumed })
      const count = await dispatchStaleQueuedMessages(deps)
      if (count > 0) deps.logger.info('dispatched messages left queued', { count })
    },
    intervalMs: intervals.catchUpMs,
    logger: deps.logger,
    failure: 'dispatching messages left queued failed',
  })
  const renewal = startPeriodicSweep({
    sweep: () => renewDispatchLeases(deps),
    intervalMs: intervals.renewMs,
    logger: deps.logger,
    failure: 'renewing the leases of messages in dispatch failed',
  })
  return {
    async stop() {
      await Promise.all([catchUp.stop(), renewal.stop()])
    },
  }
}
