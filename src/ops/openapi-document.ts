import { toOpenAPISchema } from '@elysiajs/openapi'
import type { AnyElysia } from 'elysia'
import { ProblemSchema } from '../lib/http/errors.ts'
import { SCOPES, SCOPE_DESCRIPTIONS } from '../auth/scopes.ts'
import { OAuthErrorSchema } from '../oauth/schemas.ts'
import { webhookDocumentation } from './openapi-webhooks.ts'

/**
 * The OpenAPI 3.1 document at `{base_url}/openapi.json`, built once from the routes' TypeBox
 * schemas (the same ones that validate) and then made into what client generators expect:
 * - every titled schema becomes a named component (`#/components/schemas/Hook`), referenced
 *   wherever it is used; two different schemas with one title stop the build;
 * - integers are `type: integer`: Elysia's coercing `t.Integer` (a numeric string or a number, for
 *   query strings) is documented as its number branch, and `default`s that only word errors
 *   (`t.UnionEnum` puts its first value there) are dropped from responses;
 * - every operation lists its failures: the statuses the route declares (409, …) and those that
 *   follow from what it takes (a credential: 400/401/403/429; a body: 400/413/415/422; a path
 *   parameter: 404; everything: 500/503), as problem+json, or as the OAuth error object where
 *   the route answers in that format (it declares an `OAuthError` response);
 * - a 204 has no content; the `oauth2` scheme runs the authorization-code flow with its scopes.
 */

type Json = Record<string, unknown>
type Operation = Json & { operationId?: string; security?: Record<string, string[]>[]; parameters?: Json[]; requestBody?: Json; responses?: Record<string, Json> }

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const

// Everything a REST route may answer on failure, keyed by status: the shared response components.
const PROBLEM_RESPONSES: Record<string, { name: string; description: string; headers?: string[] }> = {
  '400': { name: 'BadRequest', description: 'Malformed: the body is not JSON (`invalid_json`), a credential was sent twice (`ambiguous_credentials`), a cursor is not one a list returned (`invalid_cursor`), or an `Idempotency-Key` is not 1 to 255 visible ASCII characters (`invalid_idempotency_key`).' },
  '401': { name: 'Unauthorized', description: 'No credential, or one that is invalid, expired or revoked. `WWW-Authenticate` names the protected-resource metadata to start OAuth from.', headers: ['WWW-Authenticate'] },
  '403': { name: 'Forbidden', description: 'The credential is valid but may not do this: a bearer token without the scope (`insufficient_scope`, with a `WWW-Authenticate` challenge naming it), or an endpoint that takes an API key only.', headers: ['WWW-Authenticate'] },
  '404': { name: 'NotFound', description: "No such resource, or another account's: other accounts' resources read as missing." },
  '405': { name: 'MethodNotAllowed', description: 'This method is not used here; `Allow` lists those that are.' },
  '409': { name: 'Conflict', description: 'The request conflicts with the current state: the `code` says how (`conflict`, `hooks_limit_reached`, `subscription_not_active`, `idempotency_key_in_use`).' },
  '413': { name: 'PayloadTooLarge', description: 'The body is over 1 MB.' },
  '415': { name: 'UnsupportedMediaType', description: 'The body is not `application/json`.' },
  '422': { name: 'ValidationFailed', description: 'A body or parameter breaks the schema (`validation_failed`, each field in `errors`), or an `Idempotency-Key` was reused with another request (`idempotency_key_reused`).' },
  '429': { name: 'RateLimited', description: 'Too many requests (`rate_limited`), or, sending a message, your webhook deliveries stayed behind while it was held (`deliveries_behind`, not accepted): wait `Retry-After` seconds.', headers: ['Retry-After', 'RateLimit-Policy', 'RateLimit'] },
  '500': { name: 'InternalError', description: 'Our failure, logged with the request id. Retry later; quote `request_id` if it persists.' },
  '503': { name: 'ServiceUnavailable', description: 'The database is unreachable right now (`database_unavailable`): retry after `Retry-After`.', headers: ['Retry-After'] },
}

