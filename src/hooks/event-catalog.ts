import { t, type Static } from 'elysia'
import { buildEvent, type EventPayload, type PendingEvent } from '../messages/outbox.ts'
import { EventSchema, type MessageSchema } from '../messages/schemas.ts'
import { EVENT_DESCRIPTIONS, EVENT_TYPES, FILTER_KEYS, type EventType } from '../messages/event-types.ts'
import { ContactList } from './schemas.ts'

export const EventTypeSchema = t.Object(
  {
    type: t.UnionEnum(EVENT_TYPES),
    description: t.String(),
    schema: t.Record(t.String(), t.Unknown(), { description: "JSON Schema (2020-12) of the event's body, as deliveries send it." }),
    example: EventSchema,
    filter: t.Record(t.String(), t.Unknown(), { description: 'JSON Schema (2020-12) of the `filter` a subscription to this type takes: its one member and the numbers it holds.' }),
  },
  { title: 'EventType' },
)

type Message = Static<typeof MessageSchema>

const EXAMPLE_ACCOUNT = 'acc_01jd3m9x2qk7r5v8w4y6z0abcd'
const EXAMPLE_TIME = '2026-01-01T12:00:00.000Z'
const EXAMPLE_MESSAGES: Record<EventType, Message> = {
  'message.delivered': { id: 'msg_01jd3m9x2qk7r5v8w4y6z0efgh', account_id: EXAMPLE_ACCOUNT, direction: 'outbound', to: '+14155550123', body: 'Your code is 482913', status: 'delivered', created_at: EXAMPLE_TIME, updated_at: EXAMPLE_TIME },
  'message.failed': {
    id: 'msg_01jd3m9x2qk7r5v8w4y6z0jkmn',
    account_id: EXAMPLE_ACCOUNT,
    direction: 'outbound',
    to: '+14155550000',
    body: 'Your code is 482913',
    status: 'failed',
    error: 'The sandbox carrier fails recipients ending in 0000.',
    created_at: EXAMPLE_TIME,
    updated_at: EXAMPLE_TIME,
  },
  'message.inbound': { id: 'msg_01jd3m9x2qk7r5v8w4y6z0pqrs', account_id: EXAMPLE_ACCOUNT, direction: 'inbound', from: '+14155550123', body: 'STOP', status: 'received', created_at: EXAMPLE_TIME, updated_at: EXAMPLE_TIME },
}

/** A plain JSON Schema: TypeBox's own markers dropped, and no `$id` (a fragment `$id` is not valid JSON Schema 2020-12). */
export function plainJsonSchema(schema: unknown): Record<string, unknown> {
  return JSON.parse(JSON.stringify(schema, (key, value) => (key === '$id' ? undefined : value))) as Record<string, unknown>
}

/** A subscription's filter for one type: the member of HookFilter that type takes (docs/api.md#filters), required. */
const filterOfType = (type: EventType) =>
  t.Object(
    { [FILTER_KEYS[type]]: ContactList },
    { additionalProperties: false, description: `Deliver only ${type} events whose message's ${FILTER_KEYS[type]} is one of these numbers.` },
  )

/**
 * Each event type with its description, the JSON Schema of its body and an example, from the
 * same TypeBox schema that types the event and the same function that builds the body a
 * delivery sends (`buildEvent`), so the catalogue cannot drift from what receivers get; and the
 * filter a subscription to it takes, from the schema that checks subscriptions' filters.
 */
export function eventCatalog(): Static<typeof EventTypeSchema>[] {
  return EVENT_TYPES.map((type) => {
    const { event } = buildEvent({ accountId: EXAMPLE_ACCOUNT, type, message: EXAMPLE_MESSAGES[type] })
    const example: EventPayload = { ...event, id: 'evt_01jd3m9x2qk7r5v8w4y6z0tvwx', timestamp: EXAMPLE_TIME }
    const schema = plainJsonSchema(t.Object({ ...EventSchema.properties, type: t.Literal(type) }, { title: type }))
    const filter = { $schema: 'https://json-schema.org/draft/2020-12/schema', ...plainJsonSchema(filterOfType(type)) }
    return { type, description: EVENT_DESCRIPTIONS[type], schema: { $schema: 'https://json-schema.org/draft/2020-12/schema', ...schema }, example, filter }
  })
}

/** The event POST …/hooks/{hook_id}/test sends: the catalogue's example message, for the caller's account, with a new id and time. */
export function exampleEvent(accountId: string, type: EventType): PendingEvent {
  return buildEvent({ accountId, type, message: { ...EXAMPLE_MESSAGES[type], account_id: accountId } }).pending
}
