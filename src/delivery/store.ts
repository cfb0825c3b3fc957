import { sql } from 'drizzle-orm'
import { queryRows, type Database } from '../lib/db/client.ts'
import { newId } from '../lib/ids.ts'
import { MAX_RETRY_AFTER_MS, type DeliveryDecision } from './policy.ts'
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
  /** Attempts each subscription may start in this claim, for those the caller keeps a window for (src/delivery/flow-control.ts). */
  allowances: Record<string, number>
  /** Attempts any other subscription may start in this claim. */
  defaultAllowance: number
  /** Deliveries of one subscription in flight at once, across every sender on the database (WEBHOOK_MAX_IN_FLIGHT_PER_SUBSCRIPTION). */
  maxPerHook: number
  /** Where the round-robin walk over subscriptions starts: after the hook id the previous claim ended at ('' for the beginning). */
  after: string
}

export interface ClaimResult {
  deliveries: ClaimedDelivery[]
  /** The hook id this claim's walk ended at: the next claim's `after`. */
  walkedTo: string
  /** The walk stopped at its bound with subscriptions left unvisited: claiming again may find more. */
  more: boolean
}

/** Subscriptions one claim looks at, at most: a claim costs a few index probes per subscription visited. */
export const HOOKS_PER_CLAIM = 64

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
 * Leases up to `limit` due deliveries of active subscriptions. One short transaction; the HTTP
 * calls happen after it. Per subscription it takes no more than the smallest of: the caller's
 * allowance (its adaptive window and fair share), what the cross-process maximum leaves, and
 * what the subscription's rate limit leaves of this second; a subscription a receiver asked to
 * wait (Retry-After) gets nothing until then.
 *
 * Round-robin, not first-come. The claim walks the subscriptions that have pending deliveries
 * in hook-id order, starting after where the previous claim ended (`after`) and wrapping
 * around, one index probe per subscription (a loose index scan of deliveries_pending_idx),
 * at most HOOKS_PER_CLAIM of them. For each subscription with room it reads the head of its own
 * queue, so a backlog of thousands for one subscription costs the others nothing, and a
 * subscription without room costs one probe. The rows found are then ranked by what their
 * subscription already has in flight plus their place in its line, so the least-served
 * subscription is served first.
 *
 * Rows are locked `FOR UPDATE SKIP LOCKED`, so senders never wait on each other's rows and a
 * row is never leased twice. Claims also take a transaction-scoped advisory lock: a claim takes
 * about a millisecond, and running them one at a time means each one counts the leases every
 * earlier claim committed, which is what makes the cross-process bounds exact. A lease that
 * runs out (its sender died) makes the row due again.
 */
export async function claimDueDeliveries(db: Database, options: ClaimOptions, sender: { sole: boolean } = { sole: false }): Promise<ClaimResult> {
  type Row = {
    id: string | null
    event_id: string
    hook_id: string
    attempts: number
    payload: string
    target_url: string
    secret_ciphertext: string
    previous_secret_ciphertext: string | null
    walked_to: string | null
    visited: number
  }
  const statement = sql`with recursive walk(hook_id, lap, step) as (
            select (select d.hook_id from deliveries d where d.status = 'pending' and d.hook_id > ${options.after} order by d.hook_id limit 1), 0, 1
            union all
            select (select d.hook_id from deliveries d where d.status = 'pending' and d.hook_id > coalesce(w.hook_id, '') order by d.hook_id limit 1),
                   case when w.hook_id is null then 1 else w.lap end,
                   w.step + 1
            from walk w
            where w.step < ${HOOKS_PER_CLAIM} + 1
              and (w.hook_id is not null or w.lap = 0)
              and not (w.lap = 1 and w.hook_id >= ${options.after})
          ),
          visited as (
            select hook_id, min(step) as step from walk
            where hook_id is not null and (lap = 0 or hook_id <= ${options.after}) and step <= ${HOOKS_PER_CLAIM}
            group by hook_id
          ),
          allowance as (
            select key as hook_id, value::int as n from jsonb_each_text(${JSON.stringify(options.allowances)}::jsonb)
          ),
          in_flight as (
            select hook_id, count(*)::int as n from deliveries
            where leased_until >= now() and hook_id in (select hook_id from visited)
            group by hook_id
          ),
          rooms as (
            select v.hook_id, v.step, coalesce(f.n, 0) as held,
                   least(coalesce(a.n, ${options.defaultAllowance}),
                         ${options.maxPerHook} - coalesce(f.n, 0),
                         case when h.rate_limit_per_s is null then ${options.maxPerHook}
                              when h.rate_window_started_at = date_trunc('second', now()) then h.rate_limit_per_s - h.rate_window_count
                              else h.rate_limit_per_s end) as room
            from visited v
            join hooks h on h.id = v.hook_id and h.status = 'active' and (h.throttled_until is null or h.throttled_until <= now())
            left join in_flight f on f.hook_id = v.hook_id
            left join allowance a on a.hook_id = v.hook_id
          ),
          candidates as (
            select c.id, r.hook_id, r.step, r.held,
                   row_number() over (partition by r.hook_id order by c.next_attempt_at, c.id) as place
            from rooms r
            cross join lateral (
              select d.id, d.next_attempt_at from deliveries d
              where d.hook_id = r.hook_id and d.status = 'pending' and d.next_attempt_at <= now()
                and (d.leased_until is null or d.leased_until < now())
              order by d.next_attempt_at
              limit greatest(r.room, 0)
              for update skip locked
            ) c
            where r.room > 0
          ),
          picked as (
            select id, hook_id from candidates
            order by held + place, step
            limit ${options.limit}
          ),
          rate_counted as (
            update hooks h set
              rate_window_count = case when h.rate_window_started_at = date_trunc('second', now()) then h.rate_window_count else 0 end + p.n,
              rate_window_started_at = date_trunc('second', now())
            from (select hook_id, count(*)::int as n from picked group by hook_id) p
            where h.id = p.hook_id and h.rate_limit_per_s is not null
          ),
          leased as (
            update deliveries d set leased_until = now() + make_interval(secs => ${options.leaseMs / 1000})
            from picked, events e, hooks h
            where d.id = picked.id and e.id = d.event_id and h.id = d.hook_id
            returning d.id, d.event_id, d.hook_id, d.attempts, e.payload, h.target_url, h.secret_ciphertext,
                      case when h.previous_secret_expires_at > now() then h.previous_secret_ciphertext end as previous_secret_ciphertext
          ),
          walked as (
            select (select hook_id from visited order by step desc limit 1) as walked_to, (select count(*)::int from visited) as visited
          )
          select l.*, w.walked_to, w.visited from walked w left join leased l on true`
  // PGlite is one connection in one process (the data-dir lock): nothing else claims, so one
  // statement needs no lock and no transaction around it (on PGlite each statement costs ~0.4 ms).
  const rows = sender.sole
    ? await queryRows<Row>(db, statement)
    : await db.transaction(async (tx) => {
        await tx.execute(sql`select pg_advisory_xact_lock(${CLAIM_LOCK})`)
        return queryRows<Row>(tx as unknown as Database, statement)
      })
  const [first] = rows
  return {
    deliveries: rows
      .filter((row) => row.id !== null)
      .map((row) => ({
        id: row.id!,
        eventId: row.event_id,
        hookId: row.hook_id,
        attempts: Number(row.attempts),
        payload: row.payload,
        targetUrl: row.target_url,
        secretCiphertext: row.secret_ciphertext,
        previousSecretCiphertext: row.previous_secret_ciphertext,
      })),
    walkedTo: first?.walked_to ?? '',
    more: Number(first?.visited ?? 0) >= HOOKS_PER_CLAIM,
  }
}

