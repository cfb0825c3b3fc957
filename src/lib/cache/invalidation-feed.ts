import { sql } from 'drizzle-orm'
import { queryRows, type Database, type DatabaseTransaction } from '../db/client.ts'
import { cacheInvalidations } from '../db/schema.ts'
import type { Logger } from '../runtime/logger.ts'

export type InvalidationKind = 'api_key' | 'account' | 'grant' | 'signing_key'

/** Call inside the transaction that makes the change, so the two commit together. */
export async function recordInvalidation(db: Database | DatabaseTransaction, kind: InvalidationKind, subjectId: string): Promise<void> {
  await db.insert(cacheInvalidations).values({ kind, subjectId })
}

/**
 * Re-reading a whole window each poll (rather than "after the last id seen") means a change
 * whose transaction committed late, behind a later one, is still seen.
 */
const LOOKBACK_SECONDS = 30

export async function recentInvalidations(db: Database): Promise<{ kind: string; subject_id: string }[]> {
  return queryRows(
    db,
    sql`select kind, subject_id from ${cacheInvalidations}
        where created_at > clock_timestamp() - make_interval(secs => ${LOOKBACK_SECONDS})`,
  )
}

export interface InvalidationFeed {
  /** True while the last successful poll is recent enough for cached entries to be trusted. */
  isFresh(): boolean
  /** Polls at once: for changes this process made through another path (the CLI socket). */
  pollNow(): Promise<void>
  stop(): void
}

export interface InvalidationFeedOptions {
  db: Database
  logger: Logger
  onInvalidated(kind: string, subjectId: string): void
  /** Drop every cached entry: called when polling resumes after the feed went stale. */
  onResync(): void
  intervalMs?: number
  /** Must stay under the promised revocation bound (5 s) minus one interval. */
  staleAfterMs?: number
  now?: () => number
}

/**
 * Polls cache_invalidations and evicts what changed, so a revoked credential stops working on
 * every instance within about a second. While polls fail, the feed reports itself stale and
 * callers bypass their caches: an outage of the feed never extends the life of a revoked key.
 */
export async function startInvalidationFeed(options: InvalidationFeedOptions): Promise<InvalidationFeed> {
  const { db, logger, onInvalidated, onResync, intervalMs = 1000, staleAfterMs = 3500, now = Date.now } = options
  let lastSuccess = Number.NEGATIVE_INFINITY
  let stopped = false
  let timer: ReturnType<typeof setTimeout> | undefined

  const isFresh = () => now() - lastSuccess <= staleAfterMs

  const poll = async () => {
    const startedAt = now()
    try {
      const rows = await recentInvalidations(db)
      if (!isFresh()) onResync()
      for (const row of rows) onInvalidated(row.kind, row.subject_id)
      lastSuccess = startedAt
    } catch (error) {
      logger.warn('cache invalidation poll failed', { error: String(error) })
    }
  }

  const loop = async () => {
    await poll()
    if (!stopped) timer = setTimeout(loop, intervalMs)
  }
  await loop()

  return {
    isFresh,
    pollNow: poll,
    stop() {
      stopped = true
      clearTimeout(timer)
    },
  }
}
