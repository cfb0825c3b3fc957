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
import { parseArgs } from 'node:util'
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
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
  printTable,
  redact,
  runCommand,
  runMain,
  startServer,
  stopChild,
  wrk,
  wrkVersion,
  type Server,
  type WrkResult,
  benchOptions,
} from './harness.ts'

// ---------------------------------------------------------------------------------------------
// Options

const { values: opts } = parseArgs({
  options: {
    db: { type: 'string', default: 'postgres' },
    rounds: { type: 'string', default: '3' },
    duration: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '3' },
    connections: { type: 'string', default: '64' },
    threads: { type: 'string', default: '2' },
    'skip-healthz': { type: 'boolean', default: false },
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
const LOAD = { threads: integer('threads', opts.threads, 1, 64), connections: integer('connections', opts.connections, 1, 1024) }
const TARGET = 0.5
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

// ---------------------------------------------------------------------------------------------
// Databases

interface BenchDatabase {
  describe: string
  env: Record<string, string>
}

async function createPostgresDatabase(): Promise<BenchDatabase> {
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
  return { describe: `PostgreSQL, fresh database ${name} on ${admin.host} (dropped at the end)`, env: { DATABASE_URL: url.href } }
}

function createPgliteDirectory(): BenchDatabase {
  const dir = mkdtempSync(join(tmpdir(), 'bench-pglite-'))
  onCleanup(() => rmSync(dir, { recursive: true, force: true }))
  return { describe: `PGlite, fresh DATA_DIR ${dir} (removed at the end)`, env: { DATA_DIR: dir } }
}

// ---------------------------------------------------------------------------------------------
// Load phases

interface Measurement {
  label: string
  result: WrkResult
}

const measurements: Measurement[] = []
const problems: string[] = []

async function load(label: string, server: Server, pathAndQuery: string): Promise<void> {
  const url = `http://127.0.0.1:${server.port}${pathAndQuery}`
  process.stdout.write(`  ${label.padEnd(36)} `)
  const warmup = WARMUP > 0 ? await wrk(url, WARMUP, server.proc.pid, LOAD) : undefined
  if (warmup && errorCount(warmup)) problems.push(`${label}, warm-up: errors under load\n${redact(warmup.raw).replace(/^/gm, '    ')}`)
  const result = await wrk(url, DURATION, server.proc.pid, LOAD)
  const errors = errorCount(result)
  console.log(
    `${fmtInt(result.requestsPerSec).padStart(7)} req/s  p99 ${fmtMs(result.p99Ms).padStart(7)}  ` +
      `server ${fmtFixed(result.serverUsPerRequest, 1).padStart(4)} µs CPU/req  ` +
      `cores: server ${fmtFixed(result.serverCores, 2)} wrk ${fmtFixed(result.wrkCores, 2)} other ${fmtFixed(result.otherCores, 2)}` +
      `${errors ? '  ERRORS (see below)' : ''}`,
  )
  if (errors) {
    const s = result.socketErrors
    problems.push(
      `${label}: ${result.non2xx} non-2xx/3xx responses; socket errors connect ${s.connect}, read ${s.read}, write ${s.write}, timeout ${s.timeout}\n` +
        redact(result.raw).replace(/^/gm, '    '),
    )
  }
  measurements.push({ label, result })
}

async function expectOk(url: string, what: string): Promise<unknown> {
  let response: Response
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(5000) })
  } catch (error) {
    fail(`${what}: request failed (${(error as Error).message})`)
  }
  const text = await response.text()
  if (response.status !== 200) fail(`${what}: expected 200, got ${response.status}: ${redact(text).slice(0, 500)}`)
  try {
    return JSON.parse(text)
  } catch {
    fail(`${what}: the 200 body is not JSON: ${text.slice(0, 200)}`)
  }
}

