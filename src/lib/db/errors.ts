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

function sqlState(error: unknown): string | undefined {
  return errorCodes(error).find((code) => /^[0-9A-Z]{5}$/.test(code))
}

// postgres-js's own codes for a connection that failed or went away, and the socket's.
const CONNECTION_CODES = new Set(['CONNECTION_CLOSED', 'CONNECTION_ENDED', 'CONNECTION_DESTROYED', 'CONNECT_TIMEOUT', 'ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH'])

/**
 * The database is down, restarting or unreachable: nothing the request did wrong, and worth
 * retrying shortly. SQLSTATE class 08 (connection exception), 57P01–57P03 (the server is
 * shutting down, crashed, or starting up), 53300 (too many connections), or a connection error.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  const state = sqlState(error)
  if (state !== undefined) return state.startsWith('08') || state === '57P01' || state === '57P02' || state === '57P03' || state === '53300'
  return errorCodes(error).some((code) => CONNECTION_CODES.has(code))
}

export const isUniqueViolation = (error: unknown) => sqlState(error) === '23505'
export const isForeignKeyViolation = (error: unknown) => sqlState(error) === '23503'
