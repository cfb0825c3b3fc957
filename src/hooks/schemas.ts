import { t } from 'elysia'
import { AccountParams } from '../accounts/schemas.ts'
import { EVENT_TYPES } from './event-types.ts'

export const HookSchema = t.Object(
  {
    id: t.String({ examples: ['hook_01jd3m9x2qk7r5v8w4y6z0abcd'] }),
    account_id: t.String(),
    event: t.UnionEnum(EVENT_TYPES),
    target_url: t.String({ format: 'uri' }),
    status: t.UnionEnum(['active', 'disabled']),
    disabled_reason: t.Optional(t.String()),
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

export const CreateHookBody = t.Object(
  {
    // Not t.UnionEnum: it carries a default, which would fill in a missing event.
    event: t.Union(EVENT_TYPES.map((type) => t.Literal(type)), { description: `One of ${EVENT_TYPES.join(', ')}.` }),
    target_url: t.String({ minLength: 1, maxLength: 2048, description: 'An absolute https URL.' }),
  },
  { additionalProperties: false },
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
