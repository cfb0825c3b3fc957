import { t } from 'elysia'
import { AccountParams } from '../accounts/schemas.ts'
import { EVENT_TYPES } from './event-types.ts'

export const HookSchema = t.Object(
  {
    id: t.String({ examples: ['hook_01jd3m9x2qk7r5v8w4y6z0abcd'] }),
    account_id: t.String(),
    event: t.UnionEnum(EVENT_TYPES),
    target_url: t.String({ format: 'uri' }),
    status: t.UnionEnum(['active', 'paused', 'disabled'], {
      description: '`paused` by the owner (deliveries are recorded and sent on resume); `disabled` by the service, with `disabled_reason`.',
    }),
    disabled_reason: t.Optional(t.String()),
    rate_limit_per_s: t.Union([t.Integer(), t.Null()], { description: 'At most this many delivery attempts start in each second; null: no limit.' }),
    created_at: t.String({ format: 'date-time' }),
  },
  { $id: '#/components/schemas/Hook', title: 'Hook' },
)

export const CreatedHookSchema = t.Composite([
  HookSchema,
  t.Object({
    secret: t.String({ description: 'The Standard Webhooks signing secret (whsec_…). Shown once: store it now.' }),
  }),
])

export const RotatedHookSchema = t.Composite([
  HookSchema,
  t.Object({
    secret: t.String({ description: 'The new signing secret (whsec_…), now the current one. Shown once: store it now.' }),
    previous_secret_expires_at: t.String({
      format: 'date-time',
      description: 'Until then deliveries are also signed with the secret this one replaced (24 h after the rotation).',
    }),
  }),
])

const TargetUrl = t.String({ minLength: 1, maxLength: 2048, description: 'An absolute https URL.' })
const RateLimit = t.Integer({ minimum: 1, maximum: 10_000, description: 'At most this many delivery attempts start in each second (1–10000).' })

export const CreateHookBody = t.Object(
  {
    // Not t.UnionEnum: it carries a default, which would fill in a missing event.
    event: t.Union(EVENT_TYPES.map((type) => t.Literal(type)), { description: `One of ${EVENT_TYPES.join(', ')}.` }),
    target_url: TargetUrl,
    secret: t.Optional(
      t.String({
        maxLength: 100,
        description: 'A Standard Webhooks secret of your own (whsec_ and the base64 of 24 to 64 bytes), so one receiver can verify several subscriptions with one secret. Default: a new one.',
      }),
    ),
    rate_limit_per_s: t.Optional(RateLimit),
  },
  { additionalProperties: false },
)

export const UpdateHookBody = t.Object(
  {
    target_url: t.Optional(TargetUrl),
    status: t.Optional(t.Union([t.Literal('active'), t.Literal('paused')], { description: '`paused` holds deliveries (they are still recorded); `active` sends them again.' })),
    rate_limit_per_s: t.Optional(t.Union([RateLimit, t.Null()])),
  },
  { additionalProperties: false, minProperties: 1 },
)

export const HookParams = t.Object({ ...AccountParams.properties, hook_id: t.String({ maxLength: 64 }) })

export const DeliveryAttemptSchema = t.Object(
  {
    id: t.String(),
    delivery_id: t.String(),
    event_id: t.String({ description: 'Also the webhook-id header the receiver saw.' }),
    attempted_at: t.String({ format: 'date-time' }),
    status_code: t.Union([t.Integer(), t.Null()], { description: 'Null when no response arrived.' }),
    duration_ms: t.Integer(),
    error: t.Union([t.String(), t.Null()]),
    response_snippet: t.String({ description: "The first 4 KB of the receiver's answer." }),
  },
  { $id: '#/components/schemas/DeliveryAttempt', title: 'DeliveryAttempt' },
)
