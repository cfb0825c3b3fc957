import { describe, expect, test } from 'bun:test'
import { DatabaseUnavailableError, isDatabaseUnavailable, isUniqueViolation } from '../../../src/lib/db/errors.ts'

const driverError = (code: string) => Object.assign(new Error('driver'), { code })
// Drizzle wraps the driver's error: the code sits on the cause.
const wrapped = (cause: Error) => Object.assign(new Error('Failed query: …'), { cause })

describe('isDatabaseUnavailable', () => {
  test('connection failures and a server shutting down, starting up or full are; a query error is not', () => {
    for (const code of ['ECONNREFUSED', 'ECONNRESET', 'CONNECTION_CLOSED', 'CONNECTION_ENDED', 'CONNECTION_DESTROYED', 'CONNECT_TIMEOUT', '08006', '08001', '57P01', '57P02', '57P03', '53300']) {
      expect(isDatabaseUnavailable(driverError(code))).toBe(true)
      expect(isDatabaseUnavailable(wrapped(driverError(code)))).toBe(true)
    }
    for (const code of ['23505', '42P01', '40001', '57014']) expect(isDatabaseUnavailable(wrapped(driverError(code)))).toBe(false)
    expect(isDatabaseUnavailable(new Error('plain'))).toBe(false)
    expect(isDatabaseUnavailable(undefined)).toBe(false)
    expect(isUniqueViolation(wrapped(driverError('23505')))).toBe(true)
  })

  test("a query refused while the database is away is, and so is a failure wrapped in Elysia's ParseError (code 'PARSE', itself five capitals)", () => {
    expect(isDatabaseUnavailable(wrapped(new DatabaseUnavailableError()))).toBe(true)
    const parseError = (cause: Error) => Object.assign(new Error('Bad Request', { cause }), { code: 'PARSE' })
    expect(isDatabaseUnavailable(parseError(wrapped(driverError('57P01'))))).toBe(true)
    expect(isDatabaseUnavailable(parseError(wrapped(driverError('ECONNREFUSED'))))).toBe(true)
    expect(isDatabaseUnavailable(parseError(wrapped(driverError('42P01'))))).toBe(false)
    expect(isUniqueViolation(parseError(wrapped(driverError('23505'))))).toBe(true)
  })
})
