#!/usr/bin/env bun
/**
 * Webhook delivery end to end, against issue 11's targets: messages sent through the real API
 * (`bun src/main.ts`, default settings, LOG_LEVEL left at its default, info), their
 * `message.delivered` events delivered by the server's delivery worker thread to a local HTTPS
 * receiver (bench/webhook-receiver.ts, its own process).
 *
 *   bun bench/webhooks.ts                      # PostgreSQL; about 2 minutes, never more than 4; loopback only
 *   bun bench/webhooks.ts --database pglite    # the server on embedded PGlite (a temporary DATA_DIR); about 70 s
 *
 * Send → receipt. Every message's text is its send time, `t=<epoch ms>` (taken when the request
 * is handed to the load generator); the event carries it as data.message.body and the receiver
 * reports receipt − send per path, so two subscriptions of one account are told apart.
 * Deliveries/s = distinct events received / (last receipt − first send). A phase waits at most
 * --drain seconds after its last send; what has not arrived by then counts as an infinite
 * latency in the percentiles, and its subscriptions are deleted and made again (deleting a
 * subscription cancels its pending deliveries) so that the next phase starts clean.
 *
 * Phases (PostgreSQL):
 *   0. load generator cost: POST …/messages-shaped requests at --rate-one/s for 3 s to a bare
 *      Bun.serve (bench/bare-server.ts, own process), from Bun fetch and from the lean client
 *      (bench/http-client.ts): µs of this process's CPU per request for each.
 *   1. raw ceiling: Bun fetch POSTs of an event-like ~600-byte body to the receiver over HTTPS,
 *      --concurrency at a time, for --raw-seconds: requests/s.
 *   2. one subscription, max: one account, one subscription; POST …/messages closed-loop,
 *      --concurrency requests outstanding, for --seconds: deliveries/s, p50/p95/p99 send → receipt.
 *   3. one subscription at the target rate: open loop, --rate-one messages/s for --rate-one-seconds
 *      (requests beyond --concurrency connections wait in the client, which counts in their send →
 *      receipt; whatever is still waiting 5 s after the schedule ends is dropped and reported):
 *      p99 send → receipt and delivered/s = (received − 1) / (last receipt − first receipt).
 *   4. fairness: one account with two subscriptions, /delay/<--slow-ms>/slow (the receiver
 *      answers after --slow-ms) and /healthy (at once); --fair-rate messages/s for --fair-seconds:
 *      the healthy one's p99 send → receipt, and how many the slow one received meanwhile.
 *   5. 32 subscriptions: --accounts accounts, one subscription each (/hook/<n>); closed loop as in 2.
 *   6. latency: one message every 1000/--rate ms for --latency-seconds over those accounts;
 *      receipt − the event's `timestamp` (set in the dispatch transaction: commit → receipt).
 *   7. full table: --rows delivered messages, events, deliveries and attempts inserted with
 *      generate_series, then phase 2 again; full / empty.
 *   With --diagnostics, also (before 7): the worker alone (--backlog pending deliveries inserted
 *   by SQL, then a NOTIFY) and the messages API alone (POST load on accounts without
 *   subscriptions, until every message is dispatched).
 * With --database pglite: phases 0, 2, 3 (at --rate-one-pglite/s), 4 and 6 (on the phase-2
 * account); no SQL access (the server holds the DATA_DIR), so no VACUUM, no pg_stat_activity, no
 * full table. Accounts and API keys come from `bun src/cli.ts` there, straight from the database
 * on PostgreSQL; subscriptions always through the API.
 *
 * Options: --database postgres, --concurrency 64, --seconds 10, --messages 40000 (cap per closed
 * loop), --rate-one 2000, --rate-one-pglite 500, --rate-one-seconds 10, --fair-rate 100,
 * --fair-seconds 10, --slow-ms 2000, --rate 200, --latency-seconds 10, --accounts 32, --rows 100000,
 * --raw-seconds 5, --drain 10, --loadgen lean (or fetch: Bun fetch for the POST load),
 * --tables vacuum (before each phase: `vacuum` = VACUUM ANALYZE, `analyze`, `none`),
 * --diagnostics, --backlog 5000.
 *
 * Next to each figure it prints the CPU used meanwhile, in cores and per delivery: the server per
 * thread (main JavaScript thread, the delivery Worker thread, Bun's HTTP client thread, the
 * rest), the PostgreSQL processes serving this database, the receiver, this process (the load
 * generator, also in µs per request), and every other process (a busy machine shows there), plus
 * what the server's database connections were doing (pg_stat_activity, sampled every 50 ms).
 * The summary table has each of issue 11's targets, met or NOT MET; the GET /v0/account target
 * is measured by bench/account.ts.
 *
 * The admin connection is $DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test
 * (loopback only); the run creates a database bench_webhooks_<timestamp> and drops it at the end.
 * Every child process is stopped on the way out, on errors and Ctrl-C too, and a watchdog ends
 * the run after 240 s whatever happens. Exit code 1 on any error (an answer to POST …/messages
 * other than 202, a warning in the server's log); an unmet target is not an error.
 */
import { cpus } from 'node:os'
import { join } from 'node:path'
import { makeCertificates } from '../fixtures/tls.ts'
import { postgresDatabase } from '../src/lib/db/client.ts'
import { createAccount } from '../src/accounts/service.ts'
import { createApiKey } from '../src/auth/api-keys.ts'
import { DELIVERIES_CHANNEL } from '../src/delivery/store.ts'
import { DroppedError, HttpPool } from './http-client.ts'
import {
  BUN,
  call,
  childEnv,
  commandLine,
  connect,
  expectStatus,
  fail,
  fmtFixed,
  fmtInt,
  fmtMs,
  freePort,
  inspectServer,
  machineFields,
  onCleanup,
  percentiles,
  pgliteStorage,
  postgresCpuSeconds,
  postgresStorage,
  printFields,
  printProblems,
  printTable,
  processCpuSeconds,
  redact,
  runCommand,
  runMain,
  sleep,
  startCpu,
  startServer,
  startService,
  stopChild,
  sumThreads,
  tempDir,
  type CpuUse,
  type Percentiles,
  type Server,
  type Sql,
} from './harness.ts'

