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
import { cpus } from 'node:os'
import { join } from 'node:path'
import { makeCertificates } from '../fixtures/tls.ts'
import { postgresDatabase } from '../src/lib/db/client.ts'
import { createAccount } from '../src/accounts/service.ts'
import { createApiKey } from '../src/auth/api-keys.ts'
import { DELIVERIES_CHANNEL } from '../src/delivery/store.ts'
import {
  BUN,
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
  postgresCpuSeconds,
  postgresStorage,
  printFields,
  printProblems,
  printTable,
  processCpuSeconds,
  redact,
  runMain,
  sleep,
  startCpu,
  startServer,
  startService,
  sumThreads,
  tempDir,
  type CpuUse,
  type Percentiles,
  type Sql,
} from './harness.ts'

const cli = commandLine(import.meta.url, {
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
})
const RAW_SECONDS = cli.integer('raw-seconds', 1, 30)
const MESSAGES = cli.integer('messages', 100, 100_000)
const SEND_SECONDS = cli.integer('seconds', 1, 30)
const RATE = cli.integer('rate', 1, 2000)
const LATENCY_SECONDS = cli.integer('latency-seconds', 1, 30)
const ROWS = cli.integer('rows', 0, 1_000_000)
const BACKLOG = cli.integer('backlog', 0, 100_000)
const TABLES = cli.choice('tables', ['vacuum', 'analyze', 'none'])
const ACCOUNTS = cli.integer('accounts', 1, 256)
const CONCURRENCY = cli.integer('concurrency', 1, 512)
const ADMIN_URL = cli.loopbackUrl(process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test', 'DATABASE_URL')
const API_SECONDS = 10

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

const started = Date.now()
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(0).padStart(3)} s`
const log = (line: string) => console.log(`[${elapsed()}] ${line}`)
const fmtLatency = (p: Percentiles) => `p50 ${fmtMs(p.p50)}, p95 ${fmtMs(p.p95)}, p99 ${fmtMs(p.p99)}, max ${fmtMs(p.max)} (n=${fmtInt(p.n)})`

// ---------------------------------------------------------------------------------------------
// The receiver (bench/webhook-receiver.ts), its own process, and its control port

interface ReceiverStats {
  count: number
  unique: number
  firstAt: number
  lastAt: number
  samples: number
  latencies?: number[]
}

interface Receiver {
  /** https://localhost:<port>, with a certificate signed by the CA in `caFile`. */
  origin: string
  ca: string
  caFile: string
  pid: number
  stats(samples?: boolean): Promise<ReceiverStats>
  reset(): Promise<void>
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
    async reset() {
      const response = await fetch(`${control}/reset`, { method: 'POST', signal: AbortSignal.timeout(10_000) })
      await response.arrayBuffer()
      if (!response.ok) fail(`the receiver's /reset answered ${response.status}`)
    },
  }
}

/** Waits until the receiver has `expected` distinct events, or the timeout; answers its stats. */
async function drain(receiver: Receiver, expected: number, timeoutMs: number): Promise<ReceiverStats & { drained: boolean }> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const stats = await receiver.stats()
    if (stats.unique >= expected) return { ...stats, drained: true }
    if (Date.now() > deadline) return { ...stats, drained: false }
    await sleep(25)
  }
}

// ---------------------------------------------------------------------------------------------
// CPU: the server per thread (main JS thread, the delivery Worker thread, Bun's HTTP client
// thread, the rest), the PostgreSQL processes serving the run's database, the receiver, this
// process (the load generator), and every other process.

type Cpu = CpuUse<'receiver' | 'self' | 'postgres'>

/** Starts measuring; the function it answers ends the interval. Before the service runs, `database` is '' and `serverPid` absent. */
function startMeter(receiverPid: number, database: string, serverPid?: number): () => Cpu {
  const sources = {
    receiver: () => processCpuSeconds(receiverPid),
    self: () => processCpuSeconds(process.pid),
    postgres: () => postgresCpuSeconds(database),
  }
  const stop = startCpu(sources, serverPid)
  return () => stop()
}

