import { t } from 'elysia'
import { Type } from '@sinclair/typebox'
import { AccountParams, HookParams } from '../lib/http/params.ts'
import { ApiKeyParam, PageParams } from '../lib/http/pagination.ts'
import { PhoneNumber } from '../messages/schemas.ts'
import { EVENT_TYPES } from '../messages/event-types.ts'
import { SIGNATURE_SCHEMES } from '../delivery/signing.ts'

export const CircuitSchema = t.Object(
  {
    state: t.UnionEnum(['closed', 'open', 'half_open'], {
      description:
        '`closed`: deliveries go out as they fall due. `open`: the receiver kept failing; deliveries wait (pending, on their retry schedule) and one goes out as a probe at `next_probe_at`. `half_open`: the probe is due now; its success closes the circuit.',
    }),
    consecutive_failures: Type.Integer({ minimum: 0, description: 'Failed attempts in a row (no answer, 5xx, 429) since the last answer.' }),
    opened_at: t.Union([t.String({ format: 'date-time' }), t.Null()]),
    next_probe_at: t.Union([t.String({ format: 'date-time' }), t.Null()]),
  },
  { title: 'Circuit', description: 'The circuit breaker of this subscription: docs/webhooks.md#when-an-endpoint-keeps-failing.' },
)

/** docs/api.md#filters: the numbers a filter matches, exactly, as the event's message writes them. */
export const ContactList = t.Array(PhoneNumber, {
  minItems: 1,
  maxItems: 10,
  uniqueItems: true,
  description: '1 to 10 distinct E.164 numbers: only events whose contact is one of them are delivered.',
})

/**
 * docs/api.md#filters. One member, the one of the subscription's event type (src/messages/event-types.ts,
 * FILTER_KEYS): that it matches the type is checked by the service, which knows the type.
 */
export const HookFilterSchema = t.Object(
  { to: t.Optional(ContactList), from: t.Optional(ContactList) },
  {
    additionalProperties: false,
    minProperties: 1,
    maxProperties: 1,
    title: 'HookFilter',
    description: 'Narrows a subscription to some contacts: `to` (the recipient) for message.delivered and message.failed, `from` (the sender) for message.inbound.',
  },
)

export const HookSchema = t.Object(
  {
    id: t.String({ examples: ['hook_01jd3m9x2qk7r5v8w4y6z0abcd'] }),
    account_id: t.String(),
    event: t.UnionEnum(EVENT_TYPES),
    target_url: t.String({ format: 'uri', description: 'Where deliveries go; a message broker\'s password is shown as `***` (docs/webhooks.md#destinations).' }),
    status: t.UnionEnum(['active', 'paused', 'disabled'], {
      description: '`paused` by the owner (deliveries are recorded and sent on resume); `disabled` by the service, with `disabled_reason`.',
    }),
    disabled_reason: t.Optional(t.String()),
    rate_limit_per_s: t.Union([Type.Integer(), t.Null()], { description: 'At most this many delivery attempts start in each second; null: no limit.' }),
    circuit: CircuitSchema,
    filter: t.Union([HookFilterSchema, t.Null()], { description: 'Only events of these contacts are delivered; null: every event of its type.' }),
    signature: t.UnionEnum(SIGNATURE_SCHEMES, {
      description: 'How deliveries are signed (docs/webhooks.md#signatures): `hmac` with a shared whsec_ secret (v1), or `ed25519` with a key pair whose public key is `public_key` (v1a).',
    }),
    public_key: t.Union([t.String({ examples: ['whpk_9tR8mbnK0Sf3lYx3hGxw6lpbrjAlZyJH3IvZhm0Bq+A='] }), t.Null()], {
      description: 'ed25519: the Standard Webhooks public key (whpk_ and the base64 of 32 bytes) that verifies v1a signatures; readable at any time. Null for hmac.',
    }),
    previous_public_key: t.Union([t.String(), t.Null()], {
      description: 'ed25519, for 24 h after a rotation: the public key of the replaced key, which still signs deliveries until `previous_public_key_expires_at`. Null otherwise.',
    }),
    previous_public_key_expires_at: t.Union([t.String({ format: 'date-time' }), t.Null()], { description: 'When `previous_public_key` stops signing; null when there is none.' }),
    created_at: t.String({ format: 'date-time' }),
  },
  { title: 'Hook' },
)

