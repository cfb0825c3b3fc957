import type { LogLevel } from './config.ts'

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 }

export type LogFields = Record<string, unknown>

export interface Logger {
  debug(msg: string, fields?: LogFields): void
  info(msg: string, fields?: LogFields): void
  warn(msg: string, fields?: LogFields): void
  error(msg: string, fields?: LogFields): void
}

/** One JSON object per line on stdout (or the given sink). */
export function createLogger(level: LogLevel, write: (line: string) => void = (line) => console.log(line)): Logger {
  const threshold = RANK[level]
  const emit = (lineLevel: Exclude<LogLevel, 'silent'>, msg: string, fields?: LogFields) => {
    if (RANK[lineLevel] < threshold) return
    write(JSON.stringify({ time: new Date().toISOString(), level: lineLevel, msg, ...fields }))
  }
  return {
    debug: (msg, fields) => emit('debug', msg, fields),
    info: (msg, fields) => emit('info', msg, fields),
    warn: (msg, fields) => emit('warn', msg, fields),
    error: (msg, fields) => emit('error', msg, fields),
  }
}

const SECRET_QUERY_PARAMS = /([?&](?:key|code|code_verifier|refresh_token|access_token|id_token)=)[^&#]*/gi

/** The path and query of a URL with every credential-bearing parameter replaced. */
export function redactedPath(url: string): string {
  const start = url.indexOf('/', url.indexOf('//') + 2)
  const path = start === -1 ? '/' : url.slice(start)
  return path.replace(SECRET_QUERY_PARAMS, '$1[REDACTED]')
}
