#!/usr/bin/env bun
/**
 * What one MCP `events/poll` costs when an agent replays its earliest cursor (issue 32): an
 * account holds --events message.inbound events (payloads of about --body characters, contacts
 * spread over 1,000 numbers), and the cursor a poll got before any of them is sent again and
 * again, as a client may for the whole retention. Two polls: without a filter, and with a filter
 * that matches nothing (the worst: it reads as far as a poll may). `pollEvents` is called in
 * process on a fresh PostgreSQL database, one connection, after `vacuum analyze`.
 *
 *   bun bench/event-poll.ts                      # 100,000 events, 200 polls each
 *   bun bench/event-poll.ts --events 20000 --polls 50
 *
 * Per poll: wall time (p50, p99), shared buffers touched and temporary-file bytes (from
 * pg_stat_database), the events answered, and what the rate limiter charges for it. Options:
 * --events 100000, --body 1600, --polls 200, --pg-url <admin URL> (default
 * postgres://postgres@127.0.0.1:5432/postgres or $BENCH_PG_URL; loopback only).
 */
import { randomBytes } from 'node:crypto'
import { sql } from 'drizzle-orm'
import { DEFAULT_PG_URL, commandLine, connect, fmtInt, fmtMs, percentiles, printMachine, printTable, runMain, storage } from './harness.ts'
import { postgresDatabase, queryRows } from '../src/lib/db/client.ts'
import { migratePostgresDatabase } from '../src/lib/db/migrate.ts'
import { createSecretBox } from '../src/lib/security/secret-box.ts'
import { createRequestRateLimiter } from '../src/auth/request-rate-limit.ts'
import * as poll from '../src/mcp/event-poll.ts'
import type { Caller } from '../src/auth/authenticator.ts'

const cli = commandLine(import.meta.url, {
  events: { type: 'string', default: '100000' },
  body: { type: 'string', default: '1600' },
  polls: { type: 'string', default: '200' },
  'pg-url': { type: 'string', default: process.env.BENCH_PG_URL ?? DEFAULT_PG_URL },
})
const EVENTS = cli.integer('events', 1_000, 10_000_000)
const BODY = cli.integer('body', 1, 100_000)
const POLLS = cli.integer('polls', 1, 100_000)
const ADMIN = cli.loopbackUrl(cli.string('pg-url'), '--pg-url')

async function main(): Promise<number> {
  printMachine([['events', `${fmtInt(EVENTS)} of ~${fmtInt(BODY)}-character bodies, ${fmtInt(POLLS)} polls per row`]])
  const store = await storage('postgres', ADMIN, 'poll')
  const url = store.database!.url
  await migratePostgresDatabase(url.href)
  const handle = postgresDatabase(url.href, { max: 1 })
  const admin = connect(url)
  try {
    const accountId = 'acc_bench'
    await admin`insert into accounts (id, name) values (${accountId}, 'bench')`
    const caller: Caller = { accountId, credential: { kind: 'access_token', grantId: 'grt_bench', clientId: 'cli_bench', userId: 'usr_bench', audience: [], exp: 0 }, scopes: ['messages:read'] }
    const charged = { requests: 0 }
    const limiter = createRequestRateLimiter({ ratePerSecond: 100 })
    const rateLimiter = { ...limiter, charge: (key: string, requests: number) => void (charged.requests += requests) }
    const deps = { db: handle.db, secretBox: await createSecretBox(randomBytes(32)), retentionDays: 30, rateLimiter }
    const early = ((await poll.pollEvents(deps, caller, { name: 'message.inbound', cursor: null })) as { cursor: string }).cursor

    // The commit before issue 32 has no events.contact: the same rows either way.
    const [{ exists } = { exists: false }] = await admin`select exists (select 1 from information_schema.columns where table_name = 'events' and column_name = 'contact') as exists`
    const body = 'x'.repeat(BODY)
    const started = performance.now()
    for (let from = 0; from < EVENTS; from += 10_000) {
      const n = Math.min(10_000, EVENTS - from)
      await admin.unsafe(
        `insert into events (id, account_id, type, payload${exists ? ', contact' : ''})
         select 'evt_' || lpad(($1 + i)::text, 26, '0'), $2::text, 'message.inbound',
           json_build_object('id', 'evt_' || lpad(($1 + i)::text, 26, '0'), 'type', 'message.inbound', 'timestamp', now(), 'account_id', $2::text,
             'data', json_build_object('message', json_build_object('id', 'msg_' || ($1 + i), 'direction', 'inbound', 'from', '+1555' || lpad((i % 1000)::text, 7, '0'), 'body', $3::text)))::text
           ${exists ? `, '+1555' || lpad((i % 1000)::text, 7, '0')` : ''}
         from generate_series(1, $4) as i`,
        [from, accountId, body, n],
      )
    }
    await admin`vacuum analyze events`
    console.log(`stored   ${fmtInt(EVENTS)} events in ${fmtMs(performance.now() - started)}\n`)

    const stats = async () => {
      // The polling connection's statistics reach pg_stat_database at its next transaction end.
      await queryRows(handle.db, sql`select pg_stat_force_next_flush()`)
      await queryRows(handle.db, sql`select 1`)
      const [row] = await admin`select blks_hit + blks_read as blocks, temp_bytes from pg_stat_database where datname = current_database()`
      return { blocks: Number(row!.blocks), tempBytes: Number(row!.temp_bytes) }
    }
    const rows = [['poll, replaying the earliest cursor', 'p50', 'p99', 'buffers/poll', 'temp bytes/poll', 'events answered', 'requests charged']]
    for (const [label, args] of [['no filter, maxEvents 100', {}], ['a filter that matches nothing, maxEvents 100', { from: ['+19990000000'] }]] as const) {
      const times: number[] = []
      let answered = 0
      charged.requests = 0
      const before = await stats()
      for (let i = 0; i < POLLS; i++) {
        const at = performance.now()
        const result = (await poll.pollEvents(deps, caller, { name: 'message.inbound', arguments: args, cursor: early, maxEvents: 100 })) as { events: unknown[] }
        times.push(performance.now() - at)
        answered += result.events.length
      }
      const after = await stats()
      const p = percentiles(times)
      rows.push([label, fmtMs(p.p50), fmtMs(p.p99), fmtInt((after.blocks - before.blocks) / POLLS), fmtInt((after.tempBytes - before.tempBytes) / POLLS), fmtInt(answered / POLLS), String(1 + charged.requests / POLLS)])
    }
    printTable(rows)
    return 0
  } finally {
    await admin.end({ timeout: 5 })
    await handle.close()
  }
}

await runMain('event-poll', main, 30 * 60_000)
