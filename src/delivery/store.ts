import { sql, type SQL } from 'drizzle-orm'
import { CIRCUIT_OPENS_AFTER, isBreakerFailure, nextProbeAt, PROBE_INTERVAL_MIN_S } from './circuit.ts'
import { markHooksDueUnlessHeld } from './queue.ts'
import { pipelinedTransaction, queryRows, type Database } from '../lib/db/client.ts'
import { newId } from '../lib/db/ids.ts'
import { MAX_RETRY_AFTER_MS, type DeliveryDecision } from './policy.ts'
import type { AttemptResult } from './send.ts'
import { attemptRollups } from '../stats/rollups.ts'
import type { SignatureScheme } from './signing.ts'

/** A delivery leased to one sender, with everything needed to send it. Plain data: it crosses threads. */
export interface ClaimedDelivery {
  id: string
  eventId: string
  hookId: string
  accountId: string
  /** Attempts made before this one. */
  attempts: number
  payload: string
  eventType: string
  /** As the owner sees it; `targetCredentialsCiphertext`, when set, is the URL to connect with. */
  targetUrl: string
  /** A broker URL with its credentials, sealed (docs/webhooks.md#destinations). */
  targetCredentialsCiphertext: string | null
  /** How its subscription signs (docs/webhooks.md#signatures): the sealed keys below are whsec_ secrets or whsk_ private keys. */
  signatureScheme: SignatureScheme
  secretCiphertext: string
  /** The secret a rotation replaced, while it is still honoured (24 h): the attempt is signed with both. */
  previousSecretCiphertext: string | null
  /** Its subscription's last attempt failed, or its circuit is open (src/delivery/circuit.ts). */
  suspect: boolean
  /** The one attempt an open circuit lets through. */
  probe: boolean
  /** An agent's MCP event subscription (docs/mcp.md#events): sent as an event occurrence, and 410 or 413 refuses only this delivery. */
  eventSubscription: boolean
  /** The W3C traceparent stored with its event (docs/operations.md#traces): the attempt is a span of that trace. */
  traceContext: string | null
  /** Its target's scheme, host and port (src/delivery/queue.ts, `targetOrigin`): the key of the bound per origin. */
  origin: string
}

export interface ClaimOptions {
  limit: number
  leaseMs: number
  /** Attempts each of these subscriptions may start in this claim (src/delivery/flow-control.ts); 0 or less: none. */
  allowances: Record<string, number>
  /** Attempts any other subscription of each of these accounts may start in this claim. */
  accountNewcomerAllowances?: Record<string, number>
  /** Attempts any other subscription may start in this claim. */
  defaultAllowance: number
  /** Attempts each of these accounts may start in this claim, all its subscriptions together. */
  accountAllowances: Record<string, number>
  /** Attempts any other account may start in this claim. */
  defaultAccountAllowance: number
  /** Attempts suspect subscriptions (last attempt failed, or circuit open) may start in this claim, all together. */
  suspectAllowance: number
  /** Attempts to each of these origins (src/delivery/queue.ts, `targetOrigin`) this claim may start, all their subscriptions together. */
  originAllowances?: Record<string, number>
  /** Attempts to any other origin this claim may start; none given: no bound per origin. */
  defaultOriginAllowance?: number
  /** Deliveries of one subscription in flight at once, across every sender on the database (WEBHOOK_MAX_IN_FLIGHT_PER_SUBSCRIPTION). */
  maxPerHook: number
  /**
   * Deliveries whose attempt this sender has ended but not yet recorded: their rows are still
   * leased, but nothing of them is in flight, so they do not count against `maxPerHook`.
   */
  endedUnrecorded?: string[]
  /**
   * Subscriptions a narrow settlement just made due (this process's, since its last claim):
   * looked at first, by key, before the walk of the queue in due_at order, so that one
   * message's delivery does not wait for the walk to pass every row due before it
   * (docs/performance.md, issue 37, thirteenth pass).
   */
  woken?: string[]
  /** false: only `woken` is looked at, not the queue in due_at order (a claim as short as its few rows). */
  walk?: boolean
}

