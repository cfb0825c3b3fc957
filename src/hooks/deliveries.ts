import { sql, type SQL } from 'drizzle-orm'
import type { Static } from 'elysia'
import { queryRows, type Database } from '../lib/db/client.ts'
import { ApiError, notFound } from '../lib/http/errors.ts'
import { isId, lowestIdAt, newId } from '../lib/db/ids.ts'
import { context } from '@opentelemetry/api'
import type { Tracing } from '../lib/runtime/tracing.ts'
import { traceAttempt } from '../delivery/attempt-span.ts'
import type { Logger } from '../lib/runtime/logger.ts'
import { readPage, type Page } from '../lib/http/pagination.ts'
import type { SecretBox } from '../lib/security/secret-box.ts'
import { markDue, targetOrigin } from '../delivery/queue.ts'
import { attemptRollups } from '../stats/rollups.ts'
import type { SendOptions } from '../delivery/send.ts'
import type { SignatureScheme, SigningKeys } from '../delivery/signing.ts'
import { createDestinations } from '../delivery/destinations/index.ts'
import { exampleEvent } from './event-catalog.ts'
import type { EventType } from '../messages/event-types.ts'
import type { DeliveryAttemptSchema, DeliveryDetailSchema, DeliverySchema, TestResultSchema } from './schemas.ts'
import { getHook, noSuchHook, type Hook } from './service.ts'

export type DeliveryResource = Static<typeof DeliverySchema>
export type DeliveryDetail = Static<typeof DeliveryDetailSchema>
export type DeliveryState = DeliveryResource['state']
type AttemptResource = Static<typeof DeliveryAttemptSchema>

/** What sending a test event and queueing deliveries again need besides the database. */
export interface DeliveryOperationDeps {
  db: Database
  secretBox: SecretBox
  logger: Logger
  /** The worker's own send settings (WEBHOOK_TIMEOUT_MS, WEBHOOK_ALLOW_PRIVATE_TARGETS, WEBHOOK_CA_FILE): a test goes out as a delivery would. */
  send: Pick<SendOptions, 'timeoutMs' | 'allowPrivate' | 'ca'>
  /** Deliveries were put back in the queue: the worker should look now. */
  deliveriesQueued(): void
  /** Set when traces are on: a test attempt is a CLIENT span of the request's trace (docs/operations.md#traces). */
  tracing?: Tracing
}

// The table says `delivered` (as the worker's decisions do); the API says `succeeded`, as docs/api.md does.
const STATE_OF_STATUS: Record<string, DeliveryState> = { pending: 'pending', delivered: 'succeeded', failed: 'failed', canceled: 'canceled' }
// The status as a literal, not a parameter: a prepared statement's generic plan cannot use the
// partial index of failed and canceled deliveries (deliveries_failed_idx) for an unknown value.
const STATUS_CONDITION: Record<DeliveryState, SQL> = {
  pending: sql`d.status = 'pending'`,
  succeeded: sql`d.status = 'delivered'`,
  failed: sql`d.status = 'failed'`,
  canceled: sql`d.status = 'canceled'`,
}

interface DeliveryRow {
  id: string
  hook_id: string
  hook_status: string
  event_id: string
  event_type: string
  test: boolean
  status: string
  attempts: number
  next_attempt_at: Date | string
  created_at: Date | string
  last_status_code: number | null
  last_duration_ms: number | null
  last_error: string | null
  last_at: Date | string | null
}

const iso = (value: Date | string) => new Date(value).toISOString()

function toDeliveryResource(row: DeliveryRow): DeliveryResource {
  const state = STATE_OF_STATUS[row.status]!
  return {
    id: row.id,
    hook_id: row.hook_id,
    event_id: row.event_id,
    event_type: row.event_type as EventType,
    state,
    test: row.test,
    attempts: Number(row.attempts),
    next_attempt_at: state === 'pending' ? iso(row.next_attempt_at) : null,
    last_attempt:
      row.last_at === null
        ? null
        : { status_code: row.last_status_code, duration_ms: Number(row.last_duration_ms), error: row.last_error, at: iso(row.last_at) },
    created_at: iso(row.created_at),
  }
}

