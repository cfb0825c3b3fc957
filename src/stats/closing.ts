import { sql } from 'drizzle-orm'
import { queryRows, type Database } from '../lib/db/client.ts'
import type { Logger } from '../lib/runtime/logger.ts'
import { startPeriodicSweep } from '../lib/runtime/sweep.ts'
import { parseHistogram, percentiles } from './histogram.ts'
import type { StatUnit } from './rollups.ts'

/**
 * A bucket's figures stop changing once it is over: its p50/p95/p99 are then stored in its row,
 * and a read of a day by the minute fetches three integers per minute instead of 1,440 latency
 * histograms (docs/performance.md). A transaction begun in a bucket may still commit into it
 * after it ended; its upsert sets the row's percentiles back to null (src/stats/rollups.ts), the
 * reader then computes them from the histogram, and the next sweep stores them again. So the
 * stored figures are never stale, only sometimes absent.
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

const TABLES = [
  { table: 'hook_stats', key: 'hook_id', only: sql`true` },
  { table: 'account_stats', key: 'account_id', only: sql`s.kind = 'attempts'` },
] as const

/**
 * Stores the percentiles of the rows of these buckets that have attempts and none stored. The
 * update takes only rows that still hold the attempts it counted (a late commit in between is
 * left for the next sweep) and skips rows another transaction holds: it never waits on the
 * delivery path. Returns how many rows it filled.
 */
export async function storeClosedPercentiles(db: Database, buckets: readonly ClosedBucket[]): Promise<number> {
  const candidates = sql`jsonb_to_recordset(${JSON.stringify(buckets)}::jsonb) as c(unit text, bucket timestamptz)`
  let stored = 0
  for (const { table, key, only } of TABLES) {
    let after = sql`true`
    for (;;) {
      const rows = await queryRows<{ key: string; unit: string; bucket: string; attempts: number; latency: string }>(
        db,
        sql`select s.${sql.identifier(key)} as key, s.unit, s.bucket::text as bucket, s.attempts, s.latency::text as latency
            from ${candidates} join ${sql.identifier(table)} s on s.bucket = c.bucket and s.unit = c.unit
            where s.p50_ms is null and s.attempts > 0 and ${only} and ${after}
            order by 1, 2, 3 limit ${ROWS_PER_ROUND}`,
      )
      if (rows.length === 0) break
      const figures = rows.flatMap(({ key, unit, bucket, attempts, latency }) => {
        const found = percentiles(parseHistogram(latency))
        return found ? [{ key, unit, bucket, attempts: Number(attempts), ...found }] : []
      })
      const updated = await queryRows<{ n: number }>(
        db,
        sql`with figures as (
              select * from jsonb_to_recordset(${JSON.stringify(figures)}::jsonb) as f(key text, unit text, bucket timestamptz, attempts int, p50 int, p95 int, p99 int)
            ),
            free as (
              select s.ctid as row_id, f.p50, f.p95, f.p99
              from figures f join ${sql.identifier(table)} s on s.${sql.identifier(key)} = f.key and s.unit = f.unit and s.bucket = f.bucket
              where s.attempts = f.attempts and s.p50_ms is null and ${only}
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
      after = sql`(s.${sql.identifier(key)}, s.unit, s.bucket) > (${last.key}, ${last.unit}, ${last.bucket}::timestamptz)`
    }
  }
  return stored
}

/** Stores the percentiles of the buckets that closed lately, at start and every 30 s. */
export function startPercentileSweep(options: { db: Database; logger: Logger }): { stop(): Promise<void> } {
  return startPeriodicSweep({
    sweep: () => storeClosedPercentiles(options.db, closedBuckets(new Date())),
    intervalMs: SWEEP_INTERVAL_MS,
    logger: options.logger,
    failure: 'storing the percentiles of closed buckets failed',
  })
}
