import { sql, type SQL } from 'drizzle-orm'
import type { Static } from 'elysia'
import { queryRows, type Database } from '../lib/db/client.ts'
import { isId } from '../lib/db/ids.ts'
import { notFound, validationFailed } from '../lib/http/errors.ts'
import { FAILURE_REASONS } from './failure-reasons.ts'
import { addCounts, HistogramSum, parseHistogram, percentiles, type Counts, type Histogram, type Percentiles } from './histogram.ts'
import type { StatUnit } from './rollups.ts'
import { SettledPartCache } from './cache.ts'
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

/**
 * A rollup row as fetched: its counts in one text column, `epoch attempts succeeded p50 p95 p99
 * sent` (−1 where a percentile is not stored), rather than a column each. A day by the minute is
 * 1,440 rows, and each column of each row costs the client a decoded string and a parse: seven
 * columns made up most of an answer's CPU (docs/performance.md#packed-rows-fewer-strings-decoded-per-answer-2026-11-27).
 * The maps come only where a row has them: its failures when some attempts failed, its histogram
 * where its percentiles are not stored or it counts in the totals (rangeRowsQuery), its events
 * where it has some.
 */
interface FetchedRow {
  figures: string
  failures: Counts | string | null
  latency: string | null
  events: Counts | string | null
}

/** One bucket's figures, as read from its row (or rows: an account's are per kind of writer). */
interface BucketRow {
  attempts: number
  succeeded: number
  failures: Counts | undefined
  stored: Percentiles | null
  histogram: Histogram | undefined
  sent: number
  events: Counts | undefined
  /** Rows with attempts, and how many of their histograms were fetched: see completeLateBuckets. */
  timedRows: number
  histograms: number
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
  since: Date
  until: Date
}

function coarseCoverage(range: StatsRange): Coverage | null {
  const unit = COARSER[range.interval]
  if (!unit) return null
  const size = UNIT_MS[unit]
  const since = Math.ceil(range.since.getTime() / size) * size
  const until = Math.floor(range.until.getTime() / size) * size
  return since < until ? { unit, since: new Date(since), until: new Date(until) } : null
}

/** Whether a bucket's histogram goes into the totals: outside the coarser rows the range covers whole. */
const inTotals = (coverage: Coverage | null, startMs: number) => !coverage || startMs < coverage.since.getTime() || startMs >= coverage.until.getTime()

type StatsTable = 'hook_stats' | 'account_stats'
const ownerColumn = (table: StatsTable) => sql.identifier(table === 'hook_stats' ? 'hook_id' : 'account_id')

/**
 * The range's rollup rows of one subscription (hook_stats) or account (account_stats), as
 * FetchedRow. An account's rows are per kind of writer while their bucket is open
 * (src/stats/rollups.ts), one merged row once it closed (src/stats/closing.ts); a kind's other
 * columns hold zeros and empty maps, so the rows of one bucket add up into its figures.
 */
export function rangeRowsQuery(table: StatsTable, ownerId: string, range: StatsRange): SQL {
  const coverage = coarseCoverage(range)
  const edge = coverage ? sql`(r.bucket < ${coverage.since.toISOString()}::timestamptz or r.bucket >= ${coverage.until.toISOString()}::timestamptz)` : sql`true`
  const account = table === 'account_stats'
  // date_part is a float; extract would compute a numeric for each row.
  return sql`select concat_ws(' ', date_part('epoch', r.bucket)::int8, r.attempts, r.succeeded, coalesce(r.p50_ms, -1), coalesce(r.p95_ms, -1), coalesce(r.p99_ms, -1), ${account ? sql`r.messages_sent` : sql`0`}) as figures,
      case when r.attempts > r.succeeded then r.failures end as failures,
      case when r.attempts > 0 and (r.p50_ms is null or ${edge}) then r.latency::text end as latency,
      ${account ? sql`case when r.events <> '{}'::jsonb then r.events end` : sql`null`} as events
    from ${sql.identifier(table)} r
    where r.${ownerColumn(table)} = ${ownerId} and r.unit = ${range.interval}
      and r.bucket >= ${range.since.toISOString()}::timestamptz and r.bucket < ${range.until.toISOString()}::timestamptz`
}

