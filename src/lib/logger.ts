import type { LogLevel } from './config.ts'

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
    const head = `{"time":"${timestamp()}","level":"${lineLevel}","msg":${JSON.stringify(msg)}`
    const rest = fields ? JSON.stringify(fields) : '{}'
    output.write(rest.length > 2 ? `${head},${rest.slice(1)}` : `${head}}`, RANK[lineLevel] >= RANK.warn)
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

const SECRET_QUERY_PARAMS = /([?&](?:key|code|code_verifier|refresh_token|access_token|id_token)=)[^&#]*/gi

/** The path and query of a URL with every credential-bearing parameter replaced. */
export function redactedPath(url: string): string {
  const start = url.indexOf('/', url.indexOf('//') + 2)
  const path = start === -1 ? '/' : url.slice(start)
  return path.replace(SECRET_QUERY_PARAMS, '$1[REDACTED]')
}
