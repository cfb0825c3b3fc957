#!/usr/bin/env bun
/**
 * OAuth on our real server (`bun src/main.ts`), measured in one run on loopback:
 *   - `GET /v0/account` and `GET /v0/auth/session` with `Authorization: Bearer <access token>`
 *     (wrk -H), against a bare `Bun.serve` hello-world (bench/bare-server.ts);
 *   - the refresh grant: N workers (bench/refresh-load.ts, a separate process), each with its own
 *     grant, loop `POST /v0/auth/token/refresh {refresh_token, client_id}` with the token their
 *     previous call returned, for a fixed duration.
 *
 *   bun bench/oauth.ts                  # PostgreSQL on 127.0.0.1:5432 (a fresh database, dropped at the end)
 *   bun bench/oauth.ts --db pglite      # PGlite in a fresh temporary DATA_DIR (removed at the end)
 *
 * Options: --rounds 2 (bare, then our server at LOG_LEVEL=info, then at warn, repeated; medians
 * are reported), --duration 10 (seconds measured per phase), --warmup 3, --connections 64,
 * --threads 2 (wrk), --workers 64 (refresh grants loaded concurrently), --skip-session,
 * --pg-url <admin URL> (default postgres://postgres@127.0.0.1:5432/postgres, or $BENCH_PG_URL;
 * loopback only).
 *
 * Tokens come from the real HTTP flow (README, "OAuth in five steps"): `bun src/cli.ts demo --json`
 * gives a user, then POST /v0/auth/register (one client per run: registration is limited to 20 per
 * address per hour), POST /v0/auth/login, POST /v0/auth/authorize with a PKCE challenge and
 * POST /v0/auth/token, once per grant. The servers get a random ENCRYPTION_KEY and a fresh
 * DATA_DIR, so nothing is written into the repository.
 *
 * Each server runs alone, in its own child process; wrk and the refresh load generator are other
 * processes. Every phase is bounded in time, and everything this script starts (processes,
 * database, temporary files) is stopped or removed on the way out, on errors and on Ctrl-C too.
 * Exit code 1 on any error, including a non-2xx response or a socket error under load.
 */
import { parseArgs } from 'node:util'
import { createHash, randomBytes } from 'node:crypto'
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { availableParallelism, cpus, loadavg, release, tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import {
  BUN,
  childEnv,
  errorCount,
  fail,
  fmtFixed,
  fmtInt,
  fmtMs,
  freePort,
  median,
  onCleanup,
  parseWrk,
  printTable,
  processCpuSeconds,
  redact,
  runCommand,
  runMain,
  startServer,
  stopChild,
  systemBusySeconds,
  wrkVersion,
  type Server,
  type WrkOptions,
  type WrkResult,
  benchOptions,
} from './harness.ts'

// ---------------------------------------------------------------------------------------------
// Options

const { values: opts } = parseArgs({
  options: {
    db: { type: 'string', default: 'postgres' },
    rounds: { type: 'string', default: '2' },
    duration: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '3' },
    connections: { type: 'string', default: '64' },
    threads: { type: 'string', default: '2' },
    workers: { type: 'string', default: '64' },
    'skip-session': { type: 'boolean', default: false },
    'pg-url': { type: 'string', default: process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres' },
    help: { type: 'boolean', short: 'h', default: false },
  },
})

const cli = benchOptions(import.meta.url)
const { integer, exitWithHelpIf } = cli
// Typed here so that TypeScript knows a call to it ends the script.
const usage: (message: string) => never = cli.usage
exitWithHelpIf(opts.help)

const DB = opts.db as 'postgres' | 'pglite'
if (DB !== 'postgres' && DB !== 'pglite') usage(`--db: postgres or pglite (got ${opts.db})`)
const ROUNDS = integer('rounds', opts.rounds, 1, 10)
const DURATION = integer('duration', opts.duration, 1, 120)
const WARMUP = integer('warmup', opts.warmup, 0, 60)
const WORKERS = integer('workers', opts.workers, 1, 256)
const LOAD = { threads: integer('threads', opts.threads, 1, 64), connections: integer('connections', opts.connections, 1, 1024) }
const BEARER_TARGET = 0.5
const REFRESH_TARGET = 1000
const REDIRECT_URI = 'http://127.0.0.1:8765/callback'
const PG_ADMIN_URL = (() => {
  let url: URL
  try {
    url = new URL(opts['pg-url']!)
  } catch {
    usage(`--pg-url: not a URL (got ${opts['pg-url']})`)
  }
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) usage(`--pg-url must point at loopback (got host ${url.hostname})`)
  return url
})()

