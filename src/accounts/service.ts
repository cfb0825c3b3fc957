import { eq } from 'drizzle-orm'
import type { Static } from 'elysia'
import { AccountSchema } from './schemas.ts'
import type { Database } from '../lib/db/client.ts'
import { accounts, users } from '../lib/db/schema.ts'
import { hashPassword } from '../lib/security/crypto.ts'
import { newId } from '../lib/db/ids.ts'
import { ApiError } from '../lib/http/errors.ts'
import { isUniqueViolation } from '../lib/db/errors.ts'
import { recordInvalidation } from '../lib/cache/invalidation-feed.ts'

export type Account = typeof accounts.$inferSelect
export type User = Omit<typeof users.$inferSelect, 'passwordHash'>

export async function createAccount(db: Database, input: { name: string }): Promise<Account> {
  const [account] = await db.insert(accounts).values({ id: newId('acc'), name: input.name }).returning()
  return account!
}

export async function findAccount(db: Database, accountId: string): Promise<Account | null> {
  const [account] = await db.select().from(accounts).where(eq(accounts.id, accountId))
  return account ?? null
}

/** Renames and records the change so every instance drops its cached copy. */
export async function renameAccount(db: Database, accountId: string, name: string): Promise<Account | null> {
  return db.transaction(async (tx) => {
    const [account] = await tx.update(accounts).set({ name }).where(eq(accounts.id, accountId)).returning()
    if (account) await recordInvalidation(tx, 'account', accountId)
    return account ?? null
  })
}

export type AccountResource = Static<typeof AccountSchema>

export function toAccountResource(account: Account): AccountResource {
  return { id: account.id, name: account.name, created_at: account.createdAt.toISOString() }
}

export const normalizeEmail = (email: string) => email.trim().toLowerCase()

export async function createUser(
  db: Database,
  input: { accountId: string; email: string; password: string },
): Promise<User> {
  const passwordHash = await hashPassword(input.password)
  try {
    const [user] = await db
      .insert(users)
      .values({ id: newId('usr'), accountId: input.accountId, email: normalizeEmail(input.email), passwordHash })
      .returning({ id: users.id, accountId: users.accountId, email: users.email, createdAt: users.createdAt })
    return user!
  } catch (error) {
    if (isUniqueViolation(error)) throw new ApiError(409, 'conflict', 'A user with this email already exists.')
    throw error
  }
}
