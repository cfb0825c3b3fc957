#!/usr/bin/env bun
/**
 * Webhook delivery end to end: messages sent through the real API (`bun src/main.ts`, default
 * settings unless a scenario says otherwise, LOG_LEVEL info), their events delivered by the
 * server's delivery worker to a local HTTPS receiver in its own process (bench/webhook-receiver.ts,
 * answering 204 at once). Its CA is trusted through NODE_EXTRA_CA_CERTS (as a public CA is);
 * WEBHOOK_ALLOW_PRIVATE_TARGETS=true lets targets be on loopback; API_RATE_LIMIT=0 lets one API
 * key send thousands of messages a second. POST …/messages load comes from the lean keep-alive
 * client in bench/http-client.ts, closed loop (--concurrency requests outstanding) or open loop
 * (a fixed rate).
 *
 *   bun bench/webhooks.ts [--scenario basic] [--database postgres|pglite]
 *
 * Every message's text is its send time, `t=<epoch ms>`; the event carries it, and the receiver
 * reports send → receipt. Deliveries/s = distinct deliveries received / (last receipt − first
 * send). A phase waits at most --drain seconds after its last send; what has not arrived counts
 * as an infinite latency. Next to each phase: the CPU used meanwhile (server process, the
 * PostgreSQL backends of the run's database, receiver, this load generator, every other process)
 * in cores and in µs per delivery.
 *
 * Scenarios (--scenario):
 *   basic   one subscription, closed loop for --seconds (deliveries/s, target ≥ 4,000, PGlite 500; CPU per
 *           delivery, server and PostgreSQL together, target ≤ 400 µs; whether the worker keeps up with the API:
 *           deliveries/s ÷ messages accepted/s, target ≥ 0.95; and deliveries/s until the last POST was answered,
 *           without the drain after it); the same offered at 80 % of that closed loop's
 *           deliveries/s for --seconds (p99 ≤ 300 ms); at --rate-one/s offered (PGlite 500) for --seconds (p99 < 250 ms); fairness:
 *           one account with a subscription answering after --slow-ms and a healthy one, --fair-rate/s
 *           for --fair-seconds (healthy p99 < 100 ms). About a minute.
 *   destinations  the three kinds of target (docs/webhooks.md#destinations), one account each with one
 *           subscription to message.delivered: the HTTPS receiver; the machine's RabbitMQ (a topic exchange,
 *           a durable queue bound to it, publisher confirms); its NATS JetStream (a stream capturing the
 *           subject, file storage, PubAck). Each broker's messages are read by a consumer process of its own
 *           (bench/webhook-receiver.ts again: amqplib, auto-ack; an ordered JetStream consumer), and receipt is
 *           when that consumer gets the message. Each kind alone: a 3 s warm-up, then closed loop for
 *           --seconds (deliveries/s, send → receipt p50/p99, all delivered, CPU per delivery of the server,
 *           PostgreSQL, the broker process (found by its listening port) and the receiver or consumer); then
 *           the three together, --kind-rate (300, PGlite 100) messages/s to each for --seconds, each kind's
 *           p50/p99. A table puts the kinds side by side. Exchange, queue and stream are named after the run
 *           and deleted at the end. Under a minute.
 *   storm   account A: --broken subscriptions to message.failed (default 1,000; PGlite 100), half at a
 *           closed local port (refused), half at a listener that accepts and never answers (in a receiver
 *           process of their own, not the healthy one's). Their kind is
 *           --broken-kind: https (default), or rabbitmq / nats: amqp:// or nats:// URLs at the closed port
 *           and at a plain TCP listener that accepts and never answers (--broken then defaults to 200: a
 *           stopped broker behind 200 subscriptions). Then --failed-messages (200) of its messages fail
 *           (recipient ending 0000): broken × 200 deliveries. Meanwhile account B's one healthy
 *           subscription gets --storm-rate (100) messages/s for --storm-seconds (20): its p50/p99
 *           and delivered count (target p99 < 100 ms, PGlite 250, all delivered); on PostgreSQL also
 *           where B's time went per stage from the database's clocks (message, event and attempt rows)
 *           and per two seconds of the storm, the worker's claims meanwhile, and how many due subscriptions were ahead of B's
 *           (hook_queues, sampled every 100 ms), and the disk's stalls meanwhile (spans of 200 ms or
 *           more in which the device of PostgreSQL's WAL completed no request: every commit waits). Then the broken
 *           receivers recover (a healthy listener on the closed port, the hanging one answers 204)
 *           and the bench waits up to --recover-seconds (300) for every broken delivery. A broker kind recovers by PATCHing every broken
 *           subscription's target_url to the running broker (the machine's one cannot be stopped and
 *           started for a run), a bound queue or a stream there, where the deliveries are counted
 *           (one routing key or subject per subscription).
 *           HOOKS_PER_ACCOUNT is raised to --broken. To tell apart what each part of the storm costs B
 *           (docs/performance.md, issue 37, sixteenth pass): --refused N puts N of the --broken at the
 *           closed port and the rest at the hanging listener (default half); --paused-broken pauses A's
 *           subscriptions before its messages fail, so the fan-out is written and nothing is sent to
 *           them (they resume with the recovery). --cpu-load SHARE:BURST_MS runs bench/cpu-load.ts through B's
 *           window: one core busy BURST_MS at a time, SHARE of the time, touching neither the database nor the
 *           server; with --broken 2 --failed-messages 1 it shows what plain CPU of that shape costs B.
 *   growth  PostgreSQL. One server, one database, never reset: 1, 10, 100 subscriptions (one account),
 *           then 10,000 (100 accounts × 100); --deliveries (20,000) per step, closed loop. Per step:
 *           deliveries/s, p99, all delivered, and the claim statement's p99 from the metrics endpoint
 *           (METRICS_PORT, histogram messaging_webhook_claim_duration_seconds; n/a when absent). Check:
 *           10,000 ≥ 0.9 × 100. Bounded by --minutes (15).
 *   fanout  one account, 100 subscriptions to message.delivered, --deliveries/100 messages:
 *           deliveries/s (target ≥ 5,000).
 *   agent   one account with a REST subscription to message.delivered and an MCP agent's event
 *           subscription to the same (a user signs in over OAuth, events/subscribe, the receiver
 *           answers the verification): --agent-rate (200) messages/s for --seconds, each delivered to
 *           both; send → receipt p50/p99 of each. Target: the agent's p99 ≤ 2 × REST's.
 *   rows    PostgreSQL. Two databases side by side, each with its own server: one subscription (and,
 *           unless --skip-many, 10,000 over 100 accounts × 100) on each; then --rows (10,000,000) events
 *           with one delivery and one attempt each (1 % failed, spread over the last 33 days) inserted
 *           into one of them with generate_series. The closed loop (--seconds) on the empty and the full
 *           database in turn, --repeats (3) pairs: full ≥ 0.9 × empty, the median of the pairs' ratios; the
 *           same for the 10,000 subscriptions (20,000 deliveries a loop). Then, on the full one, GET
 *           …/deliveries?state=failed and GET …/events?since= (one day ago), --requests (200) each,
 *           one at a time (p99 < 50 ms); one run of the retention (src/delivery/retention.ts), timed.
 *           What a loop leaves undelivered after --drain is canceled by SQL, so that it does not weigh
 *           on what follows.
 *   stats   PostgreSQL. One account, 100 subscriptions (one busy to message.delivered, 99 to message.failed, each at a
 *           closed port of its own: retried after 2 h); a warm-up whose rollups the service writes, recomputed by this bench's SQL
 *           (bench/stats.ts: every row must match); the 99 paused; then --rows (10,000,000) attempts over 7 days (90 % the busy one's,
 *           2 % failed and retried 5 s later) with their events and deliveries, and the rollups they imply, by SQL.
 *           GET …/hooks/{busy}/stats and GET …/stats at interval=minute over the last 24 h (1,440 buckets), checked
 *           against the attempt log, then 1 and --clients (4) clients for --seconds each (closed loop): requests/s,
 *           p50/p95/p99 (target p99 < 50 ms); in process: EXPLAIN ANALYZE, the query, the service, JSON.stringify.
 *
 * Options: --concurrency 64, --seconds 10, --rate-one 2000, --fair-rate 100, --fair-seconds 10,
 * --slow-ms 2000, --drain (30 s for basic and destinations, 180 for the others), --otlp (traces on,
 * 100 % sampled, to a sink in this process: what tracing costs), --rabbitmq-url
 * (amqp://guest:guest@127.0.0.1:5672) and --nats-url (nats://127.0.0.1:4222), loopback only, and those
 * named above.
 * PostgreSQL: a fresh database on $DATABASE_URL's server (default postgres://postgres@127.0.0.1:5432,
 * loopback only), dropped at the end; accounts and keys are written straight into it (PGlite: the
 * CLI), subscriptions are made through the API. Every child process is stopped on the way out,
 * and a watchdog ends the run whatever happens. Exit code 1 on an error (a POST …/messages not
 * answered 202, a warning in the server's log); an unmet target is not an error.
 */
import { join } from 'node:path'
import { makeCertificates } from '../fixtures/tls.ts'
import { createAccount, createUser } from '../src/accounts/service.ts'
import { createApiKey } from '../src/auth/api-keys.ts'
import { deleteExpiredEvents } from '../src/delivery/retention.ts'
import { postgresDatabase } from '../src/lib/db/client.ts'
import { closeBuckets } from '../src/stats/closing.ts'
import { partVersionQuery, rangeRowsQuery, readAccountStats, readHookStats, splitRange, statsRange, type StatsCache } from '../src/stats/service.ts'
import { natsStream, rabbitMqQueue } from './brokers.ts'
import { DroppedError, HttpPool } from './http-client.ts'
import { closedGets, FAILURE, impliedRollups, seedAttempts, whereTimeGoes } from './stats.ts'
import {
  BUN, call, childEnv, commandLine, connect, DISK_STALL_MS, epochNow, expectStatus, fail, fmtCores, fmtFixed, fmtInt, fmtMs, freePort, listenerPid, median, onCleanup, percentiles,
  postgresCpuSeconds, printMachine, printProblems, printTable, processCpuSeconds, redact, runCommand, runMain, serverProblems, sleep, startCpu,
  startOtlpSink, startServer, startService, stopChild, storage, tempDir, verdict, watchDiskStalls, type CpuUse, type Server, type Sql, type Storage,
} from './harness.ts'

