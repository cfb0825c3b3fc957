import { sql } from 'drizzle-orm'
import { bigint, index, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'

const createdAt = () => timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow()

export const accounts = pgTable('accounts', {
  id: text('id').primaryKey(),
  name: text('name').notNull(),
  createdAt: createdAt(),
})

export const users = pgTable(
  'users',
  {
    id: text('id').primaryKey(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    /** Stored lower-cased: sign-in by email is case-insensitive. */
    email: text('email').notNull(),
    passwordHash: text('password_hash').notNull(),
    createdAt: createdAt(),
  },
  (table) => [uniqueIndex('users_email_key').on(table.email), index('users_account_id_idx').on(table.accountId)],
)

export const apiKeys = pgTable(
  'api_keys',
  {
    id: text('id').primaryKey(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    name: text('name'),
    /** The first characters of the secret, shown in listings so a key can be recognised. */
    secretPrefix: text('secret_prefix').notNull(),
    /** SHA-256 of the whole secret; the secret itself is never stored. */
    secretHash: text('secret_hash').notNull(),
    createdAt: createdAt(),
    revokedAt: timestamp('revoked_at', { withTimezone: true, mode: 'date' }),
  },
  (table) => [uniqueIndex('api_keys_secret_hash_key').on(table.secretHash), index('api_keys_account_id_idx').on(table.accountId)],
)

/**
 * One row per change to something instances hold in memory (a revoked API key, a renamed
 * account), so that every instance evicts it within seconds (src/lib/invalidation-feed.ts).
 * Rows older than the feed's look-back window are never read again.
 */
export const cacheInvalidations = pgTable(
  'cache_invalidations',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    kind: text('kind').notNull(),
    subjectId: text('subject_id').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' })
      .notNull()
      .default(sql`clock_timestamp()`),
  },
  (table) => [index('cache_invalidations_created_at_idx').on(table.createdAt)],
)
