#!/usr/bin/env bun
/**
 * Throughput of `GET /v0/account?key=<API key>` on our real server (`bun src/main.ts`) against a
 * bare `Bun.serve` hello-world (bench/bare-server.ts), measured in one run, with wrk, on loopback.
 *
 *   bun bench/account.ts                 # PostgreSQL on 127.0.0.1:5432 (a fresh database, dropped at the end)
 *   bun bench/account.ts --db pglite     # PGlite in a fresh temporary DATA_DIR (removed at the end)
 *
 * Options: --rounds 3 (bare, then our server at LOG_LEVEL=info, then at warn, repeated; medians
 * are reported), --duration 10 (seconds measured per phase), --warmup 3, --connections 64,
 * --threads 2, --skip-healthz (do not also load /healthz through our server),
 * --pg-url <admin URL> (default postgres://postgres@127.0.0.1:5432/postgres, or $BENCH_PG_URL;
 * loopback only).
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
  printProblems,
  redact,
  runMain,
  wrkPhase,
  type LogLevel,
  type Outcome,
  type Server,
} from './harness.ts'

const { cli, settings } = comparisonCommandLine(import.meta.url, { rounds: '3' }, redact, {
  'skip-healthz': { type: 'boolean', default: false },
})
const { db: DB, rounds: ROUNDS, load: LOAD } = settings
const SKIP_HEALTHZ = cli.flag('skip-healthz')
const TARGET = 0.5

interface Demo {
  accountId: string
  secret: string
}

/** The demo account and its API key, made by the CLI. */
async function setup(server: Server): Promise<Demo> {
  const demo = (await createDemo(server.env, redact)) as { account?: { id?: string }; api_key?: { secret?: string } }
  if (!demo.api_key?.secret || !demo.account?.id) fail('bun src/cli.ts demo --json printed no .account.id or .api_key.secret')
  return { accountId: demo.account.id, secret: demo.api_key.secret }
}

/** GET /v0/account?key=…, then /healthz, under wrk. */
async function measure(server: Server, logLevel: LogLevel, demo: Demo): Promise<Outcome> {
  const accountPath = `/v0/account?key=${encodeURIComponent(demo.secret)}`
  const body = await expectStatus(200, 'GET', `${server.origin}${accountPath}`, `GET /v0/account?key=… (LOG_LEVEL=${logLevel})`)
  if (body.id !== demo.accountId) fail(`GET /v0/account answered account ${body.id}, expected ${demo.accountId}`)
  const outcomes = [await wrkPhase(`account, ${DB}, LOG_LEVEL=${logLevel}`, server, accountPath, LOAD)]
  if (!SKIP_HEALTHZ) outcomes.push(await wrkPhase(`/healthz, ${DB}, LOG_LEVEL=${logLevel}`, server, '/healthz', LOAD))
  return combine(outcomes)
}

async function main(): Promise<number> {
  const { summary, problems } = await compareWithBare({
    title: 'GET /v0/account?key=… on our server vs a bare Bun.serve hello-world',
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
    ],
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

  const info = summary.find((s) => s.label === `account, ${DB}, LOG_LEVEL=info`)!
  const warn = summary.find((s) => s.label === `account, ${DB}, LOG_LEVEL=warn`)!
  console.log(`account/bare ratio, ${DB}, LOG_LEVEL=warn (request logging off): ${fmtFixed(warn.rps / bare.rps, 2)}`)
  console.log(`account/bare ratio in CPU per request, ${DB}, LOG_LEVEL=info: ${fmtFixed(bare.us / info.us, 2)}`)
  const ratio = info.rps / bare.rps
  if (DB === 'postgres') {
    console.log(`account/bare ratio: ${fmtFixed(ratio, 2)} (target >= ${TARGET.toFixed(2)})${ratio >= TARGET ? '' : ' NOT MET'}`)
  } else {
    console.log(`account/bare ratio: ${fmtFixed(ratio, 2)} (PGlite, LOG_LEVEL=info; the >= ${TARGET.toFixed(2)} target is for PostgreSQL)`)
  }
  return problems.length ? 1 : 0
}

await runMain('bench/account.ts', main)
