import { TtlCache } from '../lib/cache/ttl-cache.ts'
import type { Database } from '../lib/db/client.ts'
import { findAccount, toAccountResource, type AccountResource } from './service.ts'

/**
 * Accounts change rarely and are read on every `GET /account`; renames reach other instances
 * through the invalidation feed, so the TTL only bounds memory, not staleness. Entries are the
 * ready resource, so a hit formats nothing.
 */
export function createAccountReader(db: Database, now?: () => number) {
  const cache = new TtlCache<AccountResource>({ maxEntries: 50_000, ttlMs: 10 * 60_000, now })
  return {
    cache,
    async read(accountId: string, trustCache: boolean): Promise<AccountResource | null> {
      const cached = trustCache ? cache.get(accountId) : undefined
      if (cached) return cached
      const account = await findAccount(db, accountId)
      if (!account) return null
      const resource = toAccountResource(account)
      cache.set(accountId, resource)
      return resource
    },
  }
}

export type AccountReader = ReturnType<typeof createAccountReader>