export interface ClaimResult {
  deliveries: ClaimedDelivery[]
  /** The claim looked at as many due subscriptions as it may: more may be due. */
  more: boolean
  /**
   * For each subscription the claim found room for that nothing of its own holds back (active,
   * not suspect, not at its rate limit): when it may have more due than the claim took, how long
   * the oldest delivery found for it had been due; 0 when the claim took all it had due
   * (src/delivery/backlog.ts).
   */
  backlog: HookBacklog[]
}

export interface HookBacklog {
  hookId: string
  accountId: string
  waitedMs: number
}

/** Due subscriptions one claim looks at: enough for its limit (each has room for one at least), within these bounds. */
const SCAN_MIN = 16
const SCAN_MAX = 128

/** What one attempt did, ready to be stored. */
export interface RecordedAttempt {
  deliveryId: string
  hookId: string
  accountId: string
  result: AttemptResult
  decision: DeliveryDecision
}

/** NOTIFY channel: deliveries were committed; sent after the commit by src/delivery/commit-notifier.ts. */
export const DELIVERIES_CHANNEL = 'deliveries_due'

/** Five days of nothing but failures disable a subscription (docs/api.md#how-deliveries-are-sent); one success resets the clock. */
export const CONTINUOUS_FAILURE_DISABLES_AFTER_MS = 5 * 24 * 3_600_000

/**
 * How long a subscription whose origin had no room (src/delivery/origin-windows.ts: a host that has
 * not answered lately, with its few attempts in flight) is set aside before a claim looks at it
 * again. Such an origin's room opens as an attempt ends, which for a host that does not answer is
 * its timeout; looked at by every claim meanwhile, its thousand due subscriptions were read a
 * hundred times a second (docs/performance.md, issue 37, twenty-second pass).
 */
const ORIGIN_FULL_WAIT_S = 5

// Any constant works as long as nothing else in the database takes this advisory lock.
const CLAIM_LOCK = 7_200_011


/**
 * Leases up to `limit` due deliveries of active subscriptions. One statement (on PostgreSQL in a
 * short transaction with a lock, the two sent together); the HTTP calls happen after it.
 *
 * It takes the subscriptions that are due from the queue's index (src/delivery/queue.ts): those
 * the caller was just woken for (`woken`), by key, then the others oldest due_at first, as many
 * as its limit (16 to 128), skipping those the caller has no room for
 * (their allowance, their account's, the suspects' share), and locks their queue and
 * subscription rows, passing over rows another transaction holds (a writer marking them due, or
 * another claim). Per subscription it takes no more than the smallest of: the caller's
 * allowance (its adaptive window and fair share), what the cross-process maximum leaves, what
 * the rate limit leaves of this second, and one for an open circuit whose probe time has come
 * (none before, or while its probe is in flight); a subscription a receiver asked to wait
 * (Retry-After) gets nothing until then. It reads the head of each one's own pending queue, so
 * a backlog of thousands costs the others nothing. The rows found are ranked by what their
 * subscription already has in flight plus their place in its line, so the least-served
 * subscription is served first, then cut to each account's allowance, each origin's
 * (src/delivery/origin-windows.ts) and the suspects' share.
 *
 * A subscription whose origin has no room (src/delivery/origin-windows.ts) gets nothing, and is
 * set aside for ORIGIN_FULL_WAIT_S.
 *
 * Then it moves each subscription it looked at to when it is next due: now if it may have more
 * due, or had rows the cut left (to the back of the line: round robin, so one account's
 * thousand due subscriptions stand in front of another's for one pass over them, up to 128 per
 * claim, and not again: docs/performance.md, issue 37, seventh pass); else
 * its Retry-After, its next probe, the next second of its rate limit, its first retry, or, while
 * it has attempts in flight, the end of a lease taken now (recording an attempt marks it due at
 * once: that bound is for a sender that died); null when it has nothing pending or is not
 * active (resuming marks it due again). The rows are the claim's from the start, so a writer
 * that marks one due meanwhile waits for the claim (milliseconds) and then brings due_at
 * earlier again; one that wrote it between the statement's snapshot and its lock left a version
 * the claim does not move (its work may be newer than what the claim saw). No work is left
 * behind a due_at set from an older view.
 *
 * Deliveries are locked `FOR UPDATE SKIP LOCKED`, so claims never wait on each other's rows and
 * a delivery is never leased twice. On PostgreSQL claims also take a transaction-scoped
 * advisory lock: running them one at a time means each counts the leases every earlier one
 * committed, which keeps the cross-process bounds exact.
 */
