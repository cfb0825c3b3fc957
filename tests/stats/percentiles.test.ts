import { expect, setDefaultTimeout, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { startTestServer } from '../support/server.ts'
import { queryRows } from '../../src/lib/db/client.ts'
import { claimDueDeliveries, recordDeliveryAttempts } from '../../src/delivery/store.ts'
import { EXACT_UP_TO, HistogramSum, bucketValue, latencyIndex, parseHistogram, percentiles, type Counts, type Histogram } from '../../src/stats/histogram.ts'

setDefaultTimeout(60_000)

/** A histogram from a count map, as the rollups write it. */
function histogramOf(map: Counts): Histogram {
  const indexes = Object.keys(map).map(Number).sort((a, b) => a - b)
  return { indexes, counts: indexes.map((index) => map[index]!) }
}

// No worker: the test records attempts by hand, with the durations it chooses.
const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', API_RATE_LIMIT: '0' }, deliverWebhooks: false })
const db = server.database.handle.db

/** A seeded spread of durations from 0 ms to about 30 s, heavy at the fast end as real receivers are. */
function durations(count: number): number[] {
  let seed = 42
  const random = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31)
  return Array.from({ length: count }, () => Math.round(Math.exp(random() * random() * Math.log(30_000)) - 1))
}

test('p50, p95 and p99 are within 5 % of the exact ones computed from the attempt log, per bucket and in total, at every interval', async () => {
  const owner = await server.createAccountWithKey()
  const call = (method: string, path: string, body?: unknown) =>
    server.fetch(`/v0/account/${owner.accountId}${path}${path.includes('?') ? '&' : '?'}key=${owner.secret}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
  const hook = (await (await call('POST', '/hooks', { event: 'message.inbound', target_url: 'https://127.0.0.1:9/latency' })).json()) as { id: string }
  const EVENTS = 400
  for (let i = 0; i < EVENTS; i++) expect((await call('POST', '/sandbox/inbound', { from: '+447700900700', body: `event ${i}` })).status).toBe(201)
  const spread = durations(EVENTS)
  let recorded = 0
  while (recorded < EVENTS) {
    const { deliveries } = await claimDueDeliveries(db, {
      limit: 50, leaseMs: 60_000, allowances: {}, defaultAllowance: 50, maxPerHook: 64, accountAllowances: {}, defaultAccountAllowance: 1000, suspectAllowance: 1000,
    })
    expect(deliveries.length).toBeGreaterThan(0)
    await recordDeliveryAttempts(
      db,
      deliveries.map((delivery) => {
        const durationMs = spread[recorded++]!
        return {
          deliveryId: delivery.id, hookId: delivery.hookId, accountId: delivery.accountId, decision: { kind: 'delivered' as const },
          result: { ok: true, status: 200, durationMs, error: null, failure: null, responseSnippet: '', retryAfterSeconds: null },
        }
      }),
    )
  }

  type Exact = { bucket: string | null; n: number; p50: number; p95: number; p99: number }
  const exact = (unit: string | null) =>
    queryRows<Exact>(
      db,
      sql`select ${unit === null ? sql`null` : sql`date_trunc(${unit}, attempted_at, 'UTC')`} as bucket, count(*)::int as n,
            percentile_disc(0.5) within group (order by duration_ms) as p50,
            percentile_disc(0.95) within group (order by duration_ms) as p95,
            percentile_disc(0.99) within group (order by duration_ms) as p99
          from delivery_attempts where hook_id = ${hook.id} group by 1`,
    )
  const within5 = (got: { p50: number; p95: number; p99: number }, want: Exact) => {
    for (const p of ['p50', 'p95', 'p99'] as const) expect(Math.abs(got[p] - Number(want[p]))).toBeLessThanOrEqual(Math.max(1, Number(want[p]) * 0.05))
  }
  const [total] = await exact(null)
  expect(total!.n).toBe(EVENTS)
  const since = new Date(Date.now() - 86_400_000).toISOString()
  for (const interval of ['minute', 'hour', 'day']) {
    const stats = (await (await call('GET', `/hooks/${hook.id}/stats?interval=${interval}&since=${since}`)).json()) as any
    expect(stats.totals.attempts).toBe(EVENTS)
    within5(stats.totals.latency_ms, total!)
    for (const bucket of await exact(interval)) {
      const answered = stats.buckets.find((candidate: any) => Date.parse(candidate.start) === new Date(bucket.bucket!).getTime())
      expect(answered.attempts).toBe(bucket.n)
      within5(answered.latency_ms, bucket)
    }
    const account = (await (await call('GET', `/stats?interval=${interval}&since=${since}`)).json()) as any
    within5(account.totals.latency_ms, total!)
  }
})

test('a bucket stands for each duration it holds within 2.5 % (or the millisecond it is), and percentiles are read by nearest rank', () => {
  let worst = 0
  for (let ms = 0; ms <= 300_000; ms++) {
    const value = bucketValue(latencyIndex(ms))
    if (ms <= EXACT_UP_TO) expect(value).toBe(ms)
    else worst = Math.max(worst, Math.abs(value - ms) / ms)
  }
  expect(worst).toBeLessThanOrEqual(0.025)
  expect(worst).toBeGreaterThan(0.015)
  expect(percentiles(histogramOf({}))).toBeNull()
  // 100 attempts: 90 at 10 ms, 9 at 20 ms, 1 at 30 ms.
  expect(percentiles(histogramOf({ 10: 90, 20: 9, 30: 1 }))).toEqual({ p50: 10, p95: 20, p99: 20 })
  expect(percentiles(histogramOf({ 10: 90, 20: 8, 30: 2 }))).toEqual({ p50: 10, p95: 20, p99: 30 })
  // Histograms added together, as a range's totals are.
  const sum = new HistogramSum()
  sum.add(histogramOf({ 10: 45, 700: 2 }))
  sum.add(histogramOf({ 10: 45, 20: 8 }))
  expect(sum.percentiles()).toEqual({ p50: 10, p95: 20, p99: bucketValue(700) })
})

test('a histogram is read back from jsonb as PostgreSQL prints it, in bucket order whatever the order of its keys', async () => {
  const [row] = await queryRows<{ text: string }>(db, sql`select jsonb_build_object('120', 3, '7', 1, '99', 12, '1000', 2)::text as text`)
  expect(parseHistogram(row!.text)).toEqual({ indexes: [7, 99, 120, 1000], counts: [1, 12, 3, 2] })
  expect(parseHistogram('{"120": 3, "7": 1}')).toEqual({ indexes: [7, 120], counts: [1, 3] })
  expect(parseHistogram('{}')).toEqual({ indexes: [], counts: [] })
})