export const CreatedHookSchema = t.Composite(
  [
    HookSchema,
    t.Object({
      secret: t.Optional(t.String({ description: 'hmac only: the Standard Webhooks signing secret (whsec_…). Shown once: store it now. An ed25519 subscription has none: verify with `public_key`.' })),
    }),
  ],
  { title: 'CreatedHook' },
)

export const RotatedHookSchema = t.Composite([
  HookSchema,
  t.Object({
    secret: t.Optional(t.String({ description: 'hmac only: the new signing secret (whsec_…), now the current one. Shown once: store it now. An ed25519 rotation answers its new key in `public_key`.' })),
    previous_secret_expires_at: t.Optional(
      t.String({
        format: 'date-time',
        description: 'hmac only: until then deliveries are also signed with the secret this one replaced (24 h after the rotation). ed25519: see `previous_public_key_expires_at`.',
      }),
    ),
  }),
], { title: 'RotatedHook' })

const TargetUrl = t.String({
  minLength: 1,
  maxLength: 2048,
  description:
    'An absolute https URL; or a RabbitMQ exchange, `amqps://user:password@host[:port]/vhost?exchange=…&routing_key=…`, or a NATS JetStream subject, `tls://user:password@host[:port]?subject=…` (docs/webhooks.md#destinations). A broker URL\'s password is sealed at rest and shown as `***`; sending the URL back as shown keeps it.',
  examples: ['https://example.com/webhooks', 'amqps://app:s3cret@mq.example.com/prod?exchange=sms-events&routing_key=message.delivered'],
})
const RateLimit = Type.Integer({ minimum: 1, maximum: 10_000, description: 'At most this many delivery attempts start in each second (1–10000).' })

export const CreateHookBody = t.Object(
  {
    // Not t.UnionEnum: it carries a default, which would fill in a missing event.
    event: t.Union(EVENT_TYPES.map((type) => t.Literal(type)), { description: `One of ${EVENT_TYPES.join(', ')}.` }),
    target_url: TargetUrl,
    secret: t.Optional(
      t.String({
        maxLength: 100,
        description: 'hmac only: a Standard Webhooks secret of your own (whsec_ and the base64 of 24 to 64 bytes), so one receiver can verify several subscriptions with one secret. Default: a new one.',
      }),
    ),
    // Not t.UnionEnum: it carries a default, which would fill in a missing signature.
    signature: t.Optional(
      t.Union(SIGNATURE_SCHEMES.map((scheme) => t.Literal(scheme)), {
        description:
          '`hmac` (the default): signed with a shared whsec_ secret (v1). `ed25519`: the service makes a key pair, keeps the private key and answers the public key (`public_key`, readable at any time); deliveries carry v1a signatures. See docs/webhooks.md#signatures.',
      }),
    ),
    rate_limit_per_s: t.Optional(RateLimit),
    filter: t.Optional(HookFilterSchema),
  },
  { additionalProperties: false, title: 'CreateHookRequest' },
)

export const UpdateHookBody = t.Object(
  {
    target_url: t.Optional(TargetUrl),
    status: t.Optional(t.Union([t.Literal('active'), t.Literal('paused')], { description: '`paused` holds deliveries (they are still recorded); `active` sends them again.' })),
    rate_limit_per_s: t.Optional(t.Union([RateLimit, t.Null()])),
    filter: t.Optional(t.Union([HookFilterSchema, t.Null()], { description: 'A new filter (its member the one of the subscription\'s event type), or null to remove it.' })),
  },
  { additionalProperties: false, minProperties: 1, title: 'UpdateHookRequest' },
)


