import { t } from 'elysia'
import { PersonText } from '../lib/http/text.ts'
import { ApiKeyParam, PageParams } from '../lib/http/pagination.ts'
import { AccountParams } from '../lib/http/params.ts'
import { EVENT_TYPES } from './event-types.ts'

// E.164: a plus sign and up to 15 digits. Also what a subscription's filter holds (src/hooks/schemas.ts).
export const PhoneNumber = t.String({ pattern: '^\\+[1-9][0-9]{6,14}$', description: 'An E.164 number, e.g. +14155550123.' })
const MessageText = PersonText({ minLength: 1, maxLength: 1600 })

export const SendMessageBody = t.Object({ to: PhoneNumber, body: MessageText }, { additionalProperties: false, title: 'SendMessageRequest' })
export const InboundMessageBody = t.Object({ from: PhoneNumber, body: MessageText }, { additionalProperties: false, title: 'InboundMessageRequest' })

export const MessageSchema = t.Object(
  {
    id: t.String(),
    account_id: t.String(),
    direction: t.UnionEnum(['outbound', 'inbound']),
    to: t.Optional(t.String()),
    from: t.Optional(t.String()),
    body: t.String(),
    status: t.UnionEnum(['queued', 'delivered', 'failed', 'received']),
    error: t.Optional(t.String()),
    created_at: t.String({ format: 'date-time' }),
    updated_at: t.String({ format: 'date-time' }),
  },
  { title: 'Message' },
)

export const EventSchema = t.Object(
  {
    id: t.String(),
    type: t.UnionEnum(EVENT_TYPES),
    timestamp: t.String({ format: 'date-time' }),
    account_id: t.String(),
    data: t.Object({ message: MessageSchema }),
  },
  { title: 'Event' },
)

export const EventsQuery = t.Object(
  {
    type: t.Optional(t.Union(EVENT_TYPES.map((type) => t.Literal(type)))),
    since: t.Optional(t.String({ format: 'date-time', description: 'Only events at or after this time.' })),
    ...PageParams,
    ...ApiKeyParam,
  },
  { additionalProperties: false },
)

export const MessageParams = t.Object({ ...AccountParams.properties, message_id: t.String({ maxLength: 64 }) })
