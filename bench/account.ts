#!/usr/bin/env bun
/**
 * Throughput of `GET /v0/account` on our real server (`bun src/main.ts`), with an API key
 * (`?key=`) and with a bearer token (`Authorization: Bearer`, from the OAuth flow), against a bare
 * `Bun.serve` hello-world (bench/bare-server.ts), measured in one run, with wrk, on loopback.
 * Issue 11's target: both at LOG_LEVEL=info (the default) ≥ 0.5 of bare.
 *
 *   bun bench/account.ts                 # PostgreSQL on 127.0.0.1:5432 (a fresh database, dropped at the end)
 *   bun bench/account.ts --db pglite     # PGlite in a fresh temporary DATA_DIR (removed at the end)
 *
 * Options: --rounds 3 (bare, then our server at LOG_LEVEL=info, then at warn, repeated; medians
 * are reported), --duration 10 (seconds measured per phase), --warmup 3, --connections 64,
 * --threads 2, --skip-healthz (do not also load /healthz through our server), --skip-bearer,
 * --pg-url <admin URL> (default postgres://postgres@127.0.0.1:5432/postgres, or $BENCH_PG_URL;
 * loopback only).
 *
 * The bearer token comes from the real HTTP flow (README, "OAuth in five steps"): one client
 * registered per run (POST /v0/auth/register), then for each server POST /v0/auth/login,
 * /v0/auth/authorize with a PKCE challenge and /v0/auth/token.
 *
 * Each server runs alone, in its own child process; wrk is a third process. Every phase is
 * bounded in time, and everything this script starts (processes, database, temporary files) is
 * stopped or removed on the way out, on errors and on Ctrl-C too. Exit code 1 on any error,
 * including a non-2xx response or a socket error under load.
 */
import {
  combine,
  comparisonCommandLine,
  compareWithBare,
  createDemo,
  expectStatus,
  fail,
  fmtFixed,
  printComparison,
  oauthAccessToken,
  printProblems,
  redactTokens,
  registerOAuthClient,
  runMain,
  wrkPhase,
  type LogLevel,
  type Outcome,
  type Server,
} from './harness.ts'

const { cli, settings } = comparisonCommandLine(import.meta.url, { rounds: '3' }, redactTokens, {
  'skip-healthz': { type: 'boolean', default: false },
  'skip-bearer': { type: 'boolean', default: false },
})
const { db: DB, rounds: ROUNDS, load: LOAD } = settings
const SKIP_HEALTHZ = cli.flag('skip-healthz')
const SKIP_BEARER = cli.flag('skip-bearer')
const TARGET = 0.5
const RATE_LIMIT = '100000'

interface Demo {
  accountId: string
  secret: string
  user: { email: string; password: string }
  /** The OAuth client registered for the run (none with --skip-bearer). */
  clientId: string | null
}

/** The demo account, its user and API key, made by the CLI; an OAuth client for the bearer token. */
async function setup(server: Server): Promise<Demo> {
  const demo = (await createDemo(server.env, redactTokens)) as { account?: { id?: string }; api_key?: { secret?: string }; user?: { email?: string; password?: string } }
  if (!demo.api_key?.secret || !demo.account?.id) fail('bun src/cli.ts demo --json printed no .account.id or .api_key.secret')
  if (!demo.user?.email || !demo.user.password) fail('bun src/cli.ts demo --json printed no .user.email/.user.password')
  const clientId = SKIP_BEARER ? null : await registerOAuthClient(server.origin, 'bench/account.ts')
  return { accountId: demo.account.id, secret: demo.api_key.secret, user: { email: demo.user.email, password: demo.user.password }, clientId }
}