const counts = (value: Counts | string): Counts => (typeof value === 'string' ? JSON.parse(value) : value)
/** A bucket's map with one more row's added: a closed row and a late one can both have some. */
const withCounts = (into: Counts | undefined, value: Counts | string): Counts => (into ? addCounts(into, counts(value)) : counts(value))

const SPACE = 32
const MINUS = 45
const DIGIT_0 = 48

/** A row's `figures` (`epoch attempts succeeded p50 p95 p99 sent`) as numbers, scanned rather than split and parsed. */
function scanFigures(text: string): number[] {
  const into: number[] = []
  let value = 0
  let sign = 1
  for (let at = 0; at < text.length; at++) {
    const code = text.charCodeAt(at)
    if (code === SPACE) {
      into.push(sign * value)
      value = 0
      sign = 1
    } else if (code === MINUS) sign = -1
    else value = value * 10 + code - DIGIT_0
  }
  into.push(sign * value)
  return into
}

/** The fetched rows as one entry per bucket of the range that has a row, by its index in the range. */
function bucketRowsOf(range: StatsRange, fetched: FetchedRow[]): (BucketRow | undefined)[] {
  const unit = UNIT_MS[range.interval]
  const since = range.since.getTime()
  const rows: (BucketRow | undefined)[] = new Array((range.until.getTime() - since) / unit)
  for (const fetchedRow of fetched) {
    const [epoch, attempts, succeeded, p50, p95, p99, sent] = scanFigures(fetchedRow.figures) as [number, number, number, number, number, number, number]
    const index = (epoch * 1000 - since) / unit
    const row = (rows[index] ??= { attempts: 0, succeeded: 0, failures: undefined, stored: null, histogram: undefined, sent: 0, events: undefined, timedRows: 0, histograms: 0 })
    row.attempts += attempts
    row.succeeded += succeeded
    row.sent += sent
    if (attempts > 0) row.timedRows++
    if (p50 >= 0) row.stored = { p50, p95, p99 }
    if (fetchedRow.failures !== null) row.failures = withCounts(row.failures, fetchedRow.failures)
    if (fetchedRow.latency !== null) {
      row.histogram = addHistograms(row.histogram, parseHistogram(fetchedRow.latency))
      row.histograms++
    }
    if (fetchedRow.events !== null) row.events = withCounts(row.events, fetchedRow.events)
  }
  return rows
}

function addHistograms(into: Histogram | undefined, more: Histogram): Histogram {
  if (!into) return more
  const sum = new HistogramSum()
  sum.add(into)
  sum.add(more)
  return sum.histogram()
}

/**
 * A closed bucket of an account is one row (src/stats/closing.ts), but a transaction begun in it
 * that commits later writes a row of its kind beside it until the next sweep merges them. Such a
 * bucket's percentiles are those of both rows' histograms together, not the closed row's stored
 * ones: the histograms not fetched yet are fetched here, a second query only while such a row
 * waits for the sweep.
 */
async function completeLateBuckets(db: Database, accountId: string, range: StatsRange, rows: (BucketRow | undefined)[]): Promise<void> {
  const unit = UNIT_MS[range.interval]
  const late = new Map<number, BucketRow>()
  rows.forEach((row, index) => {
    if (row && row.timedRows > 1) {
      row.stored = null
      if (row.histograms < row.timedRows) late.set(range.since.getTime() + index * unit, row)
    }
  })
  if (late.size === 0) return
  const starts = JSON.stringify([...late.keys()].map((start) => new Date(start).toISOString()))
  const fetched = await queryRows<{ epoch: number; latency: string }>(
    db,
    sql`select date_part('epoch', bucket) as epoch, latency::text as latency from account_stats
        where account_id = ${accountId} and unit = ${range.interval} and attempts > 0
          and bucket in (select value::timestamptz from jsonb_array_elements_text(${starts}::jsonb))`,
  )
  for (const row of late.values()) row.histogram = undefined
  for (const { epoch, latency } of fetched) {
    const row = late.get(Number(epoch) * 1000)!
    row.histogram = addHistograms(row.histogram, parseHistogram(latency))
  }
}

