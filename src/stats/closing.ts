import { sql } from 'drizzle-orm'
import { queryRows, type Database } from '../lib/db/client.ts'
import type { Logger } from '../lib/runtime/logger.ts'
import { startPeriodicSweep } from '../lib/runtime/sweep.ts'
import { parseHistogram, percentiles } from './histogram.ts'
import { addedCounts, type StatUnit } from './rollups.ts'

/**
 * A bucket's figures stop changing once it is over: its p50/p95/p99 are then stored in its row,
 * and a read of a day by the minute fetches three integers per minute instead of 1,440 latency
 * histograms (docs/performance.md). A transaction begun in a bucket may still commit into it
 * after it ended; its upsert sets the row's percentiles back to null (src/stats/rollups.ts), the
 * reader then computes them from the histogram, and the next sweep stores them again. So the
 * stored figures are never stale, only sometimes absent.
 *
 * An account's rows are per kind of writer while their bucket is open (src/stats/rollups.ts),
 * so a day by the minute was two or three rows a minute; once closed, the sweep merges them into
 * one row of kind `closed` (mergeClosedAccountRows), halving what an account's answer reads.
 */
const UNIT_MS: Record<StatUnit, number> = { minute: 60_000, hour: 3_600_000, day: 86_400_000 }
/** How many closed buckets of each unit a sweep looks at, newest first: a late commit into an older one is read from its histogram. */
const LOOKBACK: Record<StatUnit, number> = { minute: 10, hour: 3, day: 2 }
/** A bucket is swept this long after its end, when the transactions begun in it have committed. */
const SETTLE_MS = 5_000
const SWEEP_INTERVAL_MS = 30_000
const ROWS_PER_ROUND = 1000

export interface ClosedBucket {
  unit: StatUnit
  bucket: string
}

/** The buckets of each unit that ended at least SETTLE_MS before `now`, the LOOKBACK newest of each. */
export function closedBuckets(now: Date): ClosedBucket[] {
  const buckets: ClosedBucket[] = []
  for (const unit of ['minute', 'hour', 'day'] as const) {
    const size = UNIT_MS[unit]
    const lastStart = Math.floor((now.getTime() - SETTLE_MS) / size) * size - size
    for (let i = 0; i < LOOKBACK[unit]; i++) buckets.push({ unit, bucket: new Date(lastStart - i * size).toISOString() })
  }
  return buckets
}

/** Each table's rows by primary key: an account's bucket can hold a closed row and a late row of a kind beside it. */
const TABLES = [
  { table: 'hook_stats', key: 'hook_id', kind: sql`''` },
  { table: 'account_stats', key: 'account_id', kind: sql`s.kind` },
] as const

const bucketList = (buckets: readonly ClosedBucket[]) => sql`jsonb_to_recordset(${JSON.stringify(buckets)}::jsonb) as c(unit text, bucket timestamptz)`

/**
 * Moves the figures of an account's rows of each kind of writer in these buckets into the
 * bucket's one `closed` row, adding them to what it holds, and deletes them, in one statement: a
 * figure is in exactly one row before and after. A transaction begun in the bucket that commits
 * later writes a row of its kind again, which the reader adds to the closed row
 * (src/stats/service.ts) and the next sweep merges. Rows another transaction holds are skipped,
 * as below. Returns how many rows it merged.
 */
export async function mergeClosedAccountRows(db: Database, buckets: readonly ClosedBucket[]): Promise<number> {
  let merged = 0
  for (;;) {
    const [row] = await queryRows<{ n: number }>(
      db,
      sql`with taken as (
            select s.ctid as row_id from ${bucketList(buckets)} join account_stats s on s.bucket = c.bucket and s.unit = c.unit
            where s.kind <> 'closed'
            order by s.account_id, s.unit, s.bucket, s.kind limit ${ROWS_PER_ROUND}
            for update of s skip locked
          ),
          removed as (
            delete from account_stats s using taken where s.ctid = taken.row_id
            returning s.account_id, s.unit, s.bucket, s.attempts, s.succeeded, s.messages_sent, s.failures, s.latency, s.events
          ),
          entries as (
            select account_id, unit, bucket, 'failures' as map, key, value::bigint as n from removed, jsonb_each_text(failures)
            union all select account_id, unit, bucket, 'latency', key, value::bigint from removed, jsonb_each_text(latency)
            union all select account_id, unit, bucket, 'events', key, value::bigint from removed, jsonb_each_text(events)
          ),
          maps as (
            select account_id, unit, bucket,
              jsonb_object_agg(key, n) filter (where map = 'failures') as failures,
              jsonb_object_agg(key, n) filter (where map = 'latency') as latency,
              jsonb_object_agg(key, n) filter (where map = 'events') as events
            from (select account_id, unit, bucket, map, key, sum(n) as n from entries group by 1, 2, 3, 4, 5) e
            group by 1, 2, 3
          ),
          added as (
            insert into account_stats (account_id, unit, bucket, kind, attempts, succeeded, messages_sent, failures, latency, events)
            select t.account_id, t.unit, t.bucket, 'closed', t.attempts, t.succeeded, t.sent,
              coalesce(m.failures, '{}'::jsonb), coalesce(m.latency, '{}'::jsonb), coalesce(m.events, '{}'::jsonb)
            from (select account_id, unit, bucket, sum(attempts)::int as attempts, sum(succeeded)::int as succeeded, sum(messages_sent)::int as sent
                  from removed group by 1, 2, 3) t
            left join maps m on m.account_id = t.account_id and m.unit = t.unit and m.bucket = t.bucket
            order by 1, 2, 3
            on conflict (account_id, unit, bucket, kind) do update set
              attempts = account_stats.attempts + excluded.attempts, succeeded = account_stats.succeeded + excluded.succeeded,
              messages_sent = account_stats.messages_sent + excluded.messages_sent,
              failures = ${addedCounts(sql`account_stats.failures`, sql`excluded.failures`)},
              latency = ${addedCounts(sql`account_stats.latency`, sql`excluded.latency`)},
              events = ${addedCounts(sql`account_stats.events`, sql`excluded.events`)},
              p50_ms = case when excluded.attempts = 0 then account_stats.p50_ms end,
              p95_ms = case when excluded.attempts = 0 then account_stats.p95_ms end,
              p99_ms = case when excluded.attempts = 0 then account_stats.p99_ms end
            returning 1
          )
          select count(*)::int as n from removed`,
    )
    const n = Number(row?.n ?? 0)
    merged += n
    if (n < ROWS_PER_ROUND) return merged
  }
}

