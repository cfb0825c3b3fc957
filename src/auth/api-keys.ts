import { and, desc, eq, isNull, lt, sql } from 'drizzle-orm'
import type { Database } from '../lib/db/client.ts'
import { apiKeys } from '../lib/db/schema.ts'
import { recordInvalidation } from '../lib/cache/invalidation-feed.ts'
import { newSecret, sha256Hex } from '../lib/security/crypto.ts'
import { newId } from '../lib/db/ids.ts'
import { isForeignKeyViolation } from '../lib/db/errors.ts'
import { ApiError } from '../lib/http/errors.ts'
import { readPage, type Page } from '../lib/http/pagination.ts'

export const API_KEY_PREFIX = 'sk_live_'
/** Enough of the secret to recognise a key in a list, far too little to guess the rest. */
const DISPLAYED_SECRET_CHARS = API_KEY_PREFIX.length + 4

export type ApiKey = Omit<typeof apiKeys.$inferSelect, 'secretHash'>

/** Every column but the hash: what callers of this module ever see of a key. */
const apiKeyColumns = {
  id: apiKeys.id,
  accountId: apiKeys.accountId,
  name: apiKeys.name,
  secretPrefix: apiKeys.secretPrefix,
  createdAt: apiKeys.createdAt,
  revokedAt: apiKeys.revokedAt,
  lastUsedAt: apiKeys.lastUsedAt,
}

export interface CreatedApiKey {
  key: ApiKey
  /** Shown once, at creation; only its hash is stored. */
  secret: string
}

export async function createApiKey(db: Database, input: { accountId: string; name?: string }): Promise<CreatedApiKey> {
  const secret = newSecret(API_KEY_PREFIX)
  try {
    const [key] = await db
      .insert(apiKeys)
      .values({
        id: newId('key'),
        accountId: input.accountId,
        name: input.name ?? null,
        secretPrefix: secret.slice(0, DISPLAYED_SECRET_CHARS),
        secretHash: sha256Hex(secret),
      })
      .returning(apiKeyColumns)
    return { key: key!, secret }
  } catch (error) {
    if (isForeignKeyViolation(error)) throw new ApiError(404, 'not_found', `No account ${input.accountId}.`)
    throw error
  }
}

export async function listApiKeys(db: Database, accountId: string): Promise<ApiKey[]> {
  return db
    .select(apiKeyColumns)
    .from(apiKeys)
    .where(eq(apiKeys.accountId, accountId))
    .orderBy(desc(apiKeys.id))
}

/** The account's active keys, newest first, a page at a time (`GET /account/{id}/keys`). */
export async function listActiveApiKeys(db: Database, accountId: string, page: { limit?: number; cursor?: string }): Promise<Page<ApiKey>> {
  return readPage(
    page,
    'key',
    (before, take) =>
      db
        .select(apiKeyColumns)
        .from(apiKeys)
        .where(and(eq(apiKeys.accountId, accountId), isNull(apiKeys.revokedAt), before ? lt(apiKeys.id, before) : undefined))
        .orderBy(desc(apiKeys.id))
        .limit(take),
    (key) => key,
  )
}

/**
 * Marks the key revoked and records a cache invalidation in the same transaction, so every
 * instance evicts it within seconds. Returns false when there was no active key with that id
 * (in `accountId`, when given: the API's callers reach only their own account's keys).
 */
export async function revokeApiKey(db: Database, keyId: string, accountId?: string): Promise<boolean> {
  return db.transaction(async (tx) => {
    const revoked = await tx
      .update(apiKeys)
      .set({ revokedAt: sql`now()` })
      .where(and(eq(apiKeys.id, keyId), isNull(apiKeys.revokedAt), accountId === undefined ? undefined : eq(apiKeys.accountId, accountId)))
      .returning({ id: apiKeys.id })
    if (revoked.length === 0) return false
    await recordInvalidation(tx, 'api_key', keyId)
    return true
  })
}

export interface ActiveApiKey {
  keyId: string
  accountId: string
  secretHash: string
}

/** Built once per database: this lookup runs on every cache miss of the authentication path. */
export function prepareActiveKeyLookup(db: Database): (secretHash: string) => Promise<ActiveApiKey | null> {
  const statement = db
    .select({ keyId: apiKeys.id, accountId: apiKeys.accountId, secretHash: apiKeys.secretHash })
    .from(apiKeys)
    .where(and(eq(apiKeys.secretHash, sql.placeholder('secretHash')), isNull(apiKeys.revokedAt)))
    .prepare('active_api_key_by_hash')
  return async (secretHash) => {
    const [row] = await statement.execute({ secretHash })
    return row ?? null
  }
}
