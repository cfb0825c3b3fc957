import { sql } from 'drizzle-orm'
import { queryRows, type Database } from './client.ts'

export interface RateLimitWindow {
  /** Hits allowed per window. */
  limit: number
  windowSeconds: number
}

export interface RateLimitState {
  /** Hits counted in the current window, this one included when it was counted. */
  count: number
  limited: boolean
  /** Seconds until the window resets (for Retry-After). */
  retryAfterSeconds: number
}

/**
 * Fixed-window counters in the database, so every instance sees the same count. One statement
 * per hit: the row restarts its window when the old one has passed.
 */
export async function countHit(db: Database, key: string, window: RateLimitWindow): Promise<RateLimitState> {
  const [row] = await queryRows<{ count: number; retry_after: string }>(
    db,
    sql`insert into rate_limits (key, window_started_at, count) values (${key}, now(), 1)
        on conflict (key) do update set
          count = case when rate_limits.window_started_at <= now() - make_interval(secs => ${window.windowSeconds})
                       then 1 else rate_limits.count + 1 end,
          window_started_at = case when rate_limits.window_started_at <= now() - make_interval(secs => ${window.windowSeconds})
                       then now() else rate_limits.window_started_at end
        returning count, extract(epoch from (window_started_at + make_interval(secs => ${window.windowSeconds}) - now())) as retry_after`,
  )
  return toState(Number(row!.count), Number(row!.retry_after), window, true)
}

/** One key's hit counted by `countHits`, which `releaseHits` can give back. */
export interface CountedHit {
  key: string
  /** Hits counted in the current window, this one included. */
  count: number
  retryAfterSeconds: number
  /** The window the hit was counted in, as the database wrote it. */
  windowStartedAt: string
}

// Statements that touch several rows lock them in key order, so two of them can never wait
// for each other (a deadlock).
const inKeyOrder = (keys: readonly string[]) => [...new Set(keys)].sort()

/**
 * Counts one hit on each key (same window length) in one statement, before the work the limit
 * protects: concurrent callers each see a count that includes every hit counted before theirs,
 * so however many run at once, no more than `limit` of them see a count within the limit.
 */
export async function countHits(db: Database, keys: readonly string[], windowSeconds: number): Promise<Map<string, CountedHit>> {
  const rows = await queryRows<{ key: string; count: number; retry_after: string; window_started_at: string }>(
    db,
    sql`insert into rate_limits (key, window_started_at, count)
        values ${sql.join(inKeyOrder(keys).map((key) => sql`(${key}, now(), 1)`), sql`, `)}
        on conflict (key) do update set
          count = case when rate_limits.window_started_at <= now() - make_interval(secs => ${windowSeconds})
                       then 1 else rate_limits.count + 1 end,
          window_started_at = case when rate_limits.window_started_at <= now() - make_interval(secs => ${windowSeconds})
                       then now() else rate_limits.window_started_at end
        returning key, count, window_started_at::text as window_started_at,
          extract(epoch from (window_started_at + make_interval(secs => ${windowSeconds}) - now())) as retry_after`,
  )
  return new Map(
    rows.map((row) => [
      row.key,
      { key: row.key, count: Number(row.count), retryAfterSeconds: Math.max(1, Math.ceil(Number(row.retry_after))), windowStartedAt: row.window_started_at },
    ]),
  )
}

/**
 * Gives counted hits back (the work they reserved was refused, or succeeded and is not to be
 * counted). A key whose window has restarted since keeps its new count.
 */
export async function releaseHits(db: Database, hits: readonly CountedHit[]): Promise<void> {
  if (hits.length === 0) return
  const started = new Map(hits.map((hit) => [hit.key, hit.windowStartedAt]))
  const keys = inKeyOrder(hits.map((hit) => hit.key))
  await db.execute(
    sql`with locked as materialized (
          select key from rate_limits where key in (${sql.join(keys.map((key) => sql`${key}`), sql`, `)}) order by key for update
        )
        update rate_limits set count = greatest(rate_limits.count - 1, 0)
        from (values ${sql.join(keys.map((key) => sql`(${key}, ${started.get(key)!}::timestamptz)`), sql`, `)}) as given (key, window_started_at)
        where rate_limits.key = given.key and rate_limits.window_started_at = given.window_started_at
          and rate_limits.key in (select key from locked)`,
  )
}

/** The state without counting a hit: for limits that count failures only. */
export async function peekHits(db: Database, key: string, window: RateLimitWindow): Promise<RateLimitState> {
  const [row] = await queryRows<{ count: number; retry_after: string }>(
    db,
    sql`select count, extract(epoch from (window_started_at + make_interval(secs => ${window.windowSeconds}) - now())) as retry_after
        from rate_limits where key = ${key} and window_started_at > now() - make_interval(secs => ${window.windowSeconds})`,
  )
  if (!row) return { count: 0, limited: false, retryAfterSeconds: 0 }
  return toState(Number(row.count), Number(row.retry_after), window, false)
}

export async function clearHits(db: Database, key: string): Promise<void> {
  await db.execute(sql`delete from rate_limits where key = ${key}`)
}

function toState(count: number, retryAfter: number, window: RateLimitWindow, counted: boolean): RateLimitState {
  return {
    count,
    limited: counted ? count > window.limit : count >= window.limit,
    retryAfterSeconds: Math.max(1, Math.ceil(retryAfter)),
  }
}

/** The longest window any limit counts in (registrations, failed verifications: an hour), with room to spare. */
const STALE_AFTER_SECONDS = 86_400

/**
 * Deletes counters whose window ended long ago: they hold nothing a limit reads again (an expired
 * window restarts at the next hit), and a row is left per email, address and grant ever counted.
 */
export async function deleteStaleHits(db: Database): Promise<number> {
  const rows = await queryRows<{ key: string }>(db, sql`delete from rate_limits where window_started_at < now() - make_interval(secs => ${STALE_AFTER_SECONDS}) returning key`)
  return rows.length
}
