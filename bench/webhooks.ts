#!/usr/bin/env bun
/**
 * Webhook delivery on PostgreSQL, end to end: messages sent through the real API
 * (`bun src/main.ts`), their `message.delivered` events delivered by the server's delivery
 * worker thread to a local HTTPS receiver (bench/webhook-receiver.ts, its own process), against
 * the raw ceiling of Bun `fetch` POSTing to that same receiver.
 *
 *   bun bench/webhooks.ts        # about 75 s, never more than 3 minutes; loopback only
 *
 * Phases:
 *   1. raw ceiling: POSTs of an event-like ~600-byte JSON body from this process, concurrency 64,
 *      to the receiver over HTTPS (its CA passed as `tls.ca`): requests/s.
 *   2. service throughput: 32 accounts, each with one `message.delivered` subscription to
 *      https://localhost:<receiver>/hook/<n> (the worker keeps at most 2 deliveries of one
 *      subscription in flight, so one subscription alone could not show the throughput);
 *      `POST …/messages` at concurrency 64 spread over the accounts, up to --messages or
 *      --seconds; deliveries/s = distinct events received / (last receipt − first send).
 *  2b. the worker alone: --backlog pending deliveries inserted by SQL in one transaction, then a
 *      NOTIFY; deliveries/s until they have all arrived (or 15 s: the rest is deleted). No API
 *      load, so this separates the worker's rate from the API's.
 *  2c. the messages API alone: the same POST load for 10 s on 32 other accounts, which have no
 *      subscription (the message and its dispatch, no event delivery); messages/s until every
 *      accepted message is dispatched.
 *   3. latency: one message every 1000/--rate ms for --latency-seconds; the receiver reports
 *      receipt time − the event's `timestamp` (set in the transaction, just before commit).
 *   4. full table: --rows delivered events (with their messages, deliveries and one attempt
 *      each) inserted with generate_series, then phase 2 again.
 * Every phase starts with VACUUM ANALYZE of the tables (--tables), so that none pays for the
 * dead row versions or the stale statistics the one before it left (see docs/performance.md).
 *
 * Options: --raw-seconds 10, --messages 20000, --seconds 15, --rate 200, --latency-seconds 10,
 * --rows 100000, --backlog 5000 (0 skips 2b), --accounts 32, --concurrency 64, --tables vacuum
 * (before each phase: `vacuum` = VACUUM ANALYZE, `analyze` = ANALYZE only, `none` = leave it to
 * autovacuum, which shows what stale statistics cost the claim).
 *
 * Next to each figure it prints the CPU used meanwhile, in cores and per delivery: the server per
 * thread (main JavaScript thread, the delivery Worker thread, Bun's HTTP client thread, the
 * rest), the PostgreSQL processes serving this database, the receiver, this process, and every
 * other process (a busy machine shows there), plus what the server's database connections were
 * doing (pg_stat_activity, sampled every 50 ms).
 *
 * The admin connection is $DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test
 * (loopback only); the run creates a database bench_webhooks_<timestamp> and drops it at the end.
 * Every child process (receiver, server) is stopped on the way out, on errors and Ctrl-C too, and
 * a watchdog ends the run after 170 s whatever happens. Exit code 1 on any error (a non-202 from
 * the API, a delivery that never arrived, a warning in the server's log).
 */
import { parseArgs } from 'node:util'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { cpus, loadavg, release, tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import { makeCertificates } from '../tests/support/tls.ts'
import { postgresDatabase } from '../src/lib/db/client.ts'
import { createAccount } from '../src/accounts/service.ts'
import { createApiKey } from '../src/auth/api-keys.ts'
import { DELIVERIES_CHANNEL } from '../src/delivery/store.ts'
import {
  BUN,
  childEnv,
  fail,
  fmtFixed,
  fmtInt,
  fmtMs,
  freePort,
  onCleanup,
  printTable,
  processCpuSeconds,
  redact,
  runCleanups,
  runMain,
  sleep,
  startServer,
  systemBusySeconds,
  type Server,
  benchOptions,
} from './harness.ts'

// ---------------------------------------------------------------------------------------------
// Options

const { values: opts } = parseArgs({
  options: {
    'raw-seconds': { type: 'string', default: '10' },
    messages: { type: 'string', default: '20000' },
    seconds: { type: 'string', default: '15' },
    rate: { type: 'string', default: '200' },
    'latency-seconds': { type: 'string', default: '10' },
    rows: { type: 'string', default: '100000' },
    backlog: { type: 'string', default: '5000' },
    accounts: { type: 'string', default: '32' },
    concurrency: { type: 'string', default: '64' },
    tables: { type: 'string', default: 'vacuum' },
    help: { type: 'boolean', short: 'h', default: false },
  },
})

const cli = benchOptions(import.meta.url)
const { integer, exitWithHelpIf } = cli
// Typed here so that TypeScript knows a call to it ends the script.
const usage: (message: string) => never = cli.usage
exitWithHelpIf(opts.help)

const RAW_SECONDS = integer('raw-seconds', opts['raw-seconds'], 1, 30)
const MESSAGES = integer('messages', opts.messages, 100, 100_000)
const SEND_SECONDS = integer('seconds', opts.seconds, 1, 30)
const RATE = integer('rate', opts.rate, 1, 2000)
const LATENCY_SECONDS = integer('latency-seconds', opts['latency-seconds'], 1, 30)
const ROWS = integer('rows', opts.rows, 0, 1_000_000)
const BACKLOG = integer('backlog', opts.backlog, 0, 100_000)
const API_SECONDS = 10
const TABLES = opts.tables as 'vacuum' | 'analyze' | 'none'
if (!['vacuum', 'analyze', 'none'].includes(TABLES)) usage(`--tables: vacuum, analyze or none (got ${opts.tables})`)
const ACCOUNTS = integer('accounts', opts.accounts, 1, 256)
const CONCURRENCY = integer('concurrency', opts.concurrency, 1, 512)

const TARGET_RATE = 2000
const TARGET_VS_RAW = 0.5
const TARGET_P99_MS = 50
const TARGET_FULL_RATIO = 0.9
const WATCHDOG_MS = 170_000
/** The full-table phase is skipped if it would start later than this (it can take 40 s). */
const LAST_PHASE_BY_MS = 115_000
const DRAIN_TIMEOUT_MS = 15_000
const BACKLOG_TIMEOUT_MS = 15_000
const WARMUP_MESSAGES = 1000

const ADMIN_URL = (() => {
  const raw = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test'
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    usage(`DATABASE_URL: not a URL (got ${raw})`)
  }
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) usage(`DATABASE_URL must point at loopback (got host ${url.hostname})`)
  return url
})()

