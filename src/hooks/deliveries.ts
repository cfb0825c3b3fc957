import { and, desc, eq, lt } from 'drizzle-orm'
import type { Static } from 'elysia'
import type { Database } from '../lib/db/client.ts'
import { deliveryAttempts } from '../lib/db/schema.ts'
import { readPage, type Page } from '../lib/pagination.ts'
import type { DeliveryAttemptSchema } from './schemas.ts'

export type DeliveryAttemptResource = Static<typeof DeliveryAttemptSchema>

/** A subscription's attempt log, newest first (the caller has checked the subscription is the account's). */
export async function listDeliveryAttempts(db: Database, hookId: string, page: { limit?: number; cursor?: string }): Promise<Page<DeliveryAttemptResource>> {
  return readPage(
    page,
    'att',
    (before, take) =>
      db
        .select()
        .from(deliveryAttempts)
        .where(and(eq(deliveryAttempts.hookId, hookId), before ? lt(deliveryAttempts.id, before) : undefined))
        .orderBy(desc(deliveryAttempts.id))
        .limit(take),
    (row) => ({
      id: row.id,
      delivery_id: row.deliveryId,
      event_id: row.eventId,
      attempted_at: row.attemptedAt.toISOString(),
      status_code: row.statusCode,
      duration_ms: row.durationMs,
      error: row.error,
      response_snippet: row.responseSnippet,
    }),
  )
}