// Not t.UnionEnum: it carries a default, which would fill in a missing `state` filter.
const DeliveryState = t.Union([t.Literal('pending'), t.Literal('succeeded'), t.Literal('failed'), t.Literal('canceled')], {
  description:
    '`pending`: waiting for its next attempt (or for its paused subscription to resume); `succeeded`: the receiver answered 2xx; `failed`: every attempt of the retry schedule failed; `canceled`: its subscription was disabled while it waited (POST …/recover sends it again).',
})

export const DeliveryIdParam = t.String({ maxLength: 64, description: 'A delivery id, dlv_… (from a list of deliveries or a test).' })

export const DeliverySchema = t.Object(
  {
    id: t.String({ examples: ['dlv_01jd3m9x2q4f1a9c07be55d2e8'] }),
    hook_id: t.String(),
    event_id: t.String({ description: 'Also the webhook-id header the receiver saw.' }),
    event_type: t.UnionEnum(EVENT_TYPES),
    state: DeliveryState,
    test: t.Boolean({ description: 'An example sent by POST …/hooks/{hook_id}/test.' }),
    attempts: Type.Integer({ description: 'Attempts made so far.' }),
    next_attempt_at: t.Union([t.String({ format: 'date-time' }), t.Null()], { description: 'When the next attempt is due; null unless pending.' }),
    last_attempt: t.Union([
      t.Object({
        status_code: t.Union([Type.Integer(), t.Null()], { description: 'Null when no response arrived.' }),
        duration_ms: Type.Integer(),
        error: t.Union([t.String(), t.Null()]),
        at: t.String({ format: 'date-time' }),
      }),
      t.Null(),
    ]),
    created_at: t.String({ format: 'date-time' }),
  },
  { title: 'Delivery' },
)

export const DeliveryAttemptSchema = t.Object(
  {
    id: t.String(),
    at: t.String({ format: 'date-time' }),
    status_code: t.Union([Type.Integer(), t.Null()], { description: 'Null when no response arrived.' }),
    duration_ms: Type.Integer(),
    error: t.Union([t.String(), t.Null()]),
    response_snippet: t.String({ description: "The first 4 KB of the receiver's answer." }),
  },
  { title: 'DeliveryAttempt' },
)

export const DeliveryDetailSchema = t.Composite([DeliverySchema, t.Object({ attempt_log: t.Array(DeliveryAttemptSchema, { description: 'Every attempt, oldest first.' }) })], {
  title: 'DeliveryDetail',
})

export const DeliveryListQuery = t.Object({ ...PageParams, ...ApiKeyParam, state: t.Optional(DeliveryState) }, { additionalProperties: false })

export const RecoverBody = t.Object(
  { since: t.String({ format: 'date-time', description: 'Failed and canceled deliveries created at or after this time are sent again.' }) },
  { additionalProperties: false, title: 'RecoverRequest' },
)

export const RecoveredSchema = t.Object({ requeued: Type.Integer({ description: 'How many deliveries were put back in the queue.' }) }, { title: 'RecoverResult' })

export const TestResultSchema = t.Object(
  {
    delivery_id: t.String({ description: 'The test delivery, in the delivery log marked `test: true`.' }),
    status_code: t.Union([Type.Integer(), t.Null()], { description: "The receiver's answer; null when none arrived." }),
    duration_ms: Type.Integer(),
    error: t.Union([t.String(), t.Null()], { description: 'Why the attempt failed; null on a 2xx.' }),
  },
  { title: 'TestResult' },
)

export const DeliveryParams = t.Object({ ...AccountParams.properties, delivery_id: DeliveryIdParam })
export const HookDeliveryParams = t.Object({ ...HookParams.properties, delivery_id: DeliveryIdParam })
