import type { openapi } from '@elysiajs/openapi'
import { eventCatalog } from '../hooks/event-catalog.ts'
import { FILTER_KEYS } from '../messages/event-types.ts'

// The OpenAPI 3.1 types the plugin's `documentation` option takes (from openapi-types).
type Documentation31 = Extract<NonNullable<NonNullable<Parameters<typeof openapi>[0]>['documentation']>, { webhooks?: unknown }>
type Webhooks = NonNullable<Documentation31['webhooks']>
type Parameter = Exclude<NonNullable<NonNullable<Extract<Webhooks[string], { post?: unknown }>['post']>['parameters']>[number], { $ref: string }>
type Schemas = NonNullable<NonNullable<Documentation31['components']>['schemas']>

// The Standard Webhooks headers of every delivery (src/delivery/send.ts, src/delivery/signing.ts; docs/webhooks.md "Signatures").
const SIGNATURE = 'v1a?,[A-Za-z0-9+/]+={0,2}'
const WEBHOOK_HEADERS: Parameter[] = [
  {
    name: 'webhook-id',
    in: 'header',
    required: true,
    description: 'The event id (`evt_…`): the same on every attempt of this event, so deduplicate on it.',
    schema: { type: 'string' },
  },
  {
    name: 'webhook-timestamp',
    in: 'header',
    required: true,
    description: 'When this attempt was sent, in Unix seconds. Refuse deliveries far from your clock (the `standardwebhooks` package allows 5 minutes).',
    schema: { type: 'integer' },
  },
  {
    name: 'webhook-signature',
    in: 'header',
    required: true,
    description:
      '`v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{raw body}">` keyed with the subscription\'s secret (the bytes after `whsec_`, base64-decoded); for a subscription created with `signature: "ed25519"`, `v1a,<base64 Ed25519 signature of the same>`, verified with its `public_key` (the 32 bytes after `whpk_`, base64-decoded). Several, space-separated, for 24 hours after a rotation: accept the delivery when any one matches. Verify the raw body bytes, before parsing the JSON.',
    schema: { type: 'string', pattern: `^${SIGNATURE}( ${SIGNATURE})*$` },
  },
]

const DELIVERY_RULES =
  'A 2xx answered within `WEBHOOK_TIMEOUT_MS` (15 s by default) is delivered. Anything else — a 3xx (redirects are never followed), a 4xx, a 5xx, a timeout or a connection error — is retried on `WEBHOOK_RETRY_SCHEDULE` (by default at once, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h and 24 h later, each ±20 %); a `Retry-After` on 429 or 503 is honoured up to 1 hour and pauses the whole subscription that long. **410 Gone disables the subscription at once** (its pending deliveries are canceled), and so do 5 days in which every attempt failed. Delivery is at least once and in no guaranteed order. The rules in full: docs/webhooks.md (sections "Retry schedule", "Guarantees" and "Verifying a delivery") in the service\'s repository.'

/** `message.delivered` → `MessageDelivered`. */
const pascalCase = (type: string) => type.replace(/(?:^|\.)(\w)/g, (_, letter: string) => letter.toUpperCase())

/**
 * The OpenAPI 3.1 `webhooks` section (one Path Item per event type, its `post` being the
 * request a delivery sends) and a component schema per event body, built from the event
 * catalogue that `GET /v0/event-types` serves: one source for both.
 */
export function webhookDocumentation(catalog = eventCatalog()): { webhooks: Webhooks; schemas: Schemas } {
  const schemas: Schemas = {}
  const webhooks: Webhooks = {}
  for (const { type, description, schema, example } of catalog) {
    const component = `${pascalCase(type)}Event`
    schemas[component] = schema
    webhooks[type] = {
      post: {
        operationId: `webhook${pascalCase(type)}`,
        summary: description,
        description: `${description} Sent to each subscription to \`${type}\` whose \`filter\`, if it has one, holds the message's \`${FILTER_KEYS[type]}\`, as one POST per event to its \`target_url\`, signed with the Standard Webhooks headers. The body is the event object, the same JSON that \`GET /v0/account/{account_id}/events\` lists.`,
        parameters: WEBHOOK_HEADERS,
        requestBody: {
          required: true,
          content: { 'application/json': { schema: { $ref: `#/components/schemas/${component}` }, example } },
        },
        responses: {
          '2XX': { description: 'Delivered. The body is ignored (its first 4 KB are kept in the attempt log).' },
          default: { description: `Not delivered. ${DELIVERY_RULES}` },
        },
      },
    }
  }
  return { webhooks, schemas }
}
