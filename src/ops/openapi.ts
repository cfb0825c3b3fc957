import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { Elysia } from 'elysia'
import { openapi } from '@elysiajs/openapi'
import { notFound } from '../lib/errors.ts'
import { eventCatalog } from '../hooks/event-catalog.ts'

// The reference page is served from the swagger-ui-dist package, so it works without the internet.
const UI_ASSETS: Record<string, string> = {
  'swagger-ui-bundle.js': 'application/javascript; charset=utf-8',
  'swagger-ui.css': 'text/css; charset=utf-8',
}
const REFERENCE_PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Messaging Service API reference</title>
  <link rel="stylesheet" href="/v0/docs/assets/swagger-ui.css">
</head>
<body>
  <div id="reference"></div>
  <script src="/v0/docs/assets/swagger-ui-bundle.js"></script>
  <script>window.onload = () => { window.ui = SwaggerUIBundle({ url: '/v0/openapi.json', dom_id: '#reference' }) }</script>
</body>
</html>
`

const assetCache = new Map<string, Promise<Uint8Array<ArrayBuffer>>>()

function loadAsset(name: string): Promise<Uint8Array<ArrayBuffer>> {
  let asset = assetCache.get(name)
  if (!asset) {
    asset = readFile(fileURLToPath(import.meta.resolve(`swagger-ui-dist/${name}`))).then((bytes) => new Uint8Array(bytes))
    assetCache.set(name, asset)
  }
  return asset
}

// The OpenAPI 3.1 types the plugin's `documentation` option takes (from openapi-types).
type Documentation31 = Extract<NonNullable<NonNullable<Parameters<typeof openapi>[0]>['documentation']>, { webhooks?: unknown }>
type Webhooks = NonNullable<Documentation31['webhooks']>
type Parameter = Exclude<NonNullable<NonNullable<Extract<Webhooks[string], { post?: unknown }>['post']>['parameters']>[number], { $ref: string }>
type Schemas = NonNullable<NonNullable<Documentation31['components']>['schemas']>

// The Standard Webhooks headers of every delivery (src/delivery/send.ts; docs/webhooks.md "Verifying a delivery").
const SIGNATURE = 'v1,[A-Za-z0-9+/]+={0,2}'
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
      '`v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{raw body}">` keyed with the subscription\'s secret (the bytes after `whsec_`, base64-decoded). Several, space-separated, for 24 hours after a secret rotation: accept the delivery when any one matches. Verify the raw body bytes, before parsing the JSON.',
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
        description: `${description} Sent to each subscription to \`${type}\` as one POST per event to its \`target_url\`, signed with the Standard Webhooks headers. The body is the event object, the same JSON that \`GET /v0/account/{account_id}/events\` lists.`,
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

/** OpenAPI 3.1 at `/v0/openapi.json` (generated from the routes' TypeBox schemas) and a reference page at `/v0/docs`. */
export function apiReference(options: { publicUrl: string }) {
  // The plugin spreads `documentation` over what it generates: `webhooks` is kept as given, and
  // these component schemas join the generated ones.
  const { webhooks, schemas } = webhookDocumentation()
  return new Elysia()
    .use(
      openapi({
        path: '/v0/docs',
        specPath: '/v0/openapi.json',
        // The plugin's own page resolves the spec relative to the site root; ours is below.
        provider: null,
        // staticFile: false, or the plugin drops every path with a dot (/.well-known/…).
        exclude: { staticFile: false, paths: [/^\/v0\/docs/, '/v0/openapi.json'] },
        documentation: {
          info: {
            title: 'Messaging Service API',
            version: '0',
            description:
              'Message outcomes, webhooks and authentication for a messaging account. Authenticate with `?key=<API key>` or `Authorization: Bearer <access token>`.',
          },
          servers: [{ url: options.publicUrl }],
          webhooks,
          components: {
            schemas,
            securitySchemes: {
              apiKey: { type: 'apiKey', in: 'query', name: 'key', description: 'A secret API key (`sk_live_…`).' },
              bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'An OAuth 2.0 access token.' },
            },
          },
        },
      }),
    )
    .get(
      '/v0/docs',
      ({ set }) => {
        set.headers['content-type'] = 'text/html; charset=utf-8'
        return REFERENCE_PAGE
      },
      { detail: { hide: true } },
    )
    .get(
      '/v0/docs/assets/:file',
      async ({ params, set }) => {
        const contentType = UI_ASSETS[params.file]
        if (!contentType) throw notFound()
        set.headers['content-type'] = contentType
        set.headers['cache-control'] = 'public, max-age=86400'
        return new Response(await loadAsset(params.file))
      },
      { detail: { hide: true } },
    )
}
