import { eq, sql } from 'drizzle-orm'
import type { Database } from '../lib/db/client.ts'
import { apiKeys, grants } from '../lib/db/schema.ts'
import type { Logger } from '../lib/runtime/logger.ts'
import type { Caller } from './authenticator.ts'

export interface UsageRecorderDeps {
  db: Database
  logger: Logger
  /** At most one write per credential in this window (a minute): `last_used_at` is that precise. */
  intervalMs?: number
  now?: () => number
}

// Enough for every credential busy within a minute on one instance; beyond it, the oldest notes go.
const MAX_REMEMBERED = 20_000

/**
 * Writes when a credential (an API key, or a grant through its access tokens) was last used, for
 * the API keys and Connected apps lists. The authentication path is hot, so a credential is
 * written at most once per interval per instance, after the answer has left: never awaited, a
 * failed write only logged.
 */
export function createUsageRecorder(deps: UsageRecorderDeps) {
  const intervalMs = deps.intervalMs ?? 60_000
  const now = deps.now ?? Date.now
  const writtenAt = new Map<string, number>()

  const write = (update: Promise<unknown>, subject: string) =>
    update.catch((error) => deps.logger.warn('recording last use failed', { subject, error: String(error) }))

  return function noteUse(credential: Caller['credential']): void {
    const id = credential.kind === 'api_key' ? credential.id : credential.grantId
    const at = now()
    const last = writtenAt.get(id)
    if (last !== undefined && at - last < intervalMs) return
    writtenAt.delete(id)
    writtenAt.set(id, at)
    if (writtenAt.size > MAX_REMEMBERED) writtenAt.delete(writtenAt.keys().next().value!)
    if (credential.kind === 'api_key') write(deps.db.update(apiKeys).set({ lastUsedAt: sql`now()` }).where(eq(apiKeys.id, id)), id)
    else write(deps.db.update(grants).set({ lastUsedAt: sql`now()` }).where(eq(grants.id, id)), id)
  }
}

export type NoteUse = ReturnType<typeof createUsageRecorder>
