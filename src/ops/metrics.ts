import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type Metric, type MetricValueWithName } from 'prom-client'
import { createRouteMatcher } from '../lib/http/route-patterns.ts'
import { sql } from 'drizzle-orm'
import { queryRows, type DatabaseHandle } from '../lib/db/client.ts'
import type { FetchHandler } from '../lib/http/foundation.ts'
import { OUTCOMES, type DeliveryMetrics } from '../delivery/outcomes.ts'

// Prometheus metrics of one process (docs/operations.md#metrics). prom-client writes the text
// format; the HTTP series are accumulated here in plain numbers and handed to it at scrape
// time, because its own counters hash their label values into a string on every increment,
// which the request path (benchmarked against bare Bun.serve) should not pay.

/** Request duration buckets, seconds. */
export const DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] as const
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const
const OTHER_METHOD = METHODS.length
const methodLabel = (index: number) => METHODS[index] ?? 'other'
/** The route label of a path that matched no route: raw paths would make a series per URL. */
export const UNMATCHED_ROUTE = 'unmatched'


interface RouteStats {
  route: string
  /** Cumulative counts are computed at scrape; these are per bucket, the last one +Inf. */
  buckets: Float64Array
  sum: number
  count: number
  /** method index * 1000 + status → requests: a number key, no string per request. */
  requests: Map<number, number>
}

export interface HttpMetrics {
  /** Wraps the instance's handler: counts every request by method, route and status, and times it. */
  measure(handler: FetchHandler): FetchHandler
  /** Records one request (exported for tests). */
  record(method: string, url: string, status: number, seconds: number): void
}

/** Each route pattern's counters, found per request by src/lib/http/route-patterns.ts. */
function routeTable(routes: readonly { method: string; path: string }[]) {
  const all = new Map<string, RouteStats>()
  const stats = (route: string) => {
    let found = all.get(route)
    if (!found) {
      found = { route, buckets: new Float64Array(DURATION_BUCKETS.length + 1), sum: 0, count: 0, requests: new Map() }
      all.set(route, found)
    }
    return found
  }
  const unmatched = stats(UNMATCHED_ROUTE)
  const match = createRouteMatcher(routes, stats)
  const find = (method: string, url: string): RouteStats => match(method, url) ?? unmatched
  return { find, all }
}

/**
 * A metric in prom-client's Metric shape, read at each scrape: Registry#getMetricsAsString asks
 * `get()` for the name, help and type again along with the values, and formats and escapes them.
 */
const scrapedMetric = (name: string, help: string, type: 'counter' | 'histogram', values: () => MetricValueWithName<string>[]) => ({
  name,
  help,
  type,
  get: async () => ({ name, help, type, aggregator: 'sum', values: values() }),
})

