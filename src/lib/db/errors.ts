/** Drizzle wraps driver errors (DrizzleQueryError); the SQLSTATE sits on the cause. */
function sqlState(error: unknown): string | undefined {
  let current: unknown = error
  for (let depth = 0; current && depth < 4; depth++) {
    const code = (current as { code?: unknown }).code
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code
    current = (current as { cause?: unknown }).cause
  }
  return undefined
}

export const isUniqueViolation = (error: unknown) => sqlState(error) === '23505'
export const isForeignKeyViolation = (error: unknown) => sqlState(error) === '23503'