/** Access, id and refresh tokens never reach the output. */
const redactAll = (text: string) => redact(text).replace(/(Bearer |rt_|eyJ)[A-Za-z0-9_.-]{8,}/g, '$1[REDACTED]')

// ---------------------------------------------------------------------------------------------
// Databases (as in bench/account.ts)

interface BenchDatabase {
  describe: string
  env: Record<string, string>
}

async function createPostgresDatabase(dataDir: string): Promise<BenchDatabase> {
  const admin = PG_ADMIN_URL
  const name = `bench_${crypto.randomUUID().replaceAll('-', '').slice(0, 12)}`
  const connect = () => postgres(admin.href, { max: 1, onnotice: () => {}, connect_timeout: 5 })
  const sql = connect()
  try {
    await sql.unsafe(`create database "${name}"`)
  } catch (error) {
    fail(`cannot create a database on ${admin.host} (${(error as Error).message}); is PostgreSQL running? (--pg-url)`)
  } finally {
    await sql.end({ timeout: 5 })
  }
  onCleanup(async () => {
    const dropper = connect()
    try {
      await dropper.unsafe(`drop database if exists "${name}" with (force)`)
    } finally {
      await dropper.end({ timeout: 5 })
    }
  })
  const url = new URL(admin.href)
  url.pathname = `/${name}`
  return { describe: `PostgreSQL, fresh database ${name} on ${admin.host} (dropped at the end)`, env: { DATABASE_URL: url.href, DATA_DIR: dataDir } }
}

function createPgliteDirectory(dataDir: string): BenchDatabase {
  return { describe: `PGlite, fresh DATA_DIR ${dataDir} (removed at the end)`, env: { DATA_DIR: dataDir } }
}

// ---------------------------------------------------------------------------------------------
// wrk with request headers (harness.ts's wrk() sends none)

async function wrkWithHeaders(url: string, headers: string[], durationSec: number, serverPid: number, options: WrkOptions): Promise<WrkResult> {
  const cmd = ['wrk', `-t${options.threads}`, `-c${options.connections}`, `-d${durationSec}s`, '--latency', ...headers.flatMap((h) => ['-H', h]), url]
  const started = performance.now()
  const busyBefore = systemBusySeconds()
  const serverBefore = processCpuSeconds(serverPid)
  const result = await runCommand(cmd, process.env as Record<string, string>, (durationSec + 20) * 1000)
  const serverCpu = processCpuSeconds(serverPid) - serverBefore
  const busy = systemBusySeconds() - busyBefore
  const wall = (performance.now() - started) / 1000
  if (result.code !== 0) fail(`wrk exited with ${result.code}:\n${redactAll(result.stderr || result.stdout)}`)
  const parsed = parseWrk(result.stdout)
  return {
    ...parsed,
    serverCores: serverCpu / wall,
    wrkCores: result.cpuSeconds / wall,
    otherCores: Math.max(0, busy - serverCpu - result.cpuSeconds) / wall,
    serverUsPerRequest: (serverCpu / parsed.requests) * 1e6,
  }
}

/** CPU seconds used so far by every local process named `postgres` (the server's backends among them). */
function postgresCpuSeconds(): number {
  let total = 0
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() !== 'postgres') continue
    } catch {
      continue
    }
    const seconds = processCpuSeconds(Number(entry))
    if (Number.isFinite(seconds)) total += seconds
  }
  return total
}

