import { sql } from 'drizzle-orm'
import type { Database } from '../lib/db/client.ts'
import { DELIVERIES_CHANNEL } from './store.ts'

/**
 * Tells the delivery workers of other processes on this PostgreSQL that deliveries were
 * committed: `NOTIFY` after the commit, at most once per `intervalMs` (a burst of commits
 * is one notification, sent when the interval ends). Sent after the commit, not inside the
 * transaction, because PostgreSQL commits notifying transactions one at a time, cluster-wide.
 * A notification lost to a crash between the commit and this is made up by the workers' poll.
 *
 * Its payload is `origin`, this process's: the process wakes its own worker directly (naming the
 * subscriptions of a narrow settlement), so its worker ignores these. Before, each commit claimed
 * twice in the worker of the process that made it, and in a storm a third of all claims were
 * such second ones and found nothing, while a healthy subscription's claim waited behind them
 * (docs/performance.md, issue 37, thirteenth pass).
 */
export function createCommitNotifier(db: Database, options: { intervalMs: number; origin: string; onError(error: unknown): void }) {
  let timer: ReturnType<typeof setTimeout> | undefined
  let pending = false
  const send = () => {
    db.execute(sql`select pg_notify(${DELIVERIES_CHANNEL}, ${options.origin})`).catch(options.onError)
  }
  const tick = () => {
    if (pending) {
      pending = false
      send()
      timer = setTimeout(tick, options.intervalMs)
    } else {
      timer = undefined
    }
  }
  return {
    committed() {
      if (timer) {
        pending = true
        return
      }
      send()
      timer = setTimeout(tick, options.intervalMs)
    },
    stop() {
      clearTimeout(timer)
    },
  }
}
