import { and, desc, eq, gte, lt, sql } from 'drizzle-orm'
import type { Static } from 'elysia'
import type { Database } from '../lib/db/client.ts'
import { events, messages } from '../lib/db/schema.ts'
import { isId, newId } from '../lib/ids.ts'
import type { Logger } from '../lib/logger.ts'
import { readPage, type Page } from '../lib/pagination.ts'
import type { EventType } from '../hooks/event-types.ts'
import type { Carrier } from './carrier.ts'
import { recordEvent, type EventPayload } from '../delivery/outbox.ts'
import type { MessageSchema } from './schemas.ts'

export type Message = typeof messages.$inferSelect
export type MessageResource = Static<typeof MessageSchema>

export interface MessageDeps {
  db: Database
  carrier: Carrier
  logger: Logger
  /** Called after a commit that queued deliveries: wakes this process's delivery worker. */
  deliveriesQueued(): void
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

/** Accepts an outbound message; the carrier's outcome is recorded by `dispatchMessage`. */
export async function acceptMessage(db: Database, accountId: string, input: { to: string; body: string }): Promise<Message> {
  const [message] = await db
    .insert(messages)
    .values({ id: newId('msg'), accountId, direction: 'outbound', contact: input.to, body: input.body, status: 'queued' })
    .returning()
  return message!
}

/**
 * Hands a queued message to the carrier and records the outcome: the status change, its event
 * and the event's deliveries in one transaction. A message already settled is left alone.
 */
export async function dispatchMessage(deps: MessageDeps, message: Message): Promise<void> {
  const outcome = await deps.carrier.deliver(message.contact, message.body)
  const queued = await deps.db.transaction(async (tx) => {
    const [settled] = await tx
      .update(messages)
      .set({ status: outcome.delivered ? 'delivered' : 'failed', error: outcome.delivered ? null : outcome.error, updatedAt: sql`now()` })
      .where(and(eq(messages.id, message.id), eq(messages.status, 'queued')))
      .returning()
    if (!settled) return 0
    const type: EventType = outcome.delivered ? 'message.delivered' : 'message.failed'
    return (await recordEvent(tx, { accountId: settled.accountId, type, message: toMessageResource(settled) })).deliveryCount
  })
  if (queued > 0) deps.deliveriesQueued()
}

// A message queued this long ago is not being dispatched by any live instance.
const STALE_QUEUED_SECONDS = 60

/** At start: dispatch messages left queued by a process that stopped between accepting and dispatching. */
export async function dispatchStaleQueuedMessages(deps: MessageDeps): Promise<number> {
  const stale = await deps.db
    .select()
    .from(messages)
    .where(and(eq(messages.status, 'queued'), lt(messages.createdAt, sql`now() - make_interval(secs => ${STALE_QUEUED_SECONDS})`)))
    .limit(1000)
  for (const message of stale) await dispatchMessage(deps, message)
  return stale.length
}

/** A contact writing back (the sandbox's stand-in for a carrier's inbound webhook). */
export async function receiveInboundMessage(
  deps: Pick<MessageDeps, 'db' | 'deliveriesQueued'>,
  accountId: string,
  input: { from: string; body: string },
): Promise<Message> {
  const { message, deliveryCount } = await deps.db.transaction(async (tx) => {
    const [message] = await tx
      .insert(messages)
      .values({ id: newId('msg'), accountId, direction: 'inbound', contact: input.from, body: input.body, status: 'received' })
      .returning()
    const { deliveryCount } = await recordEvent(tx, { accountId, type: 'message.inbound', message: toMessageResource(message!) })
    return { message: message!, deliveryCount }
  })
  if (deliveryCount > 0) deps.deliveriesQueued()
  return message
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
  const conditions = [eq(events.accountId, accountId)]
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