function createHttpMetrics(routes: readonly { method: string; path: string }[]) {
  const table = routeTable(routes)
  const record = (method: string, url: string, status: number, seconds: number) => {
    const stats = table.find(method, url)
    let methodIndex = METHODS.indexOf(method as (typeof METHODS)[number])
    if (methodIndex < 0) methodIndex = OTHER_METHOD
    const key = methodIndex * 1000 + status
    stats.requests.set(key, (stats.requests.get(key) ?? 0) + 1)
    let bucket = 0
    while (bucket < DURATION_BUCKETS.length && seconds > DURATION_BUCKETS[bucket]!) bucket++
    stats.buckets[bucket]!++
    stats.sum += seconds
    stats.count++
  }
  const http: HttpMetrics = {
    record,
    measure(handler) {
      return (request, clientAddress) => {
        const start = performance.now()
        const answered = handler(request, clientAddress)
        if (answered instanceof Promise) {
          return answered.then((response) => {
            record(request.method, request.url, response.status, (performance.now() - start) / 1000)
            return response
          })
        }
        record(request.method, request.url, answered.status, (performance.now() - start) / 1000)
        return answered
      }
    },
  }
  const requestsMetric = scrapedMetric('messaging_http_requests_total', 'HTTP requests answered, by method, route pattern and status.', 'counter', () =>
    [...table.all.values()].flatMap((stats) =>
      [...stats.requests].map(([key, value]) => ({
        labels: { method: methodLabel(Math.floor(key / 1000)), route: stats.route, status: String(key % 1000) },
        value,
      })),
    ),
  )
  const durationMetric = scrapedMetric(
    'messaging_http_request_duration_seconds',
    'Time from receiving a request to its response being ready (the body may still stream), by route pattern.',
    'histogram',
    () =>
      [...table.all.values()]
        .filter((stats) => stats.count > 0)
        .flatMap((stats) => {
          let cumulative = 0
          const buckets = DURATION_BUCKETS.map((le, index) => {
            cumulative += stats.buckets[index]!
            return { metricName: 'messaging_http_request_duration_seconds_bucket', labels: { le, route: stats.route }, value: cumulative }
          })
          return [
            ...buckets,
            { metricName: 'messaging_http_request_duration_seconds_bucket', labels: { le: '+Inf', route: stats.route }, value: stats.count },
            { metricName: 'messaging_http_request_duration_seconds_sum', labels: { route: stats.route }, value: stats.sum },
            { metricName: 'messaging_http_request_duration_seconds_count', labels: { route: stats.route }, value: stats.count },
          ]
        }),
  )
  return { http, requestsMetric, durationMetric }
}

export interface Metrics {
  http: HttpMetrics
  delivery: DeliveryMetrics
  contentType: string
  /** The Prometheus text of every series; reads the delivery queue from the database first. */
  render(): Promise<string>
}

/** How long a scrape waits for the queue and connection queries before answering without fresh values. */
export const SCRAPE_QUERY_TIMEOUT_MS = 1000

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timedOut = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms)))
  return Promise.race([promise, timedOut]).finally(() => clearTimeout(timer))
}

