import { sql, type SQL } from 'drizzle-orm'
import { EXACT_UP_TO, GROWTH } from './histogram.ts'

/**
 * The health rollups (docs/api.md#health-over-time) are written by the statements that store
 * what they count: an attempt's figures in the statement that logs it, an event's in the one
 * that stores it, a message's in the one that accepts it. They commit together or not at all, so
 * a process killed at any point neither loses a count nor counts one twice.
 *
 * Each figure goes into three rows, its minute's, hour's and day's (UTC), each row taking in a
 * statement's figures with one upsert. Those rows are the hottest in the database (every batch
 * of an account's attempts rewrites them), so the upserts are written last in their statements
 * (their input waits for the statement's other writes) and in key order: a row lock is then held
 * only from the upsert to the commit, and two statements never take two rows in opposite orders.
 */
export const STAT_UNITS = ['minute', 'hour', 'day'] as const
export type StatUnit = (typeof STAT_UNITS)[number]

const units = sql`(values ('minute'), ('hour'), ('day')) as u(unit)`
const bucketOf = (at: SQL) => sql`date_trunc(u.unit, ${at}, 'UTC')`

/** src/stats/histogram.ts: the bucket index of a duration in ms (one per ms up to EXACT_UP_TO, then GROWTH times wider each). */
export const latencyIndex = (ms: SQL) =>
  sql`case when ${ms} <= ${sql.raw(String(EXACT_UP_TO))} then greatest(${ms}, 0) else ${sql.raw(String(EXACT_UP_TO))} + ceil(ln(${ms} / ${sql.raw(`${EXACT_UP_TO}.0`)}) / ln(${sql.raw(String(GROWTH))}))::int end`

/** A condition true once each of these members of the statement's WITH has done its writes. */
const afterWrites = (members: readonly string[]) => sql.join(members.map((member) => sql`(select count(*) from ${sql.identifier(member)}) >= 0`), sql` and `)

/**
 * The tail of a WITH that records attempts: `attempts` selects one row per attempt recorded
 * (hook_id, account_id, ok boolean, failure text, duration_ms int), `after` names the members
 * whose writes come first. Adds the members stat_attempts … account_stats_added.
 */
export function attemptRollups(attempts: SQL, after: readonly string[]): SQL {
  const rollup = (key: 'hook_id' | 'account_id') => sql`
    select s.${sql.identifier(key)} as key, s.unit, s.bucket, count(*)::int as attempts, (count(*) filter (where s.ok))::int as succeeded,
      coalesce((select jsonb_object_agg(f.failure, f.n) from (
        select x.failure, count(*)::int as n from stat_attempts x
        where x.${sql.identifier(key)} = s.${sql.identifier(key)} and x.unit = s.unit and x.bucket = s.bucket and x.failure is not null group by x.failure) f), '{}'::jsonb) as failures,
      (select jsonb_object_agg(l.latency_index::text, l.n) from (
        select x.latency_index, count(*)::int as n from stat_attempts x
        where x.${sql.identifier(key)} = s.${sql.identifier(key)} and x.unit = s.unit and x.bucket = s.bucket group by x.latency_index) l) as latency
    from stat_attempts s group by 1, 2, 3 order by 1, 2, 3`
  const merge = (table: string) => sql`attempts = ${sql.identifier(table)}.attempts + excluded.attempts, succeeded = ${sql.identifier(table)}.succeeded + excluded.succeeded,
    failures = stats_add(${sql.identifier(table)}.failures, excluded.failures), latency = stats_add(${sql.identifier(table)}.latency, excluded.latency)`
  return sql`,
  stat_attempts as (
    select a.hook_id, a.account_id, a.ok, case when a.ok then null else coalesce(a.failure, 'other') end as failure,
      ${latencyIndex(sql`a.duration_ms`)} as latency_index, u.unit, ${bucketOf(sql`now()`)} as bucket
    from (${attempts}) a cross join ${units}
    where ${afterWrites(after)}
  ),
  hook_stats_added as (
    insert into hook_stats (hook_id, unit, bucket, attempts, succeeded, failures, latency)
    ${rollup('hook_id')}
    on conflict (hook_id, unit, bucket) do update set ${merge('hook_stats')}
    returning 1
  ),
  account_stats_added as (
    insert into account_stats (account_id, unit, bucket, attempts, succeeded, failures, latency)
    select * from (${rollup('account_id')}) r where ${afterWrites(['hook_stats_added'])} order by 1, 2, 3
    on conflict (account_id, unit, bucket) do update set ${merge('account_stats')}
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
    insert into account_stats (account_id, unit, bucket, events)
    select account_id, unit, bucket, jsonb_object_agg(type, n) from (
      select e.account_id, u.unit, ${bucketOf(sql`now()`)} as bucket, e.type, count(*)::int as n
      from ${sql.identifier(events)} e cross join ${units}
      where ${afterWrites(after)}
      group by 1, 2, 3, 4
    ) c group by 1, 2, 3 order by 1, 2, 3
    on conflict (account_id, unit, bucket) do update set events = stats_add(account_stats.events, excluded.events)
    returning 1
  )`
}

/** The tail of a WITH that stores outbound messages: counts the member `messages` (account_id, created_at) as sent. */
export function sentMessageRollups(messages: string): SQL {
  return sql`,
  sent_counted as (
    insert into account_stats (account_id, unit, bucket, messages_sent)
    select m.account_id, u.unit, ${bucketOf(sql`m.created_at`)} as bucket, count(*)::int
    from ${sql.identifier(messages)} m cross join ${units}
    group by 1, 2, 3 order by 1, 2, 3
    on conflict (account_id, unit, bucket) do update set messages_sent = account_stats.messages_sent + excluded.messages_sent
    returning 1
  )`
}
