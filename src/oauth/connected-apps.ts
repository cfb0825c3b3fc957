import { and, desc, eq, isNull, lt } from 'drizzle-orm'
import type { Static } from 'elysia'
import type { Database } from '../lib/db/client.ts'
import { grants, oauthClients } from '../lib/db/schema.ts'
import { isId } from '../lib/db/ids.ts'
import { readPage, type Page } from '../lib/http/pagination.ts'
import { revokeGrant } from './revocation.ts'
import type { ConnectedAppSchema } from './schemas.ts'

export type ConnectedApp = Static<typeof ConnectedAppSchema>

/** The account's grants that still work, newest first: which apps and agents hold access, and who allowed them. */
export async function listConnectedApps(db: Database, accountId: string, page: { limit?: number; cursor?: string }): Promise<Page<ConnectedApp>> {
  return readPage(
    page,
    'grt',
    (before, take) =>
      db
        .select({
          id: grants.id,
          clientId: grants.clientId,
          clientName: oauthClients.clientName,
          scope: grants.scope,
          userId: grants.userId,
          createdAt: grants.createdAt,
          lastUsedAt: grants.lastUsedAt,
        })
        .from(grants)
        .innerJoin(oauthClients, eq(oauthClients.id, grants.clientId))
        .where(and(eq(grants.accountId, accountId), isNull(grants.revokedAt), before ? lt(grants.id, before) : undefined))
        .orderBy(desc(grants.id))
        .limit(take),
    (row) => ({
      id: row.id,
      client_id: row.clientId,
      client_name: row.clientName,
      scope: row.scope,
      user_id: row.userId,
      created_at: row.createdAt.toISOString(),
      last_used_at: row.lastUsedAt?.toISOString() ?? null,
    }),
  )
}

/** Whether `grantId` is one of the account's grants that still work. */
export async function isActiveGrant(db: Database, accountId: string, grantId: string): Promise<boolean> {
  if (!isId('grt', grantId)) return false
  const [grant] = await db
    .select({ id: grants.id })
    .from(grants)
    .where(and(eq(grants.id, grantId), eq(grants.accountId, accountId), isNull(grants.revokedAt)))
  return grant !== undefined
}

/**
 * Cuts an app off: revokes its grant (every access and refresh token issued from it) if it belongs
 * to the account and still works. False when there is no such grant, as for another account's.
 */
export async function disconnectApp(db: Database, accountId: string, grantId: string): Promise<boolean> {
  if (!isId('grt', grantId)) return false
  return db.transaction(async (tx) => {
    const [grant] = await tx
      .select({ id: grants.id })
      .from(grants)
      .where(and(eq(grants.id, grantId), eq(grants.accountId, accountId), isNull(grants.revokedAt)))
      .for('update')
    if (!grant) return false
    await revokeGrant(tx, grantId, 'revoked by the account owner')
    return true
  })
}