/** The histograms of the coarser rows the range covers whole. */
async function coarseHistograms(db: Database, table: StatsTable, ownerId: string, coverage: Coverage | null): Promise<Histogram[]> {
  if (!coverage) return []
  const rows = await queryRows<{ latency: string }>(
    db,
    sql`select latency::text as latency from ${sql.identifier(table)}
        where ${ownerColumn(table)} = ${ownerId} and unit = ${coverage.unit} and bucket >= ${coverage.since.toISOString()}::timestamptz and bucket < ${coverage.until.toISOString()}::timestamptz and attempts > 0`,
  )
  return rows.map((row) => parseHistogram(row.latency))
}

const NO_FAILURES: Counts = Object.fromEntries(FAILURE_REASONS.map((reason) => [reason, 0]))

type DeliveryFigures = HookStats['totals']
type AccountFigures = AccountStats['totals']

/** One bucket's figures, or zeros; its percentiles stored or read from its own histogram. */
function deliveryFigures(row: BucketRow | undefined): DeliveryFigures {
  const failures = { ...NO_FAILURES } as DeliveryFigures['failures']
  if (!row) return { attempts: 0, succeeded: 0, failed: 0, failures, latency_ms: null }
  if (row.failures) addCounts(failures, row.failures)
  const latency = row.stored ?? (row.histogram ? percentiles(row.histogram) : null)
  return { attempts: row.attempts, succeeded: row.succeeded, failed: row.attempts - row.succeeded, failures, latency_ms: latency }
}

function accountFigures(row: BucketRow | undefined): AccountFigures {
  const events = row?.events ?? {}
  return { ...deliveryFigures(row), messages: messageFigures(row?.sent ?? 0, events), events }
}

const messageFigures = (sent: number, events: Counts) => ({
  sent,
  delivered: events['message.delivered'] ?? 0,
  failed: events['message.failed'] ?? 0,
  received: events['message.inbound'] ?? 0,
})

/** What a part of a range adds to the answer's totals: its counts, and its latency histograms added into one. */
interface PartTotals {
  attempts: number
  succeeded: number
  sent: number
  failures: Counts
  events: Counts
  latency: Histogram
}

/** A part of a range read from its rollup rows: its buckets' figures, oldest first, and what it adds to the totals. */
export interface RangePart<T> {
  buckets: ({ start: string } & T)[]
  totals: PartTotals
}

/** The part's rows added together: the counts, and the histograms into one (src/stats/histogram.ts, HistogramSum). */
function partTotals(range: StatsRange, coverage: Coverage | null, rows: (BucketRow | undefined)[], coarse: Histogram[]): PartTotals {
  const latency = new HistogramSum()
  const totals = { attempts: 0, succeeded: 0, sent: 0, failures: {} as Counts, events: {} as Counts }
  const unit = UNIT_MS[range.interval]
  rows.forEach((row, index) => {
    if (!row) return
    totals.attempts += row.attempts
    totals.succeeded += row.succeeded
    totals.sent += row.sent
    if (row.failures) addCounts(totals.failures, row.failures)
    if (row.events) addCounts(totals.events, row.events)
    if (row.histogram && inTotals(coverage, range.since.getTime() + index * unit)) latency.add(row.histogram)
  })
  for (const histogram of coarse) latency.add(histogram)
  return { ...totals, latency: latency.histogram() }
}