export async function claimDueDeliveries(
  db: Database,
  options: ClaimOptions,
  sender: { sole: boolean } = { sole: false },
): Promise<ClaimResult> {
  type Row = {
    id: string | null
    event_id: string
    hook_id: string
    account_id: string
    attempts: number
    payload: string
    event_type: string
    target_url: string
    target_credentials_ciphertext: string | null
    signature_scheme: SignatureScheme
    secret_ciphertext: string
    previous_secret_ciphertext: string | null
    suspect: boolean
    probe: boolean
    event_subscription: boolean
    trace_context: string | null
    origin: string
    visited: number
    backlog: string
  }
  // No lease taken now or earlier runs past this: a subscription with attempts in flight is due by then
  // at the latest (recording an attempt marks it due at once; this is for a sender that died).
  const leaseEnds = sql`now() + make_interval(secs => ${options.leaseMs / 1000})`
  const scan = Math.min(SCAN_MAX, Math.max(SCAN_MIN, options.limit))
  // Allowances are looked up by key in one jsonb object each (a binary search), not joined: the
  // scan below may pass over hundreds of subscriptions with no room before it finds one with some.
  const allowance = (hookId: SQL, accountId: SQL) =>
    sql`coalesce((${JSON.stringify(options.allowances)}::jsonb ->> ${hookId})::int, (${JSON.stringify(options.accountNewcomerAllowances ?? {})}::jsonb ->> ${accountId})::int, ${options.defaultAllowance})`
  // An aggregate of a member's rows per subscription, as one jsonb object read by key like the allowances.
  const perHook = (aggregate: SQL, member: SQL) =>
    sql`(select coalesce(jsonb_object_agg(x.hook_id, x.v), '{}') from (select hook_id, ${aggregate} as v from ${member} group by hook_id) x)`
  const accountAllowance = (accountId: SQL) =>
    sql`coalesce((${JSON.stringify(options.accountAllowances)}::jsonb ->> ${accountId})::int, ${options.defaultAccountAllowance})`
  const originAllowance = (origin: SQL) =>
    sql`coalesce((${JSON.stringify(options.originAllowances ?? {})}::jsonb ->> ${origin})::int, ${options.defaultOriginAllowance ?? options.limit})`
  const dueColumns = sql`q.hook_id, q.due_at, q.origin, ${originAllowance(sql`q.origin`)} <= 0 as origin_full, h.account_id, h.status, h.expires_at, h.throttled_until, h.consecutive_failures, h.circuit_opened_at, h.circuit_probe_at,
                   h.rate_limit_per_s, h.rate_window_started_at, h.rate_window_count,
                   h.status = 'active' and (h.expires_at is null or h.expires_at > now()) and (h.throttled_until is null or h.throttled_until <= now()) as servable`
  // The account's copy on the queue row: a row with no room is passed over without reading its
  // subscription (a claim behind another account's thousand full rows read them all: docs/performance.md).
  // One whose origin has no room is not passed over but set aside (next_due): an origin that does not
  // answer may have no room for minutes, and every claim would pass over its due rows again.
  const hasRoom = sql`${allowance(sql`q.hook_id`, sql`q.account_id`)} > 0
              and ${accountAllowance(sql`q.account_id`)} > 0
              and (${options.suspectAllowance} > 0 or (h.consecutive_failures = 0 and h.circuit_opened_at is null))`
  const wokenIds = sql`${JSON.stringify(options.woken ?? [])}::jsonb`
  const claim = sql`with
          walked as (
            -- The queue row and the subscription row are locked, and those another transaction holds are passed
            -- over, never waited for: a fan-out writing a thousand of one account's rows for seconds
            -- (docs/performance.md, the storm) does not hide the others' rows behind them, and this statement
            -- waits for no lock at all, so it is never in a circle of waits.
            select ${dueColumns}
            from hook_queues q
            join hooks h on h.id = q.hook_id
            where q.due_at <= now() and q.hook_id <> all(array(select jsonb_array_elements_text(${wokenIds})))
              and ${hasRoom}
            order by q.due_at
            limit ${options.walk === false ? 0 : scan}
            for update of q skip locked
            for no key update of h skip locked
          ),
          woken_due as (
            -- Found by key, not walked to: behind another account's thousand due rows the walk reaches them only
            -- after several claims (docs/performance.md, issue 37, thirteenth pass).
            select ${dueColumns}
            from hook_queues q
            join hooks h on h.id = q.hook_id
            where q.hook_id in (select jsonb_array_elements_text(${wokenIds})) and q.due_at <= now()
              and ${hasRoom}
            for update of q skip locked
            for no key update of h skip locked
          ),
          due as (
            select * from woken_due union all select * from walked
          ),
          held as materialized (
            -- Each member from here on reads the one before it and carries forward what the later ones need: none is
            -- joined to another, since with hash joins off (KEYED_PLAN_SETTINGS) such a join is a nested loop
            -- that reads one member again for every row of the other (docs/performance.md). Materialized, as
            -- tallied is: inlined, each use of a column below would copy its subquery (the lease count three times).
            select d.*,
                   -- The queue row's version in this statement's snapshot. A writer that committed after the snapshot but
                   -- before the lock above left a newer version (the lock returns that one), whose work the steps below,
                   -- reading the snapshot, may not see: its due_at is then left as the writer set it.
                   (select x.xmin from hook_queues x where x.hook_id = d.hook_id) as seen,
                   -- One probe of deliveries_leased_idx per subscription: a join here lets the planner pick a scan of the whole table.
                   case when d.servable and not d.origin_full then
                     (select count(*)::int from deliveries x where x.hook_id = d.hook_id and x.leased_until is not null and x.leased_until >= now()
                        and x.id <> all(array(select jsonb_array_elements_text(${JSON.stringify(options.endedUnrecorded ?? [])}::jsonb))))
                   else 0 end as held
            from due d
          ),
          rooms as (
            select d.*,
                   (d.consecutive_failures > 0 or d.circuit_opened_at is not null) as suspect,
                   d.circuit_opened_at is not null as probe,
                   case when not d.servable or d.origin_full then 0
                        when d.circuit_opened_at is not null and (d.circuit_probe_at > now() or d.held > 0) then 0
                   else least(${allowance(sql`d.hook_id`, sql`d.account_id`)},
                         ${options.maxPerHook} - d.held,
                         case when d.circuit_opened_at is not null then 1 else ${options.maxPerHook} end,
                         case when d.rate_limit_per_s is null then ${options.maxPerHook}
                              when d.rate_window_started_at = date_trunc('second', now()) then d.rate_limit_per_s - d.rate_window_count
                              else d.rate_limit_per_s end) end as room
            from held d
          ),
          candidates as (
            select c.id, c.next_attempt_at, r.hook_id, r.account_id, r.origin, r.due_at, r.held, r.suspect, r.probe,
                   row_number() over (partition by r.hook_id order by c.next_attempt_at, c.id) as place
            from rooms r
            cross join lateral (
              select d.id, d.next_attempt_at from deliveries d
              where d.hook_id = r.hook_id and d.status = 'pending' and d.next_attempt_at <= now()
                and (d.leased_until is null or d.leased_until < now())
              order by d.next_attempt_at
              limit least(greatest(r.room, 0), ${options.limit})
              for update skip locked
            ) c
            where r.room > 0
          ),
          ranked as (
            select c.*,
                   row_number() over (partition by c.account_id order by c.held + c.place, c.due_at, c.id) as account_place,
                   ${accountAllowance(sql`c.account_id`)} as account_room,
                   count(*) filter (where c.suspect) over (order by c.held + c.place, c.due_at, c.id) as suspect_place
            from candidates c
          ),
          fitted as (
            -- Places at an origin are counted among the rows the other bounds kept: another account's rows cut above
            -- take no place from yours at a host you share.
            select r.*,
                   row_number() over (partition by r.origin order by r.held + r.place, r.due_at, r.id) as origin_place,
                   ${originAllowance(sql`r.origin`)} as origin_room
            from ranked r
            where r.account_place <= r.account_room and (not r.suspect or r.suspect_place <= ${options.suspectAllowance})
          ),
          picked as (
            select id, hook_id, origin, suspect, probe from fitted
            where origin_place <= origin_room
            order by held + place, due_at, id
            limit ${options.limit}
          ),
          rate_counted as (
            update hooks h set
              rate_window_count = case when h.rate_window_started_at = date_trunc('second', now()) then h.rate_window_count else 0 end + p.n,
              rate_window_started_at = date_trunc('second', now())
            from (select hook_id, count(*)::int as n from picked group by hook_id) p
            where h.id = p.hook_id and h.rate_limit_per_s is not null
            returning h.id
          ),
          probing as (
            update hooks h set circuit_probe_at = ${nextProbeAt(sql`h.circuit_opened_at`)}
            from (select distinct hook_id from picked where probe) p
            where h.id = p.hook_id
            returning h.id
          ),
          leased as (
            update deliveries d set leased_until = now() + make_interval(secs => ${options.leaseMs / 1000})
            from picked, events e, hooks h
            where d.id = picked.id and e.id = d.event_id and h.id = d.hook_id
            returning d.id, d.event_id, d.hook_id, h.account_id, d.attempts, e.payload, e.type as event_type, h.target_url, h.target_credentials_ciphertext, h.signature_scheme, h.secret_ciphertext,
                      case when h.previous_secret_expires_at > now() then h.previous_secret_ciphertext end as previous_secret_ciphertext,
                      picked.suspect, picked.probe, h.grant_id is not null as event_subscription, e.trace_context, picked.origin
          ),
          counted as materialized (
            select r.*, coalesce((${perHook(sql`count(*)::int`, sql`candidates`)} ->> r.hook_id)::int, 0) as candidate_count,
                        coalesce((${perHook(sql`count(*)::int`, sql`picked`)} ->> r.hook_id)::int, 0) as picked_count,
                        -- How long the oldest delivery found for it had been due, in milliseconds.
                        (${perHook(sql`floor(extract(epoch from now() - min(next_attempt_at)) * 1000)::int`, sql`candidates`)} ->> r.hook_id)::int as oldest_wait_ms
            from rooms r
          ),
          tallied as materialized (
            select c.*,
                   -- It may have more due than it got: the claim found as many as it could take, or took fewer than it found.
                   c.candidate_count >= least(c.room, ${options.limit}) or c.picked_count < c.candidate_count as more_due,
                   c.rate_limit_per_s is not null
                     and case when c.rate_window_started_at = date_trunc('second', now()) then c.rate_window_count else 0 end + c.picked_count >= c.rate_limit_per_s
                     as at_rate_limit
            from counted c
          ),
          next_due as (
            select t.hook_id, t.seen,
                   case
                     when t.status <> 'active' or t.expires_at <= now() then null
                     when t.throttled_until > now() then t.throttled_until
                     when t.circuit_opened_at is not null then
                       case when t.picked_count > 0 then ${nextProbeAt(sql`t.circuit_opened_at`)}
                            when t.circuit_probe_at > now() then t.circuit_probe_at
                            else ${leaseEnds} end
                     when t.at_rate_limit then date_trunc('second', now()) + interval '1 second'
                     when t.origin_full then now() + make_interval(secs => ${ORIGIN_FULL_WAIT_S})
                     when t.room <= 0 then ${leaseEnds}
                     when t.more_due then now()
                     else least(
                       (select min(x.next_attempt_at) from deliveries x where x.hook_id = t.hook_id and x.status = 'pending' and x.next_attempt_at > now()),
                       case when t.held + t.picked_count > 0 then ${leaseEnds} end)
                   end as due_at
            from tallied t
          ),
          rescheduled as (
            update hook_queues q set due_at = n.due_at from next_due n
            where q.hook_id = n.hook_id and q.xmin = n.seen
          ),
          backlog as (
            -- A subscription that may have more due than it got (what next_due reschedules it now for) reports how long
            -- the oldest of the deliveries found for it had been due: the wait of the head of its line. One the claim
            -- emptied reports 0; one with no room reports nothing (what was last reported stands).
            select t.hook_id, t.account_id, case when t.more_due then coalesce(t.oldest_wait_ms, 0) else 0 end as waited_ms
            from tallied t
            where t.servable and not t.suspect and t.room > 0 and not t.at_rate_limit
          )
          select l.*, (select count(*)::int from walked) as visited,
                 (select coalesce(jsonb_agg(jsonb_build_array(b.hook_id, b.account_id, b.waited_ms)), '[]')::text from backlog b) as backlog
          from (select 1) v left join leased l on true`
  // PGlite is one connection in one process (the data-dir lock): nothing else claims, so the
  // statement needs no lock and no transaction around it (on PGlite each statement costs ~0.4 ms).
  const rows = sender.sole
    ? await queryRows<Row>(db, claim)
    : (await pipelinedTransaction(db, [sql`select pg_advisory_xact_lock(${CLAIM_LOCK})`, claim]))[1] as Row[]
  const visited = Number(rows[0]?.visited ?? 0)
  return {
    deliveries: rows
      .filter((row) => row.id !== null)
      .map((row) => ({
        id: row.id!,
        eventId: row.event_id,
        hookId: row.hook_id,
        accountId: row.account_id,
        attempts: Number(row.attempts),
        payload: row.payload,
        eventType: row.event_type,
        targetUrl: row.target_url,
        targetCredentialsCiphertext: row.target_credentials_ciphertext,
        signatureScheme: row.signature_scheme,
        secretCiphertext: row.secret_ciphertext,
        previousSecretCiphertext: row.previous_secret_ciphertext,
        suspect: row.suspect === true,
        probe: row.probe === true,
        eventSubscription: row.event_subscription === true,
        traceContext: row.trace_context,
        origin: row.origin,
      })),
    more: visited >= scan,
    backlog: (JSON.parse(rows[0]?.backlog ?? '[]') as [string, string, number][]).map(([hookId, accountId, waitedMs]) => ({ hookId, accountId, waitedMs })),
  }
}