const cli = commandLine(import.meta.url, {
  database: { type: 'string', default: 'postgres' },
  concurrency: { type: 'string', default: '64' },
  seconds: { type: 'string', default: '10' },
  messages: { type: 'string', default: '40000' },
  'rate-one': { type: 'string', default: '2000' },
  'rate-one-pglite': { type: 'string', default: '500' },
  'rate-one-seconds': { type: 'string', default: '10' },
  'fair-rate': { type: 'string', default: '100' },
  'fair-seconds': { type: 'string', default: '10' },
  'slow-ms': { type: 'string', default: '2000' },
  rate: { type: 'string', default: '200' },
  'latency-seconds': { type: 'string', default: '10' },
  accounts: { type: 'string', default: '32' },
  rows: { type: 'string', default: '100000' },
  'raw-seconds': { type: 'string', default: '5' },
  drain: { type: 'string', default: '10' },
  loadgen: { type: 'string', default: 'lean' },
  tables: { type: 'string', default: 'vacuum' },
  diagnostics: { type: 'boolean', default: false },
  backlog: { type: 'string', default: '5000' },
})
const DATABASE = cli.choice('database', ['postgres', 'pglite'])
const PG = DATABASE === 'postgres'
const CONCURRENCY = cli.integer('concurrency', 1, 512)
const SEND_SECONDS = cli.integer('seconds', 1, 30)
const MESSAGES = cli.integer('messages', 100, 200_000)
const RATE_ONE = PG ? cli.integer('rate-one', 1, 20_000) : cli.integer('rate-one-pglite', 1, 20_000)
/** The load generator's cost is measured at the one-subscription target rate (--rate-one), whatever the database. */
const LOADGEN_COST_RATE = cli.integer('rate-one', 1, 20_000)
const RATE_ONE_SECONDS = cli.integer('rate-one-seconds', 1, 30)
const FAIR_RATE = cli.integer('fair-rate', 1, 5000)
const FAIR_SECONDS = cli.integer('fair-seconds', 1, 30)
const SLOW_MS = cli.integer('slow-ms', 0, 10_000)
const RATE = cli.integer('rate', 1, 5000)
const LATENCY_SECONDS = cli.integer('latency-seconds', 1, 30)
const ACCOUNTS = cli.integer('accounts', 1, 256)
const ROWS = cli.integer('rows', 0, 1_000_000)
const RAW_SECONDS = cli.integer('raw-seconds', 0, 30)
const DRAIN_MS = cli.integer('drain', 1, 30) * 1000
const LOADGEN = cli.choice('loadgen', ['lean', 'fetch'])
const TABLES = cli.choice('tables', ['vacuum', 'analyze', 'none'])
const DIAGNOSTICS = cli.flag('diagnostics')
const BACKLOG = cli.integer('backlog', 0, 100_000)
const ADMIN_URL = cli.loopbackUrl(process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test', 'DATABASE_URL')

// Issue 11's targets.
const TARGET_RATE = 2000
const TARGET_RATE_PGLITE = 500
const TARGET_P99_ONE_MS = 250
const TARGET_P99_FAIR_MS = 100
const TARGET_P99_COMMIT_MS = 50
const TARGET_FULL_RATIO = 0.9
/** Delivered/s at the offered rate counts as keeping up within this fraction of it (the first and last receipt jitter). */
const AT_RATE_TOLERANCE = 0.99

const WATCHDOG_MS = (DIAGNOSTICS ? 300 : 240) * 1000
/** The full-table phase is skipped if it would start later than this (it can take 45 s). */
const LAST_PHASE_BY_MS = WATCHDOG_MS - 60_000
const OPEN_LOOP_GRACE_MS = 5000
const WARMUP_MESSAGES = 1000
const REQUEST_TIMEOUT_MS = 10_000
const API_SECONDS = 10
const BACKLOG_TIMEOUT_MS = 15_000

const started = Date.now()
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(0).padStart(3)} s`
const log = (line: string) => console.log(`[${elapsed()}] ${line}`)
/** Epoch ms with sub-ms precision, the clock the receiver uses too. */
const epochNow = () => performance.timeOrigin + performance.now()
const fmtLat = (n: number) => (n === Infinity ? `> ${DRAIN_MS / 1000} s` : fmtMs(n))
const fmtLatency = (p: Percentiles) => `p50 ${fmtLat(p.p50)}, p95 ${fmtLat(p.p95)}, p99 ${fmtLat(p.p99)}, max ${fmtLat(p.max)} (n=${fmtInt(p.n)})`

// ---------------------------------------------------------------------------------------------
// The receiver (bench/webhook-receiver.ts), its own process, and its control port

interface PathStats {
  count: number
  unique: number
  firstAt: number
  lastAt: number
  samples: number
  stale: number
  latencies?: number[]
  sendLatencies?: number[]
}

interface ReceiverStats extends PathStats {
  paths: Record<string, PathStats>
}

interface Receiver {
  /** https://localhost:<port>, with a certificate signed by the CA in `caFile`. */
  origin: string
  ca: string
  caFile: string
  pid: number
  stats(samples?: boolean): Promise<ReceiverStats>
  /** Forgets what it counted; with `since`, deliveries of messages sent before it are ignored from now on. */
  reset(since?: number): Promise<void>
}

async function startReceiver(workDir: string): Promise<Receiver> {
  const certs = makeCertificates(workDir)
  const port = freePort()
  const controlPort = freePort()
  const env = childEnv({ PORT: String(port), CONTROL_PORT: String(controlPort), CERT_DIR: workDir })
  const server = await startServer('receiver', [BUN, 'bench/webhook-receiver.ts'], env, controlPort, '/stats', workDir)
  const control = server.origin
  return {
    origin: `https://localhost:${port}`,
    ca: certs.ca,
    caFile: join(workDir, 'ca.pem'),
    pid: server.proc.pid,
    async stats(samples = false) {
      const response = await fetch(`${control}/stats${samples ? '?samples=1' : ''}`, { signal: AbortSignal.timeout(10_000) })
      if (!response.ok) fail(`the receiver's /stats answered ${response.status}`)
      return (await response.json()) as ReceiverStats
    },
    async reset(since?: number) {
      const response = await fetch(`${control}/reset${since ? `?since=${since.toFixed(3)}` : ''}`, { method: 'POST', signal: AbortSignal.timeout(10_000) })
      await response.arrayBuffer()
      if (!response.ok) fail(`the receiver's /reset answered ${response.status}`)
    },
  }
}

/** What arrived on `paths`, summed. */
function onPaths(stats: ReceiverStats, paths: string[]) {
  let unique = 0
  let count = 0
  let firstAt = Infinity
  let lastAt = 0
  const sendLatencies: number[] = []
  const latencies: number[] = []
  for (const path of paths) {
    const p = stats.paths[path]
    if (!p) continue
    unique += p.unique
    count += p.count
    if (p.firstAt) firstAt = Math.min(firstAt, p.firstAt)
    lastAt = Math.max(lastAt, p.lastAt)
    if (p.sendLatencies) for (const x of p.sendLatencies) sendLatencies.push(x)
    if (p.latencies) for (const x of p.latencies) latencies.push(x)
  }
  return { unique, count, firstAt, lastAt, sendLatencies, latencies }
}

/** Waits until `paths` have `expected` distinct events between them, or `timeoutMs`. */
async function drain(receiver: Receiver, paths: string[], expected: number, timeoutMs: number): Promise<{ drained: boolean; waitedMs: number }> {
  const t0 = performance.now()
  for (;;) {
    const got = onPaths(await receiver.stats(), paths).unique
    if (got >= expected) return { drained: true, waitedMs: performance.now() - t0 }
    if (performance.now() - t0 > timeoutMs) return { drained: false, waitedMs: performance.now() - t0 }
    await sleep(25)
  }
}

// ---------------------------------------------------------------------------------------------
// CPU: the server per thread, the PostgreSQL processes serving the run's database, the
// receiver, this process (the load generator), and every other process.

type Cpu = CpuUse<'receiver' | 'self' | 'postgres'>

/** Starts measuring; the function it answers ends the interval. */
function startMeter(receiverPid: number, database: string | null, serverPid?: number): () => Cpu {
  const sources = {
    receiver: () => processCpuSeconds(receiverPid),
    self: () => processCpuSeconds(process.pid),
    // On PGlite the database is inside the server process.
    postgres: () => (database === null ? 0 : postgresCpuSeconds(database)),
  }
  return startCpu(sources, serverPid)
}

function fmtCpu(c: Cpu): string {
  const core = (seconds: number) => fmtFixed(seconds / c.wall, 2)
  const { receiver, self, postgres, other } = c.seconds
  const t = c.threads
  if (!t) return `cores: receiver ${core(receiver)}, load generator ${core(self)}, other processes ${core(other + postgres)}`
  return (
    `cores: server ${core(sumThreads(t))} (main ${core(t.main)}, delivery worker ${core(t.Worker)}, ` +
    `HTTP client ${core(t['HTTP Client'])}, other threads ${core(t.other)}), ${PG ? `postgres ${core(postgres)}` : 'PGlite: inside the server'}, ` +
    `receiver ${core(receiver)}, load generator ${core(self)}, other processes ${core(other)}`
  )
}

