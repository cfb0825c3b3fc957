import { sql, type SQL } from 'drizzle-orm'
import { addCounts, latencyIndex, type Counts } from './histogram.ts'
import type { FailureReason } from './failure-reasons.ts'

/**
 * The health rollups (docs/api.md#health-over-time) are written by the statements that store
 * what they count: an attempt's figures in the statement that logs it, an event's in the one
 * that stores it, a message's in the one that accepts it. They commit together or not at all, so
 * a process killed at any point neither loses a count nor counts one twice.
 *
 * Each figure goes into three rows, its minute's, hour's and day's (UTC), each row taking in a
 * statement's figures with one upsert; an account's rows are per kind of writer (attempts,
 * messages, events), so those three never wait on each other. Those rows are the hottest in the database (every batch
 * of an account's attempts rewrites them), so the upserts are written last in their statements
 * (their input waits for the statement's other writes) and in key order: a row lock is then held
 * only from the upsert to the commit, and two statements never take two rows in opposite orders.
 */
export const STAT_UNITS = ['minute', 'hour', 'day'] as const
export type StatUnit = (typeof STAT_UNITS)[number]

const units = sql`(values ('minute'), ('hour'), ('day')) as u(unit)`
const bucketOf = (at: SQL) => sql`date_trunc(u.unit, ${at}, 'UTC')`

/**
 * A count map ({ "key": n }) with a batch's added key by key: how a rollup row takes in a batch's
 * figures. It walks the batch's keys only (a few) and finds each in the row's map by binary
 * search (a row's latency map holds a hundred). Written out in each statement rather than as a SQL
 * function: PostgreSQL cannot inline a function with a subquery, and the call cost half as much
 * again (docs/performance.md).
 */
export const addedCounts = (current: SQL, delta: SQL) =>
  sql`${current} || coalesce((select jsonb_object_agg(key, coalesce((${current} ->> key)::bigint, 0) + value::bigint) from jsonb_each_text(${delta})), '{}'::jsonb)`

/** A condition true once each of these members of the statement's WITH has done its writes. */
const afterWrites = (members: readonly string[]) => sql.join(members.map((member) => sql`(select count(*) from ${sql.identifier(member)}) >= 0`), sql` and `)

/** One attempt as the rollups count it. */
export interface AttemptFigures {
  hookId: string
  accountId: string
  ok: boolean
  failure: FailureReason | null
  durationMs: number
}

interface Delta {
  key: string
  attempts: number
  succeeded: number
  failures: Counts
  latency: Counts
}

/** A batch's figures per key (subscription or account), in key order: added up here, in one pass. */
function deltasBy(attempts: readonly AttemptFigures[], keyOf: (attempt: AttemptFigures) => string): Delta[] {
  const deltas = new Map<string, Delta>()
  for (const attempt of attempts) {
    const key = keyOf(attempt)
    let delta = deltas.get(key)
    if (!delta) deltas.set(key, (delta = { key, attempts: 0, succeeded: 0, failures: {}, latency: {} }))
    delta.attempts++
    if (attempt.ok) delta.succeeded++
    else addCounts(delta.failures, { [attempt.failure ?? 'other']: 1 })
    addCounts(delta.latency, { [latencyIndex(attempt.durationMs)]: 1 })
  }
  return [...deltas.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
}

/**
 * The tail of a WITH that records attempts: adds them to their subscriptions' and accounts'
 * rollups, once the members named in `after` have done their writes. The batch is added up in
 * JavaScript, so the statement upserts one row per subscription and unit, however many attempts
 * each had. A subscription counts only if the member `logged` (its `hook_id` column) wrote for
 * it: one deleted meanwhile is skipped (its rollups went with it), even when the delete committed
 * while this statement waited for a delivery the delete held, so that its snapshot still shows
 * the subscription. Its account still counts the attempt, as it counts every attempt its deleted
 * subscriptions made.
 */
export function attemptRollups(attempts: readonly AttemptFigures[], logged: string, after: readonly string[]): SQL {
  const figures = (deltas: Delta[]) => sql`jsonb_to_recordset(${JSON.stringify(deltas)}::jsonb) as d(key text, attempts int, succeeded int, failures jsonb, latency jsonb)`
  // A healthy batch has no failures: its row's map is kept as it is. A row whose bucket had closed
  // (a transaction begun in it committing late) is open again: src/stats/closing.ts.
  const merge = (table: string) => {
    const column = (name: string) => sql`${sql.identifier(table)}.${sql.identifier(name)}`
    return sql`attempts = ${column('attempts')} + excluded.attempts, succeeded = ${column('succeeded')} + excluded.succeeded,
    failures = case when excluded.failures = '{}'::jsonb then ${column('failures')} else ${addedCounts(column('failures'), sql`excluded.failures`)} end,
    latency = ${addedCounts(column('latency'), sql`excluded.latency`)},
    p50_ms = null, p95_ms = null, p99_ms = null`
  }
  return sql`,
  hook_stats_added as (
    insert into hook_stats (hook_id, unit, bucket, attempts, succeeded, failures, latency)
    select d.key, u.unit, ${bucketOf(sql`now()`)}, d.attempts, d.succeeded, d.failures, d.latency
    from ${figures(deltasBy(attempts, (attempt) => attempt.hookId))} cross join ${units}
    where d.key = any(array(select hook_id from ${sql.identifier(logged)})) and ${afterWrites(after)}
    order by 1, 2, 3
    on conflict (hook_id, unit, bucket) do update set ${merge('hook_stats')}
    returning 1
  ),
  account_stats_added as (
    insert into account_stats (account_id, unit, bucket, kind, attempts, succeeded, failures, latency)
    select d.key, u.unit, ${bucketOf(sql`now()`)}, 'attempts', d.attempts, d.succeeded, d.failures, d.latency
    from ${figures(deltasBy(attempts, (attempt) => attempt.accountId))} cross join ${units}
    where ${afterWrites(['hook_stats_added'])}
    order by 1, 2, 3
    on conflict (account_id, unit, bucket, kind) do update set ${merge('account_stats')}
    returning 1
  )`
}

/**
 * The tail of a WITH that stores events: counts the member `events` (account_id, type), per
 * account and type, once the members named in `after` have done their writes. Test events are
 * not passed here.
 */
export function eventRollups(events: string, after: readonly string[]): SQL {
  return sql`,
  events_counted as (
    insert into account_stats (account_id, unit, bucket, kind, events)
    select account_id, unit, bucket, 'events', jsonb_object_agg(type, n) from (
      select e.account_id, u.unit, ${bucketOf(sql`now()`)} as bucket, e.type, count(*)::int as n
      from ${sql.identifier(events)} e cross join ${units}
      where ${afterWrites(after)}
      group by 1, 2, 3, 4
    ) c group by 1, 2, 3 order by 1, 2, 3
    on conflict (account_id, unit, bucket, kind) do update set events = ${addedCounts(sql`account_stats.events`, sql`excluded.events`)}
    returning 1
  )`
}

/** The tail of a WITH that stores outbound messages: counts the member `messages` (account_id, created_at) as sent. */
export function sentMessageRollups(messages: string): SQL {
  return sql`,
  sent_counted as (
    insert into account_stats (account_id, unit, bucket, kind, messages_sent)
    select m.account_id, u.unit, ${bucketOf(sql`m.created_at`)} as bucket, 'messages', count(*)::int
    from ${sql.identifier(messages)} m cross join ${units}
    group by 1, 2, 3 order by 1, 2, 3
    on conflict (account_id, unit, bucket, kind) do update set messages_sent = account_stats.messages_sent + excluded.messages_sent
    returning 1
  )`
}