/**
 * Stores the percentiles of the rows of these buckets that have attempts and none stored. The
 * update takes only rows that still hold the attempts it counted (a late commit in between is
 * left for the next sweep) and skips rows another transaction holds: it never waits on the
 * delivery path. Returns how many rows it filled.
 */
export async function storeClosedPercentiles(db: Database, buckets: readonly ClosedBucket[]): Promise<number> {
  const candidates = bucketList(buckets)
  let stored = 0
  for (const { table, key, kind } of TABLES) {
    let after = sql`true`
    for (;;) {
      const rows = await queryRows<{ key: string; unit: string; bucket: string; kind: string; attempts: number; latency: string }>(
        db,
        sql`select s.${sql.identifier(key)} as key, s.unit, s.bucket::text as bucket, ${kind} as kind, s.attempts, s.latency::text as latency
            from ${candidates} join ${sql.identifier(table)} s on s.bucket = c.bucket and s.unit = c.unit
            where s.p50_ms is null and s.attempts > 0 and ${after}
            order by 1, 2, 3, 4 limit ${ROWS_PER_ROUND}`,
      )
      if (rows.length === 0) break
      const figures = rows.flatMap(({ key, unit, bucket, kind, attempts, latency }) => {
        const found = percentiles(parseHistogram(latency))
        return found ? [{ key, unit, bucket, kind, attempts: Number(attempts), ...found }] : []
      })
      const updated = await queryRows<{ n: number }>(
        db,
        sql`with figures as (
              select * from jsonb_to_recordset(${JSON.stringify(figures)}::jsonb) as f(key text, unit text, bucket timestamptz, kind text, attempts int, p50 int, p95 int, p99 int)
            ),
            free as (
              select s.ctid as row_id, f.p50, f.p95, f.p99
              from figures f join ${sql.identifier(table)} s on s.${sql.identifier(key)} = f.key and s.unit = f.unit and s.bucket = f.bucket and ${kind} = f.kind
              where s.attempts = f.attempts and s.p50_ms is null
              for update of s skip locked
            ),
            filled as (
              update ${sql.identifier(table)} s set p50_ms = free.p50, p95_ms = free.p95, p99_ms = free.p99
              from free where s.ctid = free.row_id
              returning 1
            )
            select count(*)::int as n from filled`,
      )
      stored += Number(updated[0]?.n ?? 0)
      if (rows.length < ROWS_PER_ROUND) break
      const last = rows[rows.length - 1]!
      after = sql`(s.${sql.identifier(key)}, s.unit, s.bucket, ${kind}) > (${last.key}, ${last.unit}, ${last.bucket}::timestamptz, ${last.kind})`
    }
  }
  return stored
}

/** Closes these buckets: an account's rows merged, then the percentiles stored (the merged rows' among them). */
export async function closeBuckets(db: Database, buckets: readonly ClosedBucket[]): Promise<{ merged: number; stored: number }> {
  const merged = await mergeClosedAccountRows(db, buckets)
  return { merged, stored: await storeClosedPercentiles(db, buckets) }
}

/** Closes the buckets that closed lately, at start and every 30 s. */
export function startClosingSweep(options: { db: Database; logger: Logger }): { stop(): Promise<void> } {
  return startPeriodicSweep({
    sweep: () => closeBuckets(options.db, closedBuckets(new Date())),
    intervalMs: SWEEP_INTERVAL_MS,
    logger: options.logger,
    failure: 'closing the rollups\' closed buckets failed',
  })
}
