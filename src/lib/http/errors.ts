/**
 * The one place that shapes failure bodies: RFC 9457 problem+json for REST resources, the
 * RFC 6749 §5.2 / RFC 7591 §3.2.2 error object for OAuth endpoints.
 */

import { Type, type Static } from '@sinclair/typebox'

export const FieldErrorSchema = Type.Object(
  {
    path: Type.String({ description: 'A JSON Pointer into the body (`/target_url`), or `query:/limit`, `params:/hook_id`, `url`.' }),
    message: Type.String(),
  },
  { title: 'FieldError' },
)
export type FieldError = Static<typeof FieldErrorSchema>

/** The body of every REST failure (RFC 9457), as the OpenAPI document names it. */
export const ProblemSchema = Type.Object(
  {
    type: Type.String({ format: 'uri', description: '`{PUBLIC_URL}/docs/errors#<code>`: what the code means and what to do about it.' }),
    title: Type.String({ description: 'The HTTP status in words.' }),
    status: Type.Integer(),
    detail: Type.String({ description: 'What went wrong with this request, for a person.' }),
    code: Type.String({ description: 'A stable snake_case code to switch on.', examples: ['validation_failed'] }),
    request_id: Type.String({ description: 'Also the X-Request-Id header: quote it when asking for help.' }),
    errors: Type.Optional(Type.Array(FieldErrorSchema, { description: 'With `validation_failed`: each field that was refused (at most 20).' })),
  },
  { title: 'Problem' },
)
export type Problem = Static<typeof ProblemSchema>

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  409: 'Conflict',
  413: 'Content Too Large',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Content',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json'

/** The errors page's path (src/ops/error-pages.ts); a code's section is its fragment. */
export const ERROR_PAGE_PATH = '/docs/errors'

/** A problem body's `type`: the section of the errors page that explains `code`. */
export const problemTypeUrl = (publicUrl: string, code: string) => `${publicUrl}${ERROR_PAGE_PATH}#${code}`

/**
 * A failure the client is meant to see. `problemCode` (not `code`: Elysia reserves that name on
 * error classes) is the stable snake_case string integrators switch on.
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly problemCode: string,
    readonly detail: string,
    readonly options: { errors?: FieldError[]; headers?: Record<string, string> } = {},
  ) {
    super(detail)
  }
}

export const badRequest = (code: string, detail: string, errors?: FieldError[]) => new ApiError(400, code, detail, { errors })
export const notFound = (detail = 'No such resource.') => new ApiError(404, 'not_found', detail)
export const validationFailed = (errors: FieldError[]) =>
  new ApiError(422, 'validation_failed', 'The request body or parameters are invalid; see errors.', { errors })

/**
 * The message of one schema violation. TypeBox says only "Expected union value" when a value is
 * none of a set of literals (an event type, a status); name the values a caller may send instead.
 */
export function describeSchemaViolation(issue: { message?: string; schema?: unknown }): string {
  const options = (issue.schema as { anyOf?: unknown } | undefined)?.anyOf
  if (Array.isArray(options) && options.length > 0 && options.every((option) => typeof option === 'object' && option !== null && 'const' in option)) {
    return `must be one of ${options.map((option) => JSON.stringify((option as { const: unknown }).const)).join(', ')}`
  }
  return issue.message ?? 'Invalid value'
}

/** One issue of a TypeBox check, as Value.Errors (and Elysia's validation error, which spreads them) gives it. */
export interface SchemaIssue {
  path?: string
  message?: string
  schema?: unknown
  value?: unknown
  /** For a union: each member's own issues, in the order of `anyOf`. */
  errors?: Iterable<SchemaIssue>[]
}

/**
 * The field errors one issue of a schema check stands for. TypeBox reports a value that matches
 * none of a union's members as one "Expected union value" at the union. For a value that may be
 * null (`X or null`: PATCH clears a field with null) given something else, the caller meant X, so
 * X's own issues are reported: each path then points at the bad field inside (`/filter/to/1`),
 * as it would without the null.
 */
export function* schemaViolations(issue: SchemaIssue): Generator<FieldError> {
  const members = (issue.schema as { anyOf?: { type?: unknown }[] } | undefined)?.anyOf
  const nullable = members?.length === 2 && issue.errors?.length === 2 && members.some((member) => member.type === 'null')
  if (nullable && issue.value !== null) {
    for (const inner of issue.errors![members!.findIndex((member) => member.type !== 'null')]!) yield* schemaViolations(inner)
    return
  }
  yield { path: issue.path || '/', message: describeSchemaViolation(issue) }
}

/**
 * The database is down or restarting (src/lib/db/errors.ts): retry shortly. Almost always
 * nothing was stored; only a connection lost during the commit itself leaves it unknown, so the
 * detail does not promise it (docs/api.md says to retry with the same Idempotency-Key).
 */