/** Deliveries with their event's type and their latest attempt, filtered by `where` (over `d`, the delivery, and `h`, its subscription). */
const selectDeliveries = (where: SQL, tail: SQL = sql``) => sql`
  select d.id, d.hook_id, h.status as hook_status, d.event_id, e.type as event_type, e.test, d.status, d.attempts, d.next_attempt_at, d.created_at,
         a.status_code as last_status_code, a.duration_ms as last_duration_ms, a.error as last_error, a.attempted_at as last_at
  from deliveries d
  join hooks h on h.id = d.hook_id
  join events e on e.id = d.event_id
  left join lateral (
    select status_code, duration_ms, error, attempted_at from delivery_attempts
    where delivery_id = d.id order by id desc limit 1
  ) a on true
  where ${where}
  ${tail}`

/** A subscription's deliveries, one per event, newest first (the caller has checked the subscription is the account's). */
export async function listDeliveries(db: Database, hookId: string, query: { limit?: number; cursor?: string; state?: DeliveryState }): Promise<Page<DeliveryResource>> {
  return readPage(
    query,
    'dlv',
    (before, take) => {
      const conditions = [sql`d.hook_id = ${hookId}`]
      if (before) conditions.push(sql`d.id < ${before}`)
      if (query.state) conditions.push(STATUS_CONDITION[query.state])
      return queryRows<DeliveryRow>(db, selectDeliveries(sql.join(conditions, sql` and `), sql`order by d.id desc limit ${take}`))
    },
    toDeliveryResource,
  )
}

/** The one answer for a delivery that is not the caller's: another account's ids are not confirmed to exist. */
const noSuchDelivery = (deliveryId: string) => notFound(`No delivery ${deliveryId} on this account.`)

/** One delivery of the account's (of `hookId` when given), or 404. */
async function findDelivery(db: Database, accountId: string, deliveryId: string, hookId?: string): Promise<DeliveryRow> {
  if (!isId('dlv', deliveryId) || (hookId !== undefined && !isId('hook', hookId))) throw noSuchDelivery(deliveryId)
  // The account's webhooks only: an agent's MCP event subscription (docs/mcp.md#events) and its log are the agent's.
  const conditions = [sql`d.id = ${deliveryId}`, sql`h.account_id = ${accountId}`, sql`h.grant_id is null`]
  if (hookId !== undefined) conditions.push(sql`h.id = ${hookId}`)
  const [row] = await queryRows<DeliveryRow>(db, selectDeliveries(sql.join(conditions, sql` and `)))
  if (!row) throw noSuchDelivery(deliveryId)
  return row
}

/** A delivery with every attempt, oldest first, each with the first 4 KB of the receiver's answer. */
export async function getDelivery(db: Database, accountId: string, deliveryId: string, hookId?: string): Promise<DeliveryDetail> {
  const row = await findDelivery(db, accountId, deliveryId, hookId)
  const attempts = await queryRows<{ id: string; attempted_at: Date | string; status_code: number | null; duration_ms: number; error: string | null; response_snippet: string }>(
    db,
    sql`select id, attempted_at, status_code, duration_ms, error, response_snippet from delivery_attempts where delivery_id = ${row.id} order by id`,
  )
  const attemptLog: AttemptResource[] = attempts.map((attempt) => ({
    id: attempt.id,
    at: iso(attempt.attempted_at),
    status_code: attempt.status_code,
    duration_ms: Number(attempt.duration_ms),
    error: attempt.error,
    response_snippet: attempt.response_snippet,
  }))
  return { ...toDeliveryResource(row), attempt_log: attemptLog }
}

/** Retry and recover send through the worker, which sends for active subscriptions only: say so rather than queue silently. */
function requireActive(hookId: string, status: string): void {
  if (status === 'active') return
  throw new ApiError(
    409,
    'subscription_not_active',
    status === 'paused'
      ? `Subscription ${hookId} is paused: resume it (PATCH with {"status":"active"}) and try again.`
      : `Subscription ${hookId} is disabled: re-enable it (PATCH with {"status":"active"}) and try again.`,
  )
}

