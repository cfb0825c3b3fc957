import { Elysia } from 'elysia'
import { ApiError, PROBLEM_CONTENT_TYPE, badRequest, databaseUnavailable, internalError, problemBody, problemResponse, schemaViolations, validationFailed, type FieldError, type SchemaIssue } from './errors.ts'
import { newId } from '../db/ids.ts'
import { isDatabaseUnavailable } from '../db/errors.ts'
import { describeError, redactedPath, redactSecrets, type Logger } from '../runtime/logger.ts'
import { clientAddress as resolveClientAddress, trustedProxies, type TrustedProxies } from './client-address.ts'

export const MAX_BODY_BYTES = 1024 * 1024

/**
 * For Bun.serve's `maxRequestBodySize`: no limit of the runtime's own, which would answer an
 * empty 413 without a request id before the app sees the request. The app refuses a declared
 * length over MAX_BODY_BYTES before reading a byte and stops reading a streamed body there.
 */
export const RUNTIME_BODY_LIMIT = Number.MAX_SAFE_INTEGER

const tooLarge = () => new ApiError(413, 'payload_too_large', `Request bodies are limited to ${MAX_BODY_BYTES} bytes.`)

/** The body as text, refused past MAX_BODY_BYTES whether declared (Content-Length) or streamed. */
async function readLimitedText(request: Request): Promise<string> {
  const declaredLength = request.headers.get('content-length')
  if (declaredLength !== null && Number(declaredLength) > MAX_BODY_BYTES) throw tooLarge()
  if (!request.body) return ''
  const reader = request.body.getReader()
  const chunks: Uint8Array[] = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > MAX_BODY_BYTES) {
      await reader.cancel()
      throw tooLarge()
    }
    chunks.push(value)
  }
  const bytes = new Uint8Array(size)
  let offset = 0
  for (const chunk of chunks) {
    bytes.set(chunk, offset)
    offset += chunk.byteLength
  }
  return new TextDecoder().decode(bytes)
}

const mediaTypeOf = (contentType: string) => contentType.split(';', 1)[0]!.trim().toLowerCase()

function isJsonContentType(contentType: string): boolean {
  const mediaType = mediaTypeOf(contentType)
  return mediaType === 'application/json' || (mediaType.startsWith('application/') && mediaType.endsWith('+json'))
}

export const isFormContentType = (contentType: string | undefined | null) =>
  contentType != null && mediaTypeOf(contentType) === 'application/x-www-form-urlencoded'

const unsupportedMediaType = () => new ApiError(415, 'unsupported_media_type', 'Send JSON bodies with Content-Type: application/json.')

const nulRefused = (path: string) => validationFailed([{ path, message: 'must not contain a NUL character' }])

/** The JSON Pointer of the first key or string holding a NUL, which no text column can store. */
function pathOfNul(value: unknown, path = ''): string | null {
  if (typeof value === 'string') return value.includes('\u0000') ? path || '/' : null
  if (value === null || typeof value !== 'object') return null
  for (const [key, item] of Object.entries(value)) {
    const itemPath = `${path}/${key.replaceAll('~', '~0').replaceAll('/', '~1')}`
    if (key.includes('\u0000')) return itemPath
    const found = pathOfNul(item, itemPath)
    if (found) return found
  }
  return null
}

/**
 * The body of a request that sent none: routes without a body ignore it, a route with a body
 * schema refuses it as unreadable (toApiError), never as "expected an object".
 */
export const NO_BODY: unique symbol = Symbol('no body')

/**
 * Bodies read by our own readers. Anything else a route received was parsed by the framework's
 * default parser, which no route of ours asks for: it is refused (see httpFoundation).
 */
const bodiesRead = new WeakSet<Request>()

/**
 * The JSON body of a request, within the size limit: NO_BODY when there is none, 415 for another
 * media type, 400 for malformed JSON, 422 for a NUL anywhere in it. Called once the caller is
 * known (src/auth/plugin.ts) or, at public endpoints, by `jsonBodies()`.
 */
