import { sql, type SQL } from 'drizzle-orm'
import type { Static } from 'elysia'
import { queryRows, type Database } from '../lib/db/client.ts'
import { isId } from '../lib/db/ids.ts'
import { notFound, validationFailed } from '../lib/http/errors.ts'
import { FAILURE_REASONS } from './failure-reasons.ts'
import { addCounts, HistogramSum, parseHistogram, percentiles, type Counts, type Histogram, type Percentiles } from './histogram.ts'
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
  p50_ms: number | null
  p95_ms: number | null
  p99_ms: number | null
  /** As text (latency::text, src/stats/histogram.ts parseHistogram); fetched only where needed (rowColumns). */
  latency: string | null
  /** Whether the row's histogram goes into the totals: the range's whole coarser buckets bring their own (coarseHistograms). */
  in_totals: boolean
  messages_sent?: number
  events?: Counts | string
}

/** A rollup row with its percentiles (stored, or read from its histogram) and its histogram where fetched. */
type ReadRow = Omit<RollupRow, 'latency'> & { histogram: Histogram | null; percentiles: Percentiles | null }

function readRow({ latency, ...row }: RollupRow): ReadRow {
  const histogram = latency === null ? null : parseHistogram(latency)
  const stored = row.p50_ms === null ? null : { p50: Number(row.p50_ms), p95: Number(row.p95_ms), p99: Number(row.p99_ms) }
  return { ...row, histogram, percentiles: stored ?? (histogram ? percentiles(histogram) : null) }
}

/**
 * A range's totals add up its rows' latency histograms. A day by the minute holds 1,440 of them,
 * but each of its whole hours is one hour row, which holds what its minutes hold (the same
 * statements write both, src/stats/rollups.ts): the totals take the coarser rows where the range
 * covers them whole and the finer rows only at its edges, and a finer row whose percentiles are
 * stored (src/stats/closing.ts) and that is not at an edge has no histogram to fetch.
 */
const COARSER: Record<StatUnit, StatUnit | null> = { minute: 'hour', hour: 'day', day: null }

interface Coverage {
  unit: StatUnit
  since: string
  until: string
}

function coarseCoverage(range: StatsRange): Coverage | null {
  const unit = COARSER[range.interval]
  if (!unit) return null
  const size = UNIT_MS[unit]
  const since = Math.ceil(range.since.getTime() / size) * size
  const until = Math.floor(range.until.getTime() / size) * size
  return since < until ? { unit, since: new Date(since).toISOString(), until: new Date(until).toISOString() } : null
}

/**
 * The select list of a range's rows of the table aliased `r`: the histogram only for a row whose
 * percentiles are not stored or which counts in the totals.
 */
function rowColumns(coverage: Coverage | null): SQL {
  const inTotals = coverage ? sql`(r.bucket < ${coverage.since}::timestamptz or r.bucket >= ${coverage.until}::timestamptz)` : sql`true`
  return sql`r.attempts, r.succeeded, r.failures, r.p50_ms, r.p95_ms, r.p99_ms, ${inTotals} as in_totals,
    case when r.attempts > 0 and (r.p50_ms is null or ${inTotals}) then r.latency::text end as latency`
}

/** The histograms of the coarser rows the range covers whole. */
async function coarseHistograms(db: Database, table: 'hook_stats' | 'account_stats', owner: SQL, coverage: Coverage | null): Promise<Histogram[]> {
  if (!coverage) return []
  const rows = await queryRows<{ latency: string }>(
    db,
    sql`select latency::text as latency from ${sql.identifier(table)}
        where ${owner} and unit = ${coverage.unit} and bucket >= ${coverage.since}::timestamptz and bucket < ${coverage.until}::timestamptz and attempts > 0`,
  )
  return rows.map((row) => parseHistogram(row.latency))
}

