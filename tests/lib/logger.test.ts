import { expect, test } from 'bun:test'
import { createLogger, redactedPath } from '../../src/lib/logger.ts'

test('credential query parameters are redacted, others kept', () => {
  expect(redactedPath('http://h/v0/account?key=sk_live_abc')).toBe('/v0/account?key=[REDACTED]')
  expect(redactedPath('http://h/v0/x?limit=5&key=sk&KEY=y&code=c#frag')).toBe('/v0/x?limit=5&key=[REDACTED]&KEY=[REDACTED]&code=[REDACTED]#frag')
  expect(redactedPath('http://h/v0/x?monkey=1')).toBe('/v0/x?monkey=1')
  expect(redactedPath('http://h')).toBe('/')
})

test('one JSON object per line, filtered by level', () => {
  const lines: string[] = []
  const logger = createLogger('warn', (line) => lines.push(line))
  logger.info('hidden')
  logger.warn('shown', { n: 1 })
  expect(lines).toHaveLength(1)
  expect(JSON.parse(lines[0]!)).toMatchObject({ level: 'warn', msg: 'shown', n: 1, time: expect.any(String) })
})