/**
 * Stores a batch of attempts in one statement: each attempt's log row, its delivery's next
 * state, and what the batch means for each subscription (a success resets its failure clock, a
 * 410 or five days of failures disable it, a 429 or 503 with Retry-After pauses it that long);
 * a subscription it disabled has its pending deliveries canceled by a second statement. A
 * delivery deleted meanwhile (its subscription was deleted) is skipped. One statement per batch rather than per attempt keeps the database off
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
    throttle_ms: (result.status === 429 || result.status === 503) && result.retryAfterSeconds !== null ? Math.min(result.retryAfterSeconds * 1000, MAX_RETRY_AFTER_MS) : null,
  }))
  const failureReason = `Every delivery attempt failed for ${CONTINUOUS_FAILURE_DISABLES_AFTER_MS / 86_400_000} days.`
  const disabled = await queryRows<{ id: string }>(db, sql`with input as (
      select * from jsonb_to_recordset(${JSON.stringify(input)}::jsonb) as i(
        delivery_id text, attempt_id text, status_code int, duration_ms int, error text, response_snippet text,
        outcome text, delay_ms float8, disable_reason text, throttle_ms float8)
    ),
    moved as (
      update deliveries d set
        -- A retry for a subscription disabled meanwhile is canceled, as its other pending deliveries were.
        status = case i.outcome when 'delivered' then 'delivered' when 'retry' then case when h.status = 'disabled' then 'canceled' else 'pending' end else 'failed' end,
        attempts = d.attempts + 1,
        leased_until = null,
        next_attempt_at = case when i.outcome = 'retry' then now() + make_interval(secs => i.delay_ms / 1000) else d.next_attempt_at end
      from input i, hooks h
      where d.id = i.delivery_id and h.id = d.hook_id
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
             max(i.disable_reason) as disable_reason,
             max(i.throttle_ms) as throttle_ms,
             min(before.status) as status_before
      from input i join moved m on m.id = i.delivery_id join hooks before on before.id = m.hook_id
      group by m.hook_id
    ),
    changed as (
    update hooks h set
      throttled_until = case when p.throttle_ms is null then h.throttled_until
        else greatest(h.throttled_until, now() + make_interval(secs => p.throttle_ms / 1000)) end,
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
      and (p.throttle_ms is not null
        or (p.succeeded and h.failing_since is not null)
        or (not p.succeeded and h.failing_since is null)
        or (h.status = 'active' and (p.disable_reason is not null
          or (not p.succeeded and h.failing_since < now() - make_interval(secs => ${CONTINUOUS_FAILURE_DISABLES_AFTER_MS / 1000})))))
    returning h.id, h.status, p.status_before
    )
    select id from changed where status = 'disabled' and status_before <> 'disabled'`)
  if (disabled.length > 0) await cancelPendingDeliveries(db, disabled.map((row) => row.id))
}

/**
 * A subscription the service has just disabled (410 Gone, or five days of failures) is sent
 * nothing more: its pending deliveries are canceled, not kept to pour out when it is
 * re-enabled, which a receiver fixed days later rarely wants all at once. They stay in the log
 * as `canceled`, and POST …/hooks/{hook_id}/recover sends them again when the owner wants them.
 * Deliveries in flight are left to their attempt, whose retry is canceled when recorded.
 */
async function cancelPendingDeliveries(db: Database, hookIds: string[]): Promise<void> {
  await db.execute(sql`update deliveries set status = 'canceled'
    where hook_id in (${sql.join(hookIds.map((id) => sql`${id}`), sql`, `)}) and status = 'pending' and (leased_until is null or leased_until < now())`)
}
