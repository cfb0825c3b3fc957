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
import { createHash, randomBytes } from 'node:crypto'
import { rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import {
  BUN,
  call,
  combine,
  comparisonCommandLine,
  compareWithBare,
  cores,
  createDemo,
  expectStatus,
  fail,
  fmtFixed,
  fmtInt,
  postgresCpuSeconds,
  printComparison,
  printPhaseFigures,
  printPhaseLabel,
  printProblems,
  processCpuSeconds,
  redact,
  runCommand,
  runMain,
  startCpu,
  wrkPhase,
  type LogLevel,
  type Measurement,
  type Outcome,
  type Server,
} from './harness.ts'
import type { RefreshLoadInput, RefreshLoadResult } from './refresh-load.ts'

/** Access, id and refresh tokens never reach the output. */
const redactAll = (text: string) => redact(text).replace(/(Bearer |rt_|eyJ)[A-Za-z0-9_.-]{8,}/g, '$1[REDACTED]')

const { cli, settings } = comparisonCommandLine(import.meta.url, { rounds: '2' }, redactAll, {
  workers: { type: 'string', default: '64' },
  'skip-session': { type: 'boolean', default: false },
})
const { db: DB, rounds: ROUNDS, load: LOAD } = settings
const WORKERS = cli.integer('workers', 1, 256)
const SKIP_SESSION = cli.flag('skip-session')
const BEARER_TARGET = 0.5
const REFRESH_TARGET = 1000
const REDIRECT_URI = 'http://127.0.0.1:8765/callback'

// ---------------------------------------------------------------------------------------------
// The OAuth flow, over HTTP as a client does it

interface Tokens {
  access_token: string
  refresh_token: string
}

interface Client {
  clientId: string
  accountId: string
  user: { email: string; password: string }
}

/** Steps 2–4 of the five steps: a PKCE pair, an authorization code, the tokens. One grant. */
async function newGrant(base: string, clientId: string, idToken: string): Promise<Tokens> {
  const verifier = randomBytes(48).toString('base64url')
  const challenge = createHash('sha256').update(verifier).digest('base64url')
  const authorize = { client_id: clientId, redirect_uri: REDIRECT_URI, id_token: idToken, code_challenge: challenge, code_challenge_method: 'S256', state: 'bench' }
  const authorized = await expectStatus(200, 'POST', `${base}/auth/authorize`, 'POST /v0/auth/authorize', { body: authorize, redact: redactAll })
  if (typeof authorized.code !== 'string') fail('POST /v0/auth/authorize answered no code')
  const exchange = { grant_type: 'authorization_code', code: authorized.code, client_id: clientId, redirect_uri: REDIRECT_URI, code_verifier: verifier }
  const tokens = await expectStatus(200, 'POST', `${base}/auth/token`, 'POST /v0/auth/token (authorization_code)', { body: exchange, redact: redactAll })
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

/**
 * Step 1, once per run: the demo user (from the CLI) and one registered client (registration is
 * limited to 20 per address per hour).
 */
async function setup(server: Server): Promise<Client> {
  const demo = (await createDemo(server.env, redactAll)) as { account?: { id?: string }; user?: { email?: string; password?: string } }
  if (!demo.user?.email || !demo.user.password || !demo.account?.id) fail('bun src/cli.ts demo --json printed no .user.email/.user.password/.account.id')
  const registration = { client_name: 'bench/oauth.ts', redirect_uris: [REDIRECT_URI] }
  const registered = await expectStatus(201, 'POST', `${server.origin}/v0/auth/register`, 'POST /v0/auth/register', { body: registration, redact: redactAll })
  if (typeof registered.client_id !== 'string') fail('POST /v0/auth/register answered no client_id')
  return { clientId: registered.client_id, accountId: demo.account.id, user: { email: demo.user.email, password: demo.user.password } }
}

// ---------------------------------------------------------------------------------------------
// The refresh grant under load

/** One run of bench/refresh-load.ts in its own process, with the server's (and PostgreSQL's) CPU measured around it. */
async function runRefreshLoad(server: Server, clientId: string, refreshTokens: string[], durationSec: number, workDir: string) {
  const inputPath = join(workDir, `refresh-input-${crypto.randomUUID()}.json`)
  const input: RefreshLoadInput = { url: `${server.origin}/v0/auth/token/refresh`, clientId, refreshTokens, durationSec, requestTimeoutMs: 10_000 }
  writeFileSync(inputPath, JSON.stringify(input), { mode: 0o600 })
  try {
    const stop = startCpu({ server: () => processCpuSeconds(server.proc.pid), postgres: () => (DB === 'postgres' ? postgresCpuSeconds() : 0) })
    const run = await runCommand([BUN, 'bench/refresh-load.ts', inputPath], process.env as Record<string, string>, (durationSec + 30) * 1000)
    const cpu = stop({ loadgen: run.cpuSeconds })
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
      serverUsPerRequest: (cpu.seconds.server / requests) * 1e6,
      postgresUsPerRequest: DB === 'postgres' ? (cpu.seconds.postgres / requests) * 1e6 : null,
      serverCores: cores(cpu, cpu.seconds.server),
      loadCores: cores(cpu, cpu.seconds.loadgen),
      // PostgreSQL's backends count as other processes, as they do in the wrk phases.
      otherCores: cores(cpu, cpu.seconds.other + (DB === 'postgres' ? cpu.seconds.postgres : 0)),
    }
  } finally {
    rmSync(inputPath, { force: true })
  }
}

/** The refresh grant: a warm-up and a measured run of `grants.length` chains, then a check that the last pair still works. */
async function refreshPhase(label: string, server: Server, clientId: string, grants: Tokens[], workDir: string): Promise<Outcome> {
  const problems: string[] = []
  const check = (phase: string, result: RefreshLoadResult) => {
    if (!result.failureCount) return
    problems.push(
      `${label}, ${phase}: ${result.failureCount} failed refreshes (${result.workers - result.workersAlive} of ${result.workers} chains broken); first failures:\n` +
        result.failures.map((f) => `    worker ${f.worker} at ${f.atMs} ms: HTTP ${f.status || '(no response)'} ${f.body}`).join('\n'),
    )
  }
  let tokens = grants.map((g) => g.refresh_token)
  if (LOAD.warmup > 0) {
    const warm = await runRefreshLoad(server, clientId, tokens, LOAD.warmup, workDir)
    check('warm-up', warm.result)
    tokens = warm.result.finalTokens.filter((t): t is string => t !== null)
    if (tokens.length === 0) fail(`${label}: every refresh chain broke during the warm-up`)
  }
  printPhaseLabel(`${label} (${tokens.length} workers)`)
  const run = await runRefreshLoad(server, clientId, tokens, LOAD.duration, workDir)
  check('measured', run.result)
  const { result, ...cpu } = run
  const measurement: Measurement = {
    label,
    kind: 'refresh',
    requestsPerSec: result.perSec,
    requests: result.successes + result.failureCount,
    p50Ms: result.p50Ms,
    p99Ms: result.p99Ms,
    ...cpu,
    errors: result.failureCount,
  }
  printPhaseFigures(measurement, 'loadgen')

  // The last pair of a surviving chain must still work: its refresh token once more, and its
  // access token on /auth/session.
  const last = result.finalTokens.find((t): t is string => t !== null)
  if (last) {
    const body = { refresh_token: last, client_id: clientId }
    const pair = await expectStatus(200, 'POST', `${server.origin}/v0/auth/token/refresh`, `${label}: one more refresh after the load`, { body, redact: redactAll })
    const headers = { authorization: `Bearer ${pair.access_token}` }
    await expectStatus(200, 'GET', `${server.origin}/v0/auth/session`, `${label}: GET /v0/auth/session with the last access token`, { headers, redact: redactAll })
  }
  return { measurements: [measurement], problems }
}

// ---------------------------------------------------------------------------------------------
// What is measured on our server, at each log level

/** Bearer reads under wrk, then the refresh grant. */
async function measure(server: Server, logLevel: LogLevel, client: Client, workDir: string): Promise<Outcome> {
  const base = `${server.origin}/v0`
  const { clientId } = client
  const login = await expectStatus(200, 'POST', `${base}/auth/login`, 'POST /v0/auth/login', { body: client.user, redact: redactAll })
  if (typeof login.id_token !== 'string') fail('POST /v0/auth/login answered no id_token')

  // The bearer token for the read phases, from its own grant.
  const [reader] = await newGrants(base, clientId, login.id_token, 1)
  const headers = { authorization: `Bearer ${reader!.access_token}` }
  const account = await expectStatus(200, 'GET', `${base}/account`, `GET /v0/account with a bearer token (LOG_LEVEL=${logLevel})`, { headers, redact: redactAll })
  if (account.id !== client.accountId) fail(`GET /v0/account answered account ${account.id}, expected ${client.accountId}`)
  const session = await expectStatus(200, 'GET', `${base}/auth/session`, `GET /v0/auth/session (LOG_LEVEL=${logLevel})`, { headers, redact: redactAll })
  if (session.active !== true || session.client_id !== clientId) fail(`GET /v0/auth/session answered ${JSON.stringify(session)}`)
  // The one request with a status >= 400 that each server is expected to log.
  const refused = await call('GET', `${base}/account`, 'GET /v0/account with a wrong bearer token', { headers: { authorization: 'Bearer x' } })
  if (refused.status !== 401) fail(`GET /v0/account with a wrong bearer token: expected 401, got ${refused.status}`)

  const bearer = { ...LOAD, headers: [`Authorization: Bearer ${reader!.access_token}`] }
  const outcomes = [await wrkPhase(`bearer account, ${DB}, LOG_LEVEL=${logLevel}`, server, '/v0/account', bearer)]
  if (!SKIP_SESSION) outcomes.push(await wrkPhase(`bearer /auth/session, ${DB}, LOG_LEVEL=${logLevel}`, server, '/v0/auth/session', bearer))
  const grants = await newGrants(base, clientId, login.id_token, WORKERS)
  outcomes.push(await refreshPhase(`refresh grant, ${DB}, LOG_LEVEL=${logLevel}`, server, clientId, grants, workDir))
  return combine(outcomes)
}

async function main(): Promise<number> {
  const { summary, problems } = await compareWithBare({
    title: 'OAuth: bearer GET /v0/account and /v0/auth/session vs a bare Bun.serve hello-world; the refresh grant',
    prefix: 'bench-oauth',
    ...settings,
    describe: (wrkName) => [
      ['load', `${wrkName}: wrk -t${LOAD.threads} -c${LOAD.connections} -d${LOAD.duration}s --latency -H 'Authorization: Bearer …' after a ${LOAD.warmup}s warm-up, on 127.0.0.1`],
      ['refresh', `${WORKERS} workers (bench/refresh-load.ts, its own process, Bun fetch keep-alive), each on its own grant, ${LOAD.duration}s after a ${LOAD.warmup}s warm-up`],
      ['rounds', `${ROUNDS} × (bare, ours at LOG_LEVEL=info, ours at LOG_LEVEL=warn); the table shows medians`],
    ],
    logging: [['logging', 'LOG_LEVEL=info: one JSON line per request on stdout, to a file in /tmp; LOG_LEVEL=warn: request logging off']],
    setup,
    measure,
    expectedFailures: 1,
  })

  console.log(`Results: ${ROUNDS > 1 ? `medians of ${ROUNDS} rounds` : 'one round'}; wrk -t${LOAD.threads} -c${LOAD.connections} -d${LOAD.duration}s; refresh: ${WORKERS} workers, ${LOAD.duration}s`)
  const bare = printComparison(summary, { postgresColumn: true })
  console.log('"vs bare (CPU)": bare server CPU per request / this server\'s. Refresh rows: req/s are successful refreshes per second,')
  console.log('latencies are measured by the load generator (per request, keep-alive); "other cores" includes PostgreSQL\'s backends.')
  const busiest = Math.max(...summary.filter((s) => s.kind === 'wrk').map((s) => s.maxOtherCores))
  if (busiest > 0.2) console.log(`note: other processes used up to ${busiest.toFixed(2)} cores during a wrk phase`)
  console.log()
  printProblems(problems)

  const find = (label: string) => summary.find((s) => s.label === label)!
  const info = find(`bearer account, ${DB}, LOG_LEVEL=info`)
  const warn = find(`bearer account, ${DB}, LOG_LEVEL=warn`)
  const refreshInfo = find(`refresh grant, ${DB}, LOG_LEVEL=info`)
  const refreshWarn = find(`refresh grant, ${DB}, LOG_LEVEL=warn`)
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