export async function readJsonBody(request: Request): Promise<unknown> {
  bodiesRead.add(request)
  // The header as sent: the framework reports none when the body is empty.
  const contentType = request.headers.get('content-type')
  if (!contentType) {
    if ((await readLimitedText(request)).length === 0) return NO_BODY
    throw unsupportedMediaType()
  }
  if (!isJsonContentType(contentType)) throw unsupportedMediaType()
  const text = await readLimitedText(request)
  if (text.length === 0) return NO_BODY
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    throw badRequest('invalid_json', 'The request body is not valid JSON.')
  }
  // JSON can only carry a NUL escaped: without that escape in the text there is none to find.
  if (text.includes('\\u0000')) {
    const path = pathOfNul(body)
    if (path) throw nulRefused(path)
  }
  return body
}

/**
 * A form body (for the OAuth endpoints, which standard clients call with forms), within the
 * size limit. A parameter sent twice is refused, never resolved by picking one (RFC 6749 §3.2).
 */
export async function parseFormBody(request: Request): Promise<Record<string, string>> {
  bodiesRead.add(request)
  const form: Record<string, string> = {}
  for (const [name, value] of new URLSearchParams(await readLimitedText(request))) {
    if (Object.hasOwn(form, name)) throw badRequest('invalid_request', `The ${name} parameter is repeated.`)
    if (name.includes('\u0000') || value.includes('\u0000')) throw nulRefused(`/${name}`)
    form[name] = value
  }
  return form
}

/** For a public feature plugin (no `auth` on its routes) that takes JSON bodies: `.use(jsonBodies())`. */
export const jsonBodies = () => new Elysia().onParse({ as: 'scoped' }, ({ request }) => readJsonBody(request))

function fieldErrors(error: { all?: SchemaIssue[] }, part: string): FieldError[] {
  const seen = new Set<string>()
  const errors: FieldError[] = []
  for (const { path, message } of (error.all ?? []).flatMap((issue) => [...schemaViolations(issue)])) {
    const key = `${path}\u0000${message}`
    if (seen.has(key)) continue
    seen.add(key)
    errors.push({ path: part === 'body' ? path : `${part}:${path}`, message })
    if (errors.length === 20) break
  }
  return errors
}

/** Maps whatever was thrown to the ApiError a client may see; null means "our fault". */
function toApiError(code: string | number, error: unknown, request: Request): ApiError | null {
  if (error instanceof ApiError) return error
  switch (code) {
    case 'PARSE': {
      const cause = (error as { cause?: unknown }).cause
      if (cause instanceof ApiError) return cause
      // A form body that no feature parser took reached a route's own JSON parser.
      if (isFormContentType(request.headers.get('content-type'))) return unsupportedMediaType()
      return badRequest('invalid_json', 'The request body is not valid JSON.')
    }
    case 'VALIDATION': {
      const validation = error as { type?: string; value?: unknown; all?: SchemaIssue[] }
      // A route that takes a body got none: as unreadable as malformed JSON. Routes without a body ignore one.
      if (validation.type === 'body' && validation.value === NO_BODY) return badRequest('invalid_json', 'The request has no body: send JSON.')
      return validationFailed(fieldErrors(validation, validation.type ?? 'body'))
    }
    case 'NOT_FOUND':
      return new ApiError(404, 'not_found', 'No such endpoint.')
    case 'INVALID_COOKIE_SIGNATURE':
    case 'INVALID_FILE_TYPE':
      return badRequest('invalid_request', 'The request is malformed.')
    default:
      return null
  }
}

/**
 * Inside the app: one problem+json body for every failure. Bodies are read by the route's own
 * reader, never before the caller is known: `readJsonBody` from the auth macro at protected
 * routes, `jsonBodies()` or the OAuth wire format at public ones (which still declare
 * `parse: 'json'`, never reached, so that the OpenAPI document names the media type).
 */