export const DATABASE_RETRY_AFTER_SECONDS = 5
export const databaseUnavailable = () =>
  new ApiError(503, 'database_unavailable', 'The service cannot reach its database right now. Retry after the delay in Retry-After.', {
    headers: { 'retry-after': String(DATABASE_RETRY_AFTER_SECONDS) },
  })

/**
 * A message held while its account's webhook deliveries were behind, for longer than the hold
 * (src/messages/admission.ts): not accepted, to be sent again after Retry-After.
 */
export const deliveriesBehind = (retryAfterSeconds: number) =>
  new ApiError(429, 'deliveries_behind', 'Your webhook deliveries are behind and stayed behind while this request waited; the message was not accepted. Send it again after the delay in Retry-After.', {
    headers: { 'retry-after': String(retryAfterSeconds) },
  })

/** The one answer to a failure of ours: the request id to quote, never the cause. */
export const internalError = (requestId: string) =>
  new ApiError(500, 'internal_error', `Something went wrong on our side. Quote ${requestId} when reporting it.`)

/**
 * The problem body of a failure. `publicUrl` (PUBLIC_URL) is passed by whoever answers, never
 * read from a global: `type` links to the section of `{PUBLIC_URL}/docs/errors` for the code.
 */
export function problemBody(error: ApiError, requestId: string, publicUrl: string): Problem {
  const body: Problem = {
    type: problemTypeUrl(publicUrl, error.problemCode),
    title: TITLES[error.status] ?? 'Error',
    status: error.status,
    detail: error.detail,
    code: error.problemCode,
    request_id: requestId,
  }
  if (error.options.errors?.length) body.errors = error.options.errors
  return body
}

export function problemResponse(error: ApiError, requestId: string, publicUrl: string, extraHeaders: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(problemBody(error, requestId, publicUrl)), {
    status: error.status,
    headers: { 'content-type': PROBLEM_CONTENT_TYPE, 'x-request-id': requestId, ...extraHeaders, ...error.options.headers },
  })
}

/** RFC 6749 §5.2 and RFC 7591 §3.2.2 error codes, and RFC 9449 §5, §8's DPoP ones. */
export type OAuthErrorCode =
  | 'invalid_request'
  | 'invalid_client'
  | 'invalid_grant'
  | 'unauthorized_client'
  | 'unsupported_grant_type'
  | 'invalid_scope'
  | 'invalid_redirect_uri'
  | 'invalid_client_metadata'
  | 'access_denied'
  | 'unsupported_response_type'
  | 'invalid_target'
  | 'temporarily_unavailable'
  | 'slow_down'
  | 'invalid_dpop_proof'
  | 'use_dpop_nonce'

const OAUTH_ERROR_CODES: ReadonlySet<string> = new Set<OAuthErrorCode>([
  'invalid_request',
  'invalid_client',
  'invalid_grant',
  'unauthorized_client',
  'unsupported_grant_type',
  'invalid_scope',
  'invalid_redirect_uri',
  'invalid_client_metadata',
  'access_denied',
  'unsupported_response_type',
  'invalid_target',
  'temporarily_unavailable',
  'slow_down',
  'invalid_dpop_proof',
  'use_dpop_nonce',
])

/**
 * A failure with an OAuth error code. Like any ApiError it becomes a problem body; at the OAuth
 * endpoints (src/oauth/wire-format.ts) that body is answered as `{ error, error_description }`.
 */
export class OAuthError extends ApiError {
  constructor(status: number, readonly error: OAuthErrorCode, readonly description: string, headers: Record<string, string> = {}) {
    super(status, error, description, { headers })
  }
}

export interface OAuthErrorBody {
  error: string
  error_description: string
}

/**
 * The OAuth error object (RFC 6749 §5.2, RFC 7591 §3.2.2) and its status for a failure an OAuth
 * endpoint answered: OAuth codes pass as they are; a schema failure is a 400 `invalidBody`
 * naming the first field; our own failures are `temporarily_unavailable`; anything else
 * `invalid_request` with its status (413, 415, ...).
 */
export function oauthErrorFor(problem: Problem, invalidBody: OAuthErrorCode): { status: number; body: OAuthErrorBody } {
  if (OAUTH_ERROR_CODES.has(problem.code)) return { status: problem.status, body: { error: problem.code, error_description: problem.detail } }
  if (problem.code === 'validation_failed') {
    const first = problem.errors?.[0]
    const field = first?.path.replace(/^\//, '') || 'body'
    return { status: 400, body: { error: invalidBody, error_description: first ? `${field}: ${first.message}` : problem.detail } }
  }
  const error = problem.status >= 500 ? 'temporarily_unavailable' : 'invalid_request'
  return { status: problem.status, body: { error, error_description: problem.detail } }
}