function fmtCpu(c: Cpu): string {
  const core = (seconds: number) => fmtFixed(seconds / c.wall, 2)
  const { receiver, self, postgres, other } = c.seconds
  const t = c.threads
  if (!t) return `cores: receiver ${core(receiver)}, load generator ${core(self)}, other processes ${core(other + postgres)}`
  return (
    `cores: server ${core(sumThreads(t))} (main ${core(t.main)}, delivery worker ${core(t.Worker)}, ` +
    `HTTP client ${core(t['HTTP Client'])}, other threads ${core(t.other)}), postgres ${core(postgres)}, ` +
    `receiver ${core(receiver)}, load generator ${core(self)}, other processes ${core(other)}`
  )
}

function perDelivery(c: Cpu, delivered: number, what = 'delivery'): string {
  const us = (seconds: number) => fmtInt((seconds * 1e6) / delivered)
  const t = c.threads ?? { main: 0, Worker: 0, 'HTTP Client': 0, other: 0 }
  return `CPU per ${what}: server ${us(sumThreads(t))} µs (main thread ${us(t.main)}, delivery worker ${us(t.Worker)}), postgres ${us(c.seconds.postgres)} µs`
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

function sampleActivity(pg: Sql, dbName: string): () => Promise<Activity> {
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
  // The ten most frequent states, and every lock wait (a lock is worth seeing even when it is rare).
  const top = activity.states.filter(([what, n]) => what !== 'idle' && n >= 0.1).slice(0, 10)
  const locks = activity.states.filter(([what, n]) => what.startsWith('active waiting Lock/') && n >= 0.02 && !top.some(([shown]) => shown === what))
  for (const [what, n] of [...top, ...locks]) log(`    ${fmtFixed(n, 2).padStart(5)}  ${what}`)
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
  const stop = startMeter(receiver.pid, '')
  const t0 = performance.now()
  await run(RAW_SECONDS, true)
  const wall = (performance.now() - t0) / 1000
  const cpu = stop()
  const stats = await receiver.stats(true)
  return {
    requests: latencies.length,
    rate: latencies.length / wall,
    roundTrip: percentiles(latencies),
    oneWay: percentiles(stats.latencies ?? []),
    received: stats.count,
    bodyBytes: Buffer.byteLength(rawBody('evt_raw0000000000000000000')),
    cpu,
    problems: errors ? [`raw ceiling: ${errors} failed requests, e.g. ${firstError}`] : [],
  }
}

// ---------------------------------------------------------------------------------------------
// The service, and what the measured phases share

interface BenchAccount {
  id: string
  secret: string
}

/** What every phase against the service needs. */
interface Rig {
  receiver: Receiver
  /** The service's origin. */
  api: string
  serverPid: number
  database: string
  /** The run's own connection to its database (application_name 'bench': left out of the activity samples). */
  sql: Sql
  /** A second one, for the pg_stat_activity samples. */
  probe: Sql
}

/** Where each phase's measurement starts: CPU and, until `stop`, pg_stat_activity samples. */
function startMeasuring(rig: Rig) {
  const stopActivity = sampleActivity(rig.probe, rig.database)
  const stopCpu = startMeter(rig.receiver.pid, rig.database, rig.serverPid)
  return { stopActivity, stopCpu }
}

/**
 * Every measured phase starts from vacuumed tables: a claim reads the dead row versions that
 * earlier phases left in the partial index of due deliveries (see docs/performance.md), so
 * without this each phase would pay for the one before it.
 */
async function vacuum(rig: Rig): Promise<void> {
  if (TABLES === 'analyze') await rig.sql`analyze messages, events, deliveries, delivery_attempts, hooks`
  else if (TABLES === 'vacuum') await rig.sql`vacuum analyze messages, events, deliveries, delivery_attempts, hooks`
}

interface SendErrors {
  count: number
  first: string
}

const MESSAGE_BODY = JSON.stringify({ to: '+14155550123', body: 'bench' })

/** POST …/messages for one account at a time; `errors` counts the answers that were not 202. */
function messageSender(api: string) {
  const errors: SendErrors = { count: 0, first: '' }
  const send = async (account: BenchAccount): Promise<boolean> => {
    try {
      const response = await fetch(`${api}/v0/account/${account.id}/messages?key=${account.secret}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: MESSAGE_BODY,
        signal: AbortSignal.timeout(10_000),
      })
      const text = await response.text()
      if (response.status === 202) return true
      errors.count++
      errors.first ||= `HTTP ${response.status}: ${redact(text).slice(0, 300)}`
    } catch (error) {
      errors.count++
      errors.first ||= (error as Error).message
    }
    return false
  }
  return { send, errors }
}

/**
 * The accounts: ACCOUNTS with an API key and one message.delivered subscription each (made
 * through the API), and as many without a subscription. Accounts and keys go straight into the
 * database (the server migrated it).
 */
async function createAccounts(databaseUrl: URL, api: string, receiver: Receiver) {
  const handle = postgresDatabase(databaseUrl.href, { max: 4 })
  const make = async (name: string): Promise<BenchAccount> => {
    const account = await createAccount(handle.db, { name })
    const key = await createApiKey(handle.db, { accountId: account.id, name: 'bench' })
    return { id: account.id, secret: key.secret }
  }
  const subscribed: BenchAccount[] = []
  const quiet: BenchAccount[] = []
  try {
    for (let i = 0; i < ACCOUNTS; i++) subscribed.push(await make(`bench ${i}`))
    for (let i = 0; i < ACCOUNTS; i++) quiet.push(await make(`bench, no subscription ${i}`))
  } finally {
    await handle.close()
  }
  const hookIds: string[] = []
  for (const [n, account] of subscribed.entries()) {
    const body = { event: 'message.delivered', target_url: `${receiver.origin}/hook/${n}` }
    const hook = await expectStatus(201, 'POST', `${api}/v0/account/${account.id}/hooks?key=${account.secret}`, 'POST …/hooks', { body })
    hookIds.push(hook.id)
  }
  return { subscribed, quiet, hookIds }
}

// ---------------------------------------------------------------------------------------------
// Phase 2 (and 4): throughput end to end

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
  cpu: Cpu
  activity: Activity
  sendErrors: SendErrors
  problems: string[]
}

async function throughput(rig: Rig, label: string, accounts: BenchAccount[], maxMessages: number, seconds: number, drainMs = DRAIN_TIMEOUT_MS): Promise<ThroughputResult> {
  await vacuum(rig)
  await rig.receiver.reset()
  const sender = messageSender(rig.api)
  const measuring = startMeasuring(rig)
  const firstSend = Date.now()
  const deadline = performance.now() + seconds * 1000
  let next = 0
  let accepted = 0
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < maxMessages && performance.now() < deadline) {
        const account = accounts[next++ % accounts.length]!
        if (await sender.send(account)) accepted++
        else await sleep(10)
      }
    }),
  )
  const sendEnd = Date.now()
  const atSendEnd = await rig.receiver.stats()
  const activity = await measuring.stopActivity()
  const stats = await drain(rig.receiver, accepted, drainMs)
  const cpu = measuring.stopCpu()
  const withSamples = await rig.receiver.stats(true)
  return {
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
    cpu,
    activity,
    sendErrors: sender.errors,
    problems: stats.drained ? [] : [`${label}: only ${stats.unique} of ${accepted} deliveries arrived within ${drainMs / 1000} s of the last send`],
  }
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
  printActivity(r.activity)
}

// ---------------------------------------------------------------------------------------------
// Phase 2b: the delivery worker alone

/**
 * `count` events with one pending delivery each (round robin over the subscriptions) committed
 * at once by this process, a NOTIFY, and the time until the receiver has them all. No API
 * requests and no dispatch transactions compete, so this is the worker's own rate.
 */
async function workerBacklog(rig: Rig, hookIds: string[], accountIds: string[], count: number, template: { payload: string; id: string }) {
  await rig.receiver.reset()
  await rig.sql.begin(async (tx) => {
    await tx`insert into events (id, account_id, type, payload)
      select 'evt_0b' || lpad(g::text, 24, '0'), (${accountIds}::text[])[1 + g % ${accountIds.length}], 'message.delivered',
             replace(${template.payload}, ${template.id}, 'evt_0b' || lpad(g::text, 24, '0'))
      from generate_series(1, ${count}) g`
    await tx`insert into deliveries (id, event_id, hook_id)
      select 'dlv_0b' || lpad(g::text, 24, '0'), 'evt_0b' || lpad(g::text, 24, '0'), (${hookIds}::text[])[1 + g % ${hookIds.length}]
      from generate_series(1, ${count}) g`
  })
  await vacuum(rig)
  const measuring = startMeasuring(rig)
  const t0 = Date.now()
  await rig.sql`select pg_notify(${DELIVERIES_CHANNEL}, '')`
  const stats = await drain(rig.receiver, count, BACKLOG_TIMEOUT_MS)
  const activity = await measuring.stopActivity()
  const cpu = measuring.stopCpu()
  if (!stats.drained) {
    // Not a failure: the rate is measured on what arrived. What is left is cancelled so that it does not leak into the next phase.
    const left = await rig.sql`delete from deliveries where id like 'dlv_0b%' and status = 'pending' returning id`
    log(`worker alone: ${fmtInt(stats.unique)} of ${fmtInt(count)} arrived within ${BACKLOG_TIMEOUT_MS / 1000} s; the ${fmtInt(left.length)} left were deleted`)
    await sleep(2000) // the attempts in flight land
  }
  return { delivered: stats.unique, duplicates: stats.count - stats.unique, rate: stats.unique / ((stats.lastAt - t0) / 1000), cpu, activity }
}

// ---------------------------------------------------------------------------------------------
// Phase 2c: the messages API alone

/**
 * The same load on accounts that have no subscription, so each message is its INSERT and its
 * dispatch transaction without an event delivery. Timed until every accepted message has been
 * dispatched (none left `queued`).
 */
async function apiAlone(rig: Rig, accounts: BenchAccount[], seconds: number) {
  await vacuum(rig)
  const sender = messageSender(rig.api)
  const measuring = startMeasuring(rig)
  const t0 = Date.now()
  const deadline = performance.now() + seconds * 1000
  let accepted = 0
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, worker) => {
      for (let i = worker; performance.now() < deadline; i += CONCURRENCY) {
        if (await sender.send(accounts[i % accounts.length]!)) accepted++
        else await sleep(10)
      }
    }),
  )
  const sendSeconds = (Date.now() - t0) / 1000
  const ids = accounts.map((a) => a.id)
  for (let tries = 0; tries < 200; tries++) {
    const [row] = await rig.sql`select count(*)::int as n from messages where status = 'queued' and account_id = any(${ids}::text[])`
    if (row!.n === 0) break
    await sleep(25)
  }
  const untilDispatched = (Date.now() - t0) / 1000
  const activity = await measuring.stopActivity()
  return { accepted, acceptRate: accepted / sendSeconds, rate: accepted / untilDispatched, cpu: measuring.stopCpu(), activity, sendErrors: sender.errors }
}

// ---------------------------------------------------------------------------------------------
// Phase 3: latency

async function latencyRun(rig: Rig, accounts: BenchAccount[]) {
  await vacuum(rig)
  await rig.receiver.reset()
  const sender = messageSender(rig.api)
  const measuring = startMeasuring(rig)
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
    sends.push(sender.send(accounts[i % accounts.length]!))
  }
  const accepted = (await Promise.all(sends)).filter(Boolean).length
  const sendSeconds = (performance.now() - t0) / 1000
  const activity = await measuring.stopActivity()
  const stats = await drain(rig.receiver, accepted, 10_000)
  const cpu = measuring.stopCpu()
  const withSamples = await rig.receiver.stats(true)
  return {
    accepted,
    rate: accepted / sendSeconds,
    late,
    latency: percentiles(withSamples.latencies ?? []),
    duplicates: stats.count - stats.unique,
    cpu,
    activity,
    sendErrors: sender.errors,
    problems: stats.drained ? [] : [`latency: only ${stats.unique} of ${accepted} deliveries arrived within 10 s of the last send`],
  }
}

// ---------------------------------------------------------------------------------------------
// Phase 4: full tables

/** ROWS delivered messages, events, deliveries and one attempt each, inserted with generate_series; answers the table sizes after. */
async function fillTables(rig: Rig, accountIds: string[], hookIds: string[], template: { payload: string; id: string }) {
  const t0 = performance.now()
  // Ids sort before the ULIDs the service makes (older), like rows from the past would; unique is all they need to be.
  await rig.sql.begin(async (tx) => {
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
  const [counts] = await rig.sql`select (select count(*) from events)::int as events, (select count(*) from deliveries)::int as deliveries,
                                        (select count(*) from delivery_attempts)::int as attempts`
  return { seconds: (performance.now() - t0) / 1000, events: counts!.events as number, deliveries: counts!.deliveries as number, attempts: counts!.attempts as number }
}

/** Deliveries not yet 'delivered', after waiting up to 5 s: the last attempts are recorded just after the receiver has answered them. */
async function pendingDeliveries(sql: Sql): Promise<number> {
  let pending = 0
  for (let tries = 0; tries < 100; tries++) {
    pending = (await sql`select count(*)::int as n from deliveries where status <> 'delivered'`)[0]!.n as number
    if (pending === 0) break
    await sleep(50)
  }
  return pending
}

// ---------------------------------------------------------------------------------------------
// Main: the phases in order, then the summary

async function main(): Promise<number> {
  const workDir = tempDir('bench-webhooks-')
  const admin = connect(ADMIN_URL)
  let pgVersion = ''
  try {
    pgVersion = (await admin`show server_version`)[0]!.server_version as string
  } catch (error) {
    fail(`cannot connect to ${ADMIN_URL.host} (${(error as Error).message}); is PostgreSQL running? (DATABASE_URL)`)
  } finally {
    await admin.end({ timeout: 5 })
  }

  console.log('Webhook delivery: raw HTTPS ceiling, end-to-end throughput, latency, throughput with a full table')
  printFields([...machineFields('machine', `${cpus().length} cores`), ['postgresql', `${pgVersion} on ${ADMIN_URL.host}`]], 12)

  // TLS material for the receiver, and the receiver itself.
  const receiver = await startReceiver(workDir)
  printFields(
    [
      ['tables', { vacuum: 'VACUUM ANALYZE before every phase', analyze: 'ANALYZE before every phase', none: 'left to autovacuum (--tables none)' }[TABLES]],
      ['receiver', `${receiver.origin} (bench/webhook-receiver.ts, own process, answers 200 "ok")`],
    ],
    12,
  )
  console.log()

  // 1. Raw ceiling.
  log(`raw ceiling: Bun fetch POST → receiver, concurrency ${CONCURRENCY}, ${RAW_SECONDS} s after a 2 s warm-up`)
  const raw = await rawCeiling(receiver)
  log(`raw ceiling: ${fmtInt(raw.rate)} requests/s (${fmtInt(raw.requests)} requests, ${raw.bodyBytes}-byte body); round trip ${fmtLatency(raw.roundTrip)}`)
  log(`  ${fmtCpu(raw.cpu)}`)

  // The database, created fresh and dropped at the end.
  const storage = await postgresStorage(ADMIN_URL, `bench_webhooks_${Date.now()}`, 'DATABASE_URL', 'bench-webhooks')
  const database = storage.database!
  log(`database ${database.name} created (dropped at the end)`)

  // 2. The service.
  const serviceEnv = { ...storage.env, LOG_LEVEL: 'warn', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile }
  const server = await startService('server', serviceEnv, workDir)
  log(`server: bun src/main.ts on ${server.origin}, LOG_LEVEL=warn, WEBHOOK_CONCURRENCY default (64)`)
  const sql = connect(database.url, { connection: { application_name: 'bench' } })
  onCleanup(() => sql.end({ timeout: 5 }))
  const probe = connect(database.url, { connection: { application_name: 'bench' } })
  onCleanup(() => probe.end({ timeout: 5 }))
  const rig: Rig = { receiver, api: server.origin, serverPid: server.proc.pid, database: database.name, sql, probe }

  const { subscribed, quiet, hookIds } = await createAccounts(database.url, rig.api, receiver)
  log(`${ACCOUNTS} accounts, each with an API key and one message.delivered subscription to ${receiver.origin}/hook/<n>; ${ACCOUNTS} more without subscriptions`)

  // Warm-up: JIT, the worker's connections to the receiver, the server's caches.
  const warm = await throughput(rig, 'warm-up', subscribed, WARMUP_MESSAGES, 5, 10_000)
  log(`warm-up: ${fmtInt(warm.delivered)} of ${fmtInt(warm.accepted)} delivered`)
  if (warm.delivered === 0) fail('no delivery arrived during the warm-up: is the delivery worker running?')

  const empty = await throughput(rig, 'throughput (empty tables)', subscribed, MESSAGES, SEND_SECONDS)
  printThroughput(empty)

  // A real event body, for the rows this script inserts itself.
  const [sample] = await sql`select payload from events limit 1`
  const payload = (sample?.payload as string | undefined) ?? rawBody('evt_00000000000000000000000000')
  const template = { payload, id: /"id":"(evt_[^"]+)"/.exec(payload)?.[1] ?? 'evt_00000000000000000000000000' }
  const accountIds = subscribed.map((a) => a.id)

  // 2b. The worker alone, on a backlog.
  let backlog: Awaited<ReturnType<typeof workerBacklog>> | undefined
  if (BACKLOG > 0) {
    log(`worker alone: ${fmtInt(BACKLOG)} pending deliveries (the service's own event body, ${Buffer.byteLength(template.payload)} bytes) inserted by SQL in one transaction, then NOTIFY ${DELIVERIES_CHANNEL}`)
    backlog = await workerBacklog(rig, hookIds, accountIds, BACKLOG, template)
    log(`worker alone: ${fmtInt(backlog.delivered)} delivered${backlog.duplicates ? ` (+${backlog.duplicates} duplicates)` : ''} → ${fmtInt(backlog.rate)} deliveries/s`)
    log(`  ${fmtCpu(backlog.cpu)}`)
    log(`  ${perDelivery(backlog.cpu, backlog.delivered)}`)
    printActivity(backlog.activity)
  }

  // 2c. The messages API alone.
  log(`API alone: POST …/messages at concurrency ${CONCURRENCY} for ${API_SECONDS} s on the ${ACCOUNTS} accounts without subscriptions`)
  const api = await apiAlone(rig, quiet, API_SECONDS)
  log(`API alone: ${fmtInt(api.accepted)} accepted (${fmtInt(api.acceptRate)}/s), all dispatched → ${fmtInt(api.rate)} messages/s`)
  log(`  ${fmtCpu(api.cpu)}`)
  log(`  ${perDelivery(api.cpu, api.accepted, 'message')}`)
  printActivity(api.activity)

  // 3. Latency.
  log(`latency: one message every ${fmtFixed(1000 / RATE, 1)} ms for ${LATENCY_SECONDS} s, spread over the accounts`)
  const latency = await latencyRun(rig, subscribed)
  log(`latency: ${fmtInt(latency.accepted)} accepted at ${fmtInt(latency.rate)}/s${latency.late ? ` (${latency.late} sends late by more than one interval)` : ''}; event → receipt ${fmtLatency(latency.latency)}`)
  log(`  ${fmtCpu(latency.cpu)}`)
  log(`  ${perDelivery(latency.cpu, latency.accepted)}`)
  printActivity(latency.activity)

  // 4. Full tables.
  const skipFull = ROWS > 0 && Date.now() - started > LAST_PHASE_BY_MS
  const skipped = skipFull ? [`the full-table phase was skipped: the run had already taken ${elapsed().trim()}`] : []
  let full: ThroughputResult | undefined
  if (ROWS > 0 && !skipFull) {
    const filled = await fillTables(rig, accountIds, hookIds, template)
    log(
      `full table: ${fmtInt(ROWS)} delivered messages/events/deliveries/attempts inserted in ${filled.seconds.toFixed(1)} s; ` +
        `now ${fmtInt(filled.events)} events, ${fmtInt(filled.deliveries)} deliveries, ${fmtInt(filled.attempts)} attempts`,
    )
    full = await throughput(rig, 'throughput (full tables)', subscribed, MESSAGES, SEND_SECONDS)
    printThroughput(full)
  }

  const pending = await pendingDeliveries(sql)
  const sendErrors = [warm, empty, api, latency, ...(full ? [full] : [])].map((phase) => phase.sendErrors)
  const sendErrorCount = sendErrors.reduce((sum, e) => sum + e.count, 0)
  const serverCheck = await inspectServer(server, redact)
  const problems = [
    ...raw.problems,
    ...warm.problems,
    ...empty.problems,
    ...latency.problems,
    ...skipped,
    ...(full?.problems ?? []),
    ...(pending ? [`${pending} deliveries are not 'delivered' at the end`] : []),
    ...(sendErrorCount ? [`${sendErrorCount} POST …/messages did not answer 202, e.g. ${sendErrors.find((e) => e.first)?.first}`] : []),
    ...serverCheck.problems,
  ]

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
  printProblems(problems)
  log('done; stopping the server and the receiver, dropping the database')
  return problems.length ? 1 : 0
}

await runMain('bench/webhooks.ts', main, { watchdogMs: WATCHDOG_MS })
