import { expect, test } from 'bun:test'
import { describeHookHealth } from '../../src/stats/summary.ts'
import type { HookStats } from '../../src/stats/service.ts'

const none = { timeout: 0, connection: 0, refused: 0, redirect: 0, http_4xx: 0, http_5xx: 0, unroutable: 0, nacked: 0, denied: 0, other: 0 }
const bucket = (start: string, attempts: number, failed: number, failures = none) => ({
  start, attempts, succeeded: attempts - failed, failed, failures, latency_ms: attempts ? { p50: 40, p95: 90, p99: 300 } : null,
})
const stats = (buckets: HookStats['buckets'], pending = 0): HookStats => ({
  hook_id: 'hook_01jd3m9x2qk7r5v8w4y6z0abcd', interval: 'hour', since: '2026-11-26T00:00:00.000Z', until: '2026-11-26T03:00:00.000Z', pending,
  totals: {
    attempts: buckets.reduce((sum, b) => sum + b.attempts, 0),
    succeeded: buckets.reduce((sum, b) => sum + b.succeeded, 0),
    failed: buckets.reduce((sum, b) => sum + b.failed, 0),
    failures: { ...none, timeout: 7, http_5xx: 12 },
    latency_ms: { p50: 41, p95: 95, p99: 1200 },
  },
  buckets,
})

test('an open circuit, failures by reason most first, latency, the worst bucket and what is pending, in that order', () => {
  const summary = describeHookHealth(
    { status: 'active', circuit: { state: 'open', next_probe_at: '2026-11-26T02:59:00.000Z' } },
    stats([bucket('2026-11-26T00:00:00.000Z', 1000, 0), bucket('2026-11-26T01:00:00.000Z', 250, 19), bucket('2026-11-26T02:00:00.000Z', 0, 0)], 1),
  )
  expect(summary).toBe(
    'Its circuit is open: the receiver kept failing, and deliveries wait for a probe (next at 2026-11-26T02:59:00.000Z). ' +
      'From 2026-11-26T00:00:00.000Z to 2026-11-26T03:00:00.000Z: 1,250 attempts, 98.4 % succeeded (1,231), 19 failed. ' +
      'Failures: 12 answered 5xx, 7 timed out. Attempt duration: p50 41 ms, p95 95 ms, p99 1200 ms. ' +
      'Most failures in one hour: 19 of 250 in the one starting 2026-11-26T01:00:00.000Z. 1 delivery is pending now.',
  )
})

test('a disabled subscription says why; no attempts says so; 99.96 % is not rounded up to 100 %', () => {
  const disabled = describeHookHealth({ status: 'disabled', disabled_reason: 'The receiver answered 410 Gone.', circuit: { state: 'closed', next_probe_at: null } }, stats([bucket('2026-11-26T00:00:00.000Z', 0, 0)], 3))
  expect(disabled).toBe('The subscription is disabled: The receiver answered 410 Gone. From 2026-11-26T00:00:00.000Z to 2026-11-26T03:00:00.000Z: no delivery attempts. 3 deliveries are pending now.')
  const almost = describeHookHealth({ status: 'active', circuit: { state: 'closed', next_probe_at: null } }, stats([bucket('2026-11-26T00:00:00.000Z', 2500, 1)]))
  expect(almost).toContain('2,500 attempts, 99.9 % succeeded (2,499), 1 failed.')
})
