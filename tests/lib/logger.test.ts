import { expect, test } from 'bun:test'
import { batchedSink, createLogger, redactedPath } from '../../src/lib/logger.ts'

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

test('batched output: lines wait for the batch, urgent lines flush at once and keep their order', async () => {
  const chunks: string[] = []
  const logger = createLogger('info', batchedSink((chunk, done) => (chunks.push(chunk), done()), { maxDelayMs: 20 }))
  logger.info('one')
  logger.info('two')
  expect(chunks).toHaveLength(0)
  logger.error('three')
  expect(chunks).toHaveLength(1)
  expect(chunks[0]!.trimEnd().split('\n').map((line) => JSON.parse(line).msg)).toEqual(['one', 'two', 'three'])
  logger.info('four')
  await Bun.sleep(40)
  expect(chunks).toHaveLength(2)
  logger.info('five')
  await logger.flush()
  expect(chunks.join('').trimEnd().split('\n')).toHaveLength(5)
})

test('batched output: a large backlog is written without waiting for the timer', () => {
  const chunks: string[] = []
  const sink = batchedSink((chunk, done) => (chunks.push(chunk), done()), { maxDelayMs: 60_000, maxBytes: 100 })
  for (let i = 0; i < 10; i++) sink.write('x'.repeat(30), false)
  expect(chunks.length).toBeGreaterThanOrEqual(2)
})