/** Streams a server's stdout: counts request log lines and keeps the first warn/error lines. */
async function scanLog(path: string): Promise<{ bytes: number; requestLines: number; warnCount: number; warnings: string[] }> {
  const result = { bytes: statSync(path).size, requestLines: 0, warnCount: 0, warnings: [] as string[] }
  const decoder = new TextDecoder()
  let carry = ''
  const visit = (line: string) => {
    if (line.includes('"msg":"request"')) result.requestLines++
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
  const workDir = mkdtempSync(join(tmpdir(), 'bench-account-'))
  onCleanup(() => rmSync(workDir, { recursive: true, force: true }))

  console.log('GET /v0/account?key=… on our server vs a bare Bun.serve hello-world')
  console.log(`date      ${new Date().toISOString()}`)
  console.log(`bun       ${Bun.version} (${Bun.revision.slice(0, 9)})`)
  console.log(`nproc     ${nproc} (${cpus()[0]?.model.trim() ?? 'unknown CPU'}), Linux ${release()}, load average ${loadavg().map((n) => n.toFixed(2)).join(' ')}`)
  console.log(`load      ${wrkName}: wrk -t${LOAD.threads} -c${LOAD.connections} -d${DURATION}s --latency after a ${WARMUP}s warm-up, on 127.0.0.1`)
  console.log(`rounds    ${ROUNDS} × (bare, ours at LOG_LEVEL=info, ours at LOG_LEVEL=warn); the table shows medians`)
  console.log('servers   each alone, in its own child process (Bun.spawn); wrk is a third process on the same cores')

  const database = DB === 'postgres' ? await createPostgresDatabase() : createPgliteDirectory()
  const dbLabel = DB
  console.log(`database  ${database.describe}`)
  console.log('logging   LOG_LEVEL=info: one JSON line per request on stdout, which goes to a file in /tmp;')
  console.log('          LOG_LEVEL=warn: request logging is off')
  console.log()

  let secret: string | undefined
  let accountId: string | undefined

  for (let round = 1; round <= ROUNDS; round++) {
    console.log(`round ${round}/${ROUNDS}`)

    // The bare baseline, alone on the machine.
    {
      const port = freePort()
      const bare = await startServer(`bare-r${round}`, [BUN, 'bench/bare-server.ts'], childEnv({ PORT: String(port) }), port, '/', workDir)
      try {
        await expectOk(`http://127.0.0.1:${port}/`, 'bare server')
        await load('bare Bun.serve', bare, '/')
      } finally {
        await stopChild(bare.proc)
      }
    }

    // Our server, once per log level: a fresh process each time, on the same database.
    for (const logLevel of ['info', 'warn'] as const) {
      const port = freePort()
      const env = childEnv({ ...database.env, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: logLevel })
      const name = `server-${logLevel}-r${round}`
      const server = await startServer(name, [BUN, 'src/main.ts'], env, port, '/healthz', workDir)
      try {
        if (secret === undefined) {
          // With PGlite the CLI hands the command to the running server over its unix socket.
          const demo = await runCommand([BUN, 'src/cli.ts', 'demo', '--json'], env, 60_000)
          if (demo.code !== 0) fail(`bun src/cli.ts demo --json exited with ${demo.code}:\n${demo.stderr}${demo.stdout}`)
          let parsed: { account?: { id?: string }; api_key?: { secret?: string } }
          try {
            parsed = JSON.parse(demo.stdout)
          } catch {
            fail(`bun src/cli.ts demo --json did not print JSON:\n${demo.stdout}\n${demo.stderr}`)
          }
          secret = parsed.api_key?.secret
          accountId = parsed.account?.id
          if (!secret) fail(`bun src/cli.ts demo --json printed no .api_key.secret:\n${demo.stdout}`)
        }
        const accountPath = `/v0/account?key=${encodeURIComponent(secret)}`
        const body = (await expectOk(`http://127.0.0.1:${port}${accountPath}`, `GET /v0/account?key=… (LOG_LEVEL=${logLevel})`)) as { id?: string }
        if (accountId && body.id !== accountId) fail(`GET /v0/account answered account ${body.id}, expected ${accountId}`)

        await load(`account, ${dbLabel}, LOG_LEVEL=${logLevel}`, server, accountPath)
        if (!opts['skip-healthz']) await load(`/healthz, ${dbLabel}, LOG_LEVEL=${logLevel}`, server, '/healthz')
      } finally {
        await stopChild(server.proc)
      }
      if (server.proc.exitCode !== 0) problems.push(`${name} exited with ${server.proc.exitCode ?? server.proc.signalCode} after SIGTERM`)
      const stderrText = readFileSync(server.stderrPath, 'utf8').trim()
      if (stderrText) problems.push(`${name} wrote to stderr:\n${redact(stderrText.slice(-2000))}`)
      const log = await scanLog(server.stdoutPath)
      if (log.warnings.length) problems.push(`${name} logged ${log.warnCount} warn/error lines, e.g.:\n${redact(log.warnings.join('\n'))}`)
      console.log(`  (${name}: ${(log.bytes / 1e6).toFixed(1)} MB on stdout, ${fmtInt(log.requestLines)} request log lines)`)
      rmSync(server.stdoutPath, { force: true }) // at info that is ~300 MB per phase
    }
  }
  console.log()

  // Medians per configuration across rounds.
  const labels = [...new Set(measurements.map((m) => m.label))]
  const summary = labels.map((label) => {
    const results = measurements.filter((m) => m.label === label).map((m) => m.result)
    const pick = (f: (r: WrkResult) => number | null) => median(results.map(f).filter((x): x is number => x !== null))
    return {
      label,
      rps: pick((r) => r.requestsPerSec),
      p50: pick((r) => r.p50Ms),
      p99: pick((r) => r.p99Ms),
      us: pick((r) => r.serverUsPerRequest),
      serverCores: pick((r) => r.serverCores),
      otherCores: pick((r) => r.otherCores),
      maxOtherCores: Math.max(...results.map((r) => r.otherCores).filter(Number.isFinite), 0),
      requests: results.reduce((sum, r) => sum + r.requests, 0),
      errors: results.reduce((sum, r) => sum + errorCount(r), 0),
    }
  })
  const bare = summary.find((s) => s.label === 'bare Bun.serve')!

  console.log(`Results: ${ROUNDS > 1 ? `medians of ${ROUNDS} rounds` : 'one round'}, wrk -t${LOAD.threads} -c${LOAD.connections} -d${DURATION}s`)
  printTable([
    ['configuration', 'req/s', 'vs bare', 'p50', 'p99', 'server µs CPU/req', 'vs bare (CPU)', 'server cores', 'other cores', 'requests', 'errors'],
    ...summary.map((s) => [
      s.label,
      fmtInt(s.rps),
      fmtFixed(s.rps / bare.rps, 2),
      fmtMs(s.p50),
      fmtMs(s.p99),
      fmtFixed(s.us, 1),
      fmtFixed(bare.us / s.us, 2),
      fmtFixed(s.serverCores, 2),
      fmtFixed(s.otherCores, 2),
      fmtInt(s.requests),
      String(s.errors),
    ]),
  ])
  console.log('"vs bare (CPU)" is the same comparison in CPU cost: bare server CPU per request / this server\'s.')
  console.log('"other cores": CPU used meanwhile by processes this script did not start; above ~0.2 the figures are noisy.')
  const busiest = Math.max(...summary.map((s) => s.maxOtherCores))
  if (busiest > 0.2) console.log(`note: other processes used up to ${busiest.toFixed(2)} cores during a measured phase`)
  console.log()

  if (problems.length) {
    console.log('PROBLEMS:')
    for (const problem of problems) console.log(`- ${problem}`)
    console.log()
  }

  const info = summary.find((s) => s.label === `account, ${dbLabel}, LOG_LEVEL=info`)!
  const warn = summary.find((s) => s.label === `account, ${dbLabel}, LOG_LEVEL=warn`)!
  console.log(`account/bare ratio, ${dbLabel}, LOG_LEVEL=warn (request logging off): ${fmtFixed(warn.rps / bare.rps, 2)}`)
  console.log(`account/bare ratio in CPU per request, ${dbLabel}, LOG_LEVEL=info: ${fmtFixed(bare.us / info.us, 2)}`)
  const ratio = info.rps / bare.rps
  if (DB === 'postgres') {
    console.log(`account/bare ratio: ${fmtFixed(ratio, 2)} (target >= ${TARGET.toFixed(2)})${ratio >= TARGET ? '' : ' NOT MET'}`)
  } else {
    console.log(`account/bare ratio: ${fmtFixed(ratio, 2)} (PGlite, LOG_LEVEL=info; the >= ${TARGET.toFixed(2)} target is for PostgreSQL)`)
  }
  return problems.length ? 1 : 0
}

await runMain('bench/account.ts', main)