export function createMetrics(options: {
  handle: DatabaseHandle
  routes: readonly { method: string; path: string }[]
  /** PostgreSQL only: the size of each of this process's pools. */
  pools?: Record<string, number>
  queryTimeoutMs?: number
}): Metrics {
  const { handle } = options
  const queryTimeoutMs = options.queryTimeoutMs ?? SCRAPE_QUERY_TIMEOUT_MS
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  const { http, requestsMetric, durationMetric } = createHttpMetrics(options.routes)
  registry.registerMetric(requestsMetric as unknown as Metric)
  registry.registerMetric(durationMetric as unknown as Metric)

  const attempts = new Counter({ name: 'messaging_webhook_attempts_total', help: 'Webhook delivery attempts ended, by what was decided after each.', labelNames: ['outcome'], registers: [registry] })
  for (const outcome of OUTCOMES) attempts.inc({ outcome }, 0)
  const inFlight = new Gauge({ name: 'messaging_webhook_attempts_in_flight', help: "Webhook attempts this process's delivery worker is sending now.", registers: [registry] })
  const restarts = new Counter({ name: 'messaging_webhook_worker_restarts_total', help: 'Times the delivery worker thread ended unasked and was started again.', registers: [registry] })
  const pending = new Gauge({ name: 'messaging_webhook_deliveries_pending', help: 'Deliveries not yet delivered, failed or canceled (every process; read from the database at scrape).', registers: [registry] })
  const oldest = new Gauge({ name: 'messaging_webhook_oldest_pending_age_seconds', help: 'Age of the oldest pending delivery, 0 when none (read from the database at scrape).', registers: [registry] })
  const claims = new Histogram({
    name: 'messaging_webhook_claim_duration_seconds',
    help: "How long each of this process's claims of due deliveries took (src/delivery/store.ts), its database round trips included.",
    buckets: [...DURATION_BUCKETS],
    registers: [registry],
  })
  const behind = new Gauge({ name: 'messaging_webhook_accounts_behind', help: "Accounts whose deliveries this process's worker is behind with (docs/webhooks.md#when-deliveries-fall-behind).", registers: [registry] })
  const held = new Histogram({
    name: 'messaging_message_hold_duration_seconds',
    help: 'How long POST …/messages requests were held while their account was behind, by how they ended (accepted, or refused with 429 deliveries_behind).',
    labelNames: ['outcome'],
    buckets: [...DURATION_BUCKETS],
    registers: [registry],
  })
  const openCircuits = new Gauge({ name: 'messaging_webhook_open_circuits', help: 'Subscriptions whose circuit breaker is open (every process; read from the database at scrape).', registers: [registry] })
  const waitingBehindCircuits = new Gauge({
    name: 'messaging_webhook_deliveries_behind_open_circuits',
    help: 'Pending deliveries of subscriptions whose circuit breaker is open (every process; read from the database at scrape).',
    registers: [registry],
  })
  const queryErrors = new Counter({ name: 'messaging_metrics_query_errors_total', help: 'Scrapes whose database queries failed or took longer than 1 s (their gauges keep the previous values).', registers: [registry] })
  const poolMax = handle.kind === 'postgres' ? new Gauge({ name: 'messaging_db_pool_max_connections', help: "Connections each of this process's PostgreSQL pools may open.", labelNames: ['pool'], registers: [registry] }) : undefined
  for (const [pool, max] of Object.entries(options.pools ?? {})) poolMax?.set({ pool }, max)
  const connections =
    handle.kind === 'postgres'
      ? new Gauge({ name: 'messaging_db_connections', help: 'Connections to this database from every client, by state (pg_stat_activity, at scrape).', labelNames: ['state'], registers: [registry] })
      : undefined

  const readDatabase = async () => {
    const [queue] = await queryRows<{ pending: number | string; oldest: number | string | null }>(
      handle.db,
      sql`select count(*)::int as pending, extract(epoch from now() - min(created_at))::float8 as oldest from deliveries where status = 'pending'`,
    )
    pending.set(Number(queue?.pending ?? 0))
    oldest.set(Math.max(0, Number(queue?.oldest ?? 0)))
    const [circuits] = await queryRows<{ open: number | string; waiting: number | string }>(
      handle.db,
      sql`select count(*)::int as open,
                 coalesce(sum((select count(*) from deliveries d where d.hook_id = h.id and d.status = 'pending')), 0)::int as waiting
          from hooks h where h.circuit_opened_at is not null`,
    )
    openCircuits.set(Number(circuits?.open ?? 0))
    waitingBehindCircuits.set(Number(circuits?.waiting ?? 0))
    if (connections) {
      const rows = await queryRows<{ state: string | null; n: number | string }>(
        handle.db,
        sql`select coalesce(state, 'unknown') as state, count(*)::int as n from pg_stat_activity where datname = current_database() group by 1`,
      )
      connections.reset()
      for (const state of ['active', 'idle', 'idle in transaction']) connections.set({ state }, 0)
      for (const row of rows) connections.set({ state: row.state ?? 'unknown' }, Number(row.n))
    }
  }

  return {
    http,
    delivery: {
      attempts(counts, now, claimSeconds = []) {
        for (let index = 0; index < OUTCOMES.length; index++) if (counts[index]) attempts.inc({ outcome: OUTCOMES[index]! }, counts[index])
        inFlight.set(now)
        for (const seconds of claimSeconds) claims.observe(seconds)
      },
      workerRestarted() {
        restarts.inc()
        // The thread that died had these in flight; their leases bring them back.
        inFlight.set(0)
      },
      accountsBehind: (count) => behind.set(count),
      messageHeld: (seconds, accepted) => held.observe({ outcome: accepted ? 'accepted' : 'refused' }, seconds),
    },
    contentType: registry.contentType,
    async render() {
      try {
        await withTimeout(readDatabase(), queryTimeoutMs)
      } catch {
        queryErrors.inc()
      }
      return registry.metrics()
    },
  }
}