// The OAuth endpoints' failures (RFC 6749 §5.2, RFC 7591 §3.2.2), keyed by status.
const OAUTH_RESPONSES: Record<string, { name: string; description: string; headers?: string[] }> = {
  '400': { name: 'OAuthBadRequest', description: '`invalid_request`, `invalid_grant`, `unsupported_grant_type`, `invalid_scope`, `invalid_target`; at registration `invalid_redirect_uri` or `invalid_client_metadata`.' },
  '401': { name: 'OAuthInvalidClient', description: '`invalid_client`: the client is unknown (register again) or its metadata document cannot be used.' },
  '413': { name: 'OAuthPayloadTooLarge', description: '`invalid_request`: the body is over 1 MB.' },
  '415': { name: 'OAuthUnsupportedMediaType', description: '`invalid_request`: the body is neither JSON nor a form (where forms are taken).' },
  '429': { name: 'OAuthSlowDown', description: '`slow_down`: too many registrations from this address; wait `Retry-After` seconds.', headers: ['Retry-After'] },
  '500': { name: 'OAuthServerError', description: '`temporarily_unavailable` with status 500: our failure, logged. Retry later.' },
  '503': { name: 'OAuthTemporarilyUnavailable', description: '`temporarily_unavailable`: the database is unreachable right now; retry after `Retry-After`.', headers: ['Retry-After'] },
}

const HEADERS: Record<string, Json> = {
  'WWW-Authenticate': {
    description:
      'RFC 6750 challenge: `Bearer resource_metadata="…"`, with `error` and `scope` when they apply. To a request that sent `Authorization: DPoP`, an RFC 9449 challenge: `DPoP resource_metadata="…", scope="…", algs="…", error="…"` (`use_dpop_nonce` comes with a `DPoP-Nonce` header).',
    schema: { type: 'string' },
  },
  'Retry-After': { description: 'Seconds to wait before retrying.', schema: { type: 'integer', minimum: 1 } },
  'RateLimit-Policy': { description: 'The credential\'s quota: `"credential";q=<requests>;w=<seconds>` (bursts may reach twice `q`).', schema: { type: 'string' } },
  RateLimit: { description: 'Requests left and seconds until the full burst is back: `"credential";r=<left>;t=<seconds>`.', schema: { type: 'string' } },
}

// The generator says "Response for status 201"; the operation's summary says what it did.
const SUCCESS: Record<string, string> = { '200': 'OK.', '201': 'Created.', '202': 'Accepted: done, or queued to be done at once.', '204': 'Done; no content.' }

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value)

/** Elysia's coercing number (`t.Integer`, `t.Numeric`): `anyOf: [a numeric string, the number]` → the number. */
function numberBranch(schema: Json): Json | undefined {
  const options = schema.anyOf
  if (!Array.isArray(options) || options.length !== 2) return undefined
  const [text, number] = options as Json[]
  const coercing = text?.type === 'string' && (text.format === 'integer' || text.format === 'numeric')
  return coercing && (number?.type === 'integer' || number?.type === 'number') ? number : undefined
}

/** A schema as the document shows it: coercing numbers as numbers, no `$id`, no `default` in what the service sends. */
function cleanSchema(schema: unknown, use: 'input' | 'output'): unknown {
  if (Array.isArray(schema)) return schema.map((item) => cleanSchema(item, use))
  if (!isObject(schema)) return schema
  const source = numberBranch(schema) ?? schema
  const clean: Json = {}
  for (const [key, value] of Object.entries(source)) {
    if (key === '$id' || (key === 'default' && use === 'output')) continue
    clean[key] = key === 'examples' || key === 'enum' || key === 'const' ? value : cleanSchema(value, use)
  }
  return clean
}

/**
 * Replaces every titled object schema by a `$ref` to a component of that name, innermost first.
 * Output schemas win over input ones of the same title only when they are the same JSON.
 */
function hoistNamedSchemas(schema: unknown, components: Json): unknown {
  if (Array.isArray(schema)) return schema.map((item) => hoistNamedSchemas(item, components))
  if (!isObject(schema)) return schema
  const hoisted: Json = {}
  for (const [key, value] of Object.entries(schema)) {
    hoisted[key] = key === 'examples' || key === 'enum' || key === 'const' || key === 'example' ? value : hoistNamedSchemas(value, components)
  }
  const name = hoisted.title
  if (typeof name !== 'string' || hoisted.type !== 'object') return hoisted
  if (!/^[A-Za-z][A-Za-z0-9]*$/.test(name)) throw new Error(`OpenAPI: the schema title ${JSON.stringify(name)} cannot name a component`)
  const known = components[name]
  if (known !== undefined && JSON.stringify(known) !== JSON.stringify(hoisted)) {
    throw new Error(`OpenAPI: two different schemas are titled ${name}; give one of them another title`)
  }
  components[name] = hoisted
  return { $ref: `#/components/schemas/${name}` }
}