// ---------------------------------------------------------------------------------------------
// HTTP helpers for the OAuth flow

async function call(method: string, url: string, what: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: any; text: string }> {
  let response: Response
  try {
    response = await fetch(url, {
      method,
      headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    })
  } catch (error) {
    fail(`${what}: request failed (${(error as Error).message})`)
  }
  const text = await response.text()
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    json = undefined
  }
  return { status: response.status, json, text }
}

async function expectStatus(status: number, method: string, url: string, what: string, body?: unknown, headers?: Record<string, string>): Promise<any> {
  const result = await call(method, url, what, body, headers)
  if (result.status !== status) fail(`${what}: expected ${status}, got ${result.status}: ${redactAll(result.text).slice(0, 500)}`)
  if (result.json === undefined) fail(`${what}: the ${status} body is not JSON: ${redactAll(result.text).slice(0, 200)}`)
  return result.json
}

interface Tokens {
  access_token: string
  refresh_token: string
}

/** Steps 2–4 of the five steps: a PKCE pair, an authorization code, the tokens. One grant. */
async function newGrant(base: string, clientId: string, idToken: string): Promise<Tokens> {
  const verifier = randomBytes(48).toString('base64url')
  const challenge = createHash('sha256').update(verifier).digest('base64url')
  const authorized = await expectStatus(200, 'POST', `${base}/auth/authorize`, 'POST /v0/auth/authorize', {
    client_id: clientId,
    redirect_uri: REDIRECT_URI,
    id_token: idToken,
    code_challenge: challenge,
    code_challenge_method: 'S256',
    state: 'bench',
  })
  if (typeof authorized.code !== 'string') fail('POST /v0/auth/authorize answered no code')
  const tokens = await expectStatus(200, 'POST', `${base}/auth/token`, 'POST /v0/auth/token (authorization_code)', {
    grant_type: 'authorization_code',
    code: authorized.code,
    client_id: clientId,
    redirect_uri: REDIRECT_URI,
    code_verifier: verifier,
  })
  if (typeof tokens.access_token !== 'string' || typeof tokens.refresh_token !== 'string') fail('POST /v0/auth/token answered no token pair')
  return tokens
}