// ---------------------------------------------------------------------------------------------
// Small helpers

const problems: string[] = []
const started = Date.now()
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(0).padStart(3)} s`
const log = (line: string) => console.log(`[${elapsed()}] ${line}`)

function percentile(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return Number.NaN
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!
}

interface Percentiles {
  n: number
  p50: number
  p95: number
  p99: number
  max: number
}

function percentiles(values: number[]): Percentiles {
  const sorted = Float64Array.from(values).sort()
  return { n: sorted.length, p50: percentile(sorted, 0.5), p95: percentile(sorted, 0.95), p99: percentile(sorted, 0.99), max: sorted.length ? sorted[sorted.length - 1]! : Number.NaN }
}

const fmtLatency = (p: Percentiles) => `p50 ${fmtMs(p.p50)}, p95 ${fmtMs(p.p95)}, p99 ${fmtMs(p.p99)}, max ${fmtMs(p.max)} (n=${fmtInt(p.n)})`

// ---------------------------------------------------------------------------------------------
// CPU accounting: the server per thread (main JS thread, the delivery Worker thread, Bun's HTTP
// client thread, the rest), the receiver, this process, the local postgres processes, and what
// every other process used.

const CLOCK_TICKS = 100

function threadCpu(pid: number): Map<string, { name: string; seconds: number }> {
  const threads = new Map<string, { name: string; seconds: number }>()
  let tids: string[]
  try {
    tids = readdirSync(`/proc/${pid}/task`)
  } catch {
    return threads
  }
  for (const tid of tids) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim()
      threads.set(tid, { name: tid === String(pid) ? 'main' : name, seconds: (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS })
    } catch {
      // the thread ended
    }
  }
  return threads
}

let benchDbName = ''

/**
 * CPU of the local postgres processes that work for this run: the backends connected to its
 * database (their process title names it) and the shared ones (WAL writer, checkpointer…);
 * backends of other databases (a test run next to us) count as "other processes".
 */
function postgresCpuSeconds(): number {
  let total = 0
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() !== 'postgres') continue
      const title = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ')
      const backend = /^postgres: \S+ \S+ (\S+) (\d[\d.:]*\(\d+\)|\[local\])/.exec(title)
      if (backend && backend[1] !== benchDbName) continue
    } catch {
      continue
    }
    const seconds = processCpuSeconds(Number(entry))
    if (Number.isFinite(seconds)) total += seconds
  }
  return total
}

interface CpuSnapshot {
  at: number
  system: number
  self: number
  receiver: number
  server: Map<string, { name: string; seconds: number }> | null
  postgres: number
}

interface CpuUse {
  /** Seconds the interval lasted. */
  wall: number
  /** Cores used on average over the interval. */
  serverMain: number
  serverWorker: number
  serverHttpClient: number
  serverOther: number
  server: number
  receiver: number
  self: number
  postgres: number
  other: number
}

let receiverPid = 0
let serverPid = 0

function cpuSnapshot(): CpuSnapshot {
  return {
    at: performance.now(),
    system: systemBusySeconds(),
    self: processCpuSeconds(process.pid),
    receiver: receiverPid ? processCpuSeconds(receiverPid) : 0,
    server: serverPid ? threadCpu(serverPid) : null,
    postgres: postgresCpuSeconds(),
  }
}

function cpuSince(before: CpuSnapshot): CpuUse {
  const after = cpuSnapshot()
  const wall = (after.at - before.at) / 1000
  const byName = { main: 0, Worker: 0, 'HTTP Client': 0, other: 0 }
  if (after.server) {
    for (const [tid, thread] of after.server) {
      const used = thread.seconds - (before.server?.get(tid)?.seconds ?? 0)
      const key = thread.name in byName ? (thread.name as keyof typeof byName) : 'other'
      byName[key] += used
    }
  }
  const server = byName.main + byName.Worker + byName['HTTP Client'] + byName.other
  const receiver = after.receiver - before.receiver
  const self = after.self - before.self
  const pg = after.postgres - before.postgres
  const other = Math.max(0, after.system - before.system - server - receiver - self - pg)
  return {
    wall,
    serverMain: byName.main / wall,
    serverWorker: byName.Worker / wall,
    serverHttpClient: byName['HTTP Client'] / wall,
    serverOther: byName.other / wall,
    server: server / wall,
    receiver: receiver / wall,
    self: self / wall,
    postgres: pg / wall,
    other: other / wall,
  }
}

const fmtCpu = (c: CpuUse) =>
  serverPid === 0
    ? `cores: receiver ${fmtFixed(c.receiver, 2)}, load generator ${fmtFixed(c.self, 2)}, other processes ${fmtFixed(c.other + c.postgres, 2)}`
    : `cores: server ${fmtFixed(c.server, 2)} (main ${fmtFixed(c.serverMain, 2)}, delivery worker ${fmtFixed(c.serverWorker, 2)}, ` +
  `HTTP client ${fmtFixed(c.serverHttpClient, 2)}, other threads ${fmtFixed(c.serverOther, 2)}), postgres ${fmtFixed(c.postgres, 2)}, ` +
  `receiver ${fmtFixed(c.receiver, 2)}, load generator ${fmtFixed(c.self, 2)}, other processes ${fmtFixed(c.other, 2)}`

// ---------------------------------------------------------------------------------------------
// The receiver's control port

let controlOrigin = ''

interface ReceiverStats {
  count: number
  unique: number
  firstAt: number
  lastAt: number
  samples: number
  latencies?: number[]
}

async function receiverStats(samples = false): Promise<ReceiverStats> {
  const response = await fetch(`${controlOrigin}/stats${samples ? '?samples=1' : ''}`, { signal: AbortSignal.timeout(10_000) })
  if (!response.ok) fail(`the receiver's /stats answered ${response.status}`)
  return (await response.json()) as ReceiverStats
}

