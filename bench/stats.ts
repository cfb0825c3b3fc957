/**
 * bench/webhooks.ts --scenario stats (issue 34): delivery attempts seeded by SQL with the health
 * rollups they imply, and GET …/stats read back under a bounded closed loop.
 */
import { EXACT_UP_TO, GROWTH, HistogramSum, parseHistogram, percentiles as histogramPercentiles } from '../src/stats/histogram.ts'
import { sql as drizzleSql, type SQL } from 'drizzle-orm'
import { queryRows, type Database } from '../src/lib/db/client.ts'
import { createStatsCache, type StatsCache } from '../src/stats/service.ts'
import { HttpPool } from './http-client.ts'
import { fail, fmtInt, median, percentiles, postgresCpuSeconds, processCpuSeconds, startCpu, type Sql } from './harness.ts'

// What src/stats/rollups.ts counts for a stored attempt: its failure reason as src/delivery/send.ts decides it (from the
// status and error it logs: null when ok), its latency index (latencyIndex, the same SQL), and a bucket per unit.
export const FAILURE = `case when a.error is null and a.status_code between 200 and 299 then null when a.error like 'timed out%' then 'timeout'
  when a.error like 'connect%' then 'connection' when a.error like 'refused (unresolvable)%' then 'connection' when a.error like 'refused (%' then 'refused' when a.status_code >= 500 then 'http_5xx'
  when a.status_code >= 400 then 'http_4xx' when a.status_code >= 300 then 'redirect' else 'other' end`
const LATENCY_INDEX = `case when a.duration_ms <= ${EXACT_UP_TO} then greatest(a.duration_ms, 0) else ${EXACT_UP_TO} + ceil(ln(a.duration_ms / ${EXACT_UP_TO}.0) / ln(${GROWTH}))::int end`
const UNITS = `(values ('minute'), ('hour'), ('day')) u(unit)`

/** hook_stats and account_stats as the stored attempts, events and messages imply them, computed set by set: with `replace` they become the tables; without, answers how many rows (an account's: figures) differ from the tables. */
export async function impliedRollups(sql: Sql, replace: boolean): Promise<{ hooks: number; accounts: number; differences: number }> {
  return sql.begin(async (tx) => {
    await tx`set local work_mem = '256MB'`
    await tx.unsafe(`create temp table att on commit drop as select a.hook_id, h.account_id, date_trunc('minute', a.attempted_at, 'UTC') as minute,
      ${FAILURE} as failure, ${LATENCY_INDEX} as li, count(*)::int as n from delivery_attempts a join hooks h on h.id = a.hook_id group by 1, 2, 3, 4, 5`)
    const per = (key: string, where: string, value: string) => `select ${key} as k, u.unit, date_trunc(u.unit, minute, 'UTC') as bucket, ${value} as v, sum(n)::int as n from att cross join ${UNITS} ${where} group by 1, 2, 3, 4`
    for (const [table, key] of [['hook_stats', 'hook_id'], ['account_stats', 'account_id']] as const) {
      await tx.unsafe(`create temp table new_${table} (like ${table} including all) on commit drop`)
      await tx.unsafe(`insert into new_${table} (${key}, unit, bucket, ${table === 'account_stats' ? 'kind, ' : ''}attempts, succeeded, failures, latency)
        select l.k, l.unit, l.bucket, ${table === 'account_stats' ? "'attempts', " : ''}l.attempts, l.attempts - coalesce(f.failed, 0), coalesce(f.failures, '{}'), l.latency
        from (select k, unit, bucket, sum(n)::int as attempts, jsonb_object_agg(v::text, n) as latency from (${per(key, '', 'li')}) x group by 1, 2, 3) l
        left join (select k, unit, bucket, sum(n)::int as failed, jsonb_object_agg(v, n) as failures from (${per(key, 'where failure is not null', 'failure')}) x group by 1, 2, 3) f using (k, unit, bucket)`)
    }
    await tx.unsafe(`insert into new_account_stats (account_id, unit, bucket, kind, events) select account_id, unit, bucket, 'events', jsonb_object_agg(type, n) from (
        select e.account_id, u.unit, date_trunc(u.unit, e.created_at, 'UTC') as bucket, e.type, count(*)::int as n from events e cross join ${UNITS} where not e.test group by 1, 2, 3, 4) c
      group by 1, 2, 3`)
    await tx.unsafe(`insert into new_account_stats (account_id, unit, bucket, kind, messages_sent) select m.account_id, u.unit, date_trunc(u.unit, m.created_at, 'UTC'), 'messages', count(*)::int
      from messages m cross join ${UNITS} where m.direction = 'outbound' group by 1, 2, 3`)
    // The percentiles the service stores in closed rows (src/stats/closing.ts) are left out: tests/stats/closing.test.ts checks them.
    // An account's bucket is compared figure by figure, whichever of its rows holds each: once closed, the service merges its kinds into one.
    const figures = (from: string) => `select account_id, unit, bucket, f.field, f.key, sum(f.n)::bigint as n from ${from} r cross join lateral (
      select 'attempts' as field, '' as key, r.attempts::bigint as n union all select 'succeeded', '', r.succeeded union all select 'sent', '', r.messages_sent
      union all select 'failures', key, value::bigint from jsonb_each_text(r.failures) union all select 'latency', key, value::bigint from jsonb_each_text(r.latency)
      union all select 'events', key, value::bigint from jsonb_each_text(r.events)) f where f.n <> 0 group by 1, 2, 3, 4, 5`
    const rows = (t: string, from: string) => (t === 'hook_stats' ? `select hook_id, unit, bucket, attempts, succeeded, failures, latency from ${from}` : figures(from))
    const diff = (t: string) => `(select count(*) from (${rows(t, t)} except ${rows(t, `new_${t}`)}) x) + (select count(*) from (${rows(t, `new_${t}`)} except ${rows(t, t)}) y)`
    const [r] = await tx.unsafe(`select (select count(*) from new_hook_stats)::int as hooks, (select count(*) from new_account_stats)::int as accounts,
      (${replace ? 0 : `${diff('hook_stats')} + ${diff('account_stats')}`})::int as differences`)
    if (replace) await tx.unsafe(`delete from hook_stats; delete from account_stats; insert into hook_stats select * from new_hook_stats; insert into account_stats select * from new_account_stats`)
    return r as unknown as { hooks: number; accounts: number; differences: number }
  })
}

