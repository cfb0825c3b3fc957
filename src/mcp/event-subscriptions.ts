import { and, asc, eq, ne, sql } from 'drizzle-orm'
import { t, type Static } from 'elysia'
import type { Database, DatabaseTransaction } from '../lib/db/client.ts'
import { queryRows } from '../lib/db/client.ts'
import { hooks } from '../lib/db/schema.ts'
import { isId } from '../lib/db/ids.ts'
import { describeError, type Logger } from '../lib/runtime/logger.ts'
import type { SecretBox } from '../lib/security/secret-box.ts'
import { startPeriodicSweep } from '../lib/runtime/sweep.ts'
import { createConcurrencyLimit } from '../lib/runtime/concurrency.ts'
import { circuitState } from '../delivery/circuit.ts'
import { sendWebhook, type SendOptions } from '../delivery/send.ts'
import { EVENT_TYPES } from '../messages/event-types.ts'
import { CONTROL_MESSAGE_TIMEOUT_MS, controlMessageId, SUBSCRIPTION_ID_HEADER, terminatedBody } from '../delivery/event-wire.ts'

/** docs/api.md#connected-apps: an agent's MCP event subscription, as its account's owner sees it. */
export const EventSubscriptionSchema = t.Object(
  {
    id: t.String({ description: 'evs_…: the id the agent gets from events/subscribe and every delivery carries in X-MCP-Subscription-Id.' }),
    grant_id: t.String(),
    event: t.UnionEnum(EVENT_TYPES),
    arguments: t.Record(t.String(), t.Unknown(), { description: "The subscription's arguments: its filter (docs/api.md#filters), or {}." }),
    callback_url: t.String({ description: 'Where its events are POSTed.' }),
    status: t.UnionEnum(['active', 'disabled']),
    circuit: t.UnionEnum(['closed', 'open', 'half_open']),
    expires_at: t.String({ format: 'date-time', description: 'The agent refreshes it before this, or it ends.' }),
    created_at: t.String({ format: 'date-time' }),
  },
  { title: 'EventSubscription' },
)
type EventSubscription = Static<typeof EventSubscriptionSchema>
export const EventSubscriptionListSchema = t.Object({ data: t.Array(EventSubscriptionSchema) }, { title: 'EventSubscriptionList' })

/** The subscriptions of one of the account's grants, oldest first (a grant holds at most 25: no pages). Ending ones are not shown. */
export async function listEventSubscriptions(db: Database, accountId: string, grantId: string): Promise<EventSubscription[]> {
  if (!isId('grt', grantId)) return []
  const rows = await db
    .select()
    .from(hooks)
    .where(and(eq(hooks.grantId, grantId), eq(hooks.accountId, accountId), ne(hooks.status, 'terminated')))
    .orderBy(asc(hooks.createdAt), asc(hooks.id))
  return rows.map((row) => ({
    id: row.id,
    grant_id: grantId,
    event: row.event as EventSubscription['event'],
    arguments: JSON.parse(row.eventArguments ?? '{}') as Record<string, unknown>,
    callback_url: row.targetUrl,
    status: row.status as EventSubscription['status'],
    circuit: circuitState(row),
    expires_at: row.expiresAt!.toISOString(),
    created_at: row.createdAt.toISOString(),
  }))
}

/**
 * Ends subscriptions now: nothing more is claimed for them (the claim takes active ones only),
 * and the sweep below tells each callback with a signed `terminated` envelope, then deletes them.
 * `where` picks them among the rows of MCP event subscriptions. Returns how many were ended.
 */
async function endEventSubscriptions(db: Database | DatabaseTransaction, where: ReturnType<typeof and>, reason: string): Promise<number> {
  const ended = await db
    .update(hooks)
    .set({ status: 'terminated', disabledReason: reason })
    .where(and(where, sql`${hooks.grantId} is not null`, ne(hooks.status, 'terminated')))
    .returning({ id: hooks.id })
  return ended.length
}

/** A revoked grant's subscriptions end with it, in the revocation's transaction (src/oauth/revocation.ts). */
export const endGrantEventSubscriptions = (db: Database | DatabaseTransaction, grantId: string) => endEventSubscriptions(db, eq(hooks.grantId, grantId), 'Access revoked')

/** The account's owner ends one of an agent's subscriptions; false when the grant holds no such subscription. */
export async function endEventSubscription(db: Database, accountId: string, grantId: string, subscriptionId: string): Promise<boolean> {
  if (!isId('evs', subscriptionId)) return false
  const where = and(eq(hooks.id, subscriptionId), eq(hooks.grantId, grantId), eq(hooks.accountId, accountId))
  return (await endEventSubscriptions(db, where, 'Ended by the account owner')) > 0
}

