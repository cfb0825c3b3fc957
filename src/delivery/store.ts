import { sql } from 'drizzle-orm'
import { queryRows, type Database } from '../lib/db/client.ts'
import { newId } from '../lib/ids.ts'
import type { DeliveryDecision } from './policy.ts'
import type { AttemptResult } from './send.ts'

/** A delivery leased to one sender, with everything needed to send it. Plain data: it crosses threads. */
export interface ClaimedDelivery {
  id: string
  eventId: string
  hookId: string
  /** Attempts made before this one. */
  attempts: number
  payload: string
  targetUrl: string
  secretCiphertext: string
  /** The secret a rotation replaced, while it is still honoured (24 h): the attempt is signed with both. */
  previousSecretCiphertext: string | null
}

export interface ClaimOptions {
  limit: number
  leaseMs: number
  /** Deliveries of one subscription in flight at once, across every sender on the database. */
  perHook: number
}

/** What one attempt did, ready to be stored. */
export interface RecordedAttempt {
  deliveryId: string
  result: AttemptResult
  decision: DeliveryDecision
}

/** NOTIFY channel: deliveries were committed; sent after the commit by src/delivery/commit-notifier.ts. */
export const DELIVERIES_CHANNEL = 'deliveries_due'

/** Five days of nothing but failures disable a subscription (docs/api.md#how-deliveries-are-sent); one success resets the clock. */
export const CONTINUOUS_FAILURE_DISABLES_AFTER_MS = 5 * 24 * 3_600_000

// Any constant works as long as nothing else in the database takes this advisory lock.
const CLAIM_LOCK = 7_200_011

/**
 * Leases up to `limit` due deliveries of active subscriptions, never putting more than
 * `perHook` of one subscription in flight. One short transaction; the HTTP calls happen after it.
 *
 * Rows are locked `FOR UPDATE SKIP LOCKED`, so senders never wait on each other's rows and a
 * row is never leased twice. Claims also take a transaction-scoped advisory lock: a claim takes
 * about a millisecond, and running them one at a time means each one counts the leases every
 * earlier claim committed, which is what makes the per-subscription bound exact across
 * processes. Subscriptions already at the bound are left out before the scan, so a backlog
 * for a slow receiver does not hide other subscriptions' due rows. A lease that runs out (its
 * sender died) makes the row due again.
 */
export async function claimDueDeliveries(db: Database, options: ClaimOptions): Promise<ClaimedDelivery[]> {
  const scan = Math.max(options.limit * 4, 64)
  const rows = await db.transaction(async (tx) => {
    await tx.execute(sql`select pg_advisory_xact_lock(${CLAIM_LOCK})`)
    return queryRows<{
      id: string
      event_id: string
      hook_id: string
      attempts: number
      payload: string
      target_url: string
      secret_ciphertext: string
      previous_secret_ciphertext: string | null
    }>(
      tx as unknown as Database,
      sql`with in_flight as (
            select hook_id, count(*)::int as n from deliveries
            where leased_until >= now()
            group by hook_id
          ),
          candidates as (
            select d.id, d.hook_id, d.next_attempt_at from deliveries d
            join hooks h on h.id = d.hook_id and h.status = 'active'
            where d.status = 'pending' and d.next_attempt_at <= now() and (d.leased_until is null or d.leased_until < now())
              and d.hook_id not in (select hook_id from in_flight where n >= ${options.perHook})
            order by d.next_attempt_at
            limit ${scan}
            for update of d skip locked
          ),
          picked as (
            select id from (
              select c.id, c.next_attempt_at,
                     row_number() over (partition by c.hook_id order by c.next_attempt_at, c.id) + coalesce(f.n, 0) as slot
              from candidates c left join in_flight f on f.hook_id = c.hook_id
            ) ranked
            where slot <= ${options.perHook}
            order by next_attempt_at
            limit ${options.limit}
          )
          update deliveries d set leased_until = now() + make_interval(secs => ${options.leaseMs / 1000})
          from picked, events e, hooks h
          where d.id = picked.id and e.id = d.event_id and h.id = d.hook_id
          returning d.id, d.event_id, d.hook_id, d.attempts, e.payload, h.target_url, h.secret_ciphertext,
                    case when h.previous_secret_expires_at > now() then h.previous_secret_ciphertext end as previous_secret_ciphertext`,
    )
  })
  return rows.map((row) => ({
    id: row.id,
    eventId: row.event_id,
    hookId: row.hook_id,
    attempts: Number(row.attempts),
    payload: row.payload,
    targetUrl: row.target_url,
    secretCiphertext: row.secret_ciphertext,
    previousSecretCiphertext: row.previous_secret_ciphertext,
  }))
}

