import { sql } from 'drizzle-orm'
import type { Static } from 'elysia'
import { queryRows, type Database } from '../lib/db/client.ts'
import { isId } from '../lib/db/ids.ts'
import { notFound, validationFailed } from '../lib/http/errors.ts'
import { FAILURE_REASONS } from './failure-reasons.ts'
import { addCounts, percentiles, type Counts } from './histogram.ts'
import type { StatUnit } from './rollups.ts'
import { MAX_BUCKETS, type AccountStatsSchema, type HookStatsSchema, type StatsQuery } from './schemas.ts'

export type HookStats = Static<typeof HookStatsSchema>
export type AccountStats = Static<typeof AccountStatsSchema>

const UNIT_MS: Record<StatUnit, number> = { minute: 60_000, hour: 3_600_000, day: 86_400_000 }
const DEFAULT_SPAN_MS = 86_400_000

/** The buckets one answer covers: [since, until), whole intervals of UTC time. */
export interface StatsRange {
  interval: StatUnit
  since: Date
  until: Date
}

/**
 * Reads `since`, `until` and `interval` (docs/api.md#health-over-time): until (default now) is
 * rounded up to the interval and since (default 24 h before it) rounded down, so every bucket is
 * whole (by default the 24 hours up to the end of the current interval). A range that is empty or holds more than MAX_BUCKETS is refused, naming the field.
 */
export function statsRange(query: Static<typeof StatsQuery>, now: Date): StatsRange {
  const interval = query.interval ?? 'hour'
  const unit = UNIT_MS[interval]
  const end = query.until ? Date.parse(query.until) : now.getTime()
  const start = query.since ? Date.parse(query.since) : end - DEFAULT_SPAN_MS
  if (start >= end) throw validationFailed([{ path: 'query:/since', message: 'must be before until' }])
  const until = Math.ceil(end / unit) * unit
  let since = Math.floor((query.since ? start : until - DEFAULT_SPAN_MS) / unit) * unit
  // "The last 24 hours by the minute", asked at 12:00:30 (or with a since the client took a moment
  // before), spans 1,441 minutes once rounded: it gets the latest 1,440, not a refusal.
  if ((until - since) / unit === MAX_BUCKETS + 1) since += unit
  const buckets = (until - since) / unit
  if (buckets > MAX_BUCKETS) {
    throw validationFailed([
      { path: 'query:/since', message: `the range holds ${buckets} buckets of a ${interval}; at most ${MAX_BUCKETS}: shorten it or choose a longer interval` },
    ])
  }
  return { interval, since: new Date(since), until: new Date(until) }
}

interface RollupRow {
  bucket: Date | string
  attempts: number
  succeeded: number
  failures: Counts | string
  latency: Counts | string
  messages_sent?: number
  events?: Counts | string
}

const counts = (value: Counts | string | undefined): Counts => (typeof value === 'string' ? JSON.parse(value) : (value ?? {}))

/** Sums of rollup rows, with the merged histogram its percentiles are read from. */
class Figures {
  attempts = 0
  succeeded = 0
  failures: Counts = Object.fromEntries(FAILURE_REASONS.map((reason) => [reason, 0]))
  latency: Counts = {}
  sent = 0
  events: Counts = {}

  add(row: RollupRow): void {
    this.attempts += Number(row.attempts)
    this.succeeded += Number(row.succeeded)
    addCounts(this.failures, counts(row.failures))
    addCounts(this.latency, counts(row.latency))
    this.sent += Number(row.messages_sent ?? 0)
    addCounts(this.events, counts(row.events))
  }

  deliveries() {
    return {
      attempts: this.attempts,
      succeeded: this.succeeded,
      failed: this.attempts - this.succeeded,
      failures: { ...this.failures } as HookStats['totals']['failures'],
      latency_ms: percentiles(this.latency),
    }
  }

  account() {
    return {
      ...this.deliveries(),
      messages: { sent: this.sent, delivered: this.events['message.delivered'] ?? 0, failed: this.events['message.failed'] ?? 0, received: this.events['message.inbound'] ?? 0 },
      events: { ...this.events },
    }
  }
}

/** The range's buckets, each with the figures of its rollup row (zeros when it has none), and their totals. */
function bucketed(range: StatsRange, rows: RollupRow[]): { start: string; figures: Figures }[] & { totals: Figures } {
  const unit = UNIT_MS[range.interval]
  const byStart = new Map(rows.map((row) => [new Date(row.bucket).getTime(), row]))
  const totals = new Figures()
  const buckets = []
  for (let start = range.since.getTime(); start < range.until.getTime(); start += unit) {
    const figures = new Figures()
    const row = byStart.get(start)
    if (row) {
      figures.add(row)
      totals.add(row)
    }
    buckets.push({ start: new Date(start).toISOString(), figures })
  }
  return Object.assign(buckets, { totals })
}

const rangeFields = (range: StatsRange) => ({ interval: range.interval, since: range.since.toISOString(), until: range.until.toISOString() })

/** A subscription's health over the range, from its rollups (src/stats/rollups.ts); another account's is not found. */
export async function readHookStats(db: Database, accountId: string, hookId: string, range: StatsRange): Promise<HookStats> {
  const [hook] = isId('hook', hookId)
    ? await queryRows<{ pending: number }>(
        db,
        sql`select (select count(*)::int from deliveries d where d.hook_id = h.id and d.status = 'pending') as pending
            from hooks h where h.id = ${hookId} and h.account_id = ${accountId}`,
      )
    : []
  if (!hook) throw notFound(`No subscription ${hookId} on this account.`)
  const rows = await queryRows<RollupRow>(
    db,
    sql`select bucket, attempts, succeeded, failures, latency from hook_stats
        where hook_id = ${hookId} and unit = ${range.interval} and bucket >= ${range.since.toISOString()}::timestamptz and bucket < ${range.until.toISOString()}::timestamptz`,
  )
  const buckets = bucketed(range, rows)
  return {
    hook_id: hookId,
    ...rangeFields(range),
    pending: Number(hook.pending),
    totals: buckets.totals.deliveries(),
    buckets: buckets.map(({ start, figures }) => ({ start, ...figures.deliveries() })),
  }
}

/** The account's health over the range: every subscription's attempts together, with its messages and events. */
export async function readAccountStats(db: Database, accountId: string, range: StatsRange): Promise<AccountStats> {
  const [rows, [pending]] = await Promise.all([
    queryRows<RollupRow>(
      db,
      sql`select bucket, attempts, succeeded, failures, latency, messages_sent, events from account_stats
          where account_id = ${accountId} and unit = ${range.interval} and bucket >= ${range.since.toISOString()}::timestamptz and bucket < ${range.until.toISOString()}::timestamptz`,
    ),
    queryRows<{ pending: number }>(
      db,
      // Per subscription, through the index of pending deliveries: a join may plan a scan of every delivery.
      sql`select coalesce(sum(p.n), 0)::int as pending from hooks h
          cross join lateral (select count(*) as n from deliveries d where d.hook_id = h.id and d.status = 'pending') p
          where h.account_id = ${accountId}`,
    ),
  ])
  const buckets = bucketed(range, rows)
  return {
    account_id: accountId,
    ...rangeFields(range),
    pending: Number(pending?.pending ?? 0),
    totals: buckets.totals.account(),
    buckets: buckets.map(({ start, figures }) => ({ start, ...figures.account() })),
  }
}