/**
 * Puts a delivery back in the queue, due now, whatever its state: a succeeded one is sent again
 * (the receiver sees the same webhook-id: its deduplication holds). It keeps its attempt count,
 * so if this attempt fails it follows the retry schedule from there (a delivery that had used the
 * whole schedule is failed again at once). A delivery being sent at this moment is not sent a
 * second time alongside: the attempt in flight decides what happens next.
 */
export async function retryDelivery(deps: Pick<DeliveryOperationDeps, 'db' | 'deliveriesQueued'>, accountId: string, deliveryId: string, hookId?: string): Promise<DeliveryResource> {
  const found = await findDelivery(deps.db, accountId, deliveryId, hookId)
  requireActive(found.hook_id, found.hook_status)
  // First in its subscription's queue (the claim takes the earliest next_attempt_at), so it is not
  // sent after a backlog of retries waiting for the receiver.
  const [requeued] = await queryRows<{ next_attempt_at: string }>(
    deps.db,
    sql`with requeued as (
          update deliveries set status = 'pending',
            next_attempt_at = least(now(), (select min(x.next_attempt_at) from deliveries x where x.hook_id = ${found.hook_id} and x.status = 'pending') - interval '1 millisecond')
          where id = ${found.id}
          returning hook_id, next_attempt_at
        ),
        ${probeNow(sql`select hook_id from requeued`)},
        queued as (
          ${markDue(sql`select r.hook_id, ${accountId}::text, ${targetOrigin(sql`h.target_url`)} from requeued r join hooks h on h.id = r.hook_id`)}
        )
        select next_attempt_at::text from requeued`,
  )
  deps.deliveriesQueued()
  return toDeliveryResource({ ...found, status: 'pending', next_attempt_at: new Date(requeued?.next_attempt_at ?? Date.now()) })
}

// Delivery ids begin with their event's time (src/messages/outbox.ts): a bound on the id lets the
// index skip older deliveries. A minute of slack covers the event being made before its deliveries.
const ID_SLACK_MS = 60_000

/**
 * A member of a `WITH`: the open circuits of these subscriptions let a probe through now rather
 * than at their next probe time (docs/webhooks.md#when-an-endpoint-keeps-failing), so what the
 * owner asked to send again goes out at once, as the probe; its answer opens or closes the
 * circuit as any probe's does.
 */
const probeNow = (hookIds: SQL): SQL => sql`probe_now as (
  update hooks h set circuit_probe_at = now()
  where h.id in (${hookIds}) and h.circuit_opened_at is not null and h.circuit_probe_at > now()
)`

/**
 * Puts every failed or canceled delivery of a subscription created at or after `since` back in
 * the queue, due now (after an outage of the receiver, or after its subscription was disabled
 * and re-enabled). Test deliveries are left alone. Returns how many were queued.
 */
export async function recoverDeliveries(deps: Pick<DeliveryOperationDeps, 'db' | 'deliveriesQueued'>, accountId: string, hookId: string, since: Date): Promise<number> {
  const hook = await getHook(deps.db, accountId, hookId)
  requireActive(hook.id, hook.status)
  const lowestId = lowestIdAt('dlv', Math.max(0, since.getTime() - ID_SLACK_MS))
  const requeued = await queryRows<{ id: string }>(
    deps.db,
    sql`with requeued as (
          update deliveries d set status = 'pending', next_attempt_at = now()
          from events e
          where d.hook_id = ${hook.id} and d.id >= ${lowestId} and d.created_at >= ${since.toISOString()}
            and d.status in ('failed', 'canceled') and e.id = d.event_id and not e.test
          returning d.id, d.hook_id
        ),
        ${probeNow(sql`select hook_id from requeued`)},
        queued as (
          ${markDue(sql`select r.hook_id, ${accountId}::text, ${targetOrigin(sql`h.target_url`)} from requeued r join hooks h on h.id = r.hook_id`)}
        )
        select id from requeued`,
  )
  if (requeued.length > 0) deps.deliveriesQueued()
  return requeued.length
}

