/** Drizzle wraps driver errors (DrizzleQueryError); the code sits on the cause. */
function errorCodes(error: unknown): string[] {
  const codes: string[] = []
  let current: unknown = error
  for (let depth = 0; current && depth < 4; depth++) {
    const code = (current as { code?: unknown }).code
    if (typeof code === 'string') codes.push(code)
    current = (current as { cause?: unknown }).cause
  }
  return codes
}

/**
 * Whether the error or one of its causes carries this SQLSTATE. Every code in the chain is
 * looked at, not the first five-character one: Elysia wraps a failure in a request's parse
 * phase (the auth macro's key lookup) in a ParseError whose code is 'PARSE'.
 */
const hasSqlState = (error: unknown, matches: (state: string) => boolean) =>
  errorCodes(error).some((code) => /^[0-9A-Z]{5}$/.test(code) && matches(code))

/** A query refused without reaching the pool: its database was found away and has not answered since (src/lib/db/client.ts). */
export class DatabaseUnavailableError extends Error {
  readonly code = 'DATABASE_UNAVAILABLE'
  constructor() {
    super('the database is unavailable: queries are refused until it answers again')
  }
}

// Ours (above), postgres-js's own codes for a connection that failed or went away, and the socket's.
const CONNECTION_CODES = new Set(['DATABASE_UNAVAILABLE', 'CONNECTION_CLOSED', 'CONNECTION_ENDED', 'CONNECTION_DESTROYED', 'CONNECT_TIMEOUT', 'ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH'])

/**
 * The database is down, restarting or unreachable: nothing the request did wrong, and worth
 * retrying shortly. SQLSTATE class 08 (connection exception), 57P01–57P03 (the server is
 * shutting down, crashed, or starting up), 53300 (too many connections), or a connection error.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  return (
    hasSqlState(error, (state) => state.startsWith('08') || state === '57P01' || state === '57P02' || state === '57P03' || state === '53300') ||
    errorCodes(error).some((code) => CONNECTION_CODES.has(code))
  )
}

export const isUniqueViolation = (error: unknown) => hasSqlState(error, (state) => state === '23505')
export const isForeignKeyViolation = (error: unknown) => hasSqlState(error, (state) => state === '23503')