/** The range's totals, as the answer shows them: percentiles from the parts' histograms together, never averaged. */
function totalsOf(parts: readonly PartTotals[]): AccountFigures {
  const latency = new HistogramSum()
  const failures = { ...NO_FAILURES }
  const events: Counts = {}
  let [attempts, succeeded, sent] = [0, 0, 0]
  for (const part of parts) {
    attempts += part.attempts
    succeeded += part.succeeded
    sent += part.sent
    addCounts(failures, part.failures)
    addCounts(events, part.events)
    latency.add(part.latency)
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

/** Every bucket of the range, oldest first, with its figures (zeros where nothing happened). */
function answerBuckets<T>(range: StatsRange, rows: (BucketRow | undefined)[], figures: (row: BucketRow | undefined) => T): ({ start: string } & T)[] {
  const unit = UNIT_MS[range.interval]
  const since = range.since.getTime()
  const buckets = new Array<{ start: string } & T>(rows.length)
  for (let index = 0; index < rows.length; index++) buckets[index] = { start: new Date(since + index * unit).toISOString(), ...figures(rows[index]) }
  return buckets
}

/** A part of a range read from one subscription's (hook_stats) or account's (account_stats) rollups. */
async function readPart<T>(db: Database, table: StatsTable, ownerId: string, range: StatsRange, figures: (row: BucketRow | undefined) => T): Promise<RangePart<T>> {
  const coverage = coarseCoverage(range)
  const [fetched, coarse] = await Promise.all([queryRows<FetchedRow>(db, rangeRowsQuery(table, ownerId, range)), coarseHistograms(db, table, ownerId, coverage)])
  const rows = bucketRowsOf(range, fetched)
  // A subscription's bucket is always one row; an account's can be a closed row and a late one.
  if (table === 'account_stats') await completeLateBuckets(db, ownerId, range, rows)
  return { buckets: answerBuckets(range, rows, figures), totals: partTotals(range, coverage, rows, coarse) }
}

/**
 * The version of the rollup rows a part is read from (its buckets' rows and the coarser ones its
 * totals take): how many there are, and the sum of a 64-bit hash of each row's xmin, the
 * transaction that wrote its current version. Any write to those rows (a late commit, the closing
 * sweep's merge, retention) adds or removes a row or gives one a new xmin, which changes the sum
 * but for a chance of about 2^-64. Summed rather than listed in key order: no sort, no string
 * built, a third cheaper than a digest of the list (docs/performance.md).
 */
export function partVersionQuery(table: StatsTable, ownerId: string, range: StatsRange): SQL {
  const coverage = coarseCoverage(range)
  const inRange = ({ unit, since, until }: { unit: StatUnit; since: Date; until: Date }) =>
    sql`(r.unit = ${unit} and r.bucket >= ${since.toISOString()}::timestamptz and r.bucket < ${until.toISOString()}::timestamptz)`
  return sql`select count(*) || ' ' || coalesce(sum(hashint8extended(r.xmin::text::int8, date_part('epoch', r.bucket)::int8)), 0) as version
    from ${sql.identifier(table)} r
    where r.${ownerColumn(table)} = ${ownerId} and (${inRange({ unit: range.interval, since: range.since, until: range.until })}${coverage ? sql` or ${inRange(coverage)}` : sql``})`
}

/**
 * Where a part of a range is kept between answers (src/stats/cache.ts); its key names the table, so a part is always
 * of the figures that table's reader builds. A kept part's objects go into every answer that uses it: nothing may change them.
 */
export type StatsCache = SettledPartCache<RangePart<unknown>>

export function createStatsCache(maxBuckets?: number): StatsCache {
  return new SettledPartCache(maxBuckets)
}

/**
 * A bucket is still written while it is the newest, and a few seconds after it ended (by
 * transactions begun in it: src/stats/closing.ts); the ones before it are settled, read once and
 * then from the cache while their rows' version holds.
 */
const SETTLING_MS = 5_000

/** The range cut where its buckets stop being settled at `nowMs`: either part may be empty. */
export function splitRange(range: StatsRange, nowMs: number): { settled: StatsRange | null; open: StatsRange | null } {
  const unit = UNIT_MS[range.interval]
  const split = Math.min(Math.max(Math.floor((nowMs - SETTLING_MS) / unit) * unit, range.since.getTime()), range.until.getTime())
  return {
    settled: split > range.since.getTime() ? { ...range, until: new Date(split) } : null,
    open: split < range.until.getTime() ? { ...range, since: new Date(split) } : null,
  }
}

/**
 * The range's buckets and totals. The buckets before the newest are read from the cache while
 * their rows' version is the one they were read from (checked on every answer: a late commit is
 * never missed, only read again); the newest are read from their rows each time.
 */
async function readRange<T>(
  db: Database,
  cache: StatsCache,
  table: StatsTable,
  ownerId: string,
  range: StatsRange,
  figures: (row: BucketRow | undefined) => T,
): Promise<{ buckets: ({ start: string } & T)[]; totals: AccountFigures }> {
  const { settled, open } = splitRange(range, Date.now())
  const [rowsVersion, openPart] = await Promise.all([
    settled ? queryRows<{ version: string }>(db, partVersionQuery(table, ownerId, settled)).then(([row]) => row!.version) : null,
    open ? readPart(db, table, ownerId, open, figures) : null,
  ])
  let settledPart: RangePart<T> | null = null
  if (settled && rowsVersion !== null) {
    // One entry per owner, interval and span: a range that slides with the clock (the last 24 hours)
    // replaces its previous minute's entry rather than leaving it behind. The part's bounds are part of its version.
    const key = `${table} ${ownerId} ${range.interval} ${range.until.getTime() - range.since.getTime()}`
    const version = `${settled.since.getTime()} ${settled.until.getTime()} ${rowsVersion}`
    settledPart = (cache.get(key, version) as RangePart<T> | undefined) ?? null
    if (!settledPart) {
      // Read after the version, never alongside it: rows read earlier than their version could be older than it.
      settledPart = await readPart(db, table, ownerId, settled, figures)
      cache.set(key, version, settledPart, settledPart.buckets.length)
    }
  }
  const parts = [settledPart, openPart].filter((part) => part !== null)
  return { buckets: parts.flatMap((part) => part.buckets), totals: totalsOf(parts.map((part) => part.totals)) }
}

const rangeFields = (range: StatsRange) => ({ interval: range.interval, since: range.since.toISOString(), until: range.until.toISOString() })

/** A subscription's health over the range, from its rollups (src/stats/rollups.ts); another account's is not found. */
export async function readHookStats(db: Database, cache: StatsCache, accountId: string, hookId: string, range: StatsRange): Promise<HookStats> {
  const [hook] = isId('hook', hookId)
    ? await queryRows<{ pending: number }>(
        db,
        sql`select (select count(*)::int from deliveries d where d.hook_id = h.id and d.status = 'pending') as pending
            from hooks h where h.id = ${hookId} and h.account_id = ${accountId}`,
      )
    : []
  if (!hook) throw notFound(`No subscription ${hookId} on this account.`)
  const { buckets, totals } = await readRange(db, cache, 'hook_stats', hookId, range, deliveryFigures)
  const { attempts, succeeded, failed, failures, latency_ms } = totals
  return {
    hook_id: hookId,
    ...rangeFields(range),
    pending: Number(hook.pending),
    totals: { attempts, succeeded, failed, failures, latency_ms },
    buckets,
  }
}

/** The account's health over the range: every subscription's attempts together, with its messages and events. */
export async function readAccountStats(db: Database, cache: StatsCache, accountId: string, range: StatsRange): Promise<AccountStats> {
  const [{ buckets, totals }, [pending]] = await Promise.all([
    readRange(db, cache, 'account_stats', accountId, range, accountFigures),
    queryRows<{ pending: number }>(
      db,
      // Per subscription, through the index of pending deliveries: a join may plan a scan of every delivery.
      sql`select coalesce(sum(p.n), 0)::int as pending from hooks h
          cross join lateral (select count(*) as n from deliveries d where d.hook_id = h.id and d.status = 'pending') p
          where h.account_id = ${accountId}`,
    ),
  ])
  return { account_id: accountId, ...rangeFields(range), pending: Number(pending?.pending ?? 0), totals, buckets }
}