/** GET /v0/account?key=…, GET /v0/account with a bearer token, then /healthz, under wrk. */
async function measure(server: Server, logLevel: LogLevel, demo: Demo): Promise<Outcome> {
  const accountPath = `/v0/account?key=${encodeURIComponent(demo.secret)}`
  const body = await expectStatus(200, 'GET', `${server.origin}${accountPath}`, `GET /v0/account?key=… (LOG_LEVEL=${logLevel})`, { redact: redactTokens })
  if (body.id !== demo.accountId) fail(`GET /v0/account answered account ${body.id}, expected ${demo.accountId}`)
  const outcomes = [await wrkPhase(`account, ${DB}, LOG_LEVEL=${logLevel}`, server, accountPath, LOAD)]
  if (demo.clientId) {
    const token = await oauthAccessToken(server.origin, demo.clientId, demo.user)
    const headers = { authorization: `Bearer ${token}` }
    const byBearer = await expectStatus(200, 'GET', `${server.origin}/v0/account`, `GET /v0/account with a bearer token (LOG_LEVEL=${logLevel})`, { headers, redact: redactTokens })
    if (byBearer.id !== demo.accountId) fail(`GET /v0/account with a bearer token answered account ${byBearer.id}, expected ${demo.accountId}`)
    outcomes.push(await wrkPhase(`bearer account, ${DB}, LOG_LEVEL=${logLevel}`, server, '/v0/account', { ...LOAD, headers: [`Authorization: Bearer ${token}`] }))
  }
  if (!SKIP_HEALTHZ) outcomes.push(await wrkPhase(`/healthz, ${DB}, LOG_LEVEL=${logLevel}`, server, '/healthz', LOAD))
  return combine(outcomes)
}

async function main(): Promise<number> {
  const { summary, problems } = await compareWithBare({
    title: 'GET /v0/account (API key, bearer token) on our server vs a bare Bun.serve hello-world',
    prefix: 'bench-account',
    ...settings,
    describe: (wrkName) => [
      ['load', `${wrkName}: wrk -t${LOAD.threads} -c${LOAD.connections} -d${LOAD.duration}s --latency after a ${LOAD.warmup}s warm-up, on 127.0.0.1`],
      ['rounds', `${ROUNDS} × (bare, ours at LOG_LEVEL=info, ours at LOG_LEVEL=warn); the table shows medians`],
      ['servers', 'each alone, in its own child process (Bun.spawn); wrk is a third process on the same cores'],
    ],
    logging: [
      ['logging', 'LOG_LEVEL=info: one JSON line per request on stdout, which goes to a file in /tmp;'],
      ['', 'LOG_LEVEL=warn: request logging is off'],
      ['limits', `API_RATE_LIMIT=${RATE_LIMIT}: every request is counted and answered with RateLimit headers, none refused`],
    ],
    // The rate limiter stays in the path being measured, set high enough never to refuse one wrk load.
    serviceEnv: { API_RATE_LIMIT: RATE_LIMIT },
    setup,
    measure,
  })

  console.log(`Results: ${ROUNDS > 1 ? `medians of ${ROUNDS} rounds` : 'one round'}, wrk -t${LOAD.threads} -c${LOAD.connections} -d${LOAD.duration}s`)
  const bare = printComparison(summary, { postgresColumn: false })
  console.log('"vs bare (CPU)" is the same comparison in CPU cost: bare server CPU per request / this server\'s.')
  console.log('"other cores": CPU used meanwhile by processes this script did not start; above ~0.2 the figures are noisy.')
  const busiest = Math.max(...summary.map((s) => s.maxOtherCores))
  if (busiest > 0.2) console.log(`note: other processes used up to ${busiest.toFixed(2)} cores during a measured phase`)
  console.log()
  printProblems(problems)

  for (const [name, prefix] of [['account', 'account'], ...(SKIP_BEARER ? [] : [['bearer account', 'bearer account']])] as const) {
    const info = summary.find((s) => s.label === `${prefix}, ${DB}, LOG_LEVEL=info`)!
    const warn = summary.find((s) => s.label === `${prefix}, ${DB}, LOG_LEVEL=warn`)!
    console.log(`${name}/bare ratio, ${DB}, LOG_LEVEL=warn (request logging off): ${fmtFixed(warn.rps / bare.rps, 2)}`)
    console.log(`${name}/bare ratio in CPU per request, ${DB}, LOG_LEVEL=info: ${fmtFixed(bare.us / info.us, 2)}`)
    const ratio = info.rps / bare.rps
    if (DB === 'postgres') {
      console.log(`${name}/bare ratio, LOG_LEVEL=info: ${fmtFixed(ratio, 2)} (target >= ${TARGET.toFixed(2)})${ratio >= TARGET ? ' met' : ' NOT MET'}`)
    } else {
      console.log(`${name}/bare ratio, LOG_LEVEL=info: ${fmtFixed(ratio, 2)} (PGlite; the >= ${TARGET.toFixed(2)} target is for PostgreSQL)`)
    }
  }
  return problems.length ? 1 : 0
}

await runMain('bench/account.ts', main)
