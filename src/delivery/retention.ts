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
 * range of the primary key, not a scan. Messages are kept: they are the account's record.
 * Returns how many events were deleted.
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
    if (rows.length < RETENTION_BATCH) return deleted
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
