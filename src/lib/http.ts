import { Elysia } from 'elysia'
import { ApiError, OAuthError, PROBLEM_CONTENT_TYPE, badRequest, oauthErrorBody, problemBody, problemResponse, validationFailed, type FieldError } from './errors.ts'
import { newId } from './ids.ts'
import { redactedPath, type Logger } from './logger.ts'
import { CORS_RESPONSE_HEADERS } from './cors.ts'

export const MAX_BODY_BYTES = 1024 * 1024

const tooLarge = () => new ApiError(413, 'payload_too_large', `Request bodies are limited to ${MAX_BODY_BYTES} bytes.`)

async function readLimitedText(request: Request): Promise<string> {
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

/**
 * OAuth endpoints answer failures with the RFC 6749 error object, not problem+json; the token
 * and revocation endpoints also take form-encoded bodies, as standard OAuth clients send them.
 */
export const OAUTH_ERROR_PATHS = new Set(['/v0/auth/register', '/v0/auth/authorize', '/v0/auth/token', '/v0/auth/token/refresh', '/v0/auth/revoke'])
const FORM_BODY_PATHS = new Set(['/v0/auth/token', '/v0/auth/token/refresh', '/v0/auth/revoke'])

function pathOf(url: string): string {
  const start = url.indexOf('/', url.indexOf('//') + 2)
  if (start === -1) return '/'
  const end = url.indexOf('?', start)
  return url.slice(start, end === -1 ? undefined : end)
}

/** RFC 6749 §3.2: a parameter sent twice is an error, never resolved by picking one. */
function parseForm(text: string): Record<string, string> {
  const form: Record<string, string> = {}
  for (const [name, value] of new URLSearchParams(text)) {
    if (Object.hasOwn(form, name)) throw new OAuthError(400, 'invalid_request', `The ${name} parameter is repeated.`)
    form[name] = value
  }
  return form
}

/** The OAuth error a failure becomes at an OAuth endpoint. */
function toOAuthError(error: ApiError, path: string): OAuthError {
  if (error.problemCode === 'validation_failed') {
    const first = error.options.errors?.[0]
    const field = first?.path.replace(/^\//, '') || 'body'
    const detail = first ? `${field}: ${first.message}` : error.detail
    return new OAuthError(400, path === '/v0/auth/register' ? 'invalid_client_metadata' : 'invalid_request', detail)
  }
  if (error.status >= 500) return new OAuthError(error.status, 'temporarily_unavailable', error.detail)
  return new OAuthError(error.status, 'invalid_request', error.detail, error.options.headers)
}

interface ValidationIssue {
  path?: string
  message?: string
}

function fieldErrors(error: { all?: ValidationIssue[] }, part: string): FieldError[] {
  const seen = new Set<string>()
  const errors: FieldError[] = []
  for (const issue of error.all ?? []) {
    const path = issue.path || '/'
    const message = issue.message ?? 'Invalid value'
    const key = `${path}\u0000${message}`
    if (seen.has(key)) continue
    seen.add(key)
    errors.push({ path: part === 'body' ? path : `${part}:${path}`, message })
    if (errors.length === 20) break
  }
  return errors
}

/** Maps whatever was thrown to the ApiError a client may see; null means "our fault". */
function toApiError(code: string | number, error: unknown): ApiError | null {
  if (error instanceof ApiError) return error
  switch (code) {
    case 'PARSE': {
      const cause = (error as { cause?: unknown }).cause
      return cause instanceof ApiError ? cause : badRequest('invalid_json', 'The request body is not valid JSON.')
    }
    case 'VALIDATION': {
      const validation = error as { type?: string; all?: ValidationIssue[] }
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
 * Inside the app: JSON parsing within the body limit and one problem+json body for every
 * failure. Routes with a body still declare `parse: 'json'`: the OpenAPI document reads media
 * types from there, while the parser below (which runs first) does the parsing.
 */
export function httpFoundation(logger: Logger) {
  return new Elysia()
    .error({ ApiError })
    .onParse({ as: 'global' }, async ({ request, contentType }) => {
      if (!contentType) {
        const text = await readLimitedText(request)
        if (text.length === 0) return undefined
        throw new ApiError(415, 'unsupported_media_type', 'Send JSON bodies with Content-Type: application/json.')
      }
      if (mediaTypeOf(contentType) === 'application/x-www-form-urlencoded' && FORM_BODY_PATHS.has(pathOf(request.url))) {
        return parseForm(await readLimitedText(request))
      }
      if (!isJsonContentType(contentType)) {
        throw new ApiError(415, 'unsupported_media_type', 'Send JSON bodies with Content-Type: application/json.')
      }
      const text = await readLimitedText(request)
      try {
        return JSON.parse(text)
      } catch {
        throw badRequest('invalid_json', 'The request body is not valid JSON.')
      }
    })
    .onError({ as: 'global' }, ({ code, error, set, request }) => {
      // The request id is made here only for failures; requestHandler adds one to every other response.
      const requestId = newId('req')
      set.headers['x-request-id'] = requestId
      const cause = code === 'PARSE' ? (error as { cause?: unknown }).cause : undefined
      const path = pathOf(request.url)
      if (error instanceof OAuthError || cause instanceof OAuthError || (OAUTH_ERROR_PATHS.has(path) && code !== 'NOT_FOUND')) {
        const mapped = toApiError(code, cause ?? error)
        const oauthError = error instanceof OAuthError ? error : cause instanceof OAuthError ? cause : mapped ? toOAuthError(mapped, path) : null
        if (oauthError) {
          set.status = oauthError.status
          set.headers['content-type'] = 'application/json'
          set.headers['cache-control'] = 'no-store'
          for (const [name, value] of Object.entries(oauthError.headers)) set.headers[name] = value
          return oauthErrorBody(oauthError)
        }
      }
      let apiError = toApiError(code, error)
      if (!apiError) {
        logger.error('unhandled error', {
          request_id: requestId,
          path: redactedPath(request.url),
          error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
          stack: error instanceof Error ? error.stack : undefined,
        })
        apiError = new ApiError(500, 'internal_error', `Something went wrong on our side. Quote ${requestId} when reporting it.`)
      }
      set.status = apiError.status
      set.headers['content-type'] = PROBLEM_CONTENT_TYPE
      for (const [name, value] of Object.entries(apiError.options.headers ?? {})) set.headers[name] = value
      return problemBody(apiError, requestId)
    })
}

/** `clientAddress`: the peer's IP, which only the runtime adapter knows (Bun.serve, Deno.serve). */
export type FetchHandler = (request: Request, clientAddress?: string) => Response | Promise<Response>

const clientAddresses = new WeakMap<Request, string>()

/** The IP address the request came from, as the runtime saw it ('unknown' when it did not say). */
export const clientAddressOf = (request: Request): string => clientAddresses.get(request) ?? 'unknown'

/**
 * Failures answered before the app sees the request still take the shape of the endpoint:
 * an OAuth error object, with CORS where the endpoint has it, so browsers can read it.
 */
function earlyFailure(request: Request, error: ApiError, requestId: string): Response {
  const path = pathOf(request.url)
  if (!OAUTH_ERROR_PATHS.has(path)) return problemResponse(error, requestId)
  const oauthError = toOAuthError(error, path)
  const headers: Record<string, string> = { 'cache-control': 'no-store', 'x-request-id': requestId, ...oauthError.headers }
  if (path !== '/v0/auth/authorize') Object.assign(headers, CORS_RESPONSE_HEADERS)
  return Response.json(oauthErrorBody(oauthError), { status: oauthError.status, headers })
}

function withRequestId(response: Response): [Response, string] {
  const existing = response.headers.get('x-request-id')
  if (existing !== null) return [response, existing]
  const requestId = newId('req')
  try {
    response.headers.set('x-request-id', requestId)
    return [response, requestId]
  } catch {
    // Some responses (redirects, proxied fetches) have immutable headers: copy them.
    const copy = new Response(response.body, response)
    copy.headers.set('x-request-id', requestId)
    return [copy, requestId]
  }
}

/**
 * Around the app: the declared-size check, a request id on every response and one log line
 * per request. Kept out of Elysia's lifecycle hooks, which cost microseconds on every request
 * even when empty, and synchronous whenever the app answers synchronously (docs/performance.md).
 */
export function requestHandler(app: { fetch(request: Request): Response | Promise<Response> }, logger: Logger): FetchHandler {
  const logRequests = logger.isEnabled('info')

  const finish = (request: Request, start: number, answered: Response): Response => {
    const [response, requestId] = withRequestId(answered)
    if (logRequests) {
      logger.info('request', {
        method: request.method,
        path: redactedPath(request.url),
        status: response.status,
        duration_ms: Math.round((performance.now() - start) * 100) / 100,
        request_id: requestId,
      })
    }
    return response
  }

  const failed = (request: Request, error: unknown): Response => {
    const requestId = newId('req')
    logger.error('unhandled error', { request_id: requestId, path: redactedPath(request.url), error: String(error) })
    return earlyFailure(request, new ApiError(500, 'internal_error', `Something went wrong on our side. Quote ${requestId} when reporting it.`), requestId)
  }

  return function handle(request, clientAddress) {
    const start = performance.now()
    if (clientAddress !== undefined) clientAddresses.set(request, clientAddress)
    const declaredLength = request.headers.get('content-length')
    if (declaredLength !== null && Number(declaredLength) > MAX_BODY_BYTES) {
      return finish(request, start, earlyFailure(request, tooLarge(), newId('req')))
    }
    let answered: Response | Promise<Response>
    try {
      answered = app.fetch(request)
    } catch (error) {
      return finish(request, start, failed(request, error))
    }
    if (answered instanceof Promise) {
      return answered.then(
        (response) => finish(request, start, response),
        (error) => finish(request, start, failed(request, error)),
      )
    }
    return finish(request, start, answered)
  }
}