async function receiverReset(): Promise<void> {
  const response = await fetch(`${controlOrigin}/reset`, { method: 'POST', signal: AbortSignal.timeout(10_000) })
  await response.arrayBuffer()
  if (!response.ok) fail(`the receiver's /reset answered ${response.status}`)
}

// ---------------------------------------------------------------------------------------------
// Phase 1: the raw ceiling

/** An event-like body of about 600 bytes; the timestamp is the send time, so the receiver also measures raw one-way latency. */
function rawBody(id: string): string {
  const now = new Date().toISOString()
  return JSON.stringify({
    id,
    type: 'message.delivered',
    timestamp: now,
    account_id: 'acc_01m81emgsenkem5jma2atf166v',
    data: {
      message: {
        id: 'msg_01m81emgsenkem5jma2atf166v',
        account_id: 'acc_01m81emgsenkem5jma2atf166v',
        direction: 'outbound',
        to: '+14155550123',
        body: 'Your order #4821 has shipped and will arrive on Tuesday between 9:00 and 13:00. Reply STOP to opt out. Track it at https://example.com/t/4821?ref=sms or call +1 415 555 0100 for help.',
        status: 'delivered',
        created_at: now,
        updated_at: now,
      },
    },
  })
}

async function rawCeiling(origin: string, ca: string) {
  const url = `${origin}/raw`
  // The headers a real delivery carries, with made-up values of the same size.
  const headers = (id: string) => ({
    'content-type': 'application/json',
    'user-agent': 'messaging-service-webhooks/0.1',
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(Date.now() / 1000)),
    'webhook-signature': `v1,${Buffer.alloc(32, 7).toString('base64')}`,
  })
  let next = 0
  let errors = 0
  let firstError = ''
  const latencies: number[] = []
  const run = async (seconds: number, record: boolean) => {
    const deadline = performance.now() + seconds * 1000
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (performance.now() < deadline) {
          const id = `evt_raw${String(next++).padStart(19, '0')}`
          const t0 = performance.now()
          try {
            const response = await fetch(url, { method: 'POST', headers: headers(id), body: rawBody(id), tls: { ca }, signal: AbortSignal.timeout(10_000) })
            await response.arrayBuffer()
            if (response.status !== 200) throw new Error(`HTTP ${response.status}`)
            if (record) latencies.push(performance.now() - t0)
          } catch (error) {
            errors++
            firstError ||= (error as Error).message
            await sleep(10)
          }
        }
      }),
    )
  }
  await run(2, false) // warm-up: connections, JIT
  await receiverReset()
  const cpu = cpuSnapshot()
  const t0 = performance.now()
  await run(RAW_SECONDS, true)
  const wall = (performance.now() - t0) / 1000
  const use = cpuSince(cpu)
  const stats = await receiverStats(true)
  if (errors) problems.push(`raw ceiling: ${errors} failed requests, e.g. ${firstError}`)
  return {
    requests: latencies.length,
    rate: latencies.length / wall,
    roundTrip: percentiles(latencies),
    oneWay: percentiles(stats.latencies ?? []),
    received: stats.count,
    bodyBytes: Buffer.byteLength(rawBody('evt_raw0000000000000000000')),
    cpu: use,
  }
}

// ---------------------------------------------------------------------------------------------
// The service

interface BenchAccount {
  id: string
  secret: string
}

let apiOrigin = ''
const MESSAGE_BODY = JSON.stringify({ to: '+14155550123', body: 'bench' })
let sendErrors = 0
let firstSendError = ''

