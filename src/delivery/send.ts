import { getCACertificates } from 'node:tls'
import { Webhook } from 'standardwebhooks'
import { type Lookup, TargetRefused, resolveTarget } from './ssrf.ts'

export interface WebhookRequest {
  url: string
  /** The event id: `webhook-id`, stable across retries so consumers can deduplicate. */
  id: string
  /** The stored body bytes, sent and signed as they are. */
  body: string
  /** `whsec_…` secrets; more than one while a secret is being rotated, each signs the attempt. */
  secrets: string[]
}

export interface SendOptions {
  /** Covers resolving, connecting, TLS, the response and reading its first 4 KB. */
  timeoutMs: number
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
  /** The first 4 KB of the response body, decoded as UTF-8. */
  responseSnippet: string
  /** From `Retry-After` on a 429 or 503, in seconds from now; the caller bounds it. */
  retryAfterSeconds: number | null
}

const SNIPPET_BYTES = 4096

// Bun parses the CAs given to fetch on every request: one PEM string of them all costs about
// 110 µs of CPU per attempt on this machine, an array of the ~150 default ones about 280 µs
// (without the option, 40). NODE_EXTRA_CA_CERTS, read once at start, is the cheap way to trust a
// private CA (docs/webhooks.md); WEBHOOK_CA_FILE works without a restart of the runtime's trust.
let trustedFor: { extra: string; pem: string } | undefined
function trustedWith(extra: string): string {
  if (trustedFor?.extra !== extra) trustedFor = { extra, pem: [...getCACertificates('default'), extra].join('\n') }
  return trustedFor.pem
}
const USER_AGENT = 'messaging-service-webhooks/0.1'
/**
 * Pinning an https target by name needs fetch's `tls.serverName` (Bun). Deno's fetch ignores
 * that option and would check the certificate against the address, so under Deno such an
 * attempt fails with a plain reason instead of a TLS error, and never goes out unpinned.
 */
const RUNTIME_PINS_TLS = typeof (globalThis as { Bun?: unknown }).Bun !== 'undefined'
/** Errors raised before a connection exists, after which the next checked address is worth a try. */
const CONNECT_ERRORS = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL'])

/**
 * One delivery attempt. Never throws for anything the target or the network does: every
 * outcome is an AttemptResult for the attempt log.
 *
 * Pinning. Bun's fetch resolves host names itself, so fetching the target URL would connect to
 * whatever a second lookup returns (DNS rebinding past the SSRF check). Instead the request goes
 * to `https://<checked address>:<port>/…` with `Host` set to the target's host and
 * `tls.serverName` set to its name: Bun sends that name as SNI and verifies the certificate
 * against it, not against the address, and keys its keep-alive pool by it too (checked on Bun
 * 1.4.5: a wrong serverName fails with ERR_TLS_CERT_ALTNAME_INVALID, an SNI-selected certificate
 * is served, two names on one address get separate connections). Staying on fetch keeps its
 * connection reuse, about ten times the throughput of a connection per request.
 */
export async function sendWebhook(request: WebhookRequest, options: SendOptions): Promise<AttemptResult> {
  const started = performance.now()
  const failure = (error: string, status: number | null = null): AttemptResult => ({
    ok: false,
    status,
    durationMs: Math.round(performance.now() - started),
    error,
    responseSnippet: '',
    retryAfterSeconds: null,
  })
  const signal = AbortSignal.timeout(options.timeoutMs)
  const now = options.now?.() ?? new Date()

  let url: URL
  try {
    url = new URL(request.url)
  } catch {
    return failure('invalid target URL')
  }
  let target
  try {
    target = await raceTimeout(resolveTarget(url, { allowPrivate: options.allowPrivate, lookup: options.lookup }), signal)
  } catch (error) {
    if (error instanceof TargetRefused) return failure(`refused (${error.reason}): ${error.message}`)
    return failure(describeNetworkError(error, options.timeoutMs))
  }

  if (!RUNTIME_PINS_TLS && url.protocol === 'https:' && !target.isAddressLiteral) {
    return failure('this runtime cannot verify TLS for a name while connecting to its checked address; the Bun entry (src/main.ts) sends https webhooks to names')
  }

  const headers = {
    host: url.host,
    'content-type': 'application/json',
    'user-agent': USER_AGENT,
    'webhook-id': request.id,
    'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
    'webhook-signature': request.secrets.map((secret) => new Webhook(secret).sign(request.id, now, request.body)).join(' '),
  }
  const tls = {
    // An address literal is verified against itself; a name must be verified (and sent as SNI) as the name.
    serverName: target.isAddressLiteral ? undefined : target.hostname,
    ca: options.ca === undefined ? undefined : trustedWith(options.ca),
  }

  let response: Response | undefined
  let lastError: unknown
  for (const address of target.addresses) {
    const pinned = new URL(url)
    pinned.hostname = address.includes(':') ? `[${address}]` : address
    pinned.hash = ''
    try {
      // proxy: false because a proxy would connect on its own terms, not to the checked address.
      response = await fetch(pinned, { method: 'POST', headers, body: request.body, redirect: 'manual', signal, tls, proxy: false })
      break
    } catch (error) {
      lastError = error
      if (!CONNECT_ERRORS.has(errorCode(error) ?? '')) break
    }
  }
  if (!response) return failure(describeNetworkError(lastError, options.timeoutMs))

  let responseSnippet: string
  try {
    responseSnippet = await readSnippet(response)
  } catch (error) {
    return failure(describeNetworkError(error, options.timeoutMs), response.status)
  }
  const ok = response.status >= 200 && response.status < 300
  return {
    ok,
    status: response.status,
    durationMs: Math.round(performance.now() - started),
    error: ok ? null : describeStatus(response),
    responseSnippet,
    retryAfterSeconds: response.status === 429 || response.status === 503 ? parseRetryAfter(response.headers.get('retry-after'), now) : null,
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

/** The DNS lookup does not take a signal: give up waiting for it when the attempt times out. */
function raceTimeout<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason)
    if (signal.aborted) return onAbort()
    signal.addEventListener('abort', onAbort, { once: true })
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort))
  })
}

/** Reads at most SNIPPET_BYTES and drops the rest unread; a character cut at the limit is left out. */
async function readSnippet(response: Response): Promise<string> {
  if (!response.body) return ''
  const reader = response.body.getReader()
  const decoder = new TextDecoder()
  let text = ''
  let remaining = SNIPPET_BYTES
  try {
    while (remaining > 0) {
      const { done, value } = await reader.read()
      if (done) break
      const chunk = value.subarray(0, remaining)
      remaining -= chunk.length
      // stream: true holds back a trailing partial UTF-8 sequence instead of emitting U+FFFD.
      text += decoder.decode(chunk, { stream: true })
    }
  } finally {
    await reader.cancel().catch(() => {})
  }
  return text
}

function describeStatus(response: Response): string {
  if (response.status >= 300 && response.status < 400) {
    const location = response.headers.get('location')
    return `redirect ${response.status} not followed${location ? ` (to ${location.slice(0, 200)})` : ''}`
  }
  return `HTTP ${response.status}`
}

function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'string' ? code : undefined
}

function describeNetworkError(error: unknown, timeoutMs: number): string {
  const name = (error as { name?: unknown } | null)?.name
  if (name === 'TimeoutError') return `timed out after ${timeoutMs} ms`
  const code = errorCode(error)
  if (code) return `connection failed: ${code}`
  return `connection failed: ${error instanceof Error ? error.message.slice(0, 200) : String(error)}`
}