/**
 * `total` attempts over the `days` before `end`, in batches of 500,000 (generate_series), with their events and deliveries.
 * Attempt g belongs to delivery k (k = g, or g − 1 for a retry); a block of 50 deliveries (3 s) goes to one subscription:
 * hooks[0] 9 blocks in 10, the others the 10th in turn. The first attempt of each block fails (a 5xx, 4xx, timeout or
 * refused connection, in turn) and is retried 5 s later with success; every other attempt is a 204 after a log-normal
 * duration (median 45 ms). The busy subscription's events are message.delivered, the others' message.failed (each
 * payload is `payload`'s text with its id replaced).
 */
export async function seedAttempts(sql: Sql, o: { accountId: string; hookIds: string[]; total: number; days: number; end: Date; payload: { id: string; text: string }; log: (line: string) => void }) {
  const tid = `(select string_agg(substr('0123456789abcdefghjkmnpqrstvwxyz', ((ms >> (5 * (9 - i))) & 31)::int + 1, 1), '' order by i) from generate_series(0, 9) i)`
  await sql.unsafe(`create or replace function pg_temp.tid(ms bigint) returns text language sql immutable as $$ select ${tid} $$`)
  const t0 = performance.now()
  const [N, others] = [o.total, o.hookIds.length - 1]
  for (let from = 1; from <= N; from += 500_000) {
    const to = Math.min(N, from + 499_999)
    await sql.begin(async (tx) => {
      await tx`create temp table seed on commit drop as select g, k, g = k as first, g % 50 = 0 as failed, g % 50 = 0 and g = ${N} as last, (k / 500 % 10)::int + 1 as r,
          case when k / 50 % 10 = 9 then (${sql.array(o.hookIds)}::text[])[2 + k / 500 % ${others}::int] else ${o.hookIds[0]!} end as hook_id,
          case when k / 50 % 10 = 9 then 'message.failed' else 'message.delivered' end as type, e_at, e_at + interval '20 ms' + (g - k) * interval '5 s' as at,
          pg_temp.tid((extract(epoch from e_at) * 1000)::bigint) || lpad(k::text, 16, '0') as dsfx
        from (select g, k, ${o.end}::timestamptz - make_interval(days => ${o.days}::int) + (k::float8 / ${N}::int) * make_interval(days => ${o.days}::int) as e_at
          from (select g, g - (g % 50 = 1 and g > 1)::int as k from generate_series(${from}::int, ${to}::int) g) s) s`
      await tx`insert into events (id, account_id, type, payload, created_at) select 'evt_' || dsfx, ${o.accountId}, type, replace(${o.payload.text}, ${o.payload.id}, 'evt_' || dsfx), e_at from seed where first`
      await tx`insert into deliveries (id, event_id, hook_id, status, attempts, next_attempt_at, created_at)
        select 'dlv_' || dsfx, 'evt_' || dsfx, hook_id, case when last then 'failed' else 'delivered' end, case when failed and not last then 2 else 1 end, e_at, e_at from seed where first`
      await tx`insert into delivery_attempts (id, delivery_id, hook_id, event_id, attempted_at, status_code, duration_ms, error, response_snippet)
        select 'att_' || pg_temp.tid((extract(epoch from at) * 1000)::bigint) || lpad(g::text, 16, '0'), 'dlv_' || dsfx, hook_id, 'evt_' || dsfx, at,
          case when failed then (array[503, 503, 503, 503, null, null, 404, 404, null, 500])[r] else 204 end,
          case when failed and r in (5, 6) then 15000 when failed and r = 9 then 1 else least(14000, round(exp(ln(45) + 0.7 * sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random()))))::int end,
          case when failed then (array['HTTP 503', 'HTTP 503', 'HTTP 503', 'HTTP 503', 'timed out after 15000 ms', 'timed out after 15000 ms', 'HTTP 404', 'HTTP 404', 'connection failed: ECONNREFUSED', 'HTTP 500'])[r] end, ''
        from seed`
    })
    o.log(`  seeded ${fmtInt(to)} of ${fmtInt(N)} attempts (${fmtInt(to / ((performance.now() - t0) / 1000))} /s)`)
  }
}

