import { Elysia } from 'elysia'
import { ApiError, PROBLEM_CONTENT_TYPE, badRequest, internalError, problemBody, problemResponse, validationFailed, type FieldError } from './errors.ts'
import { newId } from './ids.ts'
import { redactedPath, type Logger } from './logger.ts'

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

const FORM_MEDIA_TYPE = 'application/x-www-form-urlencoded'

/** Form bodies taken by a feature's own parser (`parseFormBody`); any other form body is refused. */
const formBodiesTaken = new WeakSet<Request>()

/**
 * For a feature plugin whose endpoints also take form bodies (the OAuth token endpoints):
 * reads one within the size limit. A parameter sent twice is refused, never resolved by
 * picking one (RFC 6749 §3.2 asks this of OAuth; nothing else wants it either).
 */
export async function parseFormBody(request: Request): Promise<Record<string, string>> {
  formBodiesTaken.add(request)
  const form: Record<string, string> = {}
  for (const [name, value] of new URLSearchParams(await readLimitedText(request))) {
    if (Object.hasOwn(form, name)) throw badRequest('invalid_request', `The ${name} parameter is repeated.`)
    form[name] = value
  }
  return form
}

export const isFormContentType = (contentType: string | undefined | null) => contentType != null && mediaTypeOf(contentType) === FORM_MEDIA_TYPE

const unsupportedMediaType = () => new ApiError(415, 'unsupported_media_type', 'Send JSON bodies with Content-Type: application/json.')

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
 * Inside the app: JSON bodies within the size limit and one problem+json body for every
 * failure. Routes with a body still declare `parse: 'json'`: the OpenAPI document reads media
 * types from there, while the parser below (which runs first) does the parsing. A form body is
 * left to the feature plugins that parse one (`parseFormBody`); at any other route it is 415.
 */
export function httpFoundation(logger: Logger) {
  return new Elysia()
    .error({ ApiError })
    .onParse({ as: 'global' }, async ({ request, contentType }) => {
      const declaredLength = request.headers.get('content-length')
      if (declaredLength !== null && Number(declaredLength) > MAX_BODY_BYTES) throw tooLarge()
      if (!contentType) {
        const text = await readLimitedText(request)
        if (text.length === 0) return undefined
        throw unsupportedMediaType()
      }
      if (isFormContentType(contentType)) return undefined
      if (!isJsonContentType(contentType)) throw unsupportedMediaType()
      const text = await readLimitedText(request)
      try {
        return JSON.parse(text)
      } catch {
        throw badRequest('invalid_json', 'The request body is not valid JSON.')
      }
    })
    .onTransform({ as: 'global' }, ({ request, body }) => {
      if (body !== undefined && !formBodiesTaken.has(request) && isFormContentType(request.headers.get('content-type'))) throw unsupportedMediaType()
    })
    .onError({ as: 'global' }, ({ code, error, set, request }) => {
      // The request id is made here only for failures; requestHandler adds one to every other response.
      const requestId = newId('req')
      set.headers['x-request-id'] = requestId
      let apiError = toApiError(code, error, request)
      if (!apiError) {
        logger.error('unhandled error', {
          request_id: requestId,
          path: redactedPath(request.url),
          error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
          stack: error instanceof Error ? error.stack : undefined,
        })
        apiError = internalError(requestId)
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
 * Around the app: a request id on every response and one log line
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
    return problemResponse(internalError(requestId), requestId)
  }

  return function handle(request, clientAddress) {
    const start = performance.now()
    if (clientAddress !== undefined) clientAddresses.set(request, clientAddress)
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