async function newGrants(base: string, clientId: string, idToken: string, n: number): Promise<Tokens[]> {
  const out: Tokens[] = []
  const concurrency = 8
  for (let i = 0; i < n; i += concurrency) {
    out.push(...(await Promise.all(Array.from({ length: Math.min(concurrency, n - i) }, () => newGrant(base, clientId, idToken)))))
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Measurements

interface Row {
  label: string
  kind: 'wrk' | 'refresh'
  requestsPerSec: number
  requests: number
  p50Ms: number | null
  p99Ms: number | null
  serverUsPerRequest: number
  /** CPU of the local PostgreSQL processes per request (refresh phases on PostgreSQL only). */
  postgresUsPerRequest: number | null
  serverCores: number
  loadCores: number
  otherCores: number
  errors: number
}

const measurements: Row[] = []
const problems: string[] = []

function printLine(label: string, row: Omit<Row, 'label' | 'kind'>, loadName: string): void {
  console.log(
    `  ${label.padEnd(38)} ${fmtInt(row.requestsPerSec).padStart(7)} req/s  p50 ${fmtMs(row.p50Ms).padStart(7)}  p99 ${fmtMs(row.p99Ms).padStart(7)}  ` +
      `server ${fmtFixed(row.serverUsPerRequest, 1).padStart(5)} µs CPU/req  ` +
      (row.postgresUsPerRequest === null ? '' : `PostgreSQL ${fmtFixed(row.postgresUsPerRequest, 0)} µs CPU/req  `) +
      `cores: server ${fmtFixed(row.serverCores, 2)} ${loadName} ${fmtFixed(row.loadCores, 2)} other ${fmtFixed(row.otherCores, 2)}` +
      `${row.errors ? '  ERRORS (see below)' : ''}`,
  )
}

async function loadWrk(label: string, server: Server, path: string, headers: string[]): Promise<void> {
  const url = `http://127.0.0.1:${server.port}${path}`
  const warmup = WARMUP > 0 ? await wrkWithHeaders(url, headers, WARMUP, server.proc.pid, LOAD) : undefined
  if (warmup && errorCount(warmup)) problems.push(`${label}, warm-up: errors under load\n${redactAll(warmup.raw).replace(/^/gm, '    ')}`)
  const result = await wrkWithHeaders(url, headers, DURATION, server.proc.pid, LOAD)
  const errors = errorCount(result)
  const row: Row = {
    label,
    kind: 'wrk',
    requestsPerSec: result.requestsPerSec,
    requests: result.requests,
    p50Ms: result.p50Ms,
    p99Ms: result.p99Ms,
    serverUsPerRequest: result.serverUsPerRequest,
    postgresUsPerRequest: null,
    serverCores: result.serverCores,
    loadCores: result.wrkCores,
    otherCores: result.otherCores,
    errors,
  }
  printLine(label, row, 'wrk')
  if (errors) {
    const s = result.socketErrors
    problems.push(
      `${label}: ${result.non2xx} non-2xx/3xx responses; socket errors connect ${s.connect}, read ${s.read}, write ${s.write}, timeout ${s.timeout}\n` +
        redactAll(result.raw).replace(/^/gm, '    '),
    )
  }
  measurements.push(row)
}

interface RefreshLoadResult {
  workers: number
  workersAlive: number
  successes: number
  failureCount: number
  failures: Array<{ worker: number; atMs: number; status: number; body: string }>
  elapsedSec: number
  perSec: number
  p50Ms: number | null
  p99Ms: number | null
  maxMs: number | null
  finalTokens: Array<string | null>
}

/** One run of bench/refresh-load.ts in its own process, with the server's CPU measured around it. */
async function runRefreshLoad(server: Server, clientId: string, refreshTokens: string[], durationSec: number, workDir: string) {
  const inputPath = join(workDir, `refresh-input-${crypto.randomUUID()}.json`)
  writeFileSync(
    inputPath,
    JSON.stringify({ url: `http://127.0.0.1:${server.port}/v0/auth/token/refresh`, clientId, refreshTokens, durationSec, requestTimeoutMs: 10_000 }),
    { mode: 0o600 },
  )
  try {
    const started = performance.now()
    const busyBefore = systemBusySeconds()
    const serverBefore = processCpuSeconds(server.proc.pid)
    const postgresBefore = DB === 'postgres' ? postgresCpuSeconds() : Number.NaN
    const run = await runCommand([BUN, 'bench/refresh-load.ts', inputPath], process.env as Record<string, string>, (durationSec + 30) * 1000)
    const serverCpu = processCpuSeconds(server.proc.pid) - serverBefore
    const postgresCpu = DB === 'postgres' ? postgresCpuSeconds() - postgresBefore : Number.NaN
    const busy = systemBusySeconds() - busyBefore
    const wall = (performance.now() - started) / 1000
    if (run.code !== 0) fail(`bench/refresh-load.ts exited with ${run.code}:\n${redactAll(run.stderr || run.stdout).slice(-2000)}`)
    let result: RefreshLoadResult
    try {
      result = JSON.parse(run.stdout)
    } catch {
      fail(`bench/refresh-load.ts did not print JSON:\n${redactAll(run.stdout).slice(0, 1000)}\n${redactAll(run.stderr).slice(0, 1000)}`)
    }
    const requests = result.successes + result.failureCount
    return {
      result,
      serverUsPerRequest: (serverCpu / requests) * 1e6,
      postgresUsPerRequest: DB === 'postgres' ? (postgresCpu / requests) * 1e6 : null,
      serverCores: serverCpu / wall,
      loadCores: run.cpuSeconds / wall,
      otherCores: Math.max(0, busy - serverCpu - run.cpuSeconds) / wall,
    }
  } finally {
    rmSync(inputPath, { force: true })
  }
}

async function loadRefresh(label: string, server: Server, base: string, clientId: string, grants: Tokens[], workDir: string): Promise<void> {
  let tokens = grants.map((g) => g.refresh_token)
  const check = (phase: string, result: RefreshLoadResult) => {
    if (result.failureCount) {
      problems.push(
        `${label}, ${phase}: ${result.failureCount} failed refreshes (${result.workers - result.workersAlive} of ${result.workers} chains broken); first failures:\n` +
          result.failures.map((f) => `    worker ${f.worker} at ${f.atMs} ms: HTTP ${f.status || '(no response)'} ${f.body}`).join('\n'),
      )
    }
  }
  if (WARMUP > 0) {
    const warm = await runRefreshLoad(server, clientId, tokens, WARMUP, workDir)
    check('warm-up', warm.result)
    tokens = warm.result.finalTokens.filter((t): t is string => t !== null)
    if (tokens.length === 0) fail(`${label}: every refresh chain broke during the warm-up`)
  }
  const run = await runRefreshLoad(server, clientId, tokens, DURATION, workDir)
  check('measured', run.result)
  const row: Row = {
    label,
    kind: 'refresh',
    requestsPerSec: run.result.perSec,
    requests: run.result.successes + run.result.failureCount,
    p50Ms: run.result.p50Ms,
    p99Ms: run.result.p99Ms,
    serverUsPerRequest: run.serverUsPerRequest,
    postgresUsPerRequest: run.postgresUsPerRequest,
    serverCores: run.serverCores,
    loadCores: run.loadCores,
    otherCores: run.otherCores,
    errors: run.result.failureCount,
  }
  printLine(`${label} (${tokens.length} workers)`, row, 'loadgen')
  measurements.push(row)

  // The last pair of a surviving chain must still work: its refresh token once more, and its
  // access token on /auth/session.
  const last = run.result.finalTokens.find((t): t is string => t !== null)
  if (last) {
    const pair = await expectStatus(200, 'POST', `${base}/auth/token/refresh`, `${label}: one more refresh after the load`, { refresh_token: last, client_id: clientId })
    await expectStatus(200, 'GET', `${base}/auth/session`, `${label}: GET /v0/auth/session with the last access token`, undefined, { authorization: `Bearer ${pair.access_token}` })
  }
}

/** Streams a server's stdout: counts request log lines (and those with a status >= 400), keeps the first warn/error lines. */
async function scanLog(path: string) {
  const result = { bytes: statSync(path).size, requestLines: 0, failedRequestLines: 0, failedExamples: [] as string[], warnCount: 0, warnings: [] as string[] }
  const decoder = new TextDecoder()
  let carry = ''
  const visit = (line: string) => {
    if (line.includes('"msg":"request"')) {
      result.requestLines++
      const status = Number(line.match(/"status":(\d+)/)?.[1] ?? 0)
      if (status >= 400) {
        result.failedRequestLines++
        if (result.failedExamples.length < 5) result.failedExamples.push(line.slice(0, 500))
      }
    }
    if (/"level":"(warn|error)"/.test(line)) {
      result.warnCount++
      if (result.warnings.length < 5) result.warnings.push(line.slice(0, 500))
    }
  }
  for await (const chunk of Bun.file(path).stream()) {
    const lines = (carry + decoder.decode(chunk, { stream: true })).split('\n')
    carry = lines.pop()!
    for (const line of lines) visit(line)
  }
  if (carry) visit(carry)
  return result
}

// ---------------------------------------------------------------------------------------------
// Main

async function main(): Promise<number> {
  const wrkName = await wrkVersion()
  if (!wrkName) {
    console.error('wrk is not installed: apt-get install wrk')
    return 1
  }
  const nproc = (await runCommand(['nproc'], process.env as Record<string, string>, 5000).catch(() => null))?.stdout.trim() || String(availableParallelism())
  const workDir = mkdtempSync(join(tmpdir(), 'bench-oauth-'))
  onCleanup(() => rmSync(workDir, { recursive: true, force: true }))
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-oauth-data-'))
  onCleanup(() => rmSync(dataDir, { recursive: true, force: true }))
  const encryptionKey = randomBytes(32).toString('base64url')

  console.log('OAuth: bearer GET /v0/account and /v0/auth/session vs a bare Bun.serve hello-world; the refresh grant')
  console.log(`date      ${new Date().toISOString()}`)
  console.log(`bun       ${Bun.version} (${Bun.revision.slice(0, 9)})`)
  console.log(`nproc     ${nproc} (${cpus()[0]?.model.trim() ?? 'unknown CPU'}), Linux ${release()}, load average ${loadavg().map((n) => n.toFixed(2)).join(' ')}`)
  console.log(`load      ${wrkName}: wrk -t${LOAD.threads} -c${LOAD.connections} -d${DURATION}s --latency -H 'Authorization: Bearer …' after a ${WARMUP}s warm-up, on 127.0.0.1`)
  console.log(`refresh   ${WORKERS} workers (bench/refresh-load.ts, its own process, Bun fetch keep-alive), each on its own grant, ${DURATION}s after a ${WARMUP}s warm-up`)
  console.log(`rounds    ${ROUNDS} × (bare, ours at LOG_LEVEL=info, ours at LOG_LEVEL=warn); the table shows medians`)

  const database = DB === 'postgres' ? await createPostgresDatabase(dataDir) : createPgliteDirectory(dataDir)
  console.log(`database  ${database.describe}`)
  console.log('logging   LOG_LEVEL=info: one JSON line per request on stdout, to a file in /tmp; LOG_LEVEL=warn: request logging off')
  console.log()

  let demo: { account: { id: string }; user: { email: string; password: string } } | undefined
  let clientId: string | undefined

  for (let round = 1; round <= ROUNDS; round++) {
    console.log(`round ${round}/${ROUNDS}`)

    {
      const port = freePort()
      const bare = await startServer(`bare-r${round}`, [BUN, 'bench/bare-server.ts'], childEnv({ PORT: String(port) }), port, '/', workDir)
      try {
        await expectStatus(200, 'GET', `http://127.0.0.1:${port}/`, 'bare server')
        await loadWrk('bare Bun.serve', bare, '/', [])
      } finally {
        await stopChild(bare.proc)
      }
    }

    for (const logLevel of ['info', 'warn'] as const) {
      const port = freePort()
      const base = `http://127.0.0.1:${port}/v0`
      const env = childEnv({ ...database.env, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: logLevel, ENCRYPTION_KEY: encryptionKey })
      const name = `server-${logLevel}-r${round}`
      const server = await startServer(name, [BUN, 'src/main.ts'], env, port, '/healthz', workDir)
      try {
        if (!demo) {
          // With PGlite the CLI hands the command to the running server over its socket in DATA_DIR.
          const run = await runCommand([BUN, 'src/cli.ts', 'demo', '--json'], env, 60_000)
          if (run.code !== 0) fail(`bun src/cli.ts demo --json exited with ${run.code}:\n${redactAll(run.stderr + run.stdout)}`)
          try {
            demo = JSON.parse(run.stdout)
          } catch {
            fail(`bun src/cli.ts demo --json did not print JSON:\n${redactAll(run.stdout)}\n${redactAll(run.stderr)}`)
          }
          if (!demo?.user?.email || !demo.user.password) fail('bun src/cli.ts demo --json printed no .user.email/.user.password')
        }
        if (!clientId) {
          const registered = await expectStatus(201, 'POST', `${base}/auth/register`, 'POST /v0/auth/register', {
            client_name: 'bench/oauth.ts',
            redirect_uris: [REDIRECT_URI],
          })
          clientId = registered.client_id
          if (typeof clientId !== 'string') fail('POST /v0/auth/register answered no client_id')
        }
        const login = await expectStatus(200, 'POST', `${base}/auth/login`, 'POST /v0/auth/login', { email: demo.user.email, password: demo.user.password })
        if (typeof login.id_token !== 'string') fail('POST /v0/auth/login answered no id_token')

        // The bearer token for the read phases, from its own grant.
        const [reader] = await newGrants(base, clientId, login.id_token, 1)
        const bearer = `Authorization: Bearer ${reader!.access_token}`
        const authHeader = { authorization: `Bearer ${reader!.access_token}` }
        const account = await expectStatus(200, 'GET', `${base}/account`, `GET /v0/account with a bearer token (LOG_LEVEL=${logLevel})`, undefined, authHeader)
        if (account.id !== demo.account.id) fail(`GET /v0/account answered account ${account.id}, expected ${demo.account.id}`)
        const session = await expectStatus(200, 'GET', `${base}/auth/session`, `GET /v0/auth/session (LOG_LEVEL=${logLevel})`, undefined, authHeader)
        if (session.active !== true || session.client_id !== clientId) fail(`GET /v0/auth/session answered ${JSON.stringify(session)}`)
        const refused = await call('GET', `${base}/account`, 'GET /v0/account with a wrong bearer token', undefined, { authorization: 'Bearer x' })
        if (refused.status !== 401) fail(`GET /v0/account with a wrong bearer token: expected 401, got ${refused.status}`)

        await loadWrk(`bearer account, ${DB}, LOG_LEVEL=${logLevel}`, server, '/v0/account', [bearer])
        if (!opts['skip-session']) await loadWrk(`bearer /auth/session, ${DB}, LOG_LEVEL=${logLevel}`, server, '/v0/auth/session', [bearer])

        const grants = await newGrants(base, clientId, login.id_token, WORKERS)
        await loadRefresh(`refresh grant, ${DB}, LOG_LEVEL=${logLevel}`, server, base, clientId, grants, workDir)
      } finally {
        await stopChild(server.proc)
      }
      if (server.proc.exitCode !== 0) problems.push(`${name} exited with ${server.proc.exitCode ?? server.proc.signalCode} after SIGTERM`)
      const stderrText = readFileSync(server.stderrPath, 'utf8').trim()
      if (stderrText) problems.push(`${name} wrote to stderr:\n${redactAll(stderrText.slice(-2000))}`)
      const log = await scanLog(server.stdoutPath)
      if (log.warnings.length) problems.push(`${name} logged ${log.warnCount} warn/error lines, e.g.:\n${redactAll(log.warnings.join('\n'))}`)
      // One 401 per server is ours (the wrong-token check above).
      if (log.failedRequestLines > 1) problems.push(`${name} logged ${log.failedRequestLines} requests with a status >= 400 (1 expected), e.g.:\n${redactAll(log.failedExamples.join('\n'))}`)
      console.log(`  (${name}: ${(log.bytes / 1e6).toFixed(1)} MB on stdout, ${fmtInt(log.requestLines)} request log lines, ${log.failedRequestLines} with status >= 400)`)
      rmSync(server.stdoutPath, { force: true })
    }
  }
  console.log()

  const labels = [...new Set(measurements.map((m) => m.label))]
  const summary = labels.map((label) => {
    const rows = measurements.filter((m) => m.label === label)
    const pick = (f: (r: Row) => number | null) => median(rows.map(f).filter((x): x is number => x !== null))
    return {
      label,
      kind: rows[0]!.kind,
      rps: pick((r) => r.requestsPerSec),
      p50: pick((r) => r.p50Ms),
      p99: pick((r) => r.p99Ms),
      us: pick((r) => r.serverUsPerRequest),
      pgUs: pick((r) => r.postgresUsPerRequest),
      serverCores: pick((r) => r.serverCores),
      otherCores: pick((r) => r.otherCores),
      maxOtherCores: Math.max(...rows.map((r) => r.otherCores).filter(Number.isFinite), 0),
      requests: rows.reduce((sum, r) => sum + r.requests, 0),
      errors: rows.reduce((sum, r) => sum + r.errors, 0),
    }
  })
  const bare = summary.find((s) => s.label === 'bare Bun.serve')!

  console.log(`Results: ${ROUNDS > 1 ? `medians of ${ROUNDS} rounds` : 'one round'}; wrk -t${LOAD.threads} -c${LOAD.connections} -d${DURATION}s; refresh: ${WORKERS} workers, ${DURATION}s`)
  printTable([
    ['configuration', 'req/s', 'vs bare', 'p50', 'p99', 'server µs CPU/req', 'vs bare (CPU)', 'PostgreSQL µs CPU/req', 'server cores', 'other cores', 'requests', 'errors'],
    ...summary.map((s) => [
      s.label,
      fmtInt(s.rps),
      s.kind === 'wrk' ? fmtFixed(s.rps / bare.rps, 2) : '–',
      fmtMs(s.p50),
      fmtMs(s.p99),
      fmtFixed(s.us, 1),
      s.kind === 'wrk' ? fmtFixed(bare.us / s.us, 2) : '–',
      fmtFixed(s.pgUs, 0),
      fmtFixed(s.serverCores, 2),
      fmtFixed(s.otherCores, 2),
      fmtInt(s.requests),
      String(s.errors),
    ]),
  ])
  console.log('"vs bare (CPU)": bare server CPU per request / this server\'s. Refresh rows: req/s are successful refreshes per second,')
  console.log('latencies are measured by the load generator (per request, keep-alive); "other cores" includes PostgreSQL\'s backends.')
  const busiest = Math.max(...summary.filter((s) => s.kind === 'wrk').map((s) => s.maxOtherCores))
  if (busiest > 0.2) console.log(`note: other processes used up to ${busiest.toFixed(2)} cores during a wrk phase`)
  console.log()

  if (problems.length) {
    console.log('PROBLEMS:')
    for (const problem of problems) console.log(`- ${problem}`)
    console.log()
  }

  const find = (label: string) => summary.find((s) => s.label === label)
  const info = find(`bearer account, ${DB}, LOG_LEVEL=info`)!
  const warn = find(`bearer account, ${DB}, LOG_LEVEL=warn`)!
  const refreshInfo = find(`refresh grant, ${DB}, LOG_LEVEL=info`)!
  const refreshWarn = find(`refresh grant, ${DB}, LOG_LEVEL=warn`)!
  console.log(`bearer account/bare ratio, ${DB}, LOG_LEVEL=warn (request logging off): ${fmtFixed(warn.rps / bare.rps, 2)}`)
  console.log(`bearer account/bare ratio in CPU per request, ${DB}, LOG_LEVEL=info: ${fmtFixed(bare.us / info.us, 2)}`)
  console.log(`refresh grants/s, ${DB}, LOG_LEVEL=warn: ${fmtInt(refreshWarn.rps)}`)
  const ratio = info.rps / bare.rps
  const refreshes = refreshInfo.rps
  const scope = DB === 'postgres' ? '' : ' (PGlite; the target is for PostgreSQL)'
  const verdict = (met: boolean) => (DB === 'postgres' && !met ? ' NOT MET' : '')
  console.log(`bearer account/bare ratio: ${fmtFixed(ratio, 2)} (target >= ${BEARER_TARGET.toFixed(2)})${verdict(ratio >= BEARER_TARGET)}${scope}`)
  console.log(`refresh grants/s: ${fmtInt(refreshes)} (target >= ${fmtInt(REFRESH_TARGET)})${verdict(refreshes >= REFRESH_TARGET)}${scope}`)
  return problems.length ? 1 : 0
}

await runMain('bench/oauth.ts', main)