const refOf = (schema: unknown) => (isObject(schema) && typeof schema.$ref === 'string' ? schema.$ref : undefined)

function responseComponent(entry: { description: string; headers?: string[] }, schemaRef: string, mediaType: string): Json {
  return {
    description: entry.description,
    ...(entry.headers ? { headers: Object.fromEntries(entry.headers.map((name) => [name, { $ref: `#/components/headers/${name}` }])) } : {}),
    content: { [mediaType]: { schema: { $ref: schemaRef } } },
  }
}

/** The failures an operation can answer, from what it declares and what it takes. */
function failureStatuses(path: string, operation: Operation, declared: Set<string>, oauthFormat: boolean): string[] {
  const statuses = new Set<string>(declared)
  const authenticated = (operation.security?.length ?? 0) > 0
  if (authenticated) for (const status of ['400', '401', '403', '429']) statuses.add(status)
  // The OAuth error object reports a body that breaks the schema as 400 (invalid_request, …), never 422.
  if (operation.requestBody) for (const status of oauthFormat ? ['400', '413', '415'] : ['400', '413', '415', '422']) statuses.add(status)
  const parameters = operation.parameters ?? []
  if (parameters.some((parameter) => parameter.in === 'path')) statuses.add('404')
  if (parameters.some((parameter) => parameter.in === 'path' || (parameter.in === 'query' && parameter.name !== 'key'))) statuses.add('422')
  statuses.add('500')
  // Every route but the liveness probe reads the database or may.
  if (path !== '/healthz') statuses.add('503')
  return [...statuses].sort()
}

export interface ApiDocumentOptions {
  publicUrl: string
  baseUrl: string
  /** Paths the document leaves out (the document itself, the reference page). */
  exclude: (string | RegExp)[]
}

export function buildApiDocument(app: AnyElysia, options: ApiDocumentOptions): Json {
  // staticFile: false, or the generator drops every path with a dot (/.well-known/…).
  const generated = toOpenAPISchema(app, { staticFile: false, paths: options.exclude }, undefined, undefined, '3.1.0') as unknown as { paths: Record<string, Record<string, Operation>> }
  const schemas: Json = {}
  const problemRef = refOf(hoistNamedSchemas(cleanSchema(ProblemSchema, 'output'), schemas))!
  const oauthErrorRef = refOf(hoistNamedSchemas(cleanSchema(OAuthErrorSchema, 'output'), schemas))!
  const responses: Json = {}
  for (const entry of Object.values(PROBLEM_RESPONSES)) responses[entry.name] = responseComponent(entry, problemRef, 'application/problem+json')
  for (const entry of Object.values(OAUTH_RESPONSES)) responses[entry.name] = responseComponent(entry, oauthErrorRef, 'application/json')

  const paths: Record<string, Json> = {}
  for (const [path, item] of Object.entries(generated.paths)) {
    const cleanItem: Json = {}
    for (const method of METHODS) {
      const operation = item[method]
      if (!operation) continue
      cleanItem[method] = refineOperation(path, operation, schemas)
    }
    paths[path] = cleanItem
  }

  const { webhooks, schemas: eventSchemas } = webhookDocumentation()
  // Already plain JSON Schema, exactly as GET /event-types serves them.
  Object.assign(schemas, eventSchemas)

  return {
    openapi: '3.1.0',
    info: {
      title: 'Messaging Service API',
      version: '0',
      description:
        'Message outcomes, webhooks and authentication for a messaging account. Authenticate with `?key=<API key>` or `Authorization: Bearer <access token>` (the `oauth2` scheme: authorization code with PKCE, clients register at `/v0/auth/register`). Every failure is `application/problem+json` (`Problem`), except at the OAuth endpoints, which answer the OAuth error object (`OAuthError`). Error codes are explained at ' +
        `${options.publicUrl}/docs/errors.`,
    },
    servers: [{ url: options.publicUrl }],
    paths,
    webhooks,
    components: {
      schemas: Object.fromEntries(Object.entries(schemas).sort(([a], [b]) => a.localeCompare(b))),
      responses,
      headers: HEADERS,
      parameters: {
        IdempotencyKey: {
          name: 'Idempotency-Key',
          in: 'header',
          required: false,
          description: '1 to 255 visible ASCII characters (a UUID is a good choice). The same key with the same request within 24 hours answers the first response again (with `Idempotent-Replayed: true`) instead of doing it twice; with another request, 422 `idempotency_key_reused`.',
          schema: { type: 'string', pattern: '^[\\x21-\\x7e]{1,255}$' },
        },
      },
      securitySchemes: {
        apiKey: { type: 'apiKey', in: 'query', name: 'key', description: 'A secret API key (`sk_live_…`): every scope of its account.' },
        oauth2: {
          type: 'oauth2',
          description: 'An OAuth 2.0 access token (`Authorization: Bearer …`) from the authorization-code flow with PKCE (S256). Public clients only: register with `POST /v0/auth/register` (or use a client ID metadata document URL as `client_id`).',
          flows: {
            authorizationCode: {
              authorizationUrl: `${options.baseUrl}/auth/authorize`,
              tokenUrl: `${options.baseUrl}/auth/token`,
              refreshUrl: `${options.baseUrl}/auth/token/refresh`,
              scopes: Object.fromEntries(SCOPES.map((scope) => [scope, SCOPE_DESCRIPTIONS[scope]])),
            },
          },
        },
      },
    },
  }
}

