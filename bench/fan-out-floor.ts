#!/usr/bin/env bun
/**
 * The least CPU a storm's fan-out can cost PostgreSQL (issue 37, nineteenth pass): one account
 * with --hooks subscriptions to message.failed and --events of its events, then one delivery per
 * (event, subscription) written by bare `insert … select` statements of --rows-per-statement rows
 * (each statement joins the events it covers to the subscriptions: no markDue, rollups or
 * settlement, only the rows and what the schema makes every row cost), on a fresh PostgreSQL
 * database after the migrations. The same again with the schema lightened step by step, to show
 * what each part costs: without the two indexes the fan-out's inserts never read
 * (deliveries_event_id_idx, deliveries_hook_id_idx), then also without the foreign keys, then
 * also without the claim's partial index (deliveries_pending_idx). Per step: the backend's CPU (from /proc), wall time,
 * µs of CPU per row.
 *
 *   bun bench/fan-out-floor.ts                    # 1,000 subscriptions × 200 events: the storm's 200,000 rows
 *
 * Options: --hooks 1000, --events 200, --rows-per-statement 2000, --pg-url <admin URL> (default
 * postgres://postgres@127.0.0.1:5432/postgres or $BENCH_PG_URL; loopback only).
 */
import { DEFAULT_PG_URL, commandLine, connect, fail, fmtFixed, fmtInt, printMachine, printTable, processCpuSeconds, runMain, storage } from './harness.ts'
import { migratePostgresDatabase } from '../src/lib/db/migrate.ts'

const cli = commandLine(import.meta.url, {
  hooks: { type: 'string', default: '1000' },
  events: { type: 'string', default: '200' },
  'rows-per-statement': { type: 'string', default: '2000' },
  'pg-url': { type: 'string', default: process.env.BENCH_PG_URL ?? DEFAULT_PG_URL },
})
const HOOKS = cli.integer('hooks', 1, 100_000)
const EVENTS = cli.integer('events', 1, 100_000)
const ROWS_PER_STATEMENT = cli.integer('rows-per-statement', 1, 1_000_000)
const ADMIN = cli.loopbackUrl(cli.string('pg-url'), '--pg-url')

const LIGHTER = [
  ['the schema as migrated', ''],
  ['without deliveries_event_id_idx and deliveries_hook_id_idx', 'drop index deliveries_event_id_idx; drop index deliveries_hook_id_idx'],
  ['… and without the foreign keys of deliveries', 'alter table deliveries drop constraint deliveries_event_id_events_id_fk, drop constraint deliveries_hook_id_hooks_id_fk'],
  ['… and without deliveries_pending_idx', 'drop index deliveries_pending_idx'],
] as const

async function main(): Promise<number> {
  const eventsPerStatement = Math.max(1, Math.floor(ROWS_PER_STATEMENT / HOOKS))
  printMachine([['fan-out', `${fmtInt(HOOKS)} subscriptions × ${fmtInt(EVENTS)} events = ${fmtInt(HOOKS * EVENTS)} deliveries, ${fmtInt(eventsPerStatement)} events per statement`]])
  const store = await storage('postgres', ADMIN, 'floor')
  await migratePostgresDatabase(store.database!.url.href)
  const sql = connect(store.database!.url)
  try {
    await sql`insert into accounts (id, name) values ('acc_floor', 'floor')`
    await sql`insert into hooks (id, account_id, event, target_url, secret_ciphertext)
              select 'hk_' || lpad(g::text, 24, '0'), 'acc_floor', 'message.failed', 'https://127.0.0.1:1/' || g, 'sealed' from generate_series(1, ${HOOKS}) g`
    await sql`insert into events (id, account_id, type, payload, contact)
              select 'evt_' || lpad(g::text, 26, '0'), 'acc_floor', 'message.failed', repeat('x', 400), '+14155550000' from generate_series(1, ${EVENTS}) g`
    const [{ pid }] = await sql<[{ pid: number }]>`select pg_backend_pid() as pid`
    if (!Number.isFinite(processCpuSeconds(pid))) fail(`cannot read the CPU of PostgreSQL's backend (pid ${pid}) from /proc: the server must run on this machine, outside a container`)
    const rows: string[][] = [['schema', 'rows', 'backend CPU', 'wall', 'CPU per row']]
    for (const [label, change] of LIGHTER) {
      if (change) await sql.unsafe(change)
      await sql`truncate deliveries cascade`
      await sql`checkpoint`
      const cpuBefore = processCpuSeconds(pid)
      const started = performance.now()
      for (let first = 1; first <= EVENTS; first += eventsPerStatement) {
        const last = Math.min(EVENTS, first + eventsPerStatement - 1)
        // The delivery id as src/messages/outbox.ts makes it.
        await sql`insert into deliveries (id, event_id, hook_id)
                  select 'dlv_' || substr(e.id, 5, 10) || substr(replace(gen_random_uuid()::text, '-', ''), 1, 16), e.id, h.id
                  from events e join hooks h on h.account_id = e.account_id and h.event = e.type
                  where e.id between ${eventId(first)} and ${eventId(last)}`
      }
      const wallSeconds = (performance.now() - started) / 1000
      const cpuSeconds = processCpuSeconds(pid) - cpuBefore
      const [{ n }] = await sql<[{ n: number }]>`select count(*)::int as n from deliveries`
      rows.push([label, fmtInt(n), `${fmtFixed(cpuSeconds, 2)} s`, `${fmtFixed(wallSeconds, 2)} s`, `${fmtFixed((cpuSeconds / n) * 1e6, 1)} µs`])
    }
    printTable(rows)
    return 0
  } finally {
    await sql.end({ timeout: 5 })
  }
}

const eventId = (n: number) => `evt_${String(n).padStart(26, '0')}`

await runMain('bench/fan-out-floor.ts', main, 10 * 60_000)