function perDelivery(c: Cpu, delivered: number, what = 'delivery'): string {
  const us = (seconds: number) => fmtInt((seconds * 1e6) / delivered)
  const t = c.threads ?? { main: 0, Worker: 0, 'HTTP Client': 0, other: 0 }
  return (
    `CPU per ${what}: server ${us(sumThreads(t))} µs (main thread ${us(t.main)}, delivery worker ${us(t.Worker)}, other threads ${us(t.other + t['HTTP Client'])})` +
    `${PG ? `, postgres ${us(c.seconds.postgres)} µs` : ''}, receiver ${us(c.seconds.receiver)} µs`
  )
}

// ---------------------------------------------------------------------------------------------
// What the server's database connections are doing, sampled from pg_stat_activity every 50 ms:
// mostly "idle" means the database waits for work; "idle in transaction" means a transaction
// waits for its client (the server's event loop, or a round trip); "active" ones show what
// they wait on (a lock, the WAL, nothing = on CPU).

interface Activity {
  samples: number
  states: [string, number][]
}

function sampleActivity(pg: Sql | null, dbName: string): () => Promise<Activity> {
  if (!pg) return async () => ({ samples: 0, states: [] })
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

function printActivity(activity: Activity) {
  if (!activity.samples) return
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
  // The most frequent states, and every lock wait (a lock is worth seeing even when it is rare).
  const top = activity.states.filter(([what, n]) => what !== 'idle' && n >= 0.1).slice(0, 8)
  const locks = activity.states.filter(([what, n]) => what.startsWith('active waiting Lock/') && n >= 0.02 && !top.some(([shown]) => shown === what))
  for (const [what, n] of [...top, ...locks]) log(`    ${fmtFixed(n, 2).padStart(5)}  ${what}`)
}

// ---------------------------------------------------------------------------------------------
// The load generator: POST …/messages with the send time as the message text, through the lean
// client (bench/http-client.ts) or Bun fetch; closed loop (N outstanding) or open loop (paced).

/** Where a message is sent: an account's messages URL path, its API key in the query. */
interface Target {
  path: string
}

interface Sender {
  /** POST `target.path` with the send time as the message; true on a 202, anything else counts as an error. */
  send(target: Target): Promise<boolean>
  /** Requests waiting for a connection are dropped (never sent); answers how many. */
  dropQueued(): number
  queued(): number
  stats: { sent: number; accepted: number; errors: number; firstError: string; answerMs: number[] }
  close(): void
}

const messageJson = () => `{"to":"+14155550123","body":"t=${epochNow().toFixed(3)}"}`

function newSender(origin: string, kind: 'lean' | 'fetch', expectStatus = 202, connections = CONCURRENCY): Sender {
  const url = new URL(origin)
  const stats = { sent: 0, accepted: 0, errors: 0, firstError: '', answerMs: [] as number[] }
  const record = (status: number, ms: number, body: string) => {
    if (stats.answerMs.length < 500_000) stats.answerMs.push(ms)
    if (status === expectStatus) {
      stats.accepted++
      return true
    }
    stats.errors++
    stats.firstError ||= `HTTP ${status}: ${redact(body).slice(0, 300)}`
    return false
  }
  const failed = (error: unknown) => {
    // Dropped unsent at the end of an open loop: reported as such (LoadResult.dropped), not an error of the API.
    if (error instanceof DroppedError) return false
    stats.errors++
    stats.firstError ||= (error as Error).message
    return false
  }
  if (kind === 'lean') {
    const pool = new HttpPool({ hostname: url.hostname, port: Number(url.port), connections, expectStatus, timeoutMs: REQUEST_TIMEOUT_MS })
    return {
      stats,
      send(target) {
        stats.sent++
        return pool.post(target.path, messageJson()).then((a) => record(a.status, a.ms + a.queuedMs, a.body), failed)
      },
      dropQueued: () => pool.dropQueued(),
      queued: () => pool.queued,
      close: () => pool.close(),
    }
  }
  return {
    stats,
    async send(target) {
      stats.sent++
      const t0 = performance.now()
      try {
        const response = await fetch(`${origin}${target.path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: messageJson(),
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        })
        const text = await response.text()
        return record(response.status, performance.now() - t0, text)
      } catch (error) {
        return failed(error)
      }
    },
    dropQueued: () => 0,
    queued: () => 0,
    close: () => {},
  }
}

interface LoadResult {
  sent: number
  accepted: number
  errors: number
  firstError: string
  /** Epoch ms of the first send and of the last answer. */
  firstSend: number
  sendEnd: number
  sendSeconds: number
  /** Open loop: sends more than 10 ms behind their schedule (the pacer itself was late), and requests dropped unsent. */
  late: number
  dropped: number
  /** This process's CPU per request while sending, µs. */
  loadgenUs: number
  answer: Percentiles
}

function loadResult(sender: Sender, firstSend: number, cpu0: NodeJS.CpuUsage, extra: { late: number; dropped: number }): LoadResult {
  const cpu = process.cpuUsage(cpu0)
  const sendEnd = epochNow()
  const s = sender.stats
  return {
    sent: s.sent,
    accepted: s.accepted,
    errors: s.errors,
    firstError: s.firstError,
    firstSend,
    sendEnd,
    sendSeconds: (sendEnd - firstSend) / 1000,
    ...extra,
    loadgenUs: (cpu.user + cpu.system) / Math.max(1, s.sent),
    answer: percentiles(s.answerMs),
  }
}

/** `concurrency` requests outstanding, round robin over `targets`, for `seconds` or `max` messages. */
async function closedLoop(sender: Sender, targets: Target[], seconds: number, max: number, concurrency = CONCURRENCY): Promise<LoadResult> {
  const cpu0 = process.cpuUsage()
  const firstSend = epochNow()
  const deadline = performance.now() + seconds * 1000
  let next = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < max && performance.now() < deadline) {
        if (!(await sender.send(targets[next++ % targets.length]!))) await sleep(10)
      }
    }),
  )
  return loadResult(sender, firstSend, cpu0, { late: 0, dropped: 0 })
}

/**
 * `rate` messages a second for `seconds`, round robin over `targets`, each sent when its time
 * comes whatever the answers to earlier ones (open loop). Requests beyond the sender's
 * connections wait in it; whatever still waits OPEN_LOOP_GRACE_MS after the schedule is dropped.
 */
async function openLoop(sender: Sender, targets: Target[], rate: number, seconds: number): Promise<LoadResult> {
  const cpu0 = process.cpuUsage()
  const count = Math.round(rate * seconds)
  const interval = 1000 / rate
  const firstSend = epochNow()
  const t0 = performance.now()
  const sends: Promise<boolean>[] = []
  let late = 0
  for (let i = 0; i < count; ) {
    const now = performance.now()
    const due = t0 + i * interval
    if (due > now) {
      await sleep(Math.max(1, due - now))
      continue
    }
    for (; i < count && t0 + i * interval <= now; i++) {
      if (now - (t0 + i * interval) > 10) late++
      sends.push(sender.send(targets[i % targets.length]!))
    }
  }
  let dropped = 0
  const grace = setTimeout(() => (dropped = sender.dropQueued()), OPEN_LOOP_GRACE_MS)
  await Promise.all(sends)
  clearTimeout(grace)
  return loadResult(sender, firstSend, cpu0, { late, dropped })
}

// ---------------------------------------------------------------------------------------------
// Phase 0: what the load generator costs, against a bare Bun.serve

async function loadgenCost(workDir: string) {
  const port = freePort()
  const bare = await startServer('bare-loadgen', [BUN, 'bench/bare-server.ts'], childEnv({ PORT: String(port) }), port, '/', workDir)
  const targets = [{ path: '/v0/account/acc_01m81emgsenkem5jma2atf166v/messages?key=sk_live_0123456789abcdefghijklmnopqrstuvwxyzABCDEF' }]
  const out: Record<'lean' | 'fetch', LoadResult> = {} as never
  try {
    for (const kind of ['fetch', 'lean'] as const) {
      const sender = newSender(bare.origin, kind, 200)
      await openLoop(sender, targets, LOADGEN_COST_RATE, 0.5) // warm-up: connections, JIT
      sender.stats.sent = sender.stats.accepted = sender.stats.errors = 0
      sender.stats.answerMs.length = 0
      out[kind] = await openLoop(sender, targets, LOADGEN_COST_RATE, 3)
      sender.close()
    }
  } finally {
    await stopChild(bare.proc)
  }
  return out
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

async function rawCeiling(receiver: Receiver) {
  const url = `${receiver.origin}/raw`
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
            const response = await fetch(url, { method: 'POST', headers: headers(id), body: rawBody(id), tls: { ca: receiver.ca }, signal: AbortSignal.timeout(10_000) })
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
  await receiver.reset()
  const stop = startMeter(receiver.pid, null)
  const t0 = performance.now()
  await run(RAW_SECONDS, true)
  const wall = (performance.now() - t0) / 1000
  const cpu = stop()
  return {
    requests: latencies.length,
    rate: latencies.length / wall,
    roundTrip: percentiles(latencies),
    bodyBytes: Buffer.byteLength(rawBody('evt_raw0000000000000000000')),
    cpu,
    problems: errors ? [`raw ceiling: ${errors} failed requests, e.g. ${firstError}`] : [],
  }
}

// ---------------------------------------------------------------------------------------------
// The service, its accounts and subscriptions

interface BenchAccount extends Target {
  id: string
  secret: string
}

/** A subscription the run made, and the receiver path it delivers to. */
interface Subscription {
  account: BenchAccount
  receiverPath: string
  hookId: string
}

/** What every phase against the service needs. */
interface Rig {
  receiver: Receiver
  server: Server
  /** The service's origin. */
  api: string
  /** PostgreSQL only: the database's name, the run's own connection (application_name 'bench': left out of the activity samples) and one for the samples. */
  database: string | null
  sql: Sql | null
  probe: Sql | null
}

const keyed = (account: { id: string; secret: string }, path: string) => `/v0/account/${account.id}${path}?key=${encodeURIComponent(account.secret)}`

/** Accounts and API keys: straight into PostgreSQL; through the CLI on PGlite (it hands the command to the server, which holds the DATA_DIR). */
async function makeAccounts(rig: Rig, storageUrl: URL | null, names: string[]): Promise<BenchAccount[]> {
  const out: BenchAccount[] = []
  if (storageUrl) {
    const handle = postgresDatabase(storageUrl.href, { max: 4 })
    try {
      for (const name of names) {
        const account = await createAccount(handle.db, { name })
        const key = await createApiKey(handle.db, { accountId: account.id, name: 'bench' })
        out.push({ id: account.id, secret: key.secret, path: keyed({ id: account.id, secret: key.secret }, '/messages') })
      }
    } finally {
      await handle.close()
    }
    return out
  }
  const cliJson = async (args: string[]) => {
    const run = await runCommand([BUN, 'src/cli.ts', ...args, '--json'], rig.server.env, 30_000)
    if (run.code !== 0) fail(`bun src/cli.ts ${args.slice(0, 2).join(' ')} exited with ${run.code}:\n${redact(run.stderr + run.stdout).slice(0, 1000)}`)
    return JSON.parse(run.stdout)
  }
  for (const name of names) {
    const account = await cliJson(['account', 'create', '--name', name])
    const key = await cliJson(['apikey', 'create', '--account', account.id, '--name', 'bench'])
    out.push({ id: account.id, secret: key.secret, path: keyed({ id: account.id, secret: key.secret }, '/messages') })
  }
  return out
}

async function subscribe(rig: Rig, account: BenchAccount, receiverPath: string): Promise<Subscription> {
  const body = { event: 'message.delivered', target_url: `${rig.receiver.origin}${receiverPath}` }
  const hook = await expectStatus(201, 'POST', `${rig.api}${keyed(account, '/hooks')}`, 'POST …/hooks', { body })
  return { account, receiverPath, hookId: hook.id }
}

async function unsubscribe(rig: Rig, subscription: Subscription): Promise<void> {
  const result = await call('DELETE', `${rig.api}${keyed(subscription.account, `/hooks/${subscription.hookId}`)}`, 'DELETE …/hooks/{id}')
  if (result.status !== 204) fail(`DELETE …/hooks/${subscription.hookId}: expected 204, got ${result.status}: ${redact(result.text).slice(0, 300)}`)
}

/** Deletes the subscriptions (which cancels their pending deliveries) and makes them again, to the same paths: a clean start for the next phase. */
async function resubscribe(rig: Rig, subscriptions: Subscription[]): Promise<void> {
  for (const s of subscriptions) {
    await unsubscribe(rig, s)
    s.hookId = (await subscribe(rig, s.account, s.receiverPath)).hookId
  }
}

/** Where each phase's measurement starts: CPU and, until `stop`, pg_stat_activity samples. */
function startMeasuring(rig: Rig) {
  const stopActivity = sampleActivity(rig.probe, rig.database ?? '')
  const stopCpu = startMeter(rig.receiver.pid, rig.database, rig.server.proc.pid)
  return { stopActivity, stopCpu }
}

/**
 * Every measured phase starts from vacuumed tables: a claim reads the dead row versions that
 * earlier phases left in the partial index of due deliveries (see docs/performance.md), so
 * without this each phase would pay for the one before it. PostgreSQL only.
 */
async function vacuum(rig: Rig): Promise<void> {
  if (!rig.sql) return
  if (TABLES === 'analyze') await rig.sql`analyze messages, events, deliveries, delivery_attempts, hooks`
  else if (TABLES === 'vacuum') await rig.sql`vacuum analyze messages, events, deliveries, delivery_attempts, hooks`
}

// ---------------------------------------------------------------------------------------------
// Phases 2–7: messages through the API, deliveries at the receiver

interface DeliveryResult {
  label: string
  load: LoadResult
  /** Distinct events received on the phase's paths. */
  delivered: number
  duplicates: number
  /** Delivered / (last receipt − first send). */
  rate: number
  /** (Delivered − 1) / (last receipt − first receipt): the pace of arrivals, for an open-loop phase. */
  arrivalRate: number
  backlogAtSendEnd: number
  drained: boolean
  /** Send → receipt, and commit (the event's timestamp) → receipt; what never arrived counts as Infinity. */
  sendLatency: Percentiles
  eventLatency: Percentiles
  cpu: Cpu
  activity: Activity
  /** Per extra path (fairness: the slow subscription): what arrived by the end of the phase. */
  others: Record<string, { count: number; unique: number; sendLatency: Percentiles }>
  stale: number
}

interface DeliveryPhase {
  label: string
  /** The subscriptions whose deliveries are this phase's figures: one per message sent. */
  subscriptions: Subscription[]
  /** Other subscriptions of the same accounts, only reported (fairness: the slow one). */
  others?: Subscription[]
  load: { kind: 'closed'; seconds: number; max: number } | { kind: 'open'; rate: number; seconds: number }
  drainMs?: number
}

async function deliveryPhase(rig: Rig, phase: DeliveryPhase): Promise<DeliveryResult> {
  const paths = phase.subscriptions.map((s) => s.receiverPath)
  const targets = [...new Map(phase.subscriptions.map((s) => [s.account.id, s.account])).values()]
  await vacuum(rig)
  await sleep(200) // what is still in flight from the previous phase lands, and is ignored (reset since)
  await rig.receiver.reset(epochNow())
  const sender = newSender(rig.api, LOADGEN)
  const measuring = startMeasuring(rig)
  const load = phase.load.kind === 'closed' ? await closedLoop(sender, targets, phase.load.seconds, phase.load.max) : await openLoop(sender, targets, phase.load.rate, phase.load.seconds)
  sender.close()
  const atSendEnd = onPaths(await rig.receiver.stats(), paths).unique
  const activity = await measuring.stopActivity()
  const drained = await drain(rig.receiver, paths, load.accepted, phase.drainMs ?? DRAIN_MS)
  const cpu = measuring.stopCpu()
  const stats = await rig.receiver.stats(true)
  const got = onPaths(stats, paths)
  const missing = Math.max(0, load.accepted - got.unique)
  const others: DeliveryResult['others'] = {}
  for (const s of phase.others ?? []) {
    const o = onPaths(stats, [s.receiverPath])
    others[s.receiverPath] = { count: o.count, unique: o.unique, sendLatency: percentiles(o.sendLatencies) }
  }
  if (!drained.drained) await resubscribe(rig, phase.subscriptions)
  return {
    label: phase.label,
    load,
    delivered: got.unique,
    duplicates: got.count - got.unique,
    rate: got.unique / ((got.lastAt - load.firstSend) / 1000),
    arrivalRate: (got.unique - 1) / ((got.lastAt - got.firstAt) / 1000),
    backlogAtSendEnd: load.accepted - atSendEnd,
    drained: drained.drained,
    sendLatency: percentiles([...got.sendLatencies, ...Array<number>(missing).fill(Infinity)]),
    eventLatency: percentiles([...got.latencies, ...Array<number>(missing).fill(Infinity)]),
    cpu,
    activity,
    others,
    stale: stats.stale,
  }
}

function printDelivery(r: DeliveryResult) {
  const l = r.load
  log(
    `${r.label}: ${fmtInt(l.accepted)} of ${fmtInt(l.sent)} POSTs accepted in ${l.sendSeconds.toFixed(1)} s (${fmtInt(l.accepted / l.sendSeconds)}/s; answer p50 ${fmtMs(l.answer.p50)}, p99 ${fmtMs(l.answer.p99)})` +
      `${l.errors ? `, ${l.errors} ERRORS (${l.firstError})` : ''}${l.late ? `, ${fmtInt(l.late)} sends late by > 10 ms` : ''}${l.dropped ? `, ${fmtInt(l.dropped)} dropped unsent` : ''}`,
  )
  log(
    `  ${fmtInt(r.delivered)} delivered${r.duplicates ? ` (+${r.duplicates} duplicates)` : ''} → ${fmtInt(r.rate)} deliveries/s (arrivals ${fmtInt(r.arrivalRate)}/s); ` +
      `backlog when sending ended ${fmtInt(r.backlogAtSendEnd)}${r.drained ? '' : `; NOT DRAINED: ${fmtInt(l.accepted - r.delivered)} still missing ${DRAIN_MS / 1000} s after the last send (cancelled)`}` +
      `${r.stale ? `; ${r.stale} left over from earlier phases ignored` : ''}`,
  )
  log(`  send → receipt: ${fmtLatency(r.sendLatency)}`)
  log(`  commit → receipt: ${fmtLatency(r.eventLatency)}`)
  for (const [path, o] of Object.entries(r.others)) log(`  ${path}: ${fmtInt(o.unique)} received${o.count > o.unique ? ` (+${o.count - o.unique} repeats)` : ''}, send → receipt ${fmtLatency(o.sendLatency)}`)
  log(`  load generator (${LOADGEN}): ${fmtFixed(l.loadgenUs, 1)} µs CPU per POST`)
  log(`  ${fmtCpu(r.cpu)}`)
  log(`  ${perDelivery(r.cpu, r.delivered)}`)
  printActivity(r.activity)
}

// ---------------------------------------------------------------------------------------------
// Diagnostics (--diagnostics): the delivery worker alone, the messages API alone

/**
 * `count` events with one pending delivery each (round robin over the subscriptions) committed
 * at once by this process, a NOTIFY, and the time until the receiver has them all. No API
 * requests and no dispatch transactions compete, so this is the worker's own rate.
 */
async function workerBacklog(rig: Rig, subscriptions: Subscription[], count: number, template: { payload: string; id: string }) {
  const sql = rig.sql!
  const hookIds = subscriptions.map((s) => s.hookId)
  const accountIds = subscriptions.map((s) => s.account.id)
  await rig.receiver.reset()
  await sql.begin(async (tx) => {
    await tx`insert into events (id, account_id, type, payload)
      select 'evt_0b' || lpad(g::text, 24, '0'), (${accountIds}::text[])[1 + g % ${accountIds.length}], 'message.delivered',
             replace(${template.payload}, ${template.id}, 'evt_0b' || lpad(g::text, 24, '0'))
      from generate_series(1, ${count}) g`
    await tx`insert into deliveries (id, event_id, hook_id)
      select 'dlv_0b' || lpad(g::text, 24, '0'), 'evt_0b' || lpad(g::text, 24, '0'), (${hookIds}::text[])[1 + g % ${hookIds.length}]
      from generate_series(1, ${count}) g`
  })
  await vacuum(rig)
  const paths = subscriptions.map((s) => s.receiverPath)
  const measuring = startMeasuring(rig)
  const t0 = epochNow()
  await sql`select pg_notify(${DELIVERIES_CHANNEL}, '')`
  const drained = await drain(rig.receiver, paths, count, BACKLOG_TIMEOUT_MS)
  const activity = await measuring.stopActivity()
  const cpu = measuring.stopCpu()
  const got = onPaths(await rig.receiver.stats(), paths)
  if (!drained.drained) {
    log(`worker alone: ${fmtInt(got.unique)} of ${fmtInt(count)} arrived within ${BACKLOG_TIMEOUT_MS / 1000} s; the rest are cancelled`)
    await resubscribe(rig, subscriptions)
  }
  return { delivered: got.unique, rate: got.unique / ((got.lastAt - t0) / 1000), cpu, activity }
}

/** The POST load on accounts without subscriptions, timed until every accepted message has been dispatched (none left `queued`). */
async function apiAlone(rig: Rig, accounts: BenchAccount[], seconds: number) {
  const sql = rig.sql!
  await vacuum(rig)
  const sender = newSender(rig.api, LOADGEN)
  const measuring = startMeasuring(rig)
  const load = await closedLoop(sender, accounts, seconds, 1_000_000)
  sender.close()
  const ids = accounts.map((a) => a.id)
  for (let tries = 0; tries < 200; tries++) {
    const [row] = await sql`select count(*)::int as n from messages where status = 'queued' and account_id = any(${ids}::text[])`
    if (row!.n === 0) break
    await sleep(25)
  }
  const untilDispatched = (epochNow() - load.firstSend) / 1000
  const activity = await measuring.stopActivity()
  return { load, rate: load.accepted / untilDispatched, cpu: measuring.stopCpu(), activity }
}

// ---------------------------------------------------------------------------------------------
// Phase 7: full tables

/** ROWS delivered messages, events, deliveries and one attempt each, inserted with generate_series; answers the table sizes after. */
async function fillTables(sql: Sql, subscriptions: Subscription[], template: { payload: string; id: string }) {
  const accountIds = subscriptions.map((s) => s.account.id)
  const hookIds = subscriptions.map((s) => s.hookId)
  const n = subscriptions.length
  const t0 = performance.now()
  // Ids sort before the ULIDs the service makes (older), like rows from the past would; unique is all they need to be.
  await sql.begin(async (tx) => {
    await tx`insert into messages (id, account_id, direction, contact, body, status, created_at, updated_at)
      select 'msg_00' || lpad(g::text, 24, '0'), (${accountIds}::text[])[1 + g % ${n}], 'outbound', '+14155550123', 'bench', 'delivered',
             now() - interval '2 days' + g * interval '1 ms', now() - interval '2 days' + g * interval '1 ms'
      from generate_series(1, ${ROWS}) g`
    await tx`insert into events (id, account_id, type, payload, created_at)
      select 'evt_00' || lpad(g::text, 24, '0'), (${accountIds}::text[])[1 + g % ${n}], 'message.delivered',
             replace(${template.payload}, ${template.id}, 'evt_00' || lpad(g::text, 24, '0')), now() - interval '2 days' + g * interval '1 ms'
      from generate_series(1, ${ROWS}) g`
    await tx`insert into deliveries (id, event_id, hook_id, status, attempts, next_attempt_at, leased_until, created_at)
      select 'dlv_00' || lpad(g::text, 24, '0'), 'evt_00' || lpad(g::text, 24, '0'), (${hookIds}::text[])[1 + g % ${n}], 'delivered', 1,
             now() - interval '2 days' + g * interval '1 ms', null, now() - interval '2 days' + g * interval '1 ms'
      from generate_series(1, ${ROWS}) g`
    await tx`insert into delivery_attempts (id, delivery_id, hook_id, event_id, attempted_at, status_code, duration_ms, error, response_snippet)
      select 'att_00' || lpad(g::text, 24, '0'), 'dlv_00' || lpad(g::text, 24, '0'), (${hookIds}::text[])[1 + g % ${n}], 'evt_00' || lpad(g::text, 24, '0'),
             now() - interval '2 days' + g * interval '1 ms', 200, 3, null, 'ok'
      from generate_series(1, ${ROWS}) g`
  })
  const [counts] = await sql`select (select count(*) from events)::int as events, (select count(*) from deliveries)::int as deliveries,
                                        (select count(*) from delivery_attempts)::int as attempts`
  return { seconds: (performance.now() - t0) / 1000, events: counts!.events as number, deliveries: counts!.deliveries as number, attempts: counts!.attempts as number }
}

/** Deliveries of `hookIds` not yet 'delivered', after waiting up to 5 s: the last attempts are recorded just after the receiver has answered them. */
async function pendingDeliveries(sql: Sql, hookIds: string[]): Promise<number> {
  let pending = 0
  for (let tries = 0; tries < 100; tries++) {
    pending = (await sql`select count(*)::int as n from deliveries where status <> 'delivered' and hook_id = any(${hookIds}::text[])`)[0]!.n as number
    if (pending === 0) break
    await sleep(50)
  }
  return pending
}

// ---------------------------------------------------------------------------------------------
// Main: the phases in order, then the summary

async function main(): Promise<number> {
  const workDir = tempDir('bench-webhooks-')
  let pgVersion = ''
  if (PG) {
    const admin = connect(ADMIN_URL)
    try {
      pgVersion = (await admin`show server_version`)[0]!.server_version as string
    } catch (error) {
      fail(`cannot connect to ${ADMIN_URL.host} (${(error as Error).message}); is PostgreSQL running? (DATABASE_URL)`)
    } finally {
      await admin.end({ timeout: 5 })
    }
  }

  console.log(`Webhook delivery end to end (issue 11), ${PG ? 'PostgreSQL' : 'PGlite'}`)
  printFields([...machineFields('machine', `${cpus().length} cores`), ['database', PG ? `PostgreSQL ${pgVersion} on ${ADMIN_URL.host}` : 'PGlite, embedded in the server']], 12)
  const receiver = await startReceiver(workDir)
  printFields(
    [
      ['tables', PG ? { vacuum: 'VACUUM ANALYZE before every phase', analyze: 'ANALYZE before every phase', none: 'left to autovacuum (--tables none)' }[TABLES] : '–'],
      ['receiver', `${receiver.origin} (bench/webhook-receiver.ts, own process, answers 200 "ok"; /delay/<ms>/… after <ms>)`],
      ['load', `POST …/messages from this process, ${LOADGEN === 'lean' ? 'the lean client (bench/http-client.ts)' : 'Bun fetch'}, ${CONCURRENCY} connections`],
    ],
    12,
  )
  console.log()

  // 0. What the load generator costs.
  log(`load generator cost: POST at ${fmtInt(LOADGEN_COST_RATE)}/s for 3 s to a bare Bun.serve, Bun fetch then the lean client`)
  const cost = await loadgenCost(workDir)
  for (const kind of ['fetch', 'lean'] as const) {
    const c = cost[kind]
    log(`  ${kind.padEnd(5)}: ${fmtFixed(c.loadgenUs, 1)} µs CPU per request (${fmtInt(c.accepted)} answered, ${c.errors} errors, answer p50 ${fmtMs(c.answer.p50)}, p99 ${fmtMs(c.answer.p99)})`)
  }

  // 1. Raw ceiling.
  let raw: Awaited<ReturnType<typeof rawCeiling>> | undefined
  if (PG && RAW_SECONDS > 0) {
    log(`raw ceiling: Bun fetch POST → receiver, concurrency ${CONCURRENCY}, ${RAW_SECONDS} s after a 2 s warm-up`)
    raw = await rawCeiling(receiver)
    log(`raw ceiling: ${fmtInt(raw.rate)} requests/s (${fmtInt(raw.requests)} requests, ${raw.bodyBytes}-byte body); round trip ${fmtLatency(raw.roundTrip)}`)
    log(`  ${fmtCpu(raw.cpu)}`)
  }

  // The storage, fresh, removed at the end; the service on it, default settings.
  const storage = PG ? await postgresStorage(ADMIN_URL, `bench_webhooks_${Date.now()}`, 'DATABASE_URL', 'bench-webhooks') : pgliteStorage('bench-webhooks')
  log(storage.describe)
  // The receiver's CA joins the runtime's trust store at start (NODE_EXTRA_CA_CERTS), as a public
  // CA is for a real receiver. WEBHOOK_CA_FILE would make every attempt pass the whole CA list to
  // fetch, which Bun parses per request (about 110 µs of CPU each: docs/performance.md).
  // API_RATE_LIMIT=0: the load sends thousands of messages a second with one API key, as an
  // integrator whose limit was raised for that volume would.
  const serviceEnv = { ...storage.env, WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', NODE_EXTRA_CA_CERTS: receiver.caFile, API_RATE_LIMIT: '0' }
  const server = await startService('server', serviceEnv, workDir)
  log(`server: bun src/main.ts on ${server.origin}, LOG_LEVEL default (info), WEBHOOK_* defaults, API_RATE_LIMIT=0`)
  let sql: Sql | null = null
  let probe: Sql | null = null
  if (storage.database) {
    const s = connect(storage.database.url, { connection: { application_name: 'bench' } })
    const p = connect(storage.database.url, { connection: { application_name: 'bench' } })
    onCleanup(() => s.end({ timeout: 5 }))
    onCleanup(() => p.end({ timeout: 5 }))
    sql = s
    probe = p
  }
  const rig: Rig = { receiver, server, api: server.origin, database: storage.database?.name ?? null, sql, probe }

  const names = ['bench one', 'bench fairness', ...(PG ? Array.from({ length: ACCOUNTS }, (_, i) => `bench ${i}`) : [])]
  const accounts = await makeAccounts(rig, storage.database?.url ?? null, names)
  const [oneAccount, fairAccount, ...many] = accounts as [BenchAccount, BenchAccount, ...BenchAccount[]]
  const one = await subscribe(rig, oneAccount, '/one')
  const slow = await subscribe(rig, fairAccount, `/delay/${SLOW_MS}/slow`)
  const healthy = await subscribe(rig, fairAccount, '/healthy')
  const spread: Subscription[] = []
  for (const [n, account] of many.entries()) spread.push(await subscribe(rig, account, `/hook/${n}`))
  log(
    `accounts: one with one subscription (/one); one with two (/delay/${SLOW_MS}/slow, /healthy)` +
      `${PG ? `; ${ACCOUNTS} with one each (/hook/<n>)` : ''}: message.delivered to ${receiver.origin}`,
  )

  // Warm-up: JIT, the worker's connections to the receiver, the server's caches.
  const warmSubs = PG ? [...spread, one] : [one]
  const warm = await deliveryPhase(rig, { label: 'warm-up', subscriptions: warmSubs, load: { kind: 'closed', seconds: 5, max: WARMUP_MESSAGES } })
  log(`warm-up: ${fmtInt(warm.delivered)} of ${fmtInt(warm.load.accepted)} delivered`)
  if (warm.delivered === 0) fail('no delivery arrived during the warm-up: is the delivery worker running?')

  // 2. One subscription, max.
  log(`one subscription, max: closed loop, ${CONCURRENCY} POSTs outstanding, ${SEND_SECONDS} s`)
  const oneMax = await deliveryPhase(rig, { label: 'one subscription, max', subscriptions: [one], load: { kind: 'closed', seconds: SEND_SECONDS, max: MESSAGES } })
  printDelivery(oneMax)

  // 3. One subscription at the target rate.
  log(`one subscription at ${fmtInt(RATE_ONE)}/s: open loop for ${RATE_ONE_SECONDS} s`)
  const oneRate = await deliveryPhase(rig, { label: `one subscription at ${fmtInt(RATE_ONE)}/s`, subscriptions: [one], load: { kind: 'open', rate: RATE_ONE, seconds: RATE_ONE_SECONDS } })
  printDelivery(oneRate)

  // 4. Fairness.
  log(`fairness: ${FAIR_RATE} messages/s for ${FAIR_SECONDS} s to one account with a slow (${SLOW_MS} ms) and a healthy subscription`)
  const fair = await deliveryPhase(rig, {
    label: 'fairness (healthy subscription)',
    subscriptions: [healthy],
    others: [slow],
    load: { kind: 'open', rate: FAIR_RATE, seconds: FAIR_SECONDS },
  })
  printDelivery(fair)
  const slowGot = fair.others[slow.receiverPath]!
  await unsubscribe(rig, slow) // cancels its backlog
  log(`fairness: the slow subscription received ${fmtInt(slowGot.unique)} of ${fmtInt(fair.load.accepted)} by the end of the phase; deleted (its pending deliveries cancelled)`)

  // 5. 32 subscriptions.
  let many32: DeliveryResult | undefined
  if (PG) {
    log(`${ACCOUNTS} subscriptions: closed loop, ${CONCURRENCY} POSTs outstanding over ${ACCOUNTS} accounts, ${SEND_SECONDS} s`)
    many32 = await deliveryPhase(rig, { label: `${ACCOUNTS} subscriptions`, subscriptions: spread, load: { kind: 'closed', seconds: SEND_SECONDS, max: MESSAGES } })
    printDelivery(many32)
  }

  // 6. Latency (commit → receipt).
  const latencySubs = PG ? spread : [one]
  log(`latency: one message every ${fmtFixed(1000 / RATE, 1)} ms for ${LATENCY_SECONDS} s over ${latencySubs.length} subscription(s)`)
  const latency = await deliveryPhase(rig, { label: `latency at ${RATE}/s`, subscriptions: latencySubs, load: { kind: 'open', rate: RATE, seconds: LATENCY_SECONDS } })
  printDelivery(latency)

  // A real event body, for the rows this script inserts itself.
  let template = { payload: rawBody('evt_00000000000000000000000000'), id: 'evt_00000000000000000000000000' }
  if (sql) {
    const [sample] = await sql`select payload from events limit 1`
    const payload = sample?.payload as string | undefined
    if (payload) template = { payload, id: /"id":"(evt_[^"]+)"/.exec(payload)?.[1] ?? template.id }
  }

  // Diagnostics.
  let backlog: Awaited<ReturnType<typeof workerBacklog>> | undefined
  let api: Awaited<ReturnType<typeof apiAlone>> | undefined
  if (PG && DIAGNOSTICS) {
    if (BACKLOG > 0) {
      log(`worker alone: ${fmtInt(BACKLOG)} pending deliveries (the service's own event body, ${Buffer.byteLength(template.payload)} bytes) inserted by SQL in one transaction, then NOTIFY ${DELIVERIES_CHANNEL}`)
      backlog = await workerBacklog(rig, spread, BACKLOG, template)
      log(`worker alone: ${fmtInt(backlog.delivered)} delivered → ${fmtInt(backlog.rate)} deliveries/s`)
      log(`  ${fmtCpu(backlog.cpu)}`)
      log(`  ${perDelivery(backlog.cpu, backlog.delivered)}`)
      printActivity(backlog.activity)
    }
    const quiet = await makeAccounts(rig, storage.database!.url, Array.from({ length: ACCOUNTS }, (_, i) => `bench, no subscription ${i}`))
    log(`API alone: POST …/messages at concurrency ${CONCURRENCY} for ${API_SECONDS} s on ${ACCOUNTS} accounts without subscriptions`)
    api = await apiAlone(rig, quiet, API_SECONDS)
    log(`API alone: ${fmtInt(api.load.accepted)} accepted (${fmtInt(api.load.accepted / api.load.sendSeconds)}/s), all dispatched → ${fmtInt(api.rate)} messages/s${api.load.errors ? `, ${api.load.errors} ERRORS` : ''}`)
    log(`  ${fmtCpu(api.cpu)}`)
    log(`  ${perDelivery(api.cpu, api.load.accepted, 'message')}`)
    printActivity(api.activity)
  }

  // 7. Full tables.
  const skipped: string[] = []
  let full: DeliveryResult | undefined
  if (PG && ROWS > 0) {
    if (Date.now() - started > LAST_PHASE_BY_MS) skipped.push(`the full-table phase was skipped: the run had already taken ${elapsed().trim()}`)
    else {
      const filled = await fillTables(sql!, [one, ...spread], template)
      log(
        `full table: ${fmtInt(ROWS)} delivered messages/events/deliveries/attempts inserted in ${filled.seconds.toFixed(1)} s; ` +
          `now ${fmtInt(filled.events)} events, ${fmtInt(filled.deliveries)} deliveries, ${fmtInt(filled.attempts)} attempts`,
      )
      full = await deliveryPhase(rig, { label: 'one subscription, max, full table', subscriptions: [one], load: { kind: 'closed', seconds: SEND_SECONDS, max: MESSAGES } })
      printDelivery(full)
      // What one delivered message costs on disk (its message, event, one delivery, one attempt, with every index): the table growth per day in docs/performance.md.
      await sql!`vacuum analyze messages, events, deliveries, delivery_attempts`
      const sizes = await sql!`select relname as table, pg_total_relation_size(relid)::bigint as bytes, n_live_tup::bigint as rows
        from pg_stat_user_tables where relname in ('messages', 'events', 'deliveries', 'delivery_attempts') order by relname`
      const perMessage = sizes.reduce((sum, row) => sum + Number(row.bytes) / Math.max(1, Number(row.rows)), 0)
      log(`storage: ${sizes.map((row) => `${row.table} ${fmtInt(Number(row.rows))} rows, ${fmtInt(Number(row.bytes) / Math.max(1, Number(row.rows)))} bytes/row`).join('; ')}`)
      log(`storage: about ${fmtInt(perMessage)} bytes per delivered message (its message, event, delivery and attempt, indexes included)`)
    }
  }

  // What was wrong.
  const phases = [warm, oneMax, oneRate, fair, latency, ...(many32 ? [many32] : []), ...(full ? [full] : [])]
  const loads = [...phases.map((p) => p.load), ...(api ? [api.load] : [])]
  const sendErrors = loads.reduce((sum, l) => sum + l.errors, 0)
  const dropped = loads.reduce((sum, l) => sum + l.dropped, 0)
  const pending = sql ? await pendingDeliveries(sql, [one, healthy, ...spread].map((s) => s.hookId)) : 0
  const serverCheck = await inspectServer(server, redact)
  const problems = [
    ...(raw?.problems ?? []),
    ...Object.entries(cost).flatMap(([kind, c]) => (c.errors ? [`load generator cost (${kind}): ${c.errors} failed requests, e.g. ${c.firstError}`] : [])),
    ...skipped,
    ...(pending ? [`${pending} deliveries of the current subscriptions are not 'delivered' at the end`] : []),
    ...(sendErrors ? [`${sendErrors} POST …/messages did not answer 202, e.g. ${loads.find((l) => l.firstError)?.firstError}`] : []),
    ...serverCheck.problems,
  ]
  const notes = [
    ...phases.filter((p) => !p.drained).map((p) => `${p.label}: ${fmtInt(p.load.accepted - p.delivered)} of ${fmtInt(p.load.accepted)} deliveries had not arrived ${DRAIN_MS / 1000} s after the last send (counted as infinite latency, then cancelled)`),
    ...(dropped ? [`${fmtInt(dropped)} open-loop messages could not be sent within ${OPEN_LOOP_GRACE_MS / 1000} s of the schedule's end (the API did not take them): dropped`] : []),
  ]

  // Summary.
  console.log()
  const verdict = (met: boolean) => (met ? 'met' : 'NOT MET')
  const p99 = (r: DeliveryResult) => fmtLat(r.sendLatency.p99)
  const rateTarget = PG ? TARGET_RATE : TARGET_RATE_PGLITE
  const keptUp = oneRate.arrivalRate >= AT_RATE_TOLERANCE * RATE_ONE && oneRate.drained && oneRate.load.dropped === 0
  const fullRatio = full ? full.rate / oneMax.rate : Number.NaN
  console.log(`Summary (${PG ? 'PostgreSQL' : 'PGlite'}, ${cpus().length} cores, LOG_LEVEL=info; everything on this machine, over loopback)`)
  const rows: string[][] = [
    ['figure', 'value', 'target', 'verdict'],
    [`load generator CPU per POST at ${fmtInt(LOADGEN_COST_RATE)}/s: Bun fetch / lean client`, `${fmtFixed(cost.fetch.loadgenUs, 0)} / ${fmtFixed(cost.lean.loadgenUs, 0)} µs`, '', ''],
    ...(raw ? [[`raw ceiling: Bun fetch → HTTPS receiver, c=${CONCURRENCY}`, `${fmtInt(raw.rate)} req/s`, '', '']] : []),
    ['one subscription, max: API accept rate', `${fmtInt(oneMax.load.accepted / oneMax.load.sendSeconds)} /s`, '', ''],
    ['one subscription, max: deliveries/s', `${fmtInt(oneMax.rate)} /s`, `≥ ${fmtInt(rateTarget)} /s`, verdict(oneMax.rate >= rateTarget)],
    ['one subscription, max: send → receipt p50 / p99', `${fmtLat(oneMax.sendLatency.p50)} / ${p99(oneMax)}`, '', ''],
    [`one subscription at ${fmtInt(RATE_ONE)}/s offered: delivered/s`, `${fmtInt(oneRate.arrivalRate)} /s`, `≥ ${fmtInt(AT_RATE_TOLERANCE * RATE_ONE)} /s, all`, verdict(keptUp)],
    [`one subscription at ${fmtInt(RATE_ONE)}/s offered: send → receipt p99`, p99(oneRate), PG ? `< ${TARGET_P99_ONE_MS} ms` : '', PG ? verdict(oneRate.sendLatency.p99 < TARGET_P99_ONE_MS) : ''],
    [`fairness at ${FAIR_RATE}/s: healthy subscription, send → receipt p99`, p99(fair), `< ${TARGET_P99_FAIR_MS} ms`, verdict(fair.sendLatency.p99 < TARGET_P99_FAIR_MS)],
    [`fairness: healthy delivered / slow (${SLOW_MS} ms) received`, `${fmtInt(fair.delivered)} / ${fmtInt(slowGot.unique)} of ${fmtInt(fair.load.accepted)}`, '', ''],
    ...(many32 ? [[`${ACCOUNTS} subscriptions: deliveries/s`, `${fmtInt(many32.rate)} /s`, `≥ ${fmtInt(TARGET_RATE)} /s`, verdict(many32.rate >= TARGET_RATE)]] : []),
    [`latency at ${RATE}/s: commit → receipt p50 / p99 (max)`, `${fmtLat(latency.eventLatency.p50)} / ${fmtLat(latency.eventLatency.p99)} (${fmtLat(latency.eventLatency.max)})`, `p99 < ${TARGET_P99_COMMIT_MS} ms`, verdict(latency.eventLatency.p99 < TARGET_P99_COMMIT_MS)],
    ...(backlog ? [[`worker alone, draining ${fmtInt(BACKLOG)} pending (no API load)`, `${fmtInt(backlog.rate)} /s`, '', '']] : []),
    ...(api ? [['messages API alone, no subscriptions (accepted and dispatched)', `${fmtInt(api.rate)} /s`, '', '']] : []),
    ...(full
      ? [
          [`one subscription, max, +${fmtInt(ROWS)} delivered rows: deliveries/s`, `${fmtInt(full.rate)} /s`, '', ''],
          ['full / empty (one subscription, max)', fmtFixed(fullRatio, 2), `≥ ${TARGET_FULL_RATIO.toFixed(2)}`, verdict(fullRatio >= TARGET_FULL_RATIO)],
        ]
      : []),
    ...(PG ? [['PGlite, one subscription, max: deliveries/s', 'bun bench/webhooks.ts --database pglite', `≥ ${fmtInt(TARGET_RATE_PGLITE)} /s`, '–']] : []),
    ['GET /v0/account, API key and bearer, vs bare Bun.serve', 'bun bench/account.ts', '≥ 0.50', '–'],
  ]
  printTable(rows, 1)
  console.log()
  if (notes.length) {
    console.log('Notes:')
    for (const note of notes) console.log(`- ${note}`)
    console.log()
  }
  printProblems(problems)
  log(`done; stopping the server and the receiver${PG ? ', dropping the database' : ''}`)
  return problems.length ? 1 : 0
}

await runMain('bench/webhooks.ts', main, { watchdogMs: WATCHDOG_MS })
