import { sql } from 'drizzle-orm'
import type { Static } from 'elysia'
import { queryRows, type Database } from '../lib/db/client.ts'
import { isId } from '../lib/db/ids.ts'
import { notFound, validationFailed } from '../lib/http/errors.ts'
import { FAILURE_REASONS } from './failure-reasons.ts'
import { addCounts, HistogramSum, parseHistogram, percentiles, type Counts, type Histogram } from './histogram.ts'
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
  /** As text (latency::text): src/stats/histogram.ts parseHistogram. */
  latency: string
  messages_sent?: number
  events?: Counts | string
}

/** A rollup row with its latency histogram read once (it is used for its bucket and for the totals). */
type ReadRow = RollupRow & { histogram: Histogram }
const readRows = (rows: RollupRow[]): ReadRow[] => rows.map((row) => ({ ...row, histogram: parseHistogram(row.latency) }))

const counts = (value: Counts | string | undefined): Counts => (typeof value === 'string' ? JSON.parse(value) : (value ?? {}))
const noFailures = (): Counts => Object.fromEntries(FAILURE_REASONS.map((reason) => [reason, 0]))

type DeliveryFigures = HookStats['totals']
type AccountFigures = AccountStats['totals']

/** One rollup row's figures, or zeros; its percentiles read from its own histogram. */
function deliveryFigures(row: ReadRow | undefined): DeliveryFigures {
  if (!row) return { attempts: 0, succeeded: 0, failed: 0, failures: noFailures() as DeliveryFigures['failures'], latency_ms: null }
  const attempts = Number(row.attempts)
  const succeeded = Number(row.succeeded)
  return { attempts, succeeded, failed: attempts - succeeded, failures: addCounts(noFailures(), counts(row.failures)) as DeliveryFigures['failures'], latency_ms: percentiles(row.histogram) }
}

function accountFigures(row: ReadRow | undefined): AccountFigures {
  const events = counts(row?.events)
  return { ...deliveryFigures(row), messages: messageFigures(Number(row?.messages_sent ?? 0), events), events }
}

const messageFigures = (sent: number, events: Counts) => ({
  sent,
  delivered: events['message.delivered'] ?? 0,
  failed: events['message.failed'] ?? 0,
  received: events['message.inbound'] ?? 0,
})

/** The range's rows added together: the counts, and the histograms into one (src/stats/histogram.ts, HistogramSum). */
function totalsOf(rows: ReadRow[]): AccountFigures {
  const latency = new HistogramSum()
  const failures = noFailures()
  const events: Counts = {}
  let attempts = 0
  let succeeded = 0
  let sent = 0
  for (const row of rows) {
    attempts += Number(row.attempts)
    succeeded += Number(row.succeeded)
    sent += Number(row.messages_sent ?? 0)
    addCounts(failures, counts(row.failures))
    addCounts(events, counts(row.events))
    latency.add(row.histogram)
  }
  return {
    attempts,
    succeeded,
    failed: attempts - succeeded,
    failures: failures as DeliveryFigures['failures'],
    latency_ms: latency.percentiles(),
    messages: messageFigures(sent, events),
    events,
  }
}

function combinedHistogram(a: Histogram, b: Histogram): Histogram {
  if (b.indexes.length === 0) return a
  if (a.indexes.length === 0) return b
  const sum = new HistogramSum()
  sum.add(a)
  sum.add(b)
  return sum.histogram()
}

/** Two rows of one bucket (an account's are per kind of writer) as one. */
function combined(a: ReadRow, b: ReadRow): ReadRow {
  return {
    bucket: a.bucket,
    attempts: Number(a.attempts) + Number(b.attempts),
    succeeded: Number(a.succeeded) + Number(b.succeeded),
    failures: addCounts({ ...counts(a.failures) }, counts(b.failures)),
    latency: '',
    histogram: combinedHistogram(a.histogram, b.histogram),
    messages_sent: Number(a.messages_sent ?? 0) + Number(b.messages_sent ?? 0),
    events: addCounts({ ...counts(a.events) }, counts(b.events)),
  }
}

/** Every bucket of the range, oldest first, with its row (none where nothing happened). */
function bucketRows(range: StatsRange, rows: ReadRow[]): { start: string; row: ReadRow | undefined }[] {
  const unit = UNIT_MS[range.interval]
  const byStart = new Map<number, ReadRow>()
  for (const row of rows) {
    const start = new Date(row.bucket).getTime()
    const other = byStart.get(start)
    byStart.set(start, other ? combined(other, row) : row)
  }
  const buckets = []
  for (let start = range.since.getTime(); start < range.until.getTime(); start += unit) buckets.push({ start: new Date(start).toISOString(), row: byStart.get(start) })
  return buckets
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
  const rows = readRows(
    await queryRows<RollupRow>(
      db,
      sql`select bucket, attempts, succeeded, failures, latency::text as latency from hook_stats
          where hook_id = ${hookId} and unit = ${range.interval} and bucket >= ${range.since.toISOString()}::timestamptz and bucket < ${range.until.toISOString()}::timestamptz`,
    ),
  )
  const { attempts, succeeded, failed, failures, latency_ms } = totalsOf(rows)
  return {
    hook_id: hookId,
    ...rangeFields(range),
    pending: Number(hook.pending),
    totals: { attempts, succeeded, failed, failures, latency_ms },
    buckets: bucketRows(range, rows).map(({ start, row }) => ({ start, ...deliveryFigures(row) })),
  }
}

/** The account's health over the range: every subscription's attempts together, with its messages and events. */
export async function readAccountStats(db: Database, accountId: string, range: StatsRange): Promise<AccountStats> {
  const [stored, [pending]] = await Promise.all([
    queryRows<RollupRow>(
      db,
      sql`select bucket, attempts, succeeded, failures, latency::text as latency, messages_sent, events from account_stats
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
  const rows = readRows(stored)
  return {
    account_id: accountId,
    ...rangeFields(range),
    pending: Number(pending?.pending ?? 0),
    totals: totalsOf(rows),
    buckets: bucketRows(range, rows).map(({ start, row }) => ({ start, ...accountFigures(row) })),
  }
}