const cli = commandLine(import.meta.url, {
  scenario: { type: 'string', default: 'basic' },
  database: { type: 'string', default: 'postgres' },
  concurrency: { type: 'string', default: '64' },
  seconds: { type: 'string', default: '10' },
  'rate-one': { type: 'string', default: '2000' },
  'fair-rate': { type: 'string', default: '100' },
  'fair-seconds': { type: 'string', default: '10' },
  'slow-ms': { type: 'string', default: '2000' },
  drain: { type: 'string', default: '' },
  broken: { type: 'string', default: '' },
  refused: { type: 'string', default: '' },
  'paused-broken': { type: 'boolean', default: false },
  'failed-messages': { type: 'string', default: '200' },
  'cpu-load': { type: 'string', default: '' },
  'storm-rate': { type: 'string', default: '100' },
  'storm-seconds': { type: 'string', default: '20' },
  'recover-seconds': { type: 'string', default: '300' },
  'broken-kind': { type: 'string', default: 'https' },
  'kind-rate': { type: 'string', default: '' },
  'rabbitmq-url': { type: 'string', default: 'amqp://guest:guest@127.0.0.1:5672' },
  'nats-url': { type: 'string', default: 'nats://127.0.0.1:4222' },
  deliveries: { type: 'string', default: '20000' },
  minutes: { type: 'string', default: '15' },
  rows: { type: 'string', default: '10000000' },
  requests: { type: 'string', default: '200' },
  'skip-many': { type: 'boolean', default: false },
  repeats: { type: 'string', default: '3' },
  'agent-rate': { type: 'string', default: '200' },
  clients: { type: 'string', default: '4' },
  otlp: { type: 'boolean', default: false },
})
const OTLP = cli.flag('otlp') ? startOtlpSink() : undefined
const SCENARIO = cli.choice('scenario', ['basic', 'destinations', 'storm', 'growth', 'fanout', 'rows', 'agent', 'stats'])
const DATABASE = cli.choice('database', ['postgres', 'pglite'])
const PG = DATABASE === 'postgres'
if (!PG && ['growth', 'rows', 'stats'].includes(SCENARIO)) {
  console.error(`bench/webhooks.ts: --scenario ${SCENARIO} needs PostgreSQL (it reads and writes the database itself)`)
  process.exit(2)
}
const CONCURRENCY = cli.integer('concurrency', 1, 512)
const SECONDS = cli.integer('seconds', 1, 120)
const RATE_ONE = PG ? cli.integer('rate-one', 1, 20_000) : 500
const FAIR_RATE = cli.integer('fair-rate', 1, 5000)
const FAIR_SECONDS = cli.integer('fair-seconds', 1, 60)
const SLOW_MS = cli.integer('slow-ms', 0, 10_000)
const DRAIN_MS = (cli.string('drain') ? cli.integer('drain', 1, 1800) : SCENARIO === 'basic' || SCENARIO === 'destinations' ? 30 : 180) * 1000
const BROKEN_KIND = cli.choice('broken-kind', ['https', 'rabbitmq', 'nats'])
const BROKEN = cli.string('broken') ? cli.integer('broken', 2, 10_000) : BROKEN_KIND !== 'https' ? 200 : PG ? 1000 : 100
const REFUSED = cli.string('refused') ? cli.integer('refused', 0, BROKEN) : Math.floor(BROKEN / 2)
const PAUSED_BROKEN = cli.flag('paused-broken')
const KIND_RATE = cli.string('kind-rate') ? cli.integer('kind-rate', 1, 5000) : PG ? 300 : 100
const RABBITMQ_URL = cli.loopbackUrl(cli.string('rabbitmq-url'), '--rabbitmq-url')
const NATS_URL = cli.loopbackUrl(cli.string('nats-url'), '--nats-url')
/** This run's part of every broker name (exchange, queues, stream, subjects). */
const RUN = crypto.randomUUID().slice(0, 8)
const FAILED_MESSAGES = cli.integer('failed-messages', 1, 10_000)
const CPU_LOAD = cpuLoad(cli.string('cpu-load'))
const STORM_RATE = cli.integer('storm-rate', 1, 5000)
const STORM_SECONDS = cli.integer('storm-seconds', 1, 300)
const RECOVER_SECONDS = cli.integer('recover-seconds', 1, 3600)
const DELIVERIES = cli.integer('deliveries', 100, 1_000_000)
const MINUTES = cli.integer('minutes', 1, 120)
const ROWS = cli.integer('rows', 1000, 100_000_000)
const REPEATS = cli.integer('repeats', 1, 20)
const REQUESTS = cli.integer('requests', 10, 10_000)
const AGENT_RATE = cli.integer('agent-rate', 1, 5000)
const CLIENTS = cli.integer('clients', 1, 64)
const ADMIN_URL = cli.loopbackUrl(process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres', 'DATABASE_URL')

function cpuLoad(option: string): { share: number; burstMs: number } | undefined {
  if (!option) return undefined
  const [share, burstMs] = option.split(':').map(Number)
  if (SCENARIO !== 'storm' || !(share! > 0 && share! <= 1 && Number.isInteger(burstMs) && burstMs! >= 1 && burstMs! <= 1000)) {
    console.error('bench/webhooks.ts: --cpu-load is SHARE:BURST_MS (0 < SHARE ≤ 1, 1 ≤ BURST_MS ≤ 1000), with --scenario storm')
    process.exit(2)
  }
  return { share: share!, burstMs: burstMs! }
}

const WATCHDOG_S = {
  basic: 240 + (2 * SECONDS + FAIR_SECONDS) * 2,
  destinations: 240 + 7 * (SECONDS + 3 + DRAIN_MS / 1000),
  storm: 240 + DRAIN_MS / 1000 + STORM_SECONDS + RECOVER_SECONDS,
  growth: MINUTES * 60 + 60,
  fanout: 240 + DRAIN_MS / 1000,
  rows: 900 + Math.ceil(ROWS / 2500),
  agent: 240 + SECONDS + DRAIN_MS / 1000,
  stats: 600 + Math.ceil(ROWS / 2500) + 4 * SECONDS,
}[SCENARIO]

const started = Date.now()
const log = (line: string) => console.log(`[${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s] ${line}`)
const fmtP = (p: { p50: number; p99: number; n: number }) => `p50 ${fmtMs(p.p50)}, p99 ${fmtMs(p.p99)} (n=${fmtInt(p.n)})`

// ---------------------------------------------------------------------------------------------
// The rig: the receiver, the storage, the service on it, and (PostgreSQL) a connection of our own

interface GroupStats {
  count: number
  unique: number
  lastAt: number
  hung: number
  sendLatencies?: number[]
}

interface Receiver {
  /** Its process's name, which also labels its CPU in the figures. */
  name: string
  /** https://localhost:<port> of its main listener ('' for a broker consumer). */
  origin: string
  pid: number
  caFile: string
  /** A TLS listener answering as above, or (raw) a plain TCP one that accepts and never answers. */
  listen(port: number, raw?: boolean): Promise<void>
  /** Consumes a RabbitMQ queue (`amqp://…`, `queue=`) or a JetStream stream (`nats://…`, `stream=`) into `group`. */
  consume(broker: URL, source: string, group: string): Promise<void>
  heal(): Promise<void>
  reset(since?: number): Promise<void>
  stats(samples?: boolean): Promise<Record<string, GroupStats>>
}

/** bench/webhook-receiver.ts in a process of its own: the HTTPS receiver (`https`, on a port of its own), or a broker consumer. */
async function startReceiver(workDir: string, name: string, https: boolean): Promise<Receiver> {
  const controlPort = freePort()
  const server = await startServer(name, [BUN, 'bench/webhook-receiver.ts'], childEnv({ CONTROL_PORT: String(controlPort), CERT_DIR: workDir }), controlPort, '/stats', workDir)
  const post = async (path: string) => {
    const response = await fetch(`${server.origin}${path}`, { method: 'POST', signal: AbortSignal.timeout(10_000) })
    if (!response.ok) fail(`the ${name}'s ${path.replace(/\?.*/, '')} answered ${response.status} ${(await response.text()).slice(0, 300)}`)
    await response.arrayBuffer()
  }
  const port = freePort()
  if (https) await post(`/listen?port=${port}`)
  return {
    name,
    origin: https ? `https://localhost:${port}` : '',
    pid: server.proc.pid,
    caFile: join(workDir, 'ca.pem'),
    listen: (p, raw = false) => post(`/listen?port=${p}${raw ? '&raw=1' : ''}`),
    consume: (broker, source, group) => post(`/consume?url=${encodeURIComponent(broker.href)}&${source}&group=${group}`),
    heal: () => post('/heal'),
    reset: (since) => post(`/reset${since ? `?since=${since.toFixed(3)}` : ''}`),
    async stats(samples = false) {
      const response = await fetch(`${server.origin}/stats${samples ? '?samples=1' : ''}`, { signal: AbortSignal.timeout(30_000) })
      return ((await response.json()) as { groups: Record<string, GroupStats> }).groups
    },
  }
}

/** What arrived in `groups`, summed. */
function onGroups(stats: Record<string, GroupStats>, groups: string[]) {
  const out = { count: 0, unique: 0, lastAt: 0, hung: 0, sendLatencies: [] as number[] }
  for (const g of groups) {
    const s = stats[g]
    if (!s) continue
    out.count += s.count
    out.unique += s.unique
    out.hung += s.hung
    out.lastAt = Math.max(out.lastAt, s.lastAt)
    for (const x of s.sendLatencies ?? []) out.sendLatencies.push(x)
  }
  return out
}

interface Rig {
  receiver: Receiver
  /** Broker consumers started by the scenario, each in its own process. */
  consumers: Receiver[]
  /** Brokers whose CPU the figures show: name → pid. */
  brokers: Record<string, number>
  workDir: string
  server: Server
  /** Further servers a scenario started (each on a database of its own): stopped and checked with `server`. */
  twins: Server[]
  store: Storage
  /** PostgreSQL: our own connection to the run's database. */
  sql: Sql | null
  metricsPort: number
}

/** Server settings a scenario may set; printed with the defaults of the rest. */
const WEBHOOK_DEFAULTS = { WEBHOOK_TIMEOUT_MS: '15000', WEBHOOK_RETRY_SCHEDULE: '0,5s,5m,30m,2h,5h,10h,14h,20h,24h', WEBHOOK_CONCURRENCY: '256', WEBHOOK_MAX_IN_FLIGHT_PER_SUBSCRIPTION: '64', HOOKS_PER_ACCOUNT: '100' }

async function startRig(workDir: string, settings: Record<string, string> = {}): Promise<Rig> {
  makeCertificates(workDir)
  const receiver = await startReceiver(workDir, 'receiver', true)
  const store = await storage(DATABASE, ADMIN_URL, SCENARIO)
  const metricsPort = freePort()
  const env = { ...store.env, ...settings, ...OTLP?.env, WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', NODE_EXTRA_CA_CERTS: receiver.caFile, API_RATE_LIMIT: '0', METRICS_PORT: String(metricsPort) }
  const server = await startService('server', env, workDir)
  let sql: Sql | null = null
  if (store.database) {
    const s = connect(store.database.url, { connection: { application_name: 'bench' } })
    onCleanup(() => s.end({ timeout: 5 }))
    sql = s
  }
  const shown = Object.entries({ ...WEBHOOK_DEFAULTS, ...settings }).map(([k, v]) => `${k}=${v}${k in settings ? ' (set by the scenario)' : ''}`)
  printMachine([
    ['scenario', `${SCENARIO}, ${PG ? `PostgreSQL ${(await sql!`show server_version`)[0]!.server_version}` : 'PGlite'}`],
    ['database', store.describe],
    ['receiver', `${receiver.origin} (bench/webhook-receiver.ts, own process, 204 at once)`],
    ['server', `bun src/main.ts, LOG_LEVEL=info, API_RATE_LIMIT=0, WEBHOOK_ALLOW_PRIVATE_TARGETS=true, METRICS_PORT=${metricsPort}${OTLP ? ', traces on (--otlp: every span exported to a sink in this process)' : ''}`],
    ['settings', shown.join(', ')],
    ['load', `POST …/messages from this process (bench/http-client.ts), ${CONCURRENCY} connections`],
    ...(SCENARIO === 'destinations' || (SCENARIO === 'storm' && BROKEN_KIND !== 'https')
      ? [['brokers', `RabbitMQ ${RABBITMQ_URL.host}, NATS ${NATS_URL.host}; exchange, queues, stream and subjects named after bench-${RUN}, deleted at the end`] as [string, string]]
      : []),
  ])
  console.log()
  return { receiver, consumers: [], brokers: {}, workDir, server, twins: [], store, sql, metricsPort }
}

/** CPU meter over a phase: the server, PostgreSQL (this database's backends and its shared processes), the receiver, the broker consumers and brokers, this process. */
function startMeter(rig: Rig) {
  return startCpu({
    server: () => processCpuSeconds(rig.server.proc.pid),
    ...(PG ? { postgres: () => postgresCpuSeconds(rig.store.database!.name) } : {}),
    receiver: () => processCpuSeconds(rig.receiver.pid),
    ...Object.fromEntries(rig.consumers.map((c) => [c.name, () => processCpuSeconds(c.pid)])),
    ...Object.fromEntries(Object.entries(rig.brokers).map(([name, pid]) => [name, () => processCpuSeconds(pid)])),
    loadgen: () => processCpuSeconds(process.pid),
  })
}

/** `also`: further sources of the meter to show (a broker, its consumer). */
const perDelivery = (cpu: CpuUse, n: number, also: string[] = []) =>
  `CPU per delivery: server ${fmtInt((cpu.seconds.server! * 1e6) / n)} µs${PG ? `, PostgreSQL ${fmtInt((cpu.seconds.postgres! * 1e6) / n)} µs` : ' (PGlite inside)'}${also.map((name) => `, ${name} ${fmtInt((cpu.seconds[name]! * 1e6) / n)} µs`).join('')}`

/** Every receiver's groups (the HTTPS receiver's and the broker consumers', named apart). */
async function rigStats(rig: Rig, samples = false): Promise<Record<string, GroupStats>> {
  return Object.assign({}, ...(await Promise.all([rig.receiver, ...rig.consumers].map((r) => r.stats(samples)))))
}

/** A broker consumer in a process of its own, its CPU in the figures from now on. */
async function startConsumer(rig: Rig, name: string): Promise<Receiver> {
  const consumer = await startReceiver(rig.workDir, name, false)
  rig.consumers.push(consumer)
  return consumer
}

/** The broker listening on `url`'s port, its CPU in the figures from now on (unless it is not found in /proc). */
function meterBroker(rig: Rig, name: string, url: URL): void {
  const pid = listenerPid(Number(url.port) || (url.protocol === 'nats:' ? 4222 : 5672))
  if (pid) rig.brokers[name] = pid
  else log(`(no process found listening on ${url.host}: ${name}'s CPU is in "other")`)
}

// ---------------------------------------------------------------------------------------------
// Accounts and subscriptions

interface Account {
  id: string
  key: string
}
const keyed = (a: Account, path: string) => `/v0/account/${a.id}${path}?key=${encodeURIComponent(a.key)}`

/** PostgreSQL: straight into the database; PGlite: the CLI (it hands the command to the running server). */
async function makeAccounts(rig: Rig, n: number): Promise<Account[]> {
  const out: Account[] = []
  if (rig.store.database) {
    const handle = postgresDatabase(rig.store.database.url.href, { max: 2 })
    try {
      for (let i = 0; i < n; i++) {
        const account = await createAccount(handle.db, { name: `bench ${i}` })
        out.push({ id: account.id, key: (await createApiKey(handle.db, { accountId: account.id, name: 'bench' })).secret })
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
  for (let i = 0; i < n; i++) {
    const account = await cliJson(['account', 'create', '--name', `bench ${i}`])
    out.push({ id: account.id, key: (await cliJson(['apikey', 'create', '--account', account.id, '--name', 'bench'])).secret })
  }
  return out
}

interface Hook {
  account: Account
  event: string
  url: string
  id: string
}

/** `work` on each item, `parallel` at a time; the answers in the items' order. */
async function inParallel<T, R>(items: T[], parallel: number, work: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const out: R[] = []
  let next = 0
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < items.length) {
        const i = next++
        out[i] = await work(items[i]!, i)
      }
    }),
  )
  return out
}

/** Through the API, `parallel` at a time. */
function subscribe(rig: Rig, wanted: Array<Omit<Hook, 'id'>>, parallel = 16): Promise<Hook[]> {
  return inParallel(wanted, parallel, async (w) => ({ ...w, id: (await expectStatus(201, 'POST', `${rig.server.origin}${keyed(w.account, '/hooks')}`, { body: { event: w.event, target_url: w.url } })).id }))
}

/** PATCHes each of an account's subscriptions through the API, 8 at a time, with the body `bodyOf` gives it. */
async function patchHooks(rig: Rig, account: Account, hooks: Hook[], bodyOf: (index: number) => Record<string, unknown>): Promise<void> {
  await inParallel(hooks, 8, (h, j) => expectStatus(200, 'PATCH', `${rig.server.origin}${keyed(account, `/hooks/${h.id}`)}`, { body: bodyOf(j) }))
}

/** Deletes and makes again (deleting cancels their pending deliveries): a clean start after a phase that did not drain. */
async function resubscribe(rig: Rig, hooks: Hook[]): Promise<void> {
  for (const h of hooks) {
    const gone = await call('DELETE', `${rig.server.origin}${keyed(h.account, `/hooks/${h.id}`)}`)
    if (gone.status !== 204) fail(`DELETE …/hooks/${h.id}: ${gone.status}`)
    h.id = (await subscribe(rig, [h]))[0]!.id
  }
}

// ---------------------------------------------------------------------------------------------
// Brokers (docs/webhooks.md#destinations): the bench's exchange, queues and streams, each consumed
// by a process of its own

const EXCHANGE = `bench-${RUN}`

/** A target_url: the bench's exchange with routing key `<group>.<name>`, or subject bench.<run>.<group>.<name>; on `port` instead of the broker's, a broker that is not there. */
function brokerTarget(kind: 'rabbitmq' | 'nats', group: string, name: string, port?: number): string {
  const url = new URL((kind === 'rabbitmq' ? RABBITMQ_URL : NATS_URL).href)
  if (port) url.port = String(port)
  if (kind === 'rabbitmq') {
    url.searchParams.set('exchange', EXCHANGE)
    url.searchParams.set('routing_key', `${group}.${name}`)
  } else url.searchParams.set('subject', `bench.${RUN}.${group}.${name}`)
  return url.href
}

/** Where brokerTarget(kind, group, …) lands: a durable queue bound to `<group>.#`, or a stream capturing bench.<run>.<group>.>, consumed into receiver group `group`; the broker's CPU metered. */
async function brokerSink(rig: Rig, kind: 'rabbitmq' | 'nats', group: string): Promise<void> {
  const name = `bench-${RUN}-${group}`
  if (kind === 'rabbitmq') {
    log(`${await rabbitMqQueue(RABBITMQ_URL, EXCHANGE, name, `${group}.#`)} on ${RABBITMQ_URL.host}: topic exchange ${EXCHANGE}, durable queue ${name} bound to ${group}.#, consumed by a process of its own (amqp-consumer, auto-ack)`)
    meterBroker(rig, 'rabbitmq', RABBITMQ_URL)
    await (await startConsumer(rig, 'amqp-consumer')).consume(RABBITMQ_URL, `queue=${name}`, group)
  } else {
    log(`${await natsStream(NATS_URL, name, [`bench.${RUN}.${group}.>`])} on ${NATS_URL.host}: stream ${name} (file storage) capturing bench.${RUN}.${group}.>, consumed by a process of its own (nats-consumer, an ordered consumer)`)
    meterBroker(rig, 'nats-server', NATS_URL)
    await (await startConsumer(rig, 'nats-consumer')).consume(NATS_URL, `stream=${name}`, group)
  }
}

// ---------------------------------------------------------------------------------------------
// The load: POST …/messages with the send time as the text

interface Target {
  account: Account
  /** The recipient: one ending in 0000 makes the sandbox carrier fail the message. */
  to?: string
}

interface Load {
  sent: number
  accepted: number
  errors: number
  firstError: string
  dropped: number
  firstSend: number
  /** When the last request was answered (epoch ms). */
  lastAnswer: number
  /** Accepted, by account id. */
  byAccount: Record<string, number>
}

function newPool(rig: Rig): HttpPool {
  const url = new URL(rig.server.origin)
  return new HttpPool({ hostname: url.hostname, port: Number(url.port), connections: CONCURRENCY, expectStatus: 202, timeoutMs: 10_000 })
}

function sender(pool: HttpPool, load: Load) {
  return async (target: Target): Promise<boolean> => {
    load.sent++
    try {
      const answer = await pool.post(keyed(target.account, '/messages'), `{"to":"${target.to ?? '+14155550123'}","body":"t=${epochNow().toFixed(3)}"}`)
      if (answer.status === 202) {
        load.byAccount[target.account.id] = (load.byAccount[target.account.id] ?? 0) + 1
        return ++load.accepted > 0
      }
      load.firstError ||= `HTTP ${answer.status}: ${redact(answer.body).slice(0, 300)}`
    } catch (error) {
      if (error instanceof DroppedError) return false
      load.firstError ||= (error as Error).message
    }
    load.errors++
    return false
  }
}

const newLoad = (): Load => ({ sent: 0, accepted: 0, errors: 0, firstError: '', dropped: 0, firstSend: epochNow(), lastAnswer: 0, byAccount: {} })

/** CONCURRENCY requests outstanding, round robin over `targets`, for `seconds` or `max` messages. */
async function closedLoop(rig: Rig, targets: Target[], seconds: number, max: number): Promise<Load> {
  const pool = newPool(rig)
  const load = newLoad()
  const send = sender(pool, load)
  const deadline = performance.now() + seconds * 1000
  let next = 0
  await Promise.all(
    Array.from({ length: Math.min(CONCURRENCY, max) }, async () => {
      while (next < max && performance.now() < deadline) if (!(await send(targets[next++ % targets.length]!))) await sleep(10)
    }),
  )
  load.lastAnswer = epochNow()
  pool.close()
  return load
}

/** `rate` messages a second for `seconds`, each sent on schedule whatever the answers; what still waits for a connection 5 s after the schedule is dropped. */
async function openLoop(rig: Rig, targets: Target[], rate: number, seconds: number): Promise<Load> {
  const pool = newPool(rig)
  const load = newLoad()
  const send = sender(pool, load)
  const count = Math.round(rate * seconds)
  const t0 = performance.now()
  const sends: Promise<boolean>[] = []
  for (let i = 0; i < count; ) {
    const now = performance.now()
    if (t0 + (i * 1000) / rate > now) await sleep(Math.max(1, t0 + (i * 1000) / rate - now))
    else for (; i < count && t0 + (i * 1000) / rate <= now; i++) sends.push(send(targets[i % targets.length]!))
  }
  const grace = setTimeout(() => (load.dropped = pool.dropQueued()), 5000)
  await Promise.all(sends)
  load.lastAnswer = epochNow()
  clearTimeout(grace)
  pool.close()
  return load
}

// ---------------------------------------------------------------------------------------------
// A measured phase: load, then wait for the deliveries

interface Phase {
  label: string
  /** Receiver groups whose deliveries are the phase's figures. */
  groups: string[]
  /** Deliveries each accepted message makes in those groups. */
  fan: number
  load: () => Promise<Load>
  drainMs?: number
}

interface Result {
  label: string
  load: Load
  expected: number
  delivered: number
  duplicates: number
  rate: number
  /** Deliveries/s until the last POST was answered: what the worker does while the API takes its share of the machine. */
  rateDuringLoad: number
  latency: ReturnType<typeof percentiles>
  drained: boolean
  drainMs: number
  cpu: CpuUse
  stats: Record<string, GroupStats>
}

async function measure(rig: Rig, phase: Phase): Promise<Result> {
  const since = epochNow()
  await Promise.all([rig.receiver, ...rig.consumers].map((r) => r.reset(since)))
  const stop = startMeter(rig)
  const load = await phase.load()
  const duringLoad = onGroups(await rigStats(rig), phase.groups).unique
  const expected = load.accepted * phase.fan
  const drainMs = phase.drainMs ?? DRAIN_MS
  const deadline = performance.now() + drainMs
  let got = 0
  while ((got = onGroups(await rigStats(rig), phase.groups).unique) < expected && performance.now() < deadline) await sleep(100)
  const cpu = stop()
  const stats = await rigStats(rig, true)
  const g = onGroups(stats, phase.groups)
  const missing = Math.max(0, expected - g.unique)
  return {
    label: phase.label,
    load,
    expected,
    delivered: g.unique,
    duplicates: g.count - g.unique,
    rate: g.unique / ((g.lastAt - load.firstSend) / 1000),
    rateDuringLoad: duringLoad / ((load.lastAnswer - load.firstSend) / 1000),
    latency: percentiles([...g.sendLatencies, ...Array<number>(missing).fill(Infinity)]),
    drained: got >= expected,
    drainMs,
    cpu,
    stats,
  }
}

function printResult(r: Result, also: string[] = []): void {
  const l = r.load
  log(
    `${r.label}: ${fmtInt(l.accepted)} of ${fmtInt(l.sent)} POSTs accepted${l.errors ? `, ${l.errors} ERRORS (${l.firstError})` : ''}${l.dropped ? `, ${l.dropped} dropped unsent` : ''}; ` +
      `${fmtInt(r.delivered)} of ${fmtInt(r.expected)} delivered${r.duplicates ? ` (+${r.duplicates} repeats)` : ''}${r.drained ? '' : ` (NOT all within ${r.drainMs / 1000} s of the last send)`} → ${fmtInt(r.rate)} deliveries/s`,
  )
  log(`  send → receipt ${fmtP(r.latency)}`)
  log(`  cores: ${fmtCores(r.cpu)}; ${perDelivery(r.cpu, r.delivered, also)}`)
}

/** One group's send → receipt: what `accepted` messages should have brought there and did not counts as ∞. */
function groupLatency(r: Result, group: string, accepted: number) {
  const g = onGroups(r.stats, [group])
  return { ...percentiles([...g.sendLatencies, ...Array<number>(Math.max(0, accepted - g.unique)).fill(Infinity)]), delivered: g.unique }
}

type Summary = string[][]
const summaryHead = () => [['figure', 'value', 'target', 'verdict']]
const target = (figure: string, value: string, goal: string, met: boolean): string[] => [figure, value, goal, verdict(met)]

// ---------------------------------------------------------------------------------------------
// Scenarios

async function basic(rig: Rig, summary: Summary): Promise<void> {
  const [one, fair] = (await makeAccounts(rig, 2)) as [Account, Account]
  const o = rig.receiver.origin
  const [oneHook] = await subscribe(rig, [{ account: one, event: 'message.delivered', url: `${o}/one` }])
  const [slowHook, healthyHook] = await subscribe(rig, [{ account: fair, event: 'message.delivered', url: `${o}/delay/${SLOW_MS}/slow` }, { account: fair, event: 'message.delivered', url: `${o}/healthy` }], 1)
  const run = async (phase: Phase, hooks: Hook[]) => {
    const r = await measure(rig, phase)
    printResult(r)
    if (!r.drained) await resubscribe(rig, hooks)
    return r
  }
  const warm = await run({ label: 'warm-up', groups: ['one'], fan: 1, load: () => closedLoop(rig, [{ account: one }], 5, 1000) }, [oneHook!])
  if (warm.delivered === 0) fail('no delivery arrived during the warm-up: is the delivery worker running?')
  const max = await run({ label: 'one subscription, max (closed loop)', groups: ['one'], fan: 1, load: () => closedLoop(rig, [{ account: one }], SECONDS, 200_000) }, [oneHook!])
  // Issue 37: while both run, does the worker deliver as fast as the API accepts? If not, a backlog grows and is the latency.
  const acceptedRate = max.load.accepted / ((max.load.lastAnswer - max.load.firstSend) / 1000)
  log(`  accepted ${fmtInt(acceptedRate)} messages/s; deliveries/s ÷ accepted/s = ${fmtFixed(max.rate / acceptedRate, 2)}; ${fmtInt(max.rateDuringLoad)} deliveries/s while the senders ran`)
  const belowMax = Math.max(1, Math.round(0.8 * max.rate))
  const below = await run({ label: `one subscription at ${fmtInt(belowMax)}/s (80 % of the closed loop's deliveries/s)`, groups: ['one'], fan: 1, load: () => openLoop(rig, [{ account: one }], belowMax, SECONDS) }, [oneHook!])
  const at = await run({ label: `one subscription at ${fmtInt(RATE_ONE)}/s`, groups: ['one'], fan: 1, load: () => openLoop(rig, [{ account: one }], RATE_ONE, SECONDS) }, [oneHook!])
  const fairness = await run({ label: `fairness: healthy subscription at ${FAIR_RATE}/s beside one answering in ${SLOW_MS} ms`, groups: ['healthy'], fan: 1, load: () => openLoop(rig, [{ account: fair }], FAIR_RATE, FAIR_SECONDS) }, [healthyHook!])
  const slow = onGroups(fairness.stats, ['slow'])
  log(`  the slow subscription received ${fmtInt(slow.unique)} of ${fmtInt(fairness.load.accepted)} meanwhile; deleted (its backlog cancelled)`)
  await call('DELETE', `${rig.server.origin}${keyed(fair, `/hooks/${slowHook!.id}`)}`)
  // Issue 25's targets: 4,000 deliveries/s (PGlite 500) and 400 µs of CPU per delivered message, server and PostgreSQL together.
  const goal = PG ? 4000 : 500
  const cpuPerDelivery = ((max.cpu.seconds.server! + (max.cpu.seconds.postgres ?? 0)) * 1e6) / max.delivered
  summary.push(
    target('one subscription, max: deliveries/s', `${fmtInt(max.rate)} /s`, `≥ ${fmtInt(goal)} /s`, max.rate >= goal),
    ['one subscription, max: send → receipt p50 / p99', `${fmtMs(max.latency.p50)} / ${fmtMs(max.latency.p99)}`, '', ''],
    ['one subscription, max: deliveries/s while the senders ran', `${fmtInt(max.rateDuringLoad)} /s`, '', ''],
    PG
      ? target(`one subscription, max: CPU per delivery (${perDelivery(max.cpu, max.delivered).replace('CPU per delivery: ', '')})`, `${fmtInt(cpuPerDelivery)} µs`, '≤ 400 µs', cpuPerDelivery <= 400)
      : ['one subscription, max: CPU per delivery', perDelivery(max.cpu, max.delivered).replace('CPU per delivery: ', ''), '', ''],
    target(`one subscription, max: deliveries/s ÷ accepted/s (${fmtInt(acceptedRate)} accepted/s)`, fmtFixed(max.rate / acceptedRate, 2), '≥ 0.95', max.rate / acceptedRate >= 0.95),
    target(`one subscription at ${fmtInt(belowMax)}/s (80 % of max): delivered, send → receipt p99`, `${fmtInt(below.delivered)} of ${fmtInt(below.load.sent)}, ${fmtMs(below.latency.p99)}`, 'all, ≤ 300 ms', below.drained && !below.load.dropped && below.latency.p99 <= 300),
    target(`one subscription at ${fmtInt(RATE_ONE)}/s: delivered, send → receipt p99`, `${fmtInt(at.delivered)} of ${fmtInt(at.load.sent)}, ${fmtMs(at.latency.p99)}`, 'all, < 250 ms', at.drained && !at.load.dropped && at.latency.p99 < 250),
    target(`fairness: healthy p99 (slow one received ${fmtInt(slow.unique)})`, fmtMs(fairness.latency.p99), '< 100 ms', fairness.latency.p99 < 100),
  )
}

async function destinations(rig: Rig, summary: Summary): Promise<void> {
  await brokerSink(rig, 'rabbitmq', 'rabbitmq')
  await brokerSink(rig, 'nats', 'nats')
  const accounts = await makeAccounts(rig, 3)
  const kinds = [
    { name: 'HTTPS', group: 'https', url: `${rig.receiver.origin}/https`, cpu: ['receiver'] },
    { name: 'RabbitMQ', group: 'rabbitmq', url: brokerTarget('rabbitmq', 'rabbitmq', 'delivered'), cpu: ['rabbitmq', 'amqp-consumer'] },
    { name: 'NATS', group: 'nats', url: brokerTarget('nats', 'nats', 'delivered'), cpu: ['nats-server', 'nats-consumer'] },
  ].map((k, i) => ({ ...k, account: accounts[i]! }))
  const hooks = await subscribe(rig, kinds.map((k) => ({ account: k.account, event: 'message.delivered', url: k.url })), 1)
  log(`three accounts, one subscription each: ${kinds.map((k) => `${k.name} → ${k.url.replace(/:[^:@/]*@/, ':***@')}`).join('; ')}`)
  const run = async (phase: Phase, also: string[], again: Hook[]) => {
    const r = await measure(rig, phase)
    printResult(r, also)
    if (!r.drained) await resubscribe(rig, again)
    return r
  }
  const max: Result[] = []
  for (const [i, k] of kinds.entries()) {
    const warm = await run({ label: `${k.name}: warm-up`, groups: [k.group], fan: 1, load: () => closedLoop(rig, [{ account: k.account }], 3, 500) }, k.cpu, [hooks[i]!])
    if (warm.delivered === 0) fail(`no ${k.name} delivery arrived during the warm-up`)
    max.push(await run({ label: `${k.name}: one subscription, max (closed loop)`, groups: [k.group], fan: 1, load: () => closedLoop(rig, [{ account: k.account }], SECONDS, 200_000) }, k.cpu, [hooks[i]!]))
  }
  const together = await run(
    { label: `together: ${fmtInt(KIND_RATE)} messages/s to each kind`, groups: kinds.map((k) => k.group), fan: 1, load: () => openLoop(rig, kinds.map((k) => ({ account: k.account })), KIND_RATE * kinds.length, SECONDS) },
    kinds.flatMap((k) => k.cpu),
    hooks,
  )
  const each = kinds.map((k) => groupLatency(together, k.group, together.load.byAccount[k.account.id] ?? 0))
  kinds.forEach((k, i) => log(`  ${k.name}: ${fmtInt(each[i]!.delivered)} of ${fmtInt(together.load.byAccount[k.account.id] ?? 0)} delivered, send → receipt ${fmtP(each[i]!)}`))
  const us = (r: Result, source: string) => (source in r.cpu.seconds ? `${fmtInt((r.cpu.seconds[source]! * 1e6) / r.delivered)} µs` : '–')
  console.log(`\nDestinations side by side (${PG ? 'PostgreSQL' : 'PGlite'}; CPU per delivery from the closed loop; broker and consumer: RabbitMQ's beam.smp and amqp-consumer, nats-server and nats-consumer, the HTTPS receiver)`)
  printTable([
    ['figure', ...kinds.map((k) => k.name)],
    ['one subscription, max (closed loop): deliveries/s', ...max.map((r) => `${fmtInt(r.rate)} /s`)],
    ['  send → receipt p50 / p99', ...max.map((r) => `${fmtMs(r.latency.p50)} / ${fmtMs(r.latency.p99)}`)],
    ['  delivered', ...max.map((r) => `${r.drained ? 'all' : 'NOT all'} ${fmtInt(r.delivered)} of ${fmtInt(r.expected)}`)],
    ['  CPU per delivery: server', ...max.map((r) => us(r, 'server'))],
    ...(PG ? [['  CPU per delivery: PostgreSQL', ...max.map((r) => us(r, 'postgres'))]] : []),
    ['  CPU per delivery: broker', ...max.map((r, i) => (i === 0 ? '–' : us(r, kinds[i]!.cpu[0]!)))],
    ['  CPU per delivery: receiver / consumer', ...max.map((r, i) => us(r, kinds[i]!.cpu.at(-1)!))],
    [`together, ${fmtInt(KIND_RATE)}/s each: send → receipt p50 / p99`, ...each.map((e) => `${fmtMs(e.p50)} / ${fmtMs(e.p99)}`)],
    ['  delivered', ...kinds.map((k, i) => `${fmtInt(each[i]!.delivered)} of ${fmtInt(together.load.byAccount[k.account.id] ?? 0)}`)],
  ])
  kinds.forEach((k, i) => {
    const m = max[i]!
    summary.push(
      target(`destinations: ${k.name}, max: all delivered (${fmtInt(m.rate)} /s, p50 / p99 ${fmtMs(m.latency.p50)} / ${fmtMs(m.latency.p99)})`, `${fmtInt(m.delivered)} of ${fmtInt(m.expected)}`, 'all', m.drained && m.load.errors === 0),
    )
  })
  kinds.forEach((k, i) => {
    const sent = together.load.byAccount[k.account.id] ?? 0
    summary.push(
      target(`destinations: ${k.name} at ${fmtInt(KIND_RATE)}/s beside the others: all delivered (p50 / p99 ${fmtMs(each[i]!.p50)} / ${fmtMs(each[i]!.p99)})`, `${fmtInt(each[i]!.delivered)} of ${fmtInt(sent)}`, 'all', each[i]!.delivered >= sent && sent > 0 && !together.load.dropped),
    )
  })
}

// How often the storm samples hook_queues. Its query reads every row of hook_queues and costs PostgreSQL
// ~0.8 ms beside the storm: every 20 ms that was ~0.8 s per run, in the storm only (docs/performance.md,
// issue 37, seventeenth pass).
const QUEUE_SAMPLE_MS = 100

async function storm(rig: Rig, summary: Summary): Promise<void> {
  const [a, b] = (await makeAccounts(rig, 2)) as [Account, Account]
  const refusePort = freePort()
  const hangPort = freePort()
  const https = BROKEN_KIND === 'https'
  // A's receivers are not B's: in a process of their own, their connections do not take turns on the
  // event loop of the receiver that times B's deliveries (docs/performance.md, issue 37, twenty-first pass).
  const brokenSide = await startConsumer(rig, 'broken receivers')
  await brokenSide.listen(hangPort, !https)
  const at = (i: number) => (i < REFUSED ? { port: refusePort, group: 'refuse' } : { port: hangPort, group: 'hang' })
  const broken = Array.from({ length: BROKEN }, (_, i) => ({
    account: a,
    event: 'message.failed',
    url: https ? `https://localhost:${at(i).port}/${at(i).group}/${i}` : brokerTarget(BROKEN_KIND, at(i).group, String(i), at(i).port),
  }))
  const t0 = performance.now()
  const brokenHooks = await subscribe(rig, broken, 4)
  if (PAUSED_BROKEN) await patchHooks(rig, a, brokenHooks, () => ({ status: 'paused' }))
  await subscribe(rig, [{ account: b, event: 'message.delivered', url: `${rig.receiver.origin}/healthy` }])
  const what = https ? 'HTTPS' : BROKEN_KIND === 'rabbitmq' ? 'RabbitMQ (amqp://)' : 'NATS (nats://)'
  log(`account A: ${BROKEN} ${what} subscriptions to message.failed (${REFUSED} at closed port ${refusePort}, ${BROKEN - REFUSED} at a ${https ? 'TLS' : 'TCP'} listener on ${hangPort} that never answers)${PAUSED_BROKEN ? ', paused' : ''}, made in ${((performance.now() - t0) / 1000).toFixed(1)} s; account B: one healthy HTTPS subscription`)
  await measure(rig, { label: 'warm-up', groups: ['healthy'], fan: 1, load: () => closedLoop(rig, [{ account: b }], 5, 500) })

  const expectedBroken = FAILED_MESSAGES * BROKEN
  log(`storm: B at ${STORM_RATE}/s for ${STORM_SECONDS} s; after 1 s, ${FAILED_MESSAGES} of A's messages fail → ${fmtInt(expectedBroken)} deliveries to broken receivers`)
  let failedLoad: Load | undefined
  const stormStartedAt = new Date()
  const claimsBefore = await histogram(rig, 'messaging_webhook_claim_duration_seconds')
  // How many subscriptions are due at once while B's messages arrive: the claim looks at them oldest due first.
  // And, when B's subscription is due, how many due ones are ahead of it in that order.
  const dueSamples: number[] = []
  const aheadOfB: number[] = []
  let sampling = Boolean(rig.sql)
  const sampler = (async () => {
    while (sampling) {
      const [row] = await rig.sql!`
        select count(*) filter (where q.due_at <= now())::int as due,
               count(*) filter (where q.due_at < b.due_at and q.due_at <= now())::int as ahead,
               bool_or(b.due_at <= now()) as b_due
        from hook_queues q, (select qb.due_at from hook_queues qb join hooks h on h.id = qb.hook_id where h.account_id = ${b.id}) b`
      dueSamples.push(Number(row!.due))
      if (row!.b_due) aheadOfB.push(Number(row!.ahead))
      await sleep(QUEUE_SAMPLE_MS)
    }
  })()
  // Reading data_directory takes a superuser or pg_read_all_settings: without, the disk is not watched.
  const dataDir = rig.sql ? await rig.sql`show data_directory`.then(([row]) => ({ path: String(row!.data_directory) }), (error: Error) => ({ error: error.message })) : null
  const disk = dataDir && 'path' in dataDir ? watchDiskStalls(dataDir.path) : null
  const healthy = await measure(rig, {
    label: `storm: B's healthy subscription at ${STORM_RATE}/s`,
    groups: ['healthy'],
    fan: 1,
    drainMs: 30_000,
    load: async () => {
      const fails = sleep(1000).then(async () => (failedLoad = await closedLoop(rig, [{ account: a, to: '+14155550000' }], 60, FAILED_MESSAGES)))
      const plainCpu = CPU_LOAD && runCommand([BUN, 'bench/cpu-load.ts', String(CPU_LOAD.share), String(CPU_LOAD.burstMs), String(STORM_SECONDS)], childEnv({}), (STORM_SECONDS + 30) * 1000)
      const load = await openLoop(rig, [{ account: b }], STORM_RATE, STORM_SECONDS)
      await fails
      if (plainCpu) {
        const { code, stderr, cpuSeconds } = await plainCpu
        if (code !== 0) fail(`bench/cpu-load.ts exited with code ${code}: ${stderr.trim()}`)
        log(`  plain CPU beside B (bench/cpu-load.ts, bursts of ${CPU_LOAD!.burstMs} ms): ${(cpuSeconds / STORM_SECONDS).toFixed(2)} of a core`)
      }
      return load
    },
  })
  printResult(healthy)
  if (disk) {
    const { stalls, longestMs } = disk.stop()
    log(`  the disk of PostgreSQL's WAL (${disk.device}): ${stalls} stall${stalls === 1 ? '' : 's'} of ${DISK_STALL_MS} ms or more, requests in flight and none completed${stalls ? ': every commit waited' : ''}; longest span without a completion: ${longestMs ? fmtMs(longestMs) : 'none seen'}`)
  } else if (dataDir) log(`  the disk of PostgreSQL's WAL: not watched (${'path' in dataDir ? `no block device found for ${dataDir.path}` : dataDir.error})`)
  log(`  A: ${fmtInt(failedLoad!.accepted)} of ${FAILED_MESSAGES} failing messages accepted${failedLoad!.errors ? `, ${failedLoad!.errors} ERRORS (${failedLoad!.firstError})` : ''}; ${fmtInt(onGroups(healthy.stats, ['hang']).hung)} ${https ? 'requests' : 'connections'} held by the hanging listener`)
  if (rig.sql) {
    const rows = await rig.sql`select d.status, count(*)::int as n, sum(d.attempts)::int as attempts from deliveries d join hooks h on h.id = d.hook_id where h.account_id = ${a.id} group by 1 order by 1`
    log(`  A's deliveries now: ${rows.map((r) => `${r.status} ${fmtInt(r.n)}`).join(', ')}; ${fmtInt(rows.reduce((s, r) => s + r.attempts, 0))} attempts so far`)
  }
  sampling = false
  await sampler
  const claimsAfter = await histogram(rig, 'messaging_webhook_claim_duration_seconds')
  const claims = (claimsAfter?.get(Infinity) ?? 0) - (claimsBefore?.get(Infinity) ?? 0)
  log(`  the delivery worker's claims meanwhile: ${fmtInt(claims)}, p99 ${histogramP99(claimsBefore, claimsAfter)} (the metrics' histogram bucket)`)
  if (dueSamples.length) {
    const due = percentiles(dueSamples)
    log(`  subscriptions due at once (hook_queues, sampled every ${QUEUE_SAMPLE_MS} ms, ${dueSamples.length} samples): p50 ${fmtInt(due.p50)}, p99 ${fmtInt(due.p99)}, max ${fmtInt(Math.max(...dueSamples))}`)
    const ahead = percentiles(aheadOfB)
    log(`  B's subscription found due in ${aheadOfB.length} samples; due subscriptions ahead of it then: p50 ${fmtInt(ahead.p50)}, p99 ${fmtInt(ahead.p99)}`)
  }
  if (rig.sql) await printTimeline(rig.sql, b.id, stormStartedAt)
  const goal = PG ? 100 : 250
  summary.push(
    target(`storm: B delivered, p50 / p99 (${fmtInt(expectedBroken)} broken ${what} deliveries queued)`, `${fmtInt(healthy.delivered)} of ${fmtInt(healthy.load.sent)}, ${fmtMs(healthy.latency.p50)} / ${fmtMs(healthy.latency.p99)}`, `all, p99 < ${goal} ms`, healthy.drained && !healthy.load.dropped && healthy.latency.p99 < goal),
  )

  // Recovery. HTTPS: a healthy listener on the closed port, the hanging one answers. A broker: the
  // subscriptions' target_url PATCHed to the running broker (a broker that comes back on the same
  // port cannot be staged on the machine's one), where a bound queue or a stream takes them.
  if (!https) await brokerSink(rig, BROKEN_KIND, 'recovered')
  const r0 = performance.now()
  const stop = startMeter(rig)
  if (https) {
    await brokenSide.listen(refusePort)
    await brokenSide.heal()
  } else {
    await patchHooks(rig, a, brokenHooks, (j) => ({ target_url: brokerTarget(BROKEN_KIND, 'recovered', String(j)) }))
    log(`recovery: ${BROKEN} target_url PATCHed to ${what} at ${BROKEN_KIND === 'rabbitmq' ? RABBITMQ_URL.host : NATS_URL.host} in ${((performance.now() - r0) / 1000).toFixed(1)} s`)
  }
  if (PAUSED_BROKEN) await patchHooks(rig, a, brokenHooks, () => ({ status: 'active' }))
  const groups = https ? ['refuse', 'hang'] : ['recovered']
  let delivered = 0
  let lastLog = r0
  for (;;) {
    delivered = onGroups(await rigStats(rig), groups).unique
    const elapsed = (performance.now() - r0) / 1000
    if (delivered >= expectedBroken || elapsed >= RECOVER_SECONDS) break
    if (performance.now() - lastLog >= 30_000) {
      log(`  recovering: ${fmtInt(delivered)} of ${fmtInt(expectedBroken)} delivered after ${elapsed.toFixed(0)} s`)
      lastLog = performance.now()
    }
    await sleep(250)
  }
  const seconds = (performance.now() - r0) / 1000
  const cpu = stop()
  const all = delivered >= expectedBroken
  log(`recovery: ${fmtInt(delivered)} of ${fmtInt(expectedBroken)} delivered ${all ? `in ${seconds.toFixed(1)} s` : `when the wait ended after ${RECOVER_SECONDS} s`}`)
  log(`  cores: ${fmtCores(cpu)}${delivered ? `; ${perDelivery(cpu, delivered, Object.keys(rig.brokers))}` : ''}`)
  summary.push([`storm: recovery${https ? '' : ' (target_url PATCHed to the running broker)'}, all ${fmtInt(expectedBroken)} delivered`, all ? `in ${seconds.toFixed(1)} s` : `NO: ${fmtInt(delivered)} within ${RECOVER_SECONDS} s`, '', ''])
}

/**
 * Where a healthy subscription's send → receipt went during the storm, per stage and from the
 * database's own clocks (docs/performance.md): the message's text holds its send time, the
 * message row when it was accepted, the event row when its settlement was written, the attempt
 * row when the attempt was recorded (`attempted_at`, the recording's time: less its duration, the
 * wait for the claim and for the record together). `now()` is each writing transaction's start.
 */
async function printTimeline(sql: Sql, accountId: string, since: Date): Promise<void> {
  const timeline = sql`
    select substring(m.body from 't=([0-9]+)')::bigint as sent_ms,
           extract(epoch from m.created_at) * 1000 as accepted_ms,
           extract(epoch from e.created_at) * 1000 as settled_ms,
           extract(epoch from a.attempted_at) * 1000 - a.duration_ms as started_ms,
           a.duration_ms::float8 as duration_ms,
           extract(epoch from a.attempted_at) * 1000 as recorded_ms
    from messages m
    join events e on e.account_id = m.account_id and e.payload::jsonb #>> '{data,message,id}' = m.id
    join deliveries d on d.event_id = e.id
    join delivery_attempts a on a.delivery_id = d.id
    where m.account_id = ${accountId} and m.created_at >= ${since} and not e.test`
  const stages = await sql`
    with timeline as (${timeline})
    select stage, count(*)::int as n, percentile_cont(0.5) within group (order by ms) as p50, percentile_cont(0.99) within group (order by ms) as p99, max(ms) as max
    from timeline, lateral (values
      ('1 send → accepted (message row)', accepted_ms - sent_ms),
      ('2 accepted → settled (event row)', settled_ms - accepted_ms),
      ('3 settled → recorded, less the attempt (claim and record waits)', started_ms - settled_ms),
      ('4 the attempt (request → answer)', duration_ms),
      ('send → attempt recorded', recorded_ms - sent_ms)
    ) as s(stage, ms)
    group by stage order by stage`
  log(`  where B's time went (${fmtInt(stages[0]?.n ?? 0)} attempts, from the database's clocks; ms):`)
  printTable([['stage', 'p50', 'p99', 'max'], ...stages.map((row) => [String(row.stage), fmtFixed(Number(row.p50), 1), fmtFixed(Number(row.p99), 1), fmtFixed(Number(row.max), 1)])])
  // When in the storm the tail is: its first seconds, A's fan-out being written, or A's timeouts.
  const windows = await sql`
    with timeline as (${timeline})
    select floor((sent_ms - ${since.getTime()}) / 2000.0)::int * 2 as second, count(*)::int as n,
           percentile_cont(0.5) within group (order by started_ms - sent_ms) as p50, percentile_cont(0.99) within group (order by started_ms - sent_ms) as p99,
           percentile_cont(0.99) within group (order by settled_ms - sent_ms) as settled_p99
    from timeline group by 1 order by 1`
  log(`  B's send → attempt started per two seconds of the storm (ms; the settlement's share of it):`)
  printTable([['from second', 'n', 'p50', 'p99', 'send → settled p99'], ...windows.map((row) => [String(row.second), fmtInt(row.n), fmtFixed(Number(row.p50), 1), fmtFixed(Number(row.p99), 1), fmtFixed(Number(row.settled_p99), 1)])])
}

/** Cumulative bucket counts of a Prometheus histogram (summed over label sets), or null when the metric is absent. */
async function histogram(rig: Rig, name: string): Promise<Map<number, number> | null> {
  const text = await fetch(`http://127.0.0.1:${rig.metricsPort}/metrics`, { signal: AbortSignal.timeout(10_000) }).then((r) => r.text()).catch(() => '')
  if (!text.includes('# TYPE')) log(`  (the metrics endpoint on port ${rig.metricsPort} did not answer)`)
  const buckets = new Map<number, number>()
  for (const m of text.matchAll(new RegExp(`^${name}_bucket\\{(?:.*,)?le="([^"]+)"[^}]*\\} (\\S+)`, 'gm'))) {
    const le = m[1] === '+Inf' ? Infinity : Number(m[1])
    buckets.set(le, (buckets.get(le) ?? 0) + Number(m[2]))
  }
  return buckets.size ? buckets : null
}

/** p99 between two scrapes: the upper bound of the bucket it falls in. */
function histogramP99(before: Map<number, number> | null, after: Map<number, number> | null): string {
  if (!after) return 'n/a'
  const les = [...after.keys()].sort((x, y) => x - y)
  const delta = les.map((le) => after.get(le)! - (before?.get(le) ?? 0))
  const total = delta.at(-1)!
  if (!total) return 'no claims'
  const i = delta.findIndex((n) => n >= 0.99 * total)
  return les[i] === Infinity ? `> ${fmtMs(les[i - 1]! * 1000)}` : `≤ ${fmtMs(les[i]! * 1000)}`
}

async function growth(rig: Rig, summary: Summary): Promise<void> {
  const deadline = started + MINUTES * 60_000 - 20_000
  const accounts = await makeAccounts(rig, 100)
  const held = new Map<Account, number>()
  const table: string[][] = [['subscriptions', 'deliveries/s', 'send → receipt p99', 'all delivered', 'claim p99 (metrics)', 'subscriptions made in']]
  const rates = new Map<number, number>()
  let warmed = false
  for (const count of [1, 10, 100, 10_000]) {
    if (Date.now() > deadline - 60_000) {
      log(`step ${fmtInt(count)}: skipped, less than a minute of the --minutes ${MINUTES} budget left`)
      table.push([fmtInt(count), 'skipped (time)', '', '', '', ''])
      continue
    }
    const perAccount = Math.min(100, count)
    const used = accounts.slice(0, Math.ceil(count / perAccount))
    const wanted = used.flatMap((account, n) => Array.from({ length: perAccount - (held.get(account) ?? 0) }, (_, i) => ({ account, event: 'message.delivered', url: `${rig.receiver.origin}/g/${n}-${(held.get(account) ?? 0) + i}` })))
    const t0 = performance.now()
    await subscribe(rig, wanted, 32)
    const made = (performance.now() - t0) / 1000
    for (const a of used) held.set(a, perAccount)
    log(`step ${fmtInt(count)} subscription${count > 1 ? 's' : ''}: ${fmtInt(wanted.length)} made through the API in ${made.toFixed(1)} s`)
    if (!warmed) {
      await measure(rig, { label: 'warm-up', groups: ['g'], fan: 1, load: () => closedLoop(rig, [{ account: accounts[0]! }], 5, 1000) })
      warmed = true
    }
    const messages = Math.ceil(DELIVERIES / count) * used.length
    const before = await histogram(rig, 'messaging_webhook_claim_duration_seconds')
    const drainMs = Math.max(10_000, Math.min(DRAIN_MS, deadline - Date.now() - 30_000))
    const r = await measure(rig, { label: `${fmtInt(count)} subscription${count > 1 ? 's' : ''}, ${fmtInt(messages)} messages`, groups: ['g'], fan: perAccount, drainMs, load: () => closedLoop(rig, used.map((account) => ({ account })), 600, messages) })
    const claim = histogramP99(before, await histogram(rig, 'messaging_webhook_claim_duration_seconds'))
    printResult(r)
    log(`  claim p99 (messaging_webhook_claim_duration_seconds): ${claim}`)
    rates.set(count, r.rate)
    table.push([fmtInt(count), fmtInt(r.rate), fmtMs(r.latency.p99), r.drained ? 'yes' : `no (${fmtInt(r.delivered)} of ${fmtInt(r.expected)})`, claim, `${made.toFixed(1)} s`])
  }
  console.log()
  printTable(table)
  const ratio = (rates.get(10_000) ?? Number.NaN) / (rates.get(100) ?? Number.NaN)
  summary.push(target('growth: deliveries/s with 10,000 subscriptions / with 100', fmtFixed(ratio, 2), '≥ 0.90', ratio >= 0.9))
  console.log(`\n10,000 ≥ 0.9 × 100: ${verdict(ratio >= 0.9)} (${fmtFixed(ratio, 2)})`)
}

async function fanout(rig: Rig, summary: Summary): Promise<void> {
  const [account] = (await makeAccounts(rig, 1)) as [Account]
  const wanted = Array.from({ length: 100 }, (_, i) => ({ account, event: 'message.delivered', url: `${rig.receiver.origin}/fan/${i}` }))
  await subscribe(rig, wanted, 4)
  const messages = Math.ceil(DELIVERIES / 100)
  await measure(rig, { label: 'warm-up', groups: ['fan'], fan: 100, load: () => closedLoop(rig, [{ account }], 10, 20) })
  const r = await measure(rig, { label: `fanout: 100 subscriptions, ${fmtInt(messages)} messages`, groups: ['fan'], fan: 100, load: () => closedLoop(rig, [{ account }], 60, messages) })
  printResult(r)
  summary.push(target('fanout, 100 subscriptions of one event type: deliveries/s', `${fmtInt(r.rate)} /s`, '≥ 5,000 /s', r.rate >= 5000), ['… send → receipt p50 / p99', `${fmtMs(r.latency.p50)} / ${fmtMs(r.latency.p99)}`, '', ''])
}

/** Inserts ROWS events (one delivery and one attempt each) spread over the last 33 days, ids encoding their time as the service's do. */
async function seedRows(sql: Sql, account: Account, hook: Hook): Promise<void> {
  const [sample] = await sql`select id, payload from events where account_id = ${account.id} limit 1`
  const tid = `(select string_agg(substr('0123456789abcdefghjkmnpqrstvwxyz', ((ms >> (5 * (9 - i))) & 31)::int + 1, 1), '' order by i) from generate_series(0, 9) i)`
  await sql.unsafe(`create function pg_temp.tid(ms bigint) returns text language sql immutable as $$ select ${tid} $$`)
  const batch = 500_000
  const t0 = performance.now()
  for (let from = 1; from <= ROWS; from += batch) {
    const to = Math.min(ROWS, from + batch - 1)
    await sql.begin(async (tx) => {
      await tx`create temp table seed on commit drop as
        select g, t, pg_temp.tid((extract(epoch from t) * 1000)::bigint) || lpad(g::text, 16, '0') as sfx
        from (select g, now() - interval '33 days' + (g::float8 / ${ROWS}) * interval '33 days' as t from generate_series(${from}::int, ${to}::int) g) s`
      await tx`insert into events (id, account_id, type, payload, created_at)
        select 'evt_' || sfx, ${account.id}, 'message.delivered', replace(${sample!.payload}, ${sample!.id}, 'evt_' || sfx), t from seed`
      await tx`insert into deliveries (id, event_id, hook_id, status, attempts, next_attempt_at, created_at)
        select 'dlv_' || sfx, 'evt_' || sfx, ${hook.id}, case when g % 100 = 0 then 'failed' else 'delivered' end, 1, t, t from seed`
      await tx`insert into delivery_attempts (id, delivery_id, hook_id, event_id, attempted_at, status_code, duration_ms, response_snippet)
        select 'att_' || sfx, 'dlv_' || sfx, ${hook.id}, 'evt_' || sfx, t, case when g % 100 = 0 then 500 else 204 end, 3, '' from seed`
    })
    log(`  seeded ${fmtInt(to)} of ${fmtInt(ROWS)} (${fmtInt(to / ((performance.now() - t0) / 1000))} rows/s)`)
  }
  await sql`vacuum analyze events, deliveries, delivery_attempts`
}

/** `REQUESTS` GETs of `path`, one at a time, after 10 unmeasured: p50/p99 in ms. */
async function timedGets(rig: Rig, path: string) {
  const times: number[] = []
  for (let i = 0; i < REQUESTS + 10; i++) {
    const t0 = performance.now()
    const r = await call('GET', `${rig.server.origin}${path}`)
    if (r.status !== 200) fail(`GET ${redact(path)}: ${r.status} ${redact(r.text).slice(0, 300)}`)
    if (i >= 10) times.push(performance.now() - t0)
  }
  return percentiles(times)
}

/** A second database and server beside `rig`'s, sharing its receiver, its settings and its checks at the end. */
async function twinRig(rig: Rig, name: string): Promise<Rig> {
  const store = await storage(DATABASE, ADMIN_URL, `${SCENARIO}_${name}`)
  const metricsPort = freePort()
  const server = await startService(name, { ...rig.server.env, ...store.env, METRICS_PORT: String(metricsPort) }, rig.workDir)
  const sql = connect(store.database!.url, { connection: { application_name: 'bench' } })
  onCleanup(() => sql.end({ timeout: 5 }))
  rig.twins.push(server)
  return { ...rig, server, store, sql, metricsPort }
}

async function rows(rig: Rig, summary: Summary): Promise<void> {
  // The empty database is a twin of the full one, beside it on the same PostgreSQL, with a server of its own, and
  // the two databases' loops alternate: one loop before seeding and one after gave 0.72–1.38 for the same code,
  // the machine's speed drifting by a fifth from one minute to the next (docs/performance.md, issue 37, twenty-sixth pass).
  const side = async (r: Rig, name: string) => {
    const [account] = (await makeAccounts(r, 1)) as [Account]
    const [hook] = await subscribe(r, [{ account, event: 'message.delivered', url: `${r.receiver.origin}/one` }])
    // 10,000 subscriptions (100 accounts × 100), 20,000 deliveries; made first, so that the one-subscription loops run beside them.
    const many = cli.flag('skip-many') ? [] : await makeAccounts(r, 100)
    const m0 = performance.now()
    await subscribe(r, many.flatMap((a, n) => Array.from({ length: 100 }, (_, i) => ({ account: a, event: 'message.delivered', url: `${r.receiver.origin}/g/${n}-${i}` }))), 32)
    if (many.length) log(`${name} database: 10,000 subscriptions on 100 more accounts, made through the API in ${((performance.now() - m0) / 1000).toFixed(1)} s`)
    await measure(r, { label: `${name} database: warm-up`, groups: ['one'], fan: 1, load: () => closedLoop(r, [{ account }], 5, 1000) })
    return { rig: r, sql: r.sql!, account, hook: hook!, many }
  }
  const full = await side(rig, 'full')
  const empty = await side(await twinRig(rig, 'empty'), 'empty')
  const { sql, account, hook } = full
  log(`seeding ${fmtInt(ROWS)} events, deliveries and attempts into the full database (generate_series, batches of 500,000), then VACUUM ANALYZE`)
  const t0 = performance.now()
  await seedRows(sql, account, hook)
  await empty.sql`vacuum analyze events, deliveries, delivery_attempts, messages`
  log(`  done in ${((performance.now() - t0) / 1000).toFixed(0)} s`)
  const run = async (s: typeof full, phase: Phase) => {
    const r = await measure(s.rig, phase)
    printResult(r)
    // What did not arrive would weigh on what follows: canceled (the state a deleted subscription's deliveries get).
    const left = r.drained ? { count: 0 } : await s.sql`update deliveries set status = 'canceled' where status = 'pending'`
    if (left.count) log(`  ${fmtInt(left.count)} deliveries of this phase still pending: canceled by SQL so that they do not weigh on what follows`)
    return r.rate
  }
  // --repeats pairs, the empty database's loop first in each: the figure is the median of the pairs' ratios, each loop
  // compared with its neighbour, since the 10,000 subscriptions' rate also falls from one loop to the next on both
  // databases (twenty-sixth pass).
  const alternated = async (label: string, phase: (s: typeof full) => Omit<Phase, 'label'>) => {
    const pairs: { empty: number; full: number }[] = []
    for (let i = 1; i <= REPEATS; i++) {
      const e = await run(empty, { ...phase(empty), label: `${label}, empty database, ${i} of ${REPEATS}` })
      pairs.push({ empty: e, full: await run(full, { ...phase(full), label: `${label}, +${fmtInt(ROWS)} rows, ${i} of ${REPEATS}` }) })
    }
    const ratios = pairs.map((pair) => pair.full / pair.empty)
    return { shown: `${pairs.map((pair) => `${fmtInt(pair.empty)} → ${fmtInt(pair.full)}`).join(', ')} /s`, ratio: median(ratios), ratios: ratios.map((r) => fmtFixed(r, 2)).join(', ') }
  }
  const one = await alternated('one subscription, closed loop', (s) => ({ groups: ['one'], fan: 1, load: () => closedLoop(s.rig, [{ account: s.account }], SECONDS, 200_000) }))
  const many = full.many.length
    ? await alternated('10,000 subscriptions', (s) => ({ groups: ['g'], fan: 100, load: () => closedLoop(s.rig, s.many.map((a) => ({ account: a })), 600, Math.ceil(DELIVERIES / 10_000) * 100) }))
    : null
  const failed = await timedGets(rig, keyed(account, `/hooks/${hook.id}/deliveries`).replace('?', '?state=failed&'))
  log(`GET …/deliveries?state=failed, ${REQUESTS} one at a time: ${fmtP(failed)}`)
  const since = new Date(Date.now() - 86_400_000).toISOString()
  const events = await timedGets(rig, keyed(account, '/events').replace('?', `?since=${encodeURIComponent(since)}&`))
  log(`GET …/events?since=<one day ago>, ${REQUESTS} one at a time: ${fmtP(events)}`)
  const handle = postgresDatabase(rig.store.database!.url.href, { max: 1 })
  const r0 = performance.now()
  const deleted = await deleteExpiredEvents(handle.db, { retentionDays: 30 }).finally(() => handle.close())
  const retention = (performance.now() - r0) / 1000
  log(`retention (deleteExpiredEvents, 30 days): ${fmtInt(deleted)} events with their deliveries and attempts deleted in ${retention.toFixed(1)} s (${fmtInt(deleted / retention)} events/s)`)
  summary.push(
    ['rows: one subscription, empty → full: deliveries/s, in turn', one.shown, '', ''],
    target(`rows: full / empty (+${fmtInt(ROWS)} rows), median of ${REPEATS} pairs (${one.ratios})`, fmtFixed(one.ratio, 2), '≥ 0.90', one.ratio >= 0.9),
    target('rows: GET …/deliveries?state=failed p99', fmtMs(failed.p99), '< 50 ms', failed.p99 < 50),
    target('rows: GET …/events?since= p99', fmtMs(events.p99), '< 50 ms', events.p99 < 50),
    ['rows: one retention run', `${fmtInt(deleted)} events in ${retention.toFixed(1)} s`, '', ''],
    many
      ? target(`rows: 10,000 subscriptions, full / empty (${many.ratios}): ${many.shown}`, fmtFixed(many.ratio, 2), '≥ 0.90', many.ratio >= 0.9)
      : ['rows: 10,000 subscriptions', 'skipped (--skip-many)', '', ''],
  )
}

/**
 * An MCP agent's event subscription, made as an agent makes it: a user of the account signs in on
 * the consent API, a registered client redeems the code (PKCE) for an MCP token with messages:read,
 * and events/subscribe names the receiver (2026-07-28 JSON-RPC).
 */
async function agentSubscription(rig: Rig, account: Account, event: string, url: string): Promise<string> {
  const origin = rig.server.origin
  const email = `agent-${Date.now()}@example.com`
  const password = 'bench agent password'
  if (rig.store.database) {
    const handle = postgresDatabase(rig.store.database.url.href, { max: 1 })
    await createUser(handle.db, { accountId: account.id, email, password }).finally(() => handle.close())
  } else {
    const run = await runCommand([BUN, 'src/cli.ts', 'user', 'create', '--account', account.id, '--email', email, '--password', password, '--json'], rig.server.env, 30_000)
    if (run.code !== 0) fail(`bun src/cli.ts user create exited with ${run.code}:\n${redact(run.stderr + run.stdout).slice(0, 1000)}`)
  }
  const { resource } = (await (await fetch(`${origin}/.well-known/oauth-protected-resource/v0/mcp`)).json()) as { resource: string }
  const redirectUri = 'http://127.0.0.1:8765/callback'
  const client = await expectStatus(201, 'POST', `${origin}/v0/auth/register`, {
    body: { client_name: 'bench agent', redirect_uris: [redirectUri], grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'none' },
  })
  const { id_token } = await expectStatus(200, 'POST', `${origin}/v0/auth/login`, { body: { email, password } })
  const verifier = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url')
  const challenge = Buffer.from(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))).toString('base64url')
  const { code } = await expectStatus(200, 'POST', `${origin}/v0/auth/authorize`, {
    body: { client_id: client.client_id, redirect_uri: redirectUri, id_token, code_challenge: challenge, code_challenge_method: 'S256', scope: 'messages:read', resource },
  })
  const { access_token } = await expectStatus(200, 'POST', `${origin}/v0/auth/token`, {
    body: { grant_type: 'authorization_code', code, client_id: client.client_id, redirect_uri: redirectUri, code_verifier: verifier },
  })
  const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientInfo': { name: 'bench agent', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': {} }
  const secret = `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`
  const answer = await fetch(`${origin}/v0/mcp`, {
    method: 'POST',
    headers: { authorization: `Bearer ${access_token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'events/subscribe' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'events/subscribe', params: { name: event, arguments: {}, delivery: { mode: 'webhook', url, secret }, _meta: meta } }),
  })
  const reply = (await answer.json()) as { result?: { id: string }; error?: unknown }
  if (!reply.result) fail(`events/subscribe: HTTP ${answer.status} ${JSON.stringify(reply.error ?? reply).slice(0, 300)}`)
  return reply.result.id
}

async function agent(rig: Rig, summary: Summary): Promise<void> {
  const [account] = (await makeAccounts(rig, 1)) as [Account]
  const o = rig.receiver.origin
  await subscribe(rig, [{ account, event: 'message.delivered', url: `${o}/rest` }])
  const subscriptionId = await agentSubscription(rig, account, 'message.delivered', `${o}/agent`)
  log(`REST subscription → ${o}/rest; MCP event subscription ${subscriptionId} → ${o}/agent`)
  await measure(rig, { label: 'warm-up', groups: ['rest', 'agent'], fan: 2, load: () => closedLoop(rig, [{ account }], 5, 500) })
  const r = await measure(rig, { label: `REST and agent subscriptions at ${fmtInt(AGENT_RATE)} messages/s`, groups: ['rest', 'agent'], fan: 2, load: () => openLoop(rig, [{ account }], AGENT_RATE, SECONDS) })
  printResult(r)
  const [rest, agentLatency] = [groupLatency(r, 'rest', r.load.accepted), groupLatency(r, 'agent', r.load.accepted)]
  log(`  REST subscription: send → receipt ${fmtP(rest)}`)
  log(`  agent (MCP event subscription): send → receipt ${fmtP(agentLatency)}`)
  const ratio = agentLatency.p99 / rest.p99
  summary.push(
    ['agent: REST subscription send → receipt p50 / p99', `${fmtMs(rest.p50)} / ${fmtMs(rest.p99)}`, '', ''],
    ['agent: MCP event subscription send → receipt p50 / p99', `${fmtMs(agentLatency.p50)} / ${fmtMs(agentLatency.p99)}`, '', ''],
    target(`agent: event → agent p99 / REST p99 at ${fmtInt(AGENT_RATE)}/s`, fmtFixed(ratio, 2), '≤ 2.00', ratio <= 2),
  )
}

async function stats(rig: Rig, summary: Summary): Promise<void> {
  const sql = rig.sql!
  const [account] = (await makeAccounts(rig, 1)) as [Account]
  const hooks = await subscribe(rig, [{ account, event: 'message.delivered', url: `${rig.receiver.origin}/one` }])
  // Each at a closed port of its own: a host that refuses is tried about once a second (docs/webhooks.md#a-host-that-does-not-answer).
  hooks.push(...(await subscribe(rig, Array.from({ length: 99 }, () => ({ account, event: 'message.failed', url: `https://localhost:${freePort()}/refuse` })), 8)))
  const busy = hooks[0]!.id
  await measure(rig, { label: 'warm-up', groups: ['one'], fan: 1, load: () => closedLoop(rig, [{ account }], 3, 2000) })
  await closedLoop(rig, [{ account, to: '+14155550000' }], 10, 2) // 2 failed messages: 198 attempts refused (3 in a row would open a circuit)
  for (let i = 0; (await sql`select count(*)::int as n from delivery_attempts where hook_id <> ${busy}`)[0]!.n < 198; i++) if (i > 300) fail('the warm-up\'s 198 refused attempts were not all recorded within 30 s'); else await sleep(100)
  await sql`update hooks set status = 'paused' where account_id = ${account.id} and id <> ${busy}`
  await sleep(1000)
  const check = await impliedRollups(sql, false)
  log(`warm-up: the service wrote ${check.hooks} hook_stats and ${check.accounts} account_stats rows; this bench's SQL, from the attempt log, events and messages: ${check.differences} rows (an account's: figures) differ`)
  summary.push(target('stats: rollups recomputed by bench/stats.ts from the warm-up, rows (an account\'s: figures) differing from the service\'s', String(check.differences), '0', check.differences === 0))
  const end = new Date(Math.floor(Date.now() / 60_000) * 60_000)
  const [sample] = await sql`select id, payload from events where account_id = ${account.id} and type = 'message.delivered' limit 1`
  const t0 = performance.now()
  log(`seeding ${fmtInt(ROWS)} attempts over the 7 days before ${end.toISOString()} with their events and deliveries (batches of 500,000), then their rollups and VACUUM ANALYZE`)
  await seedAttempts(sql, { accountId: account.id, hookIds: hooks.map((h) => h.id), total: ROWS, days: 7, end, payload: { id: sample!.id, text: sample!.payload }, log })
  const built = await impliedRollups(sql, true)
  // The service closes a bucket within a minute of its end (src/stats/closing.ts: an account's rows merged, percentiles stored): done here for the seeded ones at once.
  const t1 = performance.now()
  const closed = (await sql`select distinct unit, bucket::text as bucket from hook_stats where bucket + ('1 ' || unit)::interval <= now()`).map((r) => ({ unit: r.unit, bucket: r.bucket }))
  const handle = postgresDatabase(rig.store.database!.url.href, { max: 1 })
  onCleanup(() => handle.close())
  const done = await closeBuckets(handle.db, closed)
  log(`  ${fmtInt(closed.length)} buckets closed in ${((performance.now() - t1) / 1000).toFixed(1)} s: ${fmtInt(done.merged)} account rows merged, percentiles stored in ${fmtInt(done.stored)} rows`)
  await sql`vacuum analyze events, deliveries, delivery_attempts, hook_stats, account_stats`
  const keys = await sql`select unit, count(*)::int as n, avg((select count(*) from jsonb_object_keys(latency)))::float8 as k from hook_stats where hook_id = ${busy} group by 1 order by 2 desc`
  log(`  done in ${((performance.now() - t0) / 1000).toFixed(0)} s: ${fmtInt(built.hooks)} hook_stats and ${fmtInt(built.accounts)} account_stats rows; the busy subscription's: ${keys.map((r) => `${fmtInt(r.n)} ${r.unit} rows of ${fmtFixed(r.k, 1)} latency buckets`).join(', ')}`)
  // The last 24 h by the minute, as a dashboard asks: the range ends with the open minute.
  const range = () => statsRange({ interval: 'minute' }, new Date())
  for (const [name, path, key, id, table, read] of [
    ['hooks/{busy}/stats', keyed(account, `/hooks/${busy}/stats`) + '&interval=minute', 'hook_id', busy, 'hook_stats', (cache: StatsCache) => readHookStats(handle.db, cache, account.id, busy, range())],
    ['stats', keyed(account, '/stats') + '&interval=minute', 'account_id', account.id, 'account_stats', (cache: StatsCache) => readAccountStats(handle.db, cache, account.id, range())],
  ] as const) {
    const body = await expectStatus(200, 'GET', `${rig.server.origin}${path}`)
    const [log_] = await sql.unsafe(`select count(*)::int as attempts, (count(*) filter (where (${FAILURE}) is null))::int as succeeded, percentile_disc(array[0.5, 0.95, 0.99]) within group (order by a.duration_ms) as p
      from delivery_attempts a join hooks h on h.id = a.hook_id where ${key === 'hook_id' ? 'a.hook_id' : 'h.account_id'} = $1 and a.attempted_at >= $2 and a.attempted_at < $3`, [id, body.since, body.until])
    const l = body.totals.latency_ms
    log(`GET …/${name}?interval=minute, ${body.buckets.length} buckets: attempts ${fmtInt(body.totals.attempts)}, succeeded ${fmtInt(body.totals.succeeded)}, p50/p95/p99 ${l.p50}/${l.p95}/${l.p99} ms; the attempt log: ${fmtInt(log_!.attempts)}, ${fmtInt(log_!.succeeded)}, ${log_!.p.join('/')} ms`)
    summary.push(target(`stats: …/${name} totals = the attempt log's (p50/p95/p99 within 5 %)`, `${fmtInt(body.totals.attempts)} / ${fmtInt(log_!.attempts)}`, 'equal', body.totals.attempts === log_!.attempts && body.totals.succeeded === log_!.succeeded && [l.p50, l.p95, l.p99].every((p: number, i: number) => Math.abs(p / log_!.p[i] - 1) <= 0.05)))
    for (const clients of [1, CLIENTS]) {
      const r = await closedGets(rig.server.origin, path, { clients, seconds: SECONDS, serverPid: rig.server.proc.pid, database: rig.store.database!.name })
      log(`  ${clients} client${clients > 1 ? 's' : ''}, ${SECONDS} s: ${fmtInt(r.rps)} requests/s, p50 ${fmtMs(r.p50)}, p95 ${fmtMs(r.p95)}, p99 ${fmtMs(r.p99)}, max ${fmtMs(r.max)} (n=${fmtInt(r.n)}); CPU per request: server ${fmtInt(r.perRequest('server'))} µs, PostgreSQL ${fmtInt(r.perRequest('postgres'))} µs; cores: ${fmtCores(r.cpu)}`)
      summary.push(target(`stats: GET …/${name}, 1,440 minutes, ${clients} client${clients > 1 ? 's' : ''}: p50 / p95 / p99 (${fmtInt(r.rps)} req/s)`, `${fmtMs(r.p50)} / ${fmtMs(r.p95)} / ${fmtMs(r.p99)}`, 'p99 < 50 ms', r.p99 < 50))
    }
    log(`  in this process, medians of 20: ${await whereTimeGoes(handle.db, rangeRowsQuery(table, id, range()), partVersionQuery(table, id, splitRange(range(), Date.now()).settled!), read)}`)
  }
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<number> {
  const workDir = tempDir('bench-webhooks-')
  // stats: the warm-up's refused deliveries are retried after the run (their subscriptions are paused meanwhile too).
  const settings: Record<string, string> = SCENARIO === 'storm' ? { HOOKS_PER_ACCOUNT: String(Math.max(100, BROKEN)) } : SCENARIO === 'stats' ? { WEBHOOK_RETRY_SCHEDULE: '0,2h' } : {}
  const rig = await startRig(workDir, settings)
  const summary: Summary = summaryHead()
  await { basic, destinations, storm, growth, fanout, rows, agent, stats }[SCENARIO](rig, summary)
  const problems: string[] = []
  for (const server of [rig.server, ...rig.twins]) {
    await stopChild(server.proc)
    problems.push(...(await serverProblems(server, 0, SCENARIO === 'storm')))
  }
  console.log(`\nSummary: --scenario ${SCENARIO}, ${PG ? 'PostgreSQL' : 'PGlite'}, ${new Date().toISOString()}`)
  printTable(summary)
  if (OTLP) console.log(`\ntraces: ${OTLP.describe()}`)
  printProblems(problems)
  log('done; stopping the receiver and removing the database')
  return problems.length ? 1 : 0
}

await runMain(`bench/webhooks.ts --scenario ${SCENARIO}`, main, WATCHDOG_S * 1000)
