import { DrizzleQueryError } from 'drizzle-orm'

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const
export type LogLevel = (typeof LOG_LEVELS)[number]

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 }

export type LogFields = Record<string, unknown>

export interface Logger {
  debug(msg: string, fields?: LogFields): void
  info(msg: string, fields?: LogFields): void
  warn(msg: string, fields?: LogFields): void
  error(msg: string, fields?: LogFields): void
  /** Lets hot paths skip building fields for a line that would be dropped. */
  isEnabled(level: Exclude<LogLevel, 'silent'>): boolean
  /** Writes any buffered lines; resolves once the output has taken them. */
  flush(): Promise<void>
}

/** Where lines go: `urgent` lines (warnings, errors) must not wait in a buffer. */
export interface LogSink {
  write(line: string, urgent: boolean): void
  flush(): Promise<void>
}

/**
 * Lines joined and written at most every `maxDelayMs` (or sooner when `maxBytes` pile up):
 * one write per batch instead of one per request. Urgent lines flush at once, behind what
 * was buffered, so order is kept.
 */
export function batchedSink(
  write: (chunk: string, done: () => void) => void,
  options: { maxDelayMs?: number; maxBytes?: number } = {},
): LogSink {
  const { maxDelayMs = 50, maxBytes = 64 * 1024 } = options
  let pending = ''
  let bytes = 0
  let timer: ReturnType<typeof setTimeout> | undefined
  let lastWrite: Promise<void> = Promise.resolve()

  const flushNow = () => {
    clearTimeout(timer)
    timer = undefined
    if (pending.length === 0) return lastWrite
    const chunk = pending
    pending = ''
    bytes = 0
    lastWrite = new Promise((resolve) => write(chunk, resolve))
    return lastWrite
  }

  return {
    write(line, urgent) {
      pending += `${line}\n`
      bytes += line.length + 1
      if (urgent || bytes >= maxBytes) void flushNow()
      else timer ??= setTimeout(flushNow, maxDelayMs)
    },
    flush: flushNow,
  }
}

export const stdoutSink = (): LogSink => batchedSink((chunk, done) => process.stdout.write(chunk, () => done()))

// Under load many lines share a millisecond: format its timestamp once.
let stampedAt = -1
let stamp = ''
function timestamp(): string {
  const now = Date.now()
  if (now !== stampedAt) {
    stampedAt = now
    stamp = new Date(now).toISOString()
  }
  return stamp
}

/** One JSON object per line. */
export function createLogger(level: LogLevel, sink: LogSink | ((line: string) => void) = stdoutSink()): Logger {
  const threshold = RANK[level]
  const output: LogSink = typeof sink === 'function' ? { write: (line) => sink(line), flush: async () => {} } : sink
  const emit = (lineLevel: Exclude<LogLevel, 'silent'>, msg: string, fields?: LogFields) => {
    if (RANK[lineLevel] < threshold) return
    const urgent = RANK[lineLevel] >= RANK.warn
    const head = `{"time":"${timestamp()}","level":"${lineLevel}","msg":${JSON.stringify(msg)}`
    const rest = fields ? JSON.stringify(urgent ? scrubbed(fields) : fields) : '{}'
    output.write(rest.length > 2 ? `${head},${rest.slice(1)}` : `${head}}`, urgent)
  }
  return {
    debug: (msg, fields) => emit('debug', msg, fields),
    info: (msg, fields) => emit('info', msg, fields),
    warn: (msg, fields) => emit('warn', msg, fields),
    error: (msg, fields) => emit('error', msg, fields),
    isEnabled: (lineLevel) => RANK[lineLevel] >= threshold,
    flush: () => output.flush(),
  }
}

// What a logged URL, header or error message must never show. The request line (every
// request, at `info`) is built from redactedPath; warnings and errors carry text the service
// did not write (driver and runtime messages), so every string in their fields is scrubbed.

/** Parameters that carry credentials, matched however the name is written. */
const SECRET_PARAMETERS = ['key', 'code', 'code_verifier', 'refresh_token', 'access_token', 'id_token', 'token', 'client_secret', 'password']

/** A hex digit pair, either case: `6b` → `6[bB]`. */
const hexPattern = (char: string) => char.charCodeAt(0).toString(16).replace(/[a-f]/g, (digit) => `[${digit}${digit.toUpperCase()}]`)
/**
 * A parameter name, case-insensitive, each of its characters perhaps percent-encoded: servers
 * decode names before reading them, so `%6bey` is `key`. (Without the regex's `i` flag, which
 * makes every other rule slower.)
 */
const namePattern = (name: string) =>
  [...name]
    .map((char) =>
      /[a-z]/.test(char)
        ? `(?:[${char}${char.toUpperCase()}]|%${hexPattern(char)}|%${hexPattern(char.toUpperCase())})`
        : `(?:\\${char}|%${hexPattern(char)})`,
    )
    .join('')

