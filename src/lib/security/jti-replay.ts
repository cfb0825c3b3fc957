import { sql } from 'drizzle-orm'
import { queryRows, type Database } from '../db/client.ts'

/** Longer than any identifier is worth remembering: a client that sends one is refused, not stored. */
export const MAX_JTI_LENGTH = 256

/**
 * Records that `jti` was used in `namespace` until `expiresAt` (the token's own expiry: after it
 * the token is refused for being expired, so the identifier need not be remembered). Answers
 * whether this was the first use: one insert, so two instances presented the same token at the
 * same moment cannot both accept it (RFC 7523 §3, RFC 9449 §11.1).
 */
export async function firstUseOfJti(db: Database, use: { namespace: string; jti: string; expiresAt: Date }): Promise<boolean> {
  if (use.jti.length === 0 || use.jti.length > MAX_JTI_LENGTH) return false
  const rows = await queryRows<{ jti: string }>(
    db,
    sql`insert into used_jtis (namespace, jti, expires_at) values (${use.namespace}, ${use.jti}, ${use.expiresAt.toISOString()}::timestamptz)
        on conflict (namespace, jti) do nothing returning jti`,
  )
  return rows.length === 1
}

/** Forgets identifiers whose tokens have expired. */
export async function deleteExpiredJtis(db: Database): Promise<number> {
  const rows = await queryRows<{ n: number }>(db, sql`with gone as (delete from used_jtis where expires_at < now() returning 1) select count(*)::int as n from gone`)
  return Number(rows[0]?.n ?? 0)
}
