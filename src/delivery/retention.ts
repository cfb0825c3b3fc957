import { sql } from 'drizzle-orm'
import { queryRows, type Database } from '../lib/db/client.ts'
import { lowestIdAt } from '../lib/db/ids.ts'
import type { Logger } from '../lib/runtime/logger.ts'
import { startPeriodicSweep } from '../lib/runtime/sweep.ts'

const RETENTION_BATCH = 1000
const RETENTION_INTERVAL_MS = 60 * 60_000

/**
 * Deletes the events older than `retentionDays`, with their deliveries and attempt logs (the
 * foreign keys cascade), in batches of a thousand, oldest first. An event with a delivery still
 * pending is kept until it is settled. Event ids begin with their time, so "older than" is a
 * range of the primary key, not a scan. Messages are kept: they are the account's record. The
 * health rollups of the same age go with them. Returns how many events were deleted.
 */
export async function deleteExpiredEvents(db: Database, options: { retentionDays: number; now?: number }): Promise<number> {
  const cutoff = lowestIdAt('evt', (options.now ?? Date.now()) - options.retentionDays * 86_400_000)
  let deleted = 0
  for (;;) {
    const rows = await queryRows<{ id: string }>(
      db,
      sql`delete from events where id in (
            select e.id from events e
            where e.id < ${cutoff}
              and not exists (select 1 from deliveries d where d.event_id = e.id and d.status = 'pending')
            order by e.id
            limit ${RETENTION_BATCH}
            for update skip locked
          )
          returning id`,
    )
    deleted += rows.length
    if (rows.length < RETENTION_BATCH) break
  }
  await deleteExpiredRollups(db, new Date((options.now ?? Date.now()) - options.retentionDays * 86_400_000))
  return deleted
}

/**
 * The health rollups (src/stats/rollups.ts) are kept as long as the attempt log they count:
 * a bucket goes once it ended before the cutoff, in batches of a thousand rows.
 */
async function deleteExpiredRollups(db: Database, cutoff: Date): Promise<void> {
  const ended = sql`bucket + case unit when 'minute' then interval '1 minute' when 'hour' then interval '1 hour' else interval '1 day' end <= ${cutoff.toISOString()}::timestamptz`
  for (const table of ['hook_stats', 'account_stats']) {
    for (;;) {
      const rows = await queryRows<{ n: number }>(
        db,
        sql`with gone as (
              delete from ${sql.identifier(table)} where ctid in (
                select ctid from ${sql.identifier(table)} where bucket < ${cutoff.toISOString()}::timestamptz and ${ended} limit ${RETENTION_BATCH} for update skip locked)
              returning 1)
            select count(*)::int as n from gone`,
      )
      if (Number(rows[0]?.n ?? 0) < RETENTION_BATCH) break
    }
  }
}

/** Runs `deleteExpiredEvents` at start and every hour; an instance stopped for a while catches up at its next start. */
export function startEventRetention(options: { db: Database; retentionDays: number; logger: Logger }): { stop(): Promise<void> } {
  return startPeriodicSweep({
    sweep: async () => {
      const deleted = await deleteExpiredEvents(options.db, options)
      if (deleted > 0) options.logger.info('deleted expired events', { count: deleted, retention_days: options.retentionDays })
    },
    intervalMs: RETENTION_INTERVAL_MS,
    logger: options.logger,
    failure: 'deleting expired events failed',
  })
}