const BASE64URL = 'A-Za-z0-9_\\-'
const SECRETS = new RegExp(
  [
    // A credential parameter after `?`, `&`, `;` (so `&amp;key=` too) or `#`, its name decorated
    // or not (`key[]`, `key[0]`, `key%5B%5D`): its value up to the next separator.
    `([?&;#](?:${SECRET_PARAMETERS.map(namePattern).join('|')})(?:\\[[^\\]&;#=]*\\]|%5[bB][^&;#=]*?%5[dD])*=)[^&;#]*`,
    // An API key, even cut short (its first 12 characters are shown to the account anyway).
    `sk_live_[${BASE64URL}]*`,
    // A webhook signing secret: standard base64, perhaps percent-encoded; with whatever run of
    // base64url characters it is glued to, which the last rule would otherwise take alone.
    `(?<![${BASE64URL}])[${BASE64URL}]*?whsec_(?:[A-Za-z0-9+/=]|%2[bBfF]|%3[dD])+`,
    // A JWT: a base64url JSON object header (`eyJ…`), a payload and a signature (perhaps empty).
    `eyJ[${BASE64URL}]{8,}\\.[${BASE64URL}]+\\.[${BASE64URL}]*`,
    // 24 random bytes or more in base64url: authorization codes (43 characters, no prefix),
    // refresh tokens (rt_…), API keys, PKCE verifiers. Prefixed ids (acc_…, 30 characters) are shorter.
    `(?<![${BASE64URL}])[${BASE64URL}]{32,}`,
  ].join('|'),
  'g',
)

/** `text` with every credential parameter's value and every secret-shaped run replaced by [REDACTED]. */
export function redactSecrets(text: string): string {
  return text.replace(SECRETS, '$1[REDACTED]')
}

/**
 * Whether a path without a query could hold one of our secrets whole. Each is a run of 32 or
 * more base64url characters, which a path segment of 32 characters or fewer cannot hold, or a
 * webhook secret (whose standard base64 may itself hold `/`).
 */
function mayHoldSecret(path: string): boolean {
  for (let from = 0; ; ) {
    const next = path.indexOf('/', from + 1)
    if ((next === -1 ? path.length : next) - from > 32) return true
    if (next === -1) return path.includes('whsec_')
    from = next
  }
}

/** The path and query of a URL with every credential parameter and secret-shaped value replaced. */
export function redactedPath(url: string): string {
  const start = url.indexOf('/', url.indexOf('//') + 2)
  const path = start === -1 ? '/' : url.slice(start)
  // Most paths are short segments with no query: a scan of their slashes, nothing allocated.
  if (!path.includes('?') && !mayHoldSecret(path)) return path
  return redactSecrets(path)
}

/** The parameters that DrizzleQueryError writes into its message (and so into its stack). */
const QUERY_PARAMETERS = /(\nparams: )[^]*?(?=\n {4}at |$)/g

function scrubText(text: string): string {
  return redactSecrets(text.replace(QUERY_PARAMETERS, '$1[REDACTED]'))
}

/** A span's ids (src/lib/runtime/tracing.ts): 32 and 16 hex digits, which the secret-shaped rule would take for a secret. */
const TRACE_FIELDS = new Set(['trace_id', 'span_id'])

function scrubbed(fields: LogFields): LogFields {
  const clean: LogFields = {}
  for (const name in fields) {
    const value = fields[name]
    if (TRACE_FIELDS.has(name) && typeof value === 'string' && /^[0-9a-f]{16,32}$/.test(value)) clean[name] = value
    else clean[name] = typeof value === 'string' ? scrubText(value) : value instanceof Error ? describeError(value).error : value
  }
  return clean
}

export interface ErrorFields {
  error: string
  /** The SQLSTATE of a failed query (`42P01`: no such table). */
  sql_state?: string
  /** The failed query's text, with its placeholders ($1) and never its parameters. */
  query?: string
  stack?: string
}

/**
 * An error for a log line, without secrets: a failed query is described by the driver's
 * message, its SQLSTATE and its SQL text, never by its parameters (which Drizzle writes into
 * its own message and stack); any secret-shaped value left is redacted.
 */
export function describeError(error: unknown): ErrorFields {
  if (!(error instanceof Error)) return { error: scrubText(String(error)) }
  let message: string
  const fields: Omit<ErrorFields, 'error'> = {}
  if (error instanceof DrizzleQueryError) {
    const cause = error.cause
    message = `DrizzleQueryError: ${cause instanceof Error ? cause.message : 'the query failed'}`
    const code = (cause as { code?: unknown } | undefined)?.code
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) fields.sql_state = code
    fields.query = redactSecrets(error.query)
  } else {
    message = `${error.name}: ${error.message}`
  }
  // The stack starts with the message: keep only its frames, under the message written here.
  const frames = error.stack?.indexOf('\n    at ') ?? -1
  if (frames !== -1) fields.stack = scrubText(`${message}${error.stack!.slice(frames)}`)
  return { error: scrubText(message), ...fields }
}