/**
 * Stores a batch of attempts in one statement: each attempt's log row, its delivery's next
 * state, and what the batch means for each subscription (a success resets its failure clock, a
 * 410 or five days of failures disable it, a 429 or 503 with Retry-After pauses it that long,
 * and its circuit breaker counts, opens or closes: src/delivery/circuit.ts); a subscription it
 * disabled has its pending deliveries canceled by a second statement. The same statement adds
 * the attempts to the health rollups (src/stats/rollups.ts), last. A delivery deleted
 * meanwhile (its subscription was deleted) is skipped. One statement per batch rather than per
 * attempt keeps the database off the critical path when hundreds of attempts finish each second.
 *
 * Then the batch's subscriptions are marked due (src/delivery/queue.ts): a finished attempt frees
 * a slot, and a retry may be their next work. That is a statement of its own, after the first
 * committed, and it passes over queue rows another transaction holds (they are being marked due
 * by it) rather than wait: the next batch of attempts must not wait behind another account's
 * fan-out. If the process dies between the two, the subscription's due_at is still no later than
 * the lease of the attempt that ended, so nothing waits longer than that.
 */
export async function recordDeliveryAttempts(db: Database, batch: readonly RecordedAttempt[]): Promise<void> {
  if (batch.length === 0) return
  // A delivery leased again after its lease ran out (a record that waited that long) can finish
  // twice in one batch, and the statement moves each delivery once and logs what it moved: a
  // second attempt of the same delivery is recorded by a statement of its own, after the first.
  const attempts: RecordedAttempt[] = []
  const again: RecordedAttempt[] = []
  const seen = new Set<string>()
  for (const attempt of batch) {
    if (seen.has(attempt.deliveryId)) again.push(attempt)
    else {
      seen.add(attempt.deliveryId)
      attempts.push(attempt)
    }
  }
  const input = attempts.map(({ deliveryId, result, decision }) => ({
    delivery_id: deliveryId,
    attempt_id: newId('att'),
    status_code: result.status,
    breaker_failure: isBreakerFailure(result),
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
        delivery_id text, attempt_id text, status_code int, breaker_failure boolean, duration_ms int, error text, response_snippet text,
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
      -- The attempt's own figures come back with its delivery, so that what follows reads one member
      -- and joins no two: with hash joins off (KEYED_PLAN_SETTINGS) a join of two members is a
      -- nested loop, a batch of 70 attempts read 70 × 70 rows twice (docs/performance.md).
      returning d.id, d.hook_id, d.event_id, i.attempt_id, i.status_code, i.duration_ms, i.error, i.response_snippet,
                i.outcome, i.disable_reason, i.throttle_ms, i.breaker_failure
    ),
    logged as (
      insert into delivery_attempts (id, delivery_id, hook_id, event_id, status_code, duration_ms, error, response_snippet)
      select m.attempt_id, m.id, m.hook_id, m.event_id, m.status_code, m.duration_ms, m.error, m.response_snippet
      from moved m
    ),
    per_hook as (
      select m.hook_id,
             -- An agent's receiver refusing one event (410, 413) answered on purpose: it stops the failure clock as a success does.
             bool_or(m.outcome in ('delivered', 'refused')) as succeeded,
             max(m.disable_reason) as disable_reason,
             max(m.throttle_ms) as throttle_ms,
             bool_or(not m.breaker_failure) as answered,
             count(*) filter (where m.breaker_failure)::int as failures,
             min(before.status) as status_before
      from moved m join hooks before on before.id = m.hook_id
      group by m.hook_id
    ),
    changed as (
    update hooks h set
      throttled_until = case when p.throttle_ms is null then h.throttled_until
        else greatest(h.throttled_until, now() + make_interval(secs => p.throttle_ms / 1000)) end,
      failing_since = case when p.succeeded then null else coalesce(h.failing_since, now()) end,
      consecutive_failures = case when p.answered then 0 else h.consecutive_failures + p.failures end,
      circuit_opened_at = case
        when p.answered then null
        when h.circuit_opened_at is null and h.consecutive_failures + p.failures >= ${CIRCUIT_OPENS_AFTER} then now()
        else h.circuit_opened_at end,
      circuit_probe_at = case
        when p.answered then null
        when h.circuit_opened_at is null and h.consecutive_failures + p.failures >= ${CIRCUIT_OPENS_AFTER} then now() + make_interval(secs => ${PROBE_INTERVAL_MIN_S})
        when h.circuit_opened_at is not null then greatest(h.circuit_probe_at, ${nextProbeAt(sql`h.circuit_opened_at`)})
        else h.circuit_probe_at end,
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
        or p.failures > 0
        or (p.answered and (h.consecutive_failures > 0 or h.circuit_opened_at is not null))
        or (p.succeeded and h.failing_since is not null)
        or (not p.succeeded and h.failing_since is null)
        or (h.status = 'active' and (p.disable_reason is not null
          or (not p.succeeded and h.failing_since < now() - make_interval(secs => ${CONTINUOUS_FAILURE_DISABLES_AFTER_MS / 1000})))))
    returning h.id, h.status, p.status_before
    )${attemptRollups(
      attempts.map(({ hookId, accountId, result }) => ({ hookId, accountId, ok: result.ok, failure: result.failure, durationMs: result.durationMs })),
      'moved',
      ['changed'],
    )}
    select id from changed where status = 'disabled' and status_before <> 'disabled'`)
  if (disabled.length > 0) await cancelPendingDeliveries(db, disabled.map((row) => row.id))
  await markHooksDueUnlessHeld(db, [...new Set(attempts.map((attempt) => attempt.hookId))])
  await recordDeliveryAttempts(db, again)
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
