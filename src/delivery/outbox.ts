import { and, eq } from 'drizzle-orm'
import type { Static } from 'elysia'
import type { DatabaseTransaction } from '../lib/db/client.ts'
import { deliveries, events, hooks } from '../lib/db/schema.ts'
import { newId } from '../lib/ids.ts'
import type { EventType } from '../hooks/event-types.ts'
import type { EventSchema, MessageSchema } from '../messages/schemas.ts'

export type EventPayload = Static<typeof EventSchema>

/**
 * Stores an event and one pending delivery per active subscription of its type, inside the
 * caller's transaction: the change, the event and its deliveries commit together or not at
 * all, so a committed event is never without its deliveries. Subscriptions made later do not
 * see it. The caller announces the commit (MessageDeps.deliveriesQueued).
 */
export async function recordEvent(
  tx: DatabaseTransaction,
  input: { accountId: string; type: EventType; message: Static<typeof MessageSchema> },
): Promise<{ event: EventPayload; deliveryCount: number }> {
  const id = newId('evt')
  const event: EventPayload = { id, type: input.type, timestamp: new Date().toISOString(), account_id: input.accountId, data: { message: input.message } }
  await tx.insert(events).values({ id, accountId: input.accountId, type: input.type, payload: JSON.stringify(event) })
  const subscribers = await tx
    .select({ id: hooks.id })
    .from(hooks)
    .where(and(eq(hooks.accountId, input.accountId), eq(hooks.event, input.type), eq(hooks.status, 'active')))
  if (subscribers.length > 0) {
    await tx.insert(deliveries).values(subscribers.map((hook) => ({ id: newId('dlv'), eventId: id, hookId: hook.id })))
  }
  return { event, deliveryCount: subscribers.length }
}
