import { expect, test } from 'bun:test'
import { MAX_RETRY_AFTER_MS, decideAfterAttempt } from '../../src/delivery/policy.ts'

const schedule = [0, 5_000, 300_000]
const failed = (status: number | null, retryAfterSeconds: number | null = null) => ({ ok: false, status, retryAfterSeconds })

test('success is delivered; 410 disables the subscription', () => {
  expect(decideAfterAttempt({ ok: true, status: 200, retryAfterSeconds: null }, 1, schedule)).toEqual({ kind: 'delivered' })
  expect(decideAfterAttempt(failed(410), 1, schedule).kind).toBe('disable_hook')
})

test("an MCP event subscription's 410 or 413 refuses that delivery only; a REST subscription's 413 is retried", () => {
  const agent = { eventSubscription: true }
  expect(decideAfterAttempt(failed(410), 1, schedule, Math.random, agent)).toEqual({ kind: 'refused' })
  expect(decideAfterAttempt(failed(413), 1, schedule, Math.random, agent)).toEqual({ kind: 'refused' })
  expect(decideAfterAttempt(failed(500), 1, schedule, () => 0.5, agent)).toEqual({ kind: 'retry', delayMs: 5_000 })
  expect(decideAfterAttempt(failed(413), 1, schedule, () => 0.5).kind).toBe('retry')
})

test('failures follow the schedule with ±20 % jitter, then stop', () => {
  expect(decideAfterAttempt(failed(500), 1, schedule, () => 0.5)).toEqual({ kind: 'retry', delayMs: 5_000 })
  expect(decideAfterAttempt(failed(null), 2, schedule, () => 0)).toEqual({ kind: 'retry', delayMs: 240_000 })
  expect(decideAfterAttempt(failed(302), 2, schedule, () => 1)).toEqual({ kind: 'retry', delayMs: 360_000 })
  expect(decideAfterAttempt(failed(500), 3, schedule)).toEqual({ kind: 'exhausted' })
})

test('Retry-After on 429 and 503 is honoured when longer than the schedule, up to an hour', () => {
  expect(decideAfterAttempt(failed(429, 60), 1, schedule, () => 0.5)).toEqual({ kind: 'retry', delayMs: 60_000 })
  expect(decideAfterAttempt(failed(503, 1), 1, schedule, () => 0.5)).toEqual({ kind: 'retry', delayMs: 5_000 })
  expect(decideAfterAttempt(failed(503, 86_400), 1, schedule, () => 0.5)).toEqual({ kind: 'retry', delayMs: MAX_RETRY_AFTER_MS })
  expect(decideAfterAttempt(failed(500, 60), 1, schedule, () => 0.5)).toEqual({ kind: 'retry', delayMs: 5_000 })
})
