import { sql } from 'drizzle-orm'
import { queryRows, type Database } from './db/client.ts'

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