export function httpFoundation(logger: Logger, options: { publicUrl: string }) {
  // While the database is away every request that needs it fails: one warning per 5 s says so
  // (each request's own log line has its 503), not one per request.
  let unavailableSince = -Infinity
  let unavailableUnlogged = 0
  return new Elysia()
    .error({ ApiError })
    .onTransform({ as: 'global' }, ({ request, body }) => {
      if (body !== undefined && !bodiesRead.has(request)) throw unsupportedMediaType()
    })
    .onBeforeHandle({ as: 'global' }, ({ request }) => {
      // A NUL can reach a handler only percent-encoded in the path or the query.
      if (request.url.includes('%00')) throw nulRefused('url')
    })
    .onError({ as: 'global' }, ({ code, error, set, request }) => {
      // The request id is set here only for failures; requestHandler adds one to every other response.
      const requestId = incomingRequestIds.get(request) ?? newId('req')
      set.headers['x-request-id'] = requestId
      // The database first: a lookup that failed in the parse phase (the auth macro) comes wrapped as a PARSE error.
      let apiError = error instanceof ApiError ? error : null
      if (!apiError && isDatabaseUnavailable(error)) {
        if (performance.now() - unavailableSince >= 5_000) {
          logger.warn('the database is unavailable', { request_id: requestId, path: redactedPath(request.url), others_since_last_warning: unavailableUnlogged, ...describeError(error) })
          unavailableSince = performance.now()
          unavailableUnlogged = 0
        } else {
          unavailableUnlogged++
        }
        apiError = databaseUnavailable()
      }
      apiError ??= toApiError(code, error, request)
      if (!apiError) {
        logger.error('unhandled error', {
          request_id: requestId,
          path: redactedPath(request.url),
          // A failed query without its parameters: SQLSTATE, the driver's message, the SQL text.
          ...describeError(error),
        })
        apiError = internalError(requestId)
      }
      set.status = apiError.status
      set.headers['content-type'] = PROBLEM_CONTENT_TYPE
      for (const [name, value] of Object.entries(apiError.options.headers ?? {})) set.headers[name] = value
      return problemBody(apiError, requestId, options.publicUrl)
    })
}

/** `clientAddress`: the peer's IP, which only the runtime adapter knows (Bun.serve, Deno.serve). */
export type FetchHandler = (request: Request, clientAddress?: string) => Response | Promise<Response>

const clientAddresses = new WeakMap<Request, string>()
/** Set only when TRUSTED_PROXIES is: the proxies whose X-Forwarded-For this request's address is read from. */
const proxiesOf = new WeakMap<Request, TrustedProxies>()
const NO_PROXIES: TrustedProxies = () => false

/**
 * The client's IP address: the socket's peer as the runtime saw it ('unknown' when it did not
 * say), or behind trusted proxies the address they forwarded (src/lib/http/client-address.ts).
 */
export function clientAddressOf(request: Request): string {
  const proxies = proxiesOf.get(request)
  return resolveClientAddress(clientAddresses.get(request), proxies ? request.headers.get('x-forwarded-for') : null, proxies ?? NO_PROXIES)
}

/**
 * A request id the client sent that we keep: 1 to 128 characters of `A-Za-z0-9._-` (docs/api.md#requests-and-responses),
 * so it can be written into a header, a JSON body and a log line as it is. Anything else is
 * replaced by one of ours.
 */
export function isAcceptableRequestId(id: string): boolean {
  if (id.length === 0 || id.length > 128) return false
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i)
    // 0-9, A-Z, a-z, '-', '.', '_'
    if (!((c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 45 || c === 46 || c === 95)) return false
  }
  return true
}

/** Requests that came with an acceptable X-Request-Id, for the error handler inside the app. */
const incomingRequestIds = new WeakMap<Request, string>()

/** The request id a request will be answered with when the client chose it; undefined when the service makes one. */
export const incomingRequestIdOf = (request: Request): string | undefined => incomingRequestIds.get(request)

/** Who called, once the auth macro knows (src/auth/plugin.ts): for the request's log line. */
export interface LoggedCaller {
  accountId: string
  credential: { kind: 'api_key'; id: string } | { kind: 'access_token'; clientId: string }
}
const callers = new WeakMap<Request, LoggedCaller>()

/** Called by the auth macro once a request's credential is accepted. */
export function noteCaller(request: Request, caller: LoggedCaller): void {
  callers.set(request, caller)
}

const MAX_USER_AGENT = 200
// Control characters (C0, DEL, C1) and the bidi/line separators that could disguise a log line.
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g
const userAgents = new Map<string, string>()

/**
 * The User-Agent for a log line: at most 200 characters, without control characters, any
 * secret-shaped value redacted (a client may send anything). Clients repeat theirs on every
 * request, so each distinct value is cleaned once (a bounded cache).
 */