async function sendMessage(account: BenchAccount): Promise<boolean> {
  try {
    const response = await fetch(`${apiOrigin}/v0/account/${account.id}/messages?key=${account.secret}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: MESSAGE_BODY,
      signal: AbortSignal.timeout(10_000),
    })
    const text = await response.text()
    if (response.status === 202) return true
    sendErrors++
    firstSendError ||= `HTTP ${response.status}: ${redact(text).slice(0, 300)}`
  } catch (error) {
    sendErrors++
    firstSendError ||= (error as Error).message
  }
  return false
}

/** Waits until the receiver has `expected` distinct events, or the timeout; answers its stats. */
async function drain(expected: number, timeoutMs: number): Promise<ReceiverStats & { drained: boolean }> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const stats = await receiverStats()
    if (stats.unique >= expected) return { ...stats, drained: true }
    if (Date.now() > deadline) return { ...stats, drained: false }
    await sleep(25)
  }
}

interface ThroughputResult {
  label: string
  accepted: number
  acceptRate: number
  sendSeconds: number
  delivered: number
  duplicates: number
  /** Deliveries received / (last receipt − first send). */
  rate: number
  /** Accepted but not yet received when the last message was accepted. */
  backlogAtSendEnd: number
  drained: boolean
  latency: Percentiles
  cpu: CpuUse
  activity: { samples: number; states: [string, number][] }
}

/** The run's own connection to its database (application_name 'bench': left out of the activity samples). */
let benchSql: Sql | undefined

/**
 * Every measured phase starts from vacuumed tables: a claim reads the dead row versions that
 * earlier phases left in the partial index of due deliveries (see docs/performance.md), so
 * without this each phase would pay for the one before it.
 */
async function vacuum(): Promise<void> {
  if (!benchSql || TABLES === 'none') return
  if (TABLES === 'analyze') await benchSql`analyze messages, events, deliveries, delivery_attempts, hooks`
  else await benchSql`vacuum analyze messages, events, deliveries, delivery_attempts, hooks`
}

let activityProbe: (() => () => Promise<{ samples: number; states: [string, number][] }>) | undefined

async function throughput(label: string, accounts: BenchAccount[], maxMessages: number, seconds: number, drainMs = DRAIN_TIMEOUT_MS): Promise<ThroughputResult> {
  await vacuum()
  await receiverReset()
  const stopSampling = activityProbe?.()
  const cpu = cpuSnapshot()
  const firstSend = Date.now()
  const deadline = performance.now() + seconds * 1000
  let next = 0
  let accepted = 0
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < maxMessages && performance.now() < deadline) {
        const account = accounts[next++ % accounts.length]!
        if (await sendMessage(account)) accepted++
        else await sleep(10)
      }
    }),
  )
  const sendEnd = Date.now()
  const atSendEnd = await receiverStats()
  const activity = (await stopSampling?.()) ?? { samples: 0, states: [] }
  const stats = await drain(accepted, drainMs)
  const use = cpuSince(cpu)
  const withSamples = await receiverStats(true)
  const result: ThroughputResult = {
    label,
    accepted,
    acceptRate: accepted / ((sendEnd - firstSend) / 1000),
    sendSeconds: (sendEnd - firstSend) / 1000,
    delivered: stats.unique,
    duplicates: stats.count - stats.unique,
    rate: stats.unique / ((stats.lastAt - firstSend) / 1000),
    backlogAtSendEnd: accepted - atSendEnd.unique,
    drained: stats.drained,
    latency: percentiles(withSamples.latencies ?? []),
    cpu: use,
    activity,
  }
  if (!stats.drained) problems.push(`${label}: only ${stats.unique} of ${accepted} deliveries arrived within ${drainMs / 1000} s of the last send`)
  return result
}

function printThroughput(r: ThroughputResult) {
  log(
    `${r.label}: ${fmtInt(r.accepted)} messages accepted in ${r.sendSeconds.toFixed(1)} s (${fmtInt(r.acceptRate)}/s); ` +
      `${fmtInt(r.delivered)} delivered${r.duplicates ? ` (+${r.duplicates} duplicates)` : ''} → ${fmtInt(r.rate)} deliveries/s; ` +
      `backlog when sending ended ${fmtInt(r.backlogAtSendEnd)}`,
  )
  log(`  event → receipt under load: ${fmtLatency(r.latency)}`)
  log(`  ${fmtCpu(r.cpu)}`)
  log(`  ${perDelivery(r.cpu, r.delivered)}`)
  if (r.activity.samples) printActivity(r.activity)
}

function perDelivery(cpu: CpuUse, delivered: number): string {
  const us = (cores: number) => fmtInt((cores * cpu.wall * 1e6) / delivered)
  return `CPU per delivery: server ${us(cpu.server)} µs (main thread ${us(cpu.serverMain)}, delivery worker ${us(cpu.serverWorker)}), postgres ${us(cpu.postgres)} µs`
}

/**
 * The messages API without webhooks: the same load on accounts that have no subscription, so
 * each message is its INSERT and its dispatch transaction without an event delivery. Timed until
 * every accepted message has been dispatched (none left `queued`).
 */
async function apiAlone(pg: Sql, accounts: BenchAccount[], seconds: number) {
  await vacuum()
  const stopSampling = activityProbe?.()
  const cpu = cpuSnapshot()
  const t0 = Date.now()
  const deadline = performance.now() + seconds * 1000
  let accepted = 0
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, worker) => {
      for (let i = worker; performance.now() < deadline; i += CONCURRENCY) {
        if (await sendMessage(accounts[i % accounts.length]!)) accepted++
        else await sleep(10)
      }
    }),
  )
  const sendSeconds = (Date.now() - t0) / 1000
  const ids = accounts.map((a) => a.id)
  for (let tries = 0; tries < 200; tries++) {
    const [row] = await pg`select count(*)::int as n from messages where status = 'queued' and account_id = any(${ids}::text[])`
    if (row!.n === 0) break
    await sleep(25)
  }
  const untilDispatched = (Date.now() - t0) / 1000
  const activity = (await stopSampling?.()) ?? { samples: 0, states: [] }
  return { accepted, acceptRate: accepted / sendSeconds, rate: accepted / untilDispatched, cpu: cpuSince(cpu), activity }
}

async function latencyRun(accounts: BenchAccount[]) {
  await vacuum()
  await receiverReset()
  const stopSampling = activityProbe?.()
  const cpu = cpuSnapshot()
  const count = RATE * LATENCY_SECONDS
  const interval = 1000 / RATE
  const t0 = performance.now()
  const sends: Promise<boolean>[] = []
  let late = 0
  for (let i = 0; i < count; i++) {
    const due = t0 + i * interval
    const wait = due - performance.now()
    if (wait > 1) await sleep(wait)
    else if (wait < -interval) late++
    sends.push(sendMessage(accounts[i % accounts.length]!))
  }
  const accepted = (await Promise.all(sends)).filter(Boolean).length
  const sendSeconds = (performance.now() - t0) / 1000
  const activity = (await stopSampling?.()) ?? { samples: 0, states: [] }
  const stats = await drain(accepted, 10_000)
  const use = cpuSince(cpu)
  const withSamples = await receiverStats(true)
  if (!stats.drained) problems.push(`latency: only ${stats.unique} of ${accepted} deliveries arrived within 10 s of the last send`)
  return { accepted, rate: accepted / sendSeconds, late, latency: percentiles(withSamples.latencies ?? []), duplicates: stats.count - stats.unique, cpu: use, activity }
}

/**
 * The delivery worker alone: `count` events with one pending delivery each (round robin over the
 * subscriptions) committed at once by this process, a NOTIFY, and the time until the receiver has
 * them all. No API requests and no dispatch transactions compete, so this is the worker's own rate.
 */
async function workerBacklog(pg: Sql, hookIds: string[], accountIds: string[], count: number, template: { payload: string; id: string }) {
  await receiverReset()
  await pg.begin(async (tx) => {
    await tx`insert into events (id, account_id, type, payload)
      select 'evt_0b' || lpad(g::text, 24, '0'), (${accountIds}::text[])[1 + g % ${accountIds.length}], 'message.delivered',
             replace(${template.payload}, ${template.id}, 'evt_0b' || lpad(g::text, 24, '0'))
      from generate_series(1, ${count}) g`
    await tx`insert into deliveries (id, event_id, hook_id)
      select 'dlv_0b' || lpad(g::text, 24, '0'), 'evt_0b' || lpad(g::text, 24, '0'), (${hookIds}::text[])[1 + g % ${hookIds.length}]
      from generate_series(1, ${count}) g`
  })
  await vacuum()
  const stopSampling = activityProbe?.()
  const cpu = cpuSnapshot()
  const t0 = Date.now()
  await pg`select pg_notify(${DELIVERIES_CHANNEL}, '')`
  const stats = await drain(count, BACKLOG_TIMEOUT_MS)
  const activity = (await stopSampling?.()) ?? { samples: 0, states: [] }
  const use = cpuSince(cpu)
  if (!stats.drained) {
    // Not a failure: the rate is measured on what arrived. What is left is cancelled so that it does not leak into the next phase.
    const left = await pg`delete from deliveries where id like 'dlv_0b%' and status = 'pending' returning id`
    log(`worker alone: ${fmtInt(stats.unique)} of ${fmtInt(count)} arrived within ${BACKLOG_TIMEOUT_MS / 1000} s; the ${fmtInt(left.length)} left were deleted`)
    await sleep(2000) // the attempts in flight land
  }
  return { delivered: stats.unique, duplicates: stats.count - stats.unique, rate: stats.unique / ((stats.lastAt - t0) / 1000), cpu: use, activity }
}

// ---------------------------------------------------------------------------------------------
// What the server's database connections are doing, sampled from pg_stat_activity every 50 ms:
// mostly "idle" means the database waits for work; "idle in transaction" means a transaction
// waits for its client (the server's event loop, or a round trip); "active" ones show what
// they wait on (a lock, the WAL, nothing = on CPU).

type Sql = ReturnType<typeof postgres>

function sampleActivity(pg: Sql, dbName: string): () => Promise<{ samples: number; states: [string, number][] }> {
  const counts = new Map<string, number>()
  let samples = 0
  let stopped = false
  const loop = (async () => {
    while (!stopped) {
      // The connection ends under us when the run is interrupted: then stop sampling, quietly.
      const rows = await pg`select state, wait_event_type, wait_event, regexp_replace(left(query, 48), '\\s+', ' ', 'g') as query
        from pg_stat_activity where datname = ${dbName} and pid <> pg_backend_pid() and application_name <> 'bench'`.catch(() => null)
      if (!rows) break
      samples++
      for (const row of rows) {
        const state = row.state as string
        const what =
          state === 'active'
            ? `active${row.wait_event ? ` waiting ${row.wait_event_type}/${row.wait_event}` : ''}: ${row.query}`
            : state === 'idle in transaction'
              ? `idle in transaction, after: ${row.query}`
              : state
        counts.set(what, (counts.get(what) ?? 0) + 1)
      }
      await sleep(50)
    }
  })()
  return async () => {
    stopped = true
    await loop
    return { samples, states: [...counts].map(([what, n]): [string, number] => [what, n / Math.max(1, samples)]).sort((a, b) => b[1] - a[1]) }
  }
}

function printActivity(activity: { samples: number; states: [string, number][] }) {
  const sum = (test: (what: string) => boolean) => activity.states.reduce((total, [what, n]) => total + (test(what) ? n : 0), 0)
  const groups: [string, number][] = [
    ['idle', sum((w) => w === 'idle')],
    ['idle in transaction (waiting for the server)', sum((w) => w.startsWith('idle in transaction'))],
    ['active, waiting for the server (Client)', sum((w) => w.startsWith('active waiting Client/'))],
    ['active, waiting on a lock (Lock)', sum((w) => w.startsWith('active waiting Lock/'))],
    ['active, waiting on WAL or I/O (LWLock, IO)', sum((w) => /^active waiting (LWLock|IO)\//.test(w))],
    ['active, running', sum((w) => /^active: /.test(w))],
  ]
  const total = groups.reduce((t, [, n]) => t + n, 0)
  log(`  the server's ${fmtFixed(total, 0)} database connections, mean over ${activity.samples} samples of pg_stat_activity: ` + groups.filter(([, n]) => n >= 0.005).map(([what, n]) => `${what} ${fmtFixed(n, 2)}`).join(', '))
  // The ten most frequent states, and every lock wait (a lock is worth seeing even when it is rare).
  const top = activity.states.filter(([what, n]) => what !== 'idle' && n >= 0.1).slice(0, 10)
  const locks = activity.states.filter(([what, n]) => what.startsWith('active waiting Lock/') && n >= 0.02 && !top.some(([shown]) => shown === what))
  for (const [what, n] of [...top, ...locks]) log(`    ${fmtFixed(n, 2).padStart(5)}  ${what}`)
}

// ---------------------------------------------------------------------------------------------
// Main

async function main(): Promise<number> {
  const watchdog = setTimeout(() => {
    console.error(`\nbench/webhooks.ts: still running after ${WATCHDOG_MS / 1000} s; stopping everything it started`)
    void runCleanups().finally(() => process.exit(1))
  }, WATCHDOG_MS)
  onCleanup(() => clearTimeout(watchdog))

  const workDir = mkdtempSync(join(tmpdir(), 'bench-webhooks-'))
  onCleanup(() => rmSync(workDir, { recursive: true, force: true }))

  const admin = postgres(ADMIN_URL.href, { max: 1, onnotice: () => {}, connect_timeout: 5 })
  let pgVersion = ''
  try {
    pgVersion = (await admin`show server_version`)[0]!.server_version as string
  } catch (error) {
    await admin.end({ timeout: 5 })
    fail(`cannot connect to ${ADMIN_URL.host} (${(error as Error).message}); is PostgreSQL running? (DATABASE_URL)`)
  }

  console.log('Webhook delivery: raw HTTPS ceiling, end-to-end throughput, latency, throughput with a full table')
  console.log(`date        ${new Date().toISOString()}`)
  console.log(`bun         ${Bun.version} (${Bun.revision.slice(0, 9)})`)
  console.log(`machine     ${cpus().length} cores (${cpus()[0]?.model.trim() ?? 'unknown CPU'}), Linux ${release()}, load average ${loadavg().map((n) => n.toFixed(2)).join(' ')}`)
  console.log(`postgresql  ${pgVersion} on ${ADMIN_URL.host}`)

  // TLS material for the receiver, and the receiver itself.
  const certs = makeCertificates(workDir)
  const caFile = join(workDir, 'ca.pem')
  const receiverPort = freePort()
  const controlPort = freePort()
  const receiver = await startServer('receiver', [BUN, 'bench/webhook-receiver.ts'], childEnv({ PORT: String(receiverPort), CONTROL_PORT: String(controlPort), CERT_DIR: workDir }), controlPort, '/stats', workDir)
  receiverPid = receiver.proc.pid
  controlOrigin = `http://127.0.0.1:${controlPort}`
  const receiverOrigin = `https://localhost:${receiverPort}`
  console.log(`tables      ${{ vacuum: 'VACUUM ANALYZE before every phase', analyze: 'ANALYZE before every phase', none: 'left to autovacuum (--tables none)' }[TABLES]}`)
  console.log(`receiver    ${receiverOrigin} (bench/webhook-receiver.ts, own process, answers 200 "ok")`)
  console.log()

  // 1. Raw ceiling.
  log(`raw ceiling: Bun fetch POST → receiver, concurrency ${CONCURRENCY}, ${RAW_SECONDS} s after a 2 s warm-up`)
  const raw = await rawCeiling(receiverOrigin, certs.ca)
  log(`raw ceiling: ${fmtInt(raw.rate)} requests/s (${fmtInt(raw.requests)} requests, ${raw.bodyBytes}-byte body); round trip ${fmtLatency(raw.roundTrip)}`)
  log(`  ${fmtCpu(raw.cpu)}`)

  // The database, created fresh and dropped at the end.
  const dbName = `bench_webhooks_${Date.now()}`
  await admin.unsafe(`create database "${dbName}"`)
  await admin.end({ timeout: 5 })
  onCleanup(async () => {
    const dropper = postgres(ADMIN_URL.href, { max: 1, onnotice: () => {}, connect_timeout: 5 })
    try {
      await dropper.unsafe(`drop database if exists "${dbName}" with (force)`)
    } finally {
      await dropper.end({ timeout: 5 })
    }
  })
  benchDbName = dbName
  const dbUrl = new URL(ADMIN_URL.href)
  dbUrl.pathname = `/${dbName}`
  log(`database ${dbName} created (dropped at the end)`)

  // 2. The service.
  const port = freePort()
  const server: Server = await startServer(
    'server',
    [BUN, 'src/main.ts'],
    childEnv({
      DATABASE_URL: dbUrl.href,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      ENCRYPTION_KEY: randomBytes(32).toString('base64url'),
      WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
      WEBHOOK_CA_FILE: caFile,
    }),
    port,
    '/healthz',
    workDir,
  )
  serverPid = server.proc.pid
  apiOrigin = `http://127.0.0.1:${port}`
  log(`server: bun src/main.ts on ${apiOrigin}, LOG_LEVEL=warn, WEBHOOK_CONCURRENCY default (64)`)

  const pg = postgres(dbUrl.href, { max: 1, onnotice: () => {}, connect_timeout: 5, connection: { application_name: 'bench' } })
  onCleanup(() => pg.end({ timeout: 5 }))
  const probe = postgres(dbUrl.href, { max: 1, onnotice: () => {}, connect_timeout: 5, connection: { application_name: 'bench' } })
  onCleanup(() => probe.end({ timeout: 5 }))
  activityProbe = () => sampleActivity(probe, dbName)
  benchSql = pg

  // Accounts and keys straight into the database (the server migrated it); subscriptions through the API.
  const handle = postgresDatabase(dbUrl.href, { max: 4 })
  const accounts: BenchAccount[] = []
  for (let i = 0; i < ACCOUNTS; i++) {
    const account = await createAccount(handle.db, { name: `bench ${i}` })
    const key = await createApiKey(handle.db, { accountId: account.id, name: 'bench' })
    accounts.push({ id: account.id, secret: key.secret })
  }
  const quiet: BenchAccount[] = []
  for (let i = 0; i < ACCOUNTS; i++) {
    const account = await createAccount(handle.db, { name: `bench, no subscription ${i}` })
    const key = await createApiKey(handle.db, { accountId: account.id, name: 'bench' })
    quiet.push({ id: account.id, secret: key.secret })
  }
  const hookIds: string[] = []
  for (const [n, account] of accounts.entries()) {
    const response = await fetch(`${apiOrigin}/v0/account/${account.id}/hooks?key=${account.secret}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ event: 'message.delivered', target_url: `${receiverOrigin}/hook/${n}` }),
      signal: AbortSignal.timeout(10_000),
    })
    const text = await response.text()
    if (response.status !== 201) fail(`POST …/hooks answered ${response.status}: ${redact(text).slice(0, 300)}`)
    hookIds.push((JSON.parse(text) as { id: string }).id)
  }
  await handle.close()
  log(`${ACCOUNTS} accounts, each with an API key and one message.delivered subscription to ${receiverOrigin}/hook/<n>; ${ACCOUNTS} more without subscriptions`)

  // Warm-up: JIT, the worker's connections to the receiver, the server's caches.
  const warm = await throughput('warm-up', accounts, WARMUP_MESSAGES, 5, 10_000)
  log(`warm-up: ${fmtInt(warm.delivered)} of ${fmtInt(warm.accepted)} delivered`)
  if (warm.delivered === 0) fail('no delivery arrived during the warm-up: is the delivery worker running?')

  const empty = await throughput('throughput (empty tables)', accounts, MESSAGES, SEND_SECONDS)
  printThroughput(empty)

  // A real event body, for the rows this script inserts itself.
  const [sample] = await pg`select payload from events limit 1`
  const payload = (sample?.payload as string | undefined) ?? rawBody('evt_00000000000000000000000000')
  const template = { payload, id: /"id":"(evt_[^"]+)"/.exec(payload)?.[1] ?? 'evt_00000000000000000000000000' }

  // 2b. The worker alone, on a backlog.
  let backlog: Awaited<ReturnType<typeof workerBacklog>> | undefined
  if (BACKLOG > 0) {
    log(`worker alone: ${fmtInt(BACKLOG)} pending deliveries (the service's own event body, ${Buffer.byteLength(template.payload)} bytes) inserted by SQL in one transaction, then NOTIFY ${DELIVERIES_CHANNEL}`)
    backlog = await workerBacklog(pg, hookIds, accounts.map((a) => a.id), BACKLOG, template)
    log(`worker alone: ${fmtInt(backlog.delivered)} delivered${backlog.duplicates ? ` (+${backlog.duplicates} duplicates)` : ''} → ${fmtInt(backlog.rate)} deliveries/s`)
    log(`  ${fmtCpu(backlog.cpu)}`)
    log(`  ${perDelivery(backlog.cpu, backlog.delivered)}`)
    if (backlog.activity.samples) printActivity(backlog.activity)
  }

  // 2c. The messages API alone.
  log(`API alone: POST …/messages at concurrency ${CONCURRENCY} for ${API_SECONDS} s on the ${ACCOUNTS} accounts without subscriptions`)
  const api = await apiAlone(pg, quiet, API_SECONDS)
  log(`API alone: ${fmtInt(api.accepted)} accepted (${fmtInt(api.acceptRate)}/s), all dispatched → ${fmtInt(api.rate)} messages/s`)
  log(`  ${fmtCpu(api.cpu)}`)
  log(`  ${perDelivery(api.cpu, api.accepted).replace('per delivery', 'per message')}`)
  if (api.activity.samples) printActivity(api.activity)

  // 3. Latency.
  log(`latency: one message every ${fmtFixed(1000 / RATE, 1)} ms for ${LATENCY_SECONDS} s, spread over the accounts`)
  const latency = await latencyRun(accounts)
  log(`latency: ${fmtInt(latency.accepted)} accepted at ${fmtInt(latency.rate)}/s${latency.late ? ` (${latency.late} sends late by more than one interval)` : ''}; event → receipt ${fmtLatency(latency.latency)}`)
  log(`  ${fmtCpu(latency.cpu)}`)
  log(`  ${perDelivery(latency.cpu, latency.accepted)}`)
  if (latency.activity.samples) printActivity(latency.activity)

  // 4. Full table.
  let fullRows = { events: 0, deliveries: 0, attempts: 0 }
  let full: ThroughputResult | undefined
  if (ROWS > 0 && Date.now() - started > LAST_PHASE_BY_MS) {
    problems.push(`the full-table phase was skipped: the run had already taken ${elapsed().trim()}`)
  } else if (ROWS > 0) {
    const t0 = performance.now()
    const accountIds = accounts.map((a) => a.id)
    // Ids sort before the ULIDs the service makes (older), like rows from the past would; unique is all they need to be.
    await pg.begin(async (tx) => {
      await tx`insert into messages (id, account_id, direction, contact, body, status, created_at, updated_at)
        select 'msg_00' || lpad(g::text, 24, '0'), (${accountIds}::text[])[1 + g % ${ACCOUNTS}], 'outbound', '+14155550123', 'bench', 'delivered',
               now() - interval '2 days' + g * interval '1 ms', now() - interval '2 days' + g * interval '1 ms'
        from generate_series(1, ${ROWS}) g`
      await tx`insert into events (id, account_id, type, payload, created_at)
        select 'evt_00' || lpad(g::text, 24, '0'), (${accountIds}::text[])[1 + g % ${ACCOUNTS}], 'message.delivered',
               replace(${template.payload}, ${template.id}, 'evt_00' || lpad(g::text, 24, '0')), now() - interval '2 days' + g * interval '1 ms'
        from generate_series(1, ${ROWS}) g`
      await tx`insert into deliveries (id, event_id, hook_id, status, attempts, next_attempt_at, leased_until, created_at)
        select 'dlv_00' || lpad(g::text, 24, '0'), 'evt_00' || lpad(g::text, 24, '0'), (${hookIds}::text[])[1 + g % ${ACCOUNTS}], 'delivered', 1,
               now() - interval '2 days' + g * interval '1 ms', null, now() - interval '2 days' + g * interval '1 ms'
        from generate_series(1, ${ROWS}) g`
      await tx`insert into delivery_attempts (id, delivery_id, hook_id, event_id, attempted_at, status_code, duration_ms, error, response_snippet)
        select 'att_00' || lpad(g::text, 24, '0'), 'dlv_00' || lpad(g::text, 24, '0'), (${hookIds}::text[])[1 + g % ${ACCOUNTS}], 'evt_00' || lpad(g::text, 24, '0'),
               now() - interval '2 days' + g * interval '1 ms', 200, 3, null, 'ok'
        from generate_series(1, ${ROWS}) g`
    })
    const [counts] = await pg`select (select count(*) from events)::int as events, (select count(*) from deliveries)::int as deliveries,
                                     (select count(*) from delivery_attempts)::int as attempts`
    fullRows = { events: counts!.events as number, deliveries: counts!.deliveries as number, attempts: counts!.attempts as number }
    log(
      `full table: ${fmtInt(ROWS)} delivered messages/events/deliveries/attempts inserted in ${((performance.now() - t0) / 1000).toFixed(1)} s; ` +
        `now ${fmtInt(fullRows.events)} events, ${fmtInt(fullRows.deliveries)} deliveries, ${fmtInt(fullRows.attempts)} attempts`,
    )
    full = await throughput('throughput (full tables)', accounts, MESSAGES, SEND_SECONDS)
    printThroughput(full)
  }
  // The last attempts are recorded just after the receiver has answered them.
  let pending = 0
  for (let tries = 0; tries < 100; tries++) {
    pending = ((await pg`select count(*)::int as n from deliveries where status <> 'delivered'`)[0]!.n as number)
    if (pending === 0) break
    await sleep(50)
  }
  if (pending) problems.push(`${pending} deliveries are not 'delivered' at the end`)

  if (sendErrors) problems.push(`${sendErrors} POST …/messages did not answer 202, e.g. ${firstSendError}`)
  const stderrText = readFileSync(server.stderrPath, 'utf8').trim()
  if (stderrText) problems.push(`the server wrote to stderr:\n${redact(stderrText.slice(-2000))}`)
  if (statSync(server.stdoutPath).size > 0) {
    const lines = readFileSync(server.stdoutPath, 'utf8').trim().split('\n').filter((line) => /"level":"(warn|error)"/.test(line))
    if (lines.length) problems.push(`the server logged ${lines.length} warn/error lines, e.g.:\n${redact(lines.slice(0, 5).join('\n'))}`)
  }

  // Summary.
  console.log()
  const verdict = (met: boolean) => (met ? 'met' : 'NOT MET')
  const vsRaw = empty.rate / raw.rate
  const fullRatio = full ? full.rate / empty.rate : Number.NaN
  console.log(`Summary (${cpus().length} cores; everything on this machine, over loopback)`)
  printTable(
    [
      ['figure', 'value', 'target', 'verdict'],
      ['raw ceiling: Bun fetch → HTTPS receiver, c=' + CONCURRENCY, `${fmtInt(raw.rate)} req/s`, '', ''],
      ['API accept rate (POST …/messages, empty tables)', `${fmtInt(empty.acceptRate)} /s`, '', ''],
      ['deliveries/s end to end (empty tables)', `${fmtInt(empty.rate)} /s`, `≥ ${fmtInt(TARGET_RATE)} /s`, verdict(empty.rate >= TARGET_RATE)],
      ['deliveries/s vs raw ceiling', fmtFixed(vsRaw, 2), `≥ ${TARGET_VS_RAW.toFixed(2)}`, verdict(vsRaw >= TARGET_VS_RAW)],
      ...(backlog ? [[`worker alone, draining ${fmtInt(BACKLOG)} pending (no API load)`, `${fmtInt(backlog.rate)} /s`, '', '']] : []),
      ['messages API alone, no subscriptions (accepted and dispatched)', `${fmtInt(api.rate)} /s`, '', ''],
      [`latency at ${RATE} events/s: p50 / p95`, `${fmtMs(latency.latency.p50)} / ${fmtMs(latency.latency.p95)}`, '', ''],
      [`latency at ${RATE} events/s: p99 (max)`, `${fmtMs(latency.latency.p99)} (${fmtMs(latency.latency.max)})`, `< ${TARGET_P99_MS} ms`, verdict(latency.latency.p99 < TARGET_P99_MS)],
      ...(full
        ? [
            ['API accept rate (full tables)', `${fmtInt(full.acceptRate)} /s`, '', ''],
            [`deliveries/s end to end (+${fmtInt(ROWS)} delivered rows)`, `${fmtInt(full.rate)} /s`, '', ''],
            ['full / empty', fmtFixed(fullRatio, 2), `≥ ${TARGET_FULL_RATIO.toFixed(2)}`, verdict(fullRatio >= TARGET_FULL_RATIO)],
          ]
        : []),
    ],
    1,
  )
  console.log()
  if (problems.length) {
    console.log('PROBLEMS:')
    for (const problem of problems) console.log(`- ${problem}`)
    console.log()
  }
  log('done; stopping the server and the receiver, dropping the database')
  return problems.length ? 1 : 0
}

await runMain('bench/webhooks.ts', main)
