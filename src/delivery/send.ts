import type { FailureReason } from '../stats/failure-reasons.ts'
import { signatureHeader, type SigningKeys } from './signing.ts'
import { type Lookup, TargetRefused, type TargetRefusal, describeNetworkError, fetchPinned, isTimeout, readPrefix } from '../lib/security/outbound.ts'

export interface WebhookRequest {
  url: string
  /** The event id: `webhook-id`, stable across retries so consumers can deduplicate. */
  id: string
  /** The stored body bytes, sent and signed as they are. */
  body: string
  /** The subscription's signing keys; during a rotation both sign the attempt. */
  keys: SigningKeys
  /** Headers besides the Standard Webhooks ones (an MCP event subscription's X-MCP-Subscription-Id). */
  headers?: Record<string, string>
}

export interface SendOptions {
  /** Covers resolving, connecting, TLS, the response and reading its first 4 KB. */
  timeoutMs: number
  /** Connecting alone: CONNECT_TIMEOUT_MS (src/lib/security/outbound.ts) when absent. */
  connectTimeoutMs?: number
  allowPrivate: boolean
  /** Extra trusted CAs (PEM, WEBHOOK_CA_FILE), added to the default ones rather than replacing them. */
  ca?: string
  now?: () => Date
  lookup?: Lookup
}

export interface AttemptResult {
  /** A 2xx within the timeout. */
  ok: boolean
  /** The response status; null when no response arrived. */
  status: number | null
  durationMs: number
  /** Why the attempt failed, short enough for the attempt log; null when ok. */
  error: string | null
  /** The kind of failure, counted in the health figures (docs/api.md#health-over-time); null when ok. */
  failure: FailureReason | null
  /** The first 4 KB of the response body, decoded as UTF-8. */
  responseSnippet: string
  /** From `Retry-After` on a 429 or 503, in seconds from now; the caller bounds it. */
  retryAfterSeconds: number | null
}

const SNIPPET_BYTES = 4096
const USER_AGENT = 'messaging-service-webhooks/0.1'

/**
 * One delivery attempt. Never throws for anything the target or the network does: every
 * outcome is an AttemptResult for the attempt log.
 *
 * The request goes out through the outbound guard (src/lib/security/outbound.ts): resolved here, every
 * address checked, the connection pinned to a checked one with TLS verified against the name,
 * redirects never followed.
 */
export async function sendWebhook(request: WebhookRequest, options: SendOptions): Promise<AttemptResult> {
  const started = performance.now()
  const failure = (error: string, reason: FailureReason, status: number | null = null): AttemptResult => ({
    ok: false,
    status,
    durationMs: Math.round(performance.now() - started),
    error,
    failure: reason,
    responseSnippet: '',
    retryAfterSeconds: null,
  })
  const signal = AbortSignal.timeout(options.timeoutMs)
  const now = options.now?.() ?? new Date()

  let url: URL
  try {
    url = new URL(request.url)
  } catch {
    return failure('invalid target URL', 'other')
  }
  const timestamp = Math.floor(now.getTime() / 1000)
  let signed: Record<string, string>
  try {
    signed = await standardWebhookHeaders(request, timestamp)
  } catch {
    return failure('the attempt could not be signed', 'other')
  }
  const headers: Record<string, string> = { ...request.headers, 'content-type': 'application/json', 'user-agent': USER_AGENT, ...signed }
  let response: Response
  try {
    response = await fetchPinned(url, { method: 'POST', headers, body: request.body }, options, signal)
  } catch (error) {
    if (error instanceof TargetRefused) return failure(error.reason === 'runtime' ? error.message : `refused (${error.reason}): ${error.message}`, refusalFailure(error.reason))
    return failure(describeNetworkError(error, options.timeoutMs), networkFailure(error))
  }

  let responseSnippet: string
  try {
    responseSnippet = await readPrefix(response, SNIPPET_BYTES)
  } catch (error) {
    return failure(describeNetworkError(error, options.timeoutMs), networkFailure(error), response.status)
  }
  const ok = response.status >= 200 && response.status < 300
  return {
    ok,
    status: response.status,
    durationMs: Math.round(performance.now() - started),
    error: ok ? null : describeStatus(response),
    failure: ok ? null : statusFailure(response.status),
    responseSnippet,
    retryAfterSeconds: response.status === 429 || response.status === 503 ? parseRetryAfter(response.headers.get('retry-after'), now) : null,
  }
}

/**
 * The Standard Webhooks headers of one attempt, whatever carries them (an HTTP request, an AMQP
 * message's headers, a NATS message's headers: docs/webhooks.md#destinations).
 */
export async function standardWebhookHeaders(request: Pick<WebhookRequest, 'id' | 'body' | 'keys'>, timestampSeconds: number): Promise<Record<string, string>> {
  return {
    'webhook-id': request.id,
    'webhook-timestamp': String(timestampSeconds),
    'webhook-signature': await signatureHeader(request.keys, request.id, timestampSeconds, request.body),
  }
}

/** `Retry-After` as delay-seconds or an HTTP date (RFC 9110 §10.2.3); null when absent or malformed. */
export function parseRetryAfter(value: string | null, now: Date): number | null {
  if (value === null) return null
  const trimmed = value.trim()
  if (/^\d+$/.test(trimmed)) return Number(trimmed)
  // All three HTTP-date forms open with a day name; without that check Date.parse reads '-5' as a year.
  if (!/^[A-Za-z]{3}/.test(trimmed)) return null
  const date = Date.parse(trimmed)
  if (Number.isNaN(date)) return null
  return Math.max(0, Math.ceil((date - now.getTime()) / 1000))
}

/** A name that does not resolve is a connection that could not be made; the others are the address guard's refusals. */
function refusalFailure(reason: TargetRefusal): FailureReason {
  if (reason === 'unresolvable') return 'connection'
  return reason === 'runtime' ? 'other' : 'refused'
}

/** No answer within the attempt's timeout, or none at all: a connect timeout is a connection that was never made. */
function networkFailure(error: unknown): FailureReason {
  return isTimeout(error) ? 'timeout' : 'connection'
}

function statusFailure(status: number): FailureReason {
  if (status >= 500) return 'http_5xx'
  if (status >= 400) return 'http_4xx'
  if (status >= 300) return 'redirect'
  return 'other'
}

function describeStatus(response: Response): string {
  if (response.status >= 300 && response.status < 400) {
    const location = response.headers.get('location')
    return `redirect ${response.status} not followed${location ? ` (to ${location.slice(0, 200)})` : ''}`
  }
  return `HTTP ${response.status}`
}