function refineOperation(path: string, generated: Operation, schemas: Json): Operation {
  const operation: Operation = { ...generated }
  if (operation.parameters) {
    operation.parameters = operation.parameters.map((parameter) => {
      if (parameter.in === 'header' && parameter.name === 'idempotency-key') return { $ref: '#/components/parameters/IdempotencyKey' }
      return isObject(parameter.schema) ? { ...parameter, schema: hoistNamedSchemas(cleanSchema(parameter.schema, 'input'), schemas) } : parameter
    })
  }
  if (operation.requestBody) {
    const content = (operation.requestBody.content ?? {}) as Record<string, Json>
    operation.requestBody = {
      ...operation.requestBody,
      content: Object.fromEntries(Object.entries(content).map(([type, media]) => [type, { ...media, schema: hoistNamedSchemas(cleanSchema(media.schema, 'input'), schemas) }])),
    }
  }
  const declared = new Set<string>()
  const answers: Record<string, Json> = {}
  const authenticated = (operation.security?.length ?? 0) > 0
  let oauthFormat = false
  let htmlPage = false
  for (const [status, response] of Object.entries(operation.responses ?? {})) {
    const content = response.content as Record<string, Json> | undefined
    const schema = content && Object.values(content)[0]?.schema
    const title = isObject(schema) ? schema.title : undefined
    if (content?.['text/html']) {
      // A page for a person (the consent page): its failures are pages too, documented as declared.
      htmlPage = true
      answers[status] = response
      continue
    }
    if (Number(status) >= 400) {
      // A declared failure: shaped like every other one, by its status.
      if (title === 'OAuthError') oauthFormat = true
      else if (title !== 'Problem') throw new Error(`OpenAPI: ${path} declares a ${status} answer that is neither a Problem nor an OAuthError`)
      declared.add(status)
      continue
    }
    const generic = typeof response.description !== 'string' || response.description.startsWith('Response for status')
    const description = generic ? (SUCCESS[status] ?? response.description) : response.description
    if (status === '204' || content === undefined) {
      answers[status] = { description }
      continue
    }
    answers[status] = {
      ...response,
      description,
      ...(authenticated ? { headers: { 'RateLimit-Policy': { $ref: '#/components/headers/RateLimit-Policy' }, RateLimit: { $ref: '#/components/headers/RateLimit' } } } : {}),
      content: Object.fromEntries(Object.entries(content).map(([type, media]) => [type, { ...media, schema: hoistNamedSchemas(cleanSchema(media.schema, 'output'), schemas) }])),
    }
  }
  for (const status of htmlPage ? [] : failureStatuses(path, operation, declared, oauthFormat)) {
    const entry = oauthFormat ? (OAUTH_RESPONSES[status] ?? PROBLEM_RESPONSES[status]) : PROBLEM_RESPONSES[status]
    if (!entry) throw new Error(`OpenAPI: no shared response for status ${status} (${path})`)
    answers[status] = { $ref: `#/components/responses/${entry.name}` }
  }
  operation.responses = answers
  return operation
}