export function loggedUserAgent(raw: string | null): string | undefined {
  if (raw === null) return undefined
  // Keyed by the part that is read, so a huge header costs the cache no more than a short one.
  const read = raw.slice(0, MAX_USER_AGENT * 2)
  const known = userAgents.get(read)
  if (known !== undefined) return known
  const clean = redactSecrets(read.replace(UNPRINTABLE, '')).slice(0, MAX_USER_AGENT)
  if (userAgents.size >= 1000) userAgents.clear()
  userAgents.set(read, clean)
  return clean
}

/** Headers decided while the request was handled that every answer to it carries, whoever shaped it (the rate limit's). */
const responseHeaders = new WeakMap<Request, Record<string, string>>()

/** Called by the auth macro once the request's rate-limit state is known (src/auth/plugin.ts). */
export function noteResponseHeaders(request: Request, headers: Record<string, string>): void {
  responseHeaders.set(request, headers)
}

function setHeaders(response: Response, headers: Record<string, string>): Response {
  try {
    for (const name in headers) response.headers.set(name, headers[name]!)
    return response
  } catch {
    // Some responses (redirects, proxied fetches) have immutable headers: copy them.
    const copy = new Response(response.body, response)
    for (const name in headers) copy.headers.set(name, headers[name]!)
    return copy
  }
}

function withRequestHeaders(request: Request, response: Response, incoming: string | undefined): [Response, string] {
  const noted = responseHeaders.get(request)
  const existing = response.headers.get('x-request-id')
  if (existing !== null) return [noted ? setHeaders(response, noted) : response, existing]
  const requestId = incoming ?? newId('req')
  return [setHeaders(response, noted ? { ...noted, 'x-request-id': requestId } : { 'x-request-id': requestId }), requestId]
}

/**
 * Around the app: a request id (and the headers noted for the request) on every response and one log line
 * per request. Kept out of Elysia's lifecycle hooks, which cost microseconds on every request
 * even when empty, and synchronous whenever the app answers synchronously (docs/performance.md).
 */
export function requestHandler(
  app: { fetch(request: Request): Response | Promise<Response> },
  logger: Logger,
  options: { publicUrl: string; trustedProxies?: readonly string[] },
): FetchHandler {
  const logRequests = logger.isEnabled('info')
  const proxies = options.trustedProxies?.length ? trustedProxies(options.trustedProxies) : undefined

  const finish = (request: Request, start: number, answered: Response, incoming: string | undefined): Response => {
    const [response, requestId] = withRequestHeaders(request, answered, incoming)
    if (logRequests) {
      const caller = callers.get(request)
      const credential = caller?.credential
      // One shape for every line (absent fields are undefined, which JSON leaves out).
      logger.info('request', {
        method: request.method,
        path: redactedPath(request.url),
        status: response.status,
        duration_ms: Math.round((performance.now() - start) * 100) / 100,
        request_id: requestId,
        account_id: caller?.accountId,
        credential: credential === undefined ? undefined : credential.kind === 'api_key' ? 'api_key' : 'bearer',
        credential_id: credential === undefined ? undefined : credential.kind === 'api_key' ? credential.id : credential.clientId,
        client_address: clientAddressOf(request),
        user_agent: loggedUserAgent(request.headers.get('user-agent')),
      })
    }
    return response
  }

  const failed = (request: Request, error: unknown): Response => {
    const requestId = incomingRequestIds.get(request) ?? newId('req')
    logger.error('unhandled error', { request_id: requestId, path: redactedPath(request.url), ...describeError(error) })
    return problemResponse(internalError(requestId), requestId, options.publicUrl)
  }

  return function handle(request, clientAddress) {
    const start = performance.now()
    if (clientAddress !== undefined) {
      clientAddresses.set(request, clientAddress)
      if (proxies) proxiesOf.set(request, proxies)
    }
    const sent = request.headers.get('x-request-id')
    let incoming: string | undefined
    if (sent !== null && isAcceptableRequestId(sent)) {
      incoming = sent
      incomingRequestIds.set(request, sent)
    }
    let answered: Response | Promise<Response>
    try {
      answered = app.fetch(request)
    } catch (error) {
      return finish(request, start, failed(request, error), incoming)
    }
    if (answered instanceof Promise) {
      return answered.then(
        (response) => finish(request, start, response, incoming),
        (error) => finish(request, start, failed(request, error), incoming),
      )
    }
    return finish(request, start, answered, incoming)
  }
}