const SWEEP_INTERVAL_MS = 2_000
const SWEEP_BATCH = 100
/**
 * Terminated envelopes in flight at once per instance, across sweeps: a mass revocation (an owner
 * revoking an agent with many subscriptions, every grant of a client) is sent in a stream, not a burst.
 */
export const TERMINATED_ENVELOPES_IN_FLIGHT = 16

export interface EventSubscriptionSweepDeps {
  db: Database
  secretBox: SecretBox
  send: Pick<SendOptions, 'timeoutMs' | 'allowPrivate' | 'ca'>
  logger: Logger
  /** Runs an envelope's sending when its turn comes: one queue per instance (startEventSubscriptionSweep), so sweeps share the bound. */
  envelopes(send: () => Promise<void>): Promise<void>
}

/**
 * Deletes ended and expired subscriptions (their pending deliveries go with them), a hundred rows
 * per statement until none is left, and sends each ended one's callback the extension's
 * `terminated` envelope, signed, through the outbound guard. Rows are taken `FOR UPDATE SKIP
 * LOCKED`, so instances sweeping together never take one twice. The envelopes are sent beside the
 * sweep, not in its way (a callback that never answers delays no one): `sending` settles when they
 * have; at most TERMINATED_ENVELOPES_IN_FLIGHT at once (`deps.envelopes`), the rest wait their turn.
 * Each is one attempt of at most 5 s, after the row is gone: it tells a receiver that is
 * there; one that is not learns it at its next refresh, which creates the subscription afresh or is
 * refused (docs/mcp.md#events). An expired subscription gets no envelope: its client stopped refreshing.
 */
export async function sweepEventSubscriptions(deps: EventSubscriptionSweepDeps): Promise<{ removed: number; sending: Promise<void> }> {
  type Row = { id: string; target_url: string; secret_ciphertext: string; status: string; disabled_reason: string | null }
  const ended: Row[] = []
  let removed = 0
  for (;;) {
    const rows = await queryRows<Row>(
      deps.db,
      sql`delete from hooks where id in (
            select id from hooks
            where grant_id is not null and (status = 'terminated' or expires_at <= now())
            order by id limit ${SWEEP_BATCH}
            for update skip locked
          )
          returning id, target_url, secret_ciphertext, status, disabled_reason`,
    )
    removed += rows.length
    ended.push(...rows.filter((row) => row.status === 'terminated'))
    if (rows.length < SWEEP_BATCH) break
  }
  const send = { ...deps.send, timeoutMs: Math.min(deps.send.timeoutMs, CONTROL_MESSAGE_TIMEOUT_MS) }
  const sending = Promise.all(
    ended.map((row) => deps.envelopes(async () => {
      const secret = await deps.secretBox.open(row.secret_ciphertext)
      const result = await sendWebhook(
        { url: row.target_url, id: controlMessageId('terminated'), body: terminatedBody(row.disabled_reason ?? 'Ended'), keys: { scheme: 'hmac', current: secret }, headers: { [SUBSCRIPTION_ID_HEADER]: row.id } },
        send,
      )
      deps.logger.info('event subscription terminated', { subscription_id: row.id, reason: row.disabled_reason, status_code: result.status, error: result.error })
    })),
  ).then(
    () => undefined,
    (error: unknown) => deps.logger.warn('sending terminated envelopes failed', { ...describeError(error) }),
  )
  return { removed, sending }
}

/**
 * Sweeps every 2 s; stopping waits for the sweep under way and for the envelopes being sent. Those
 * still waiting for their turn are not sent: a mass revocation must not hold a shutdown for
 * minutes, and a receiver that missed its envelope learns the end at its next refresh, as one that
 * was down does (docs/mcp.md#events).
 */
export function startEventSubscriptionSweep(deps: Omit<EventSubscriptionSweepDeps, 'envelopes'>): { stop(): Promise<void> } {
  const sending = new Set<Promise<void>>()
  const limit = createConcurrencyLimit(TERMINATED_ENVELOPES_IN_FLIGHT)
  let stopping = false
  const envelopes = (send: () => Promise<void>) => limit(() => (stopping ? Promise.resolve() : send()))
  const sweep = startPeriodicSweep({
    sweep: async () => {
      const run = await sweepEventSubscriptions({ ...deps, envelopes })
      sending.add(run.sending)
      void run.sending.finally(() => sending.delete(run.sending))
    },
    intervalMs: SWEEP_INTERVAL_MS,
    logger: deps.logger,
    failure: 'sweeping MCP event subscriptions failed',
  })
  return {
    async stop() {
      stopping = true
      await sweep.stop()
      await Promise.all(sending)
    },
  }
}