/**
 * Sends one example event of the subscription's type now, signed with its secret (both, during
 * a rotation), through the same SSRF guard and timeout as every delivery, whatever the
 * subscription's status (testing a fix before resuming is the point). The attempt is stored as
 * a delivery marked `test` and logged, and counted in the health figures (it was an attempt at
 * the receiver); it never changes the subscription (no failure clock, no disabling on 410) and
 * is not retried.
 */
export async function sendTestEvent(deps: DeliveryOperationDeps, accountId: string, hookId: string): Promise<Static<typeof TestResultSchema>> {
  const hook = await getHook(deps.db, accountId, hookId)
  const keys = await signingKeys(deps.secretBox, hook)
  const event = exampleEvent(accountId, hook.event as EventType)
  const deliveryId = newId('dlv')
  const url = hook.targetCredentialsCiphertext ? await deps.secretBox.open(hook.targetCredentialsCiphertext) : hook.targetUrl
  // A broker's connection for this one attempt, closed after it: tests are rare, and the worker's pool is in another thread.
  const destinations = createDestinations(deps.send)
  const send = (headers: Record<string, string>) => destinations.send({ url, id: event.id, eventType: event.type, subscriptionId: hook.id, body: event.payload, keys, headers })
  const { result, trace } = await (deps.tracing
    ? traceAttempt(deps.tracing, context.active(), { hookId: hook.id, eventId: event.id, deliveryId, attempt: 1, url: hook.targetUrl }, send)
    : send({}).then((result) => ({ result, trace: undefined }))
  ).finally(() => destinations.close())
  // The subscription may have been deleted while the attempt was in flight: the log goes only
  // where the subscription still is, and its row is held (key share, as a foreign key's check
  // takes it) so that a delete waits for this statement rather than failing its foreign keys.
  const [logged] = await queryRows<{ attempts: number }>(
    deps.db,
    sql`with
      subscription as (
        select id from hooks where id = ${hook.id} and account_id = ${accountId} for key share
      ),
      test_event as (
        insert into events (id, account_id, type, payload, test)
        select ${event.id}, ${accountId}, ${event.type}, ${event.payload}, true from subscription
        returning id
      ),
      test_delivery as (
        insert into deliveries (id, event_id, hook_id, status, attempts)
        select ${deliveryId}, id, ${hook.id}, ${result.ok ? 'delivered' : 'failed'}, 1 from test_event
        returning id, event_id, hook_id
      ),
      test_attempt as (
        insert into delivery_attempts (id, delivery_id, hook_id, event_id, status_code, duration_ms, error, response_snippet)
        select ${newId('att')}, id, hook_id, event_id, ${result.status}::int, ${Math.round(result.durationMs)}::int, ${result.error}::text, ${result.responseSnippet}::text from test_delivery
        returning hook_id
      )${attemptRollups([{ hookId: hook.id, accountId, ok: result.ok, failure: result.failure, durationMs: result.durationMs }], 'test_attempt', ['test_attempt'])}
    select count(*)::int as attempts from test_attempt`,
  )
  deps.logger.info('delivery attempt', {
    hook_id: hook.id,
    event_id: event.id,
    delivery_id: deliveryId,
    attempt: 1,
    status: result.status,
    ...(result.error ? { error: result.error } : {}),
    duration_ms: Math.round(result.durationMs),
    outcome: result.ok ? 'delivered' : 'failed',
    test: true,
    ...trace,
  })
  // Sent, but not kept: the subscription and its log are gone, as the owner asked.
  if (logged?.attempts !== 1) throw noSuchHook(hook.id)
  return { delivery_id: deliveryId, status_code: result.status, duration_ms: Math.round(result.durationMs), error: result.error }
}

/** The keys an attempt is signed with: the current one, and the one a rotation replaced while it is honoured. */
async function signingKeys(box: SecretBox, hook: Hook): Promise<SigningKeys> {
  const honoured = hook.previousSecretCiphertext && hook.previousSecretExpiresAt && hook.previousSecretExpiresAt.getTime() > Date.now()
  return {
    scheme: hook.signatureScheme as SignatureScheme,
    current: await box.open(hook.secretCiphertext),
    previous: honoured ? await box.open(hook.previousSecretCiphertext!) : null,
  }
}