const counts = (value: Counts | string | undefined): Counts => (typeof value === 'string' ? JSON.parse(value) : (value ?? {}))
const noFailures = (): Counts => Object.fromEntries(FAILURE_REASONS.map((reason) => [reason, 0]))

type DeliveryFigures = HookStats['totals']
type AccountFigures = AccountStats['totals']

/** One rollup row's figures, or zeros; its percentiles read from its own histogram. */
function deliveryFigures(row: ReadRow | undefined): DeliveryFigures {
  if (!row) return { attempts: 0, succeeded: 0, failed: 0, failures: noFailures() as DeliveryFigures['failures'], latency_ms: null }
  const attempts = Number(row.attempts)
  const succeeded = Number(row.succeeded)
  return { attempts, succeeded, failed: attempts - succeeded, failures: addCounts(noFailures(), counts(row.failures)) as DeliveryFigures['failures'], latency_ms: row.percentiles }
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
function totalsOf(rows: ReadRow[], coarse: Histogram[]): AccountFigures {
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
    if (row.in_totals && row.histogram) latency.add(row.histogram)
  }
  for (const histogram of coarse) latency.add(histogram)
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

/** Every bucket of the range, oldest first, with its row (none where nothing happened). */
function bucketRows(range: StatsRange, rows: ReadRow[]): { start: string; row: ReadRow | undefined }[] {
  const unit = UNIT_MS[range.interval]
  const byStart = new Map(rows.map((row) => [new Date(row.bucket).getTime(), row]))
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
  const coverage = coarseCoverage(range)
  const owner = sql`hook_id = ${hookId}`
  const [stored, coarse] = await Promise.all([
    queryRows<RollupRow>(
      db,
      sql`select r.bucket, ${rowColumns(coverage)} from hook_stats r
          where r.${owner} and r.unit = ${range.interval} and r.bucket >= ${range.since.toISOString()}::timestamptz and r.bucket < ${range.until.toISOString()}::timestamptz`,
    ),
    coarseHistograms(db, 'hook_stats', owner, coverage),
  ])
  const rows = stored.map(readRow)
  const { attempts, succeeded, failed, failures, latency_ms } = totalsOf(rows, coarse)
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
  const coverage = coarseCoverage(range)
  const owner = sql`account_id = ${accountId}`
  const [stored, coarse, [pending]] = await Promise.all([
    queryRows<RollupRow>(
      db,
      // An account's rows are per kind of writer (src/stats/rollups.ts): joined here into one row per bucket.
      sql`with kinds as (
            select * from account_stats
            where ${owner} and unit = ${range.interval} and bucket >= ${range.since.toISOString()}::timestamptz and bucket < ${range.until.toISOString()}::timestamptz
          ),
          r as (select * from kinds where kind = 'attempts'),
          m as (select bucket, messages_sent from kinds where kind = 'messages'),
          e as (select bucket, events from kinds where kind = 'events')
          select coalesce(r.bucket, m.bucket, e.bucket) as bucket, ${rowColumns(coverage)}, m.messages_sent, e.events
          from r full join m on m.bucket = r.bucket full join e on e.bucket = coalesce(r.bucket, m.bucket)`,
    ),
    coarseHistograms(db, 'account_stats', owner, coverage),
    queryRows<{ pending: number }>(
      db,
      // Per subscription, through the index of pending deliveries: a join may plan a scan of every delivery.
      sql`select coalesce(sum(p.n), 0)::int as pending from hooks h
          cross join lateral (select count(*) as n from deliveries d where d.hook_id = h.id and d.status = 'pending') p
          where h.account_id = ${accountId}`,
    ),
  ])
  const rows = stored.map(readRow)
  return {
    account_id: accountId,
    ...rangeFields(range),
    pending: Number(pending?.pending ?? 0),
    totals: totalsOf(rows, coarse),
    buckets: bucketRows(range, rows).map(({ start, row }) => ({ start, ...accountFigures(row) })),
  }
}