/** `clients` GETs of `path` outstanding for `seconds` (closed loop, keep-alive): requests/s, p50/p95/p99, CPU per request of the server and PostgreSQL. */
export async function closedGets(origin: string, path: string, o: { clients: number; seconds: number; serverPid: number; database: string }) {
  const url = new URL(origin)
  const pool = new HttpPool({ hostname: url.hostname, port: Number(url.port), connections: o.clients, expectStatus: 200, timeoutMs: 10_000 })
  const [times, deadline] = [[] as number[], performance.now() + o.seconds * 1000]
  const stop = startCpu({ server: () => processCpuSeconds(o.serverPid), postgres: () => postgresCpuSeconds(o.database) })
  await Promise.all(Array.from({ length: o.clients }, async () => {
    while (performance.now() < deadline) {
      const answer = await pool.request(`GET ${path} HTTP/1.1\r\nHost: ${url.host}\r\n\r\n`)
      if (answer.status !== 200) fail(`GET …/stats answered ${answer.status}: ${answer.body.slice(0, 300)}`)
      times.push(answer.ms)
    }
  }))
  const cpu = stop()
  pool.close()
  return { ...percentiles(times), rps: times.length / cpu.wall, cpu, perRequest: (k: string) => (cpu.seconds[k]! * 1e6) / times.length }
}

/** The median ms of `runs` calls of `f`, after two unmeasured. */
export async function medianMs(runs: number, f: () => unknown): Promise<number> {
  const times: number[] = []
  for (let i = -2; i < runs; i++) {
    const t0 = performance.now()
    await f()
    if (i >= 0) times.push(performance.now() - t0)
  }
  return median(times)
}

/**
 * Where a GET …/stats spends its time, measured in this process (medians of 20): the service's rollup query
 * (src/stats/service.ts rangeRowsQuery) in PostgreSQL (EXPLAIN ANALYZE) and fetched as the service fetches it, the version query of its settled part, the
 * histograms among its rows scanned (parseHistogram), their percentiles and the totals' merge (src/stats/histogram.ts,
 * as the service does), the service function `read` without and with its cache, JSON.stringify.
 */
export async function whereTimeGoes(db: Database, query: SQL, versionQuery: SQL, read: (cache: StatsCache) => Promise<unknown>): Promise<string> {
  const explain = async (of: SQL) => ((await queryRows(db, drizzleSql`explain (analyze, buffers, format json) ${of}`)) as [{ 'QUERY PLAN': [ExplainedPlan] }])[0]['QUERY PLAN'][0]
  const [plan, versionPlan] = [await explain(query), await explain(versionQuery)]
  const rows = await queryRows<{ latency: string | null }>(db, query)
  const [histograms, answer, cache] = [rows.flatMap((r) => (r.latency ? [parseHistogram(r.latency)] : [])), await read(createStatsCache(0)), createStatsCache()]
  const ms = {
    fetched: await medianMs(20, () => queryRows(db, query)),
    scanned: await medianMs(20, () => rows.map((r) => r.latency && parseHistogram(r.latency))),
    percentiles: await medianMs(20, () => histograms.map(histogramPercentiles)),
    totals: await medianMs(20, () => {
      const sum = new HistogramSum()
      for (const histogram of histograms) sum.add(histogram)
      return sum.percentiles()
    }),
    service: await medianMs(20, () => read(createStatsCache(0))),
    cached: await medianMs(20, () => read(cache)),
    stringify: await medianMs(20, () => JSON.stringify(answer)),
  }
  const f = (n: number) => `${n.toFixed(1)} ms`
  return `the query ${f(plan['Execution Time'])} in PostgreSQL (${fmtInt(plan.Plan['Actual Rows'])} rows, ${fmtInt(plan.Plan['Shared Hit Blocks'] + plan.Plan['Shared Read Blocks'])} buffers), ` +
    `fetched ${f(ms.fetched)}; the settled part's version (src/stats/service.ts, partVersionQuery) ${f(versionPlan['Execution Time'])} in PostgreSQL (${fmtInt(versionPlan.Plan['Shared Hit Blocks'] + versionPlan.Plan['Shared Read Blocks'])} buffers); ${fmtInt(histograms.length)} histograms (the rows without stored percentiles or at the range's ragged edges) scanned ${f(ms.scanned)}, their percentiles ${f(ms.percentiles)}, merged into the totals ${f(ms.totals)}; ` +
    `the service function ${f(ms.service)}, ${f(ms.cached)} with its cache warm (src/stats/cache.ts); JSON.stringify of its ${fmtInt(JSON.stringify(answer).length / 1024)} KB answer ${f(ms.stringify)}`
}

interface ExplainedPlan {
  'Execution Time': number
  Plan: { 'Actual Rows': number; 'Shared Hit Blocks': number; 'Shared Read Blocks': number }
}