/**
 * Stores a batch of attempts in one statement: each attempt's log row, its delivery's next
 * state, and what the batch means for each subscription (a success resets its failure clock, a
 * 410 or five days of failures disable it). A delivery deleted meanwhile (its subscription was
 * deleted) is skipped. One statement per batch rather than per attempt keeps the database off
 * the critical path when hundreds of attempts finish each second.
 */
export async function recordDeliveryAttempts(db: Database, attempts: readonly RecordedAttempt[]): Promise<void> {
  if (attempts.length === 0) return
  const input = attempts.map(({ deliveryId, result, decision }) => ({
    delivery_id: deliveryId,
    attempt_id: newId('att'),
    status_code: result.status,
    duration_ms: Math.round(result.durationMs),
    error: result.error,
    response_snippet: result.responseSnippet,
    outcome: decision.kind,
    delay_ms: decision.kind === 'retry' ? decision.delayMs : null,
    disable_reason: decision.kind === 'disable_hook' ? decision.reason : null,
  }))
  const failureReason = `Every delivery attempt failed for ${CONTINUOUS_FAILURE_DISABLES_AFTER_MS / 86_400_000} days.`
  await db.execute(sql`with input as (
      select * from jsonb_to_recordset(${JSON.stringify(input)}::jsonb) as i(
        delivery_id text, attempt_id text, status_code int, duration_ms int, error text, response_snippet text,
        outcome text, delay_ms float8, disable_reason text)
    ),
    moved as (
      update deliveries d set
        status = case i.outcome when 'delivered' then 'delivered' when 'retry' then 'pending' else 'failed' end,
        attempts = d.attempts + 1,
        leased_until = null,
        next_attempt_at = case when i.outcome = 'retry' then now() + make_interval(secs => i.delay_ms / 1000) else d.next_attempt_at end
      from input i
      where d.id = i.delivery_id
      returning d.id, d.hook_id, d.event_id
    ),
    logged as (
      insert into delivery_attempts (id, delivery_id, hook_id, event_id, status_code, duration_ms, error, response_snippet)
      select i.attempt_id, m.id, m.hook_id, m.event_id, i.status_code, i.duration_ms, i.error, i.response_snippet
      from input i join moved m on m.id = i.delivery_id
    ),
    per_hook as (
      select m.hook_id,
             bool_or(i.outcome = 'delivered') as succeeded,
             max(i.disable_reason) as disable_reason
      from input i join moved m on m.id = i.delivery_id
      group by m.hook_id
    )
    update hooks h set
      failing_since = case when p.succeeded then null else coalesce(h.failing_since, now()) end,
      status = case
        when h.status <> 'active' then h.status
        when p.disable_reason is not null then 'disabled'
        when not p.succeeded and h.failing_since < now() - make_interval(secs => ${CONTINUOUS_FAILURE_DISABLES_AFTER_MS / 1000}) then 'disabled'
        else h.status end,
      disabled_reason = case
        when h.status <> 'active' then h.disabled_reason
        when p.disable_reason is not null then p.disable_reason
        when not p.succeeded and h.failing_since < now() - make_interval(secs => ${CONTINUOUS_FAILURE_DISABLES_AFTER_MS / 1000}) then ${failureReason}
        else h.disabled_reason end
    from per_hook p
    where h.id = p.hook_id
      -- Only rows that change: rewriting each subscription row for every batch would bloat hooks.
      and ((p.succeeded and h.failing_since is not null)
        or (not p.succeeded and h.failing_since is null)
        or (h.status = 'active' and (p.disable_reason is not null
          or (not p.succeeded and h.failing_since < now() - make_interval(secs => ${CONTINUOUS_FAILURE_DISABLES_AFTER_MS / 1000})))))`)
}
