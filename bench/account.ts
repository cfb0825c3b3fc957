#!/usr/bin/env bun
/**
 * Throughput of `GET /v0/account?key=<API key>` on our real server (`bun src/server.ts`) against a
 * bare `Bun.serve` hello-world (bench/bare-server.ts), measured in one run, with wrk, on loopback.
 *
 *   bun bench/account.ts                 # PostgreSQL on 127.0.0.1:5432 (a fresh database, dropped at the end)
 *   bun bench/account.ts --db pglite     # PGlite in a fresh temporary DATA_DIR
 *
 * Options: --duration 10 (seconds per measured phase), --warmup 3, --connections 64, --threads 2,
 * --rounds 1 (repeat bare/info/warn and report medians), --skip-healthz, --pg-url <admin URL>
 * (default postgres://postgres@127.0.0.1:5432/postgres; loopback only).
 *
 * Every server runs in its own child process; wrk is a third process. Each phase is bounded in
 * time, and everything this script starts (processes, database, temporary files) is stopped or
 * removed on the way out, including on errors and Ctrl-C.
 */
import { parseArgs } from 'node:util'
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, statSync } from 'node:fs'
import { availableParallelism, cpus, loadavg, release, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Subprocess } from 'bun'
import postgres from 'postgres'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const BUN = process.execPath

// ---------------------------------------------------------------------------------------------
// Options

const { values: opts } = parseArgs({
  options: {
    db: { type: 'string', default: 'postgres' },
    duration: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '3' },
    connections: { type: 'string', default: '64' },
    threads: { type: 'string', default: '2' },
    rounds: { type: 'string', default: '1' },
    'skip-healthz': { type: 'boolean', default: false },
    'pg-url': { type: 'string', default: process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres' },
    help: { type: 'boolean', short: 'h', default: false },
  },
})

if (opts.help) {
  console.log(readFileSync(fileURLToPath(import.meta.url), 'utf8').split('*/')[0]!.replace(/^#!.*\n\/\*\*\n/, ''))
  process.exit(0)
}

function usage(message: string): never {
  console.error(`bench/account.ts: ${message} (--help for the options)`)
  process.exit(2)
}

function seconds(name: string, raw: string, min: number, max: number): number {
  const n = Number(raw.replace(/s$/, ''))
  if (!Number.isInteger(n) || n < min || n > max) usage(`--${name}: an integer from ${min} to ${max} (got ${raw})`)
  return n
}

const DB = opts.db as 'postgres' | 'pglite'
if (DB !== 'postgres' && DB !== 'pglite') usage(`--db: postgres or pglite (got ${opts.db})`)
const DURATION = seconds('duration', opts.duration, 1, 120)
const WARMUP = seconds('warmup', opts.warmup, 0, 60)
const CONNECTIONS = seconds('connections', opts.connections, 1, 1024)
const THREADS = seconds('threads', opts.threads, 1, 64)
const ROUNDS = seconds('rounds', opts.rounds, 1, 10)
const TARGET = 0.5

// ---------------------------------------------------------------------------------------------
// Everything started here is registered for cleanup, which runs in `finally` and on signals.

class BenchError extends Error {}
function fail(message: string): never {
  throw new BenchError(message)
}

const children = new Set<Subprocess>()
const cleanups: Array<() => void | Promise<void>> = []

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

async function stopChild(proc: Subprocess, graceMs = 5000): Promise<void> {
  if (proc.exitCode === null && proc.signalCode === null) {
    proc.kill('SIGTERM')
    const exited = await Promise.race([proc.exited.then(() => true), sleep(graceMs).then(() => false)])
    if (!exited) {
      proc.kill('SIGKILL')
      await proc.exited
    }
  }
  children.delete(proc)
}

async function runCleanups(): Promise<void> {
  for (const proc of [...children]) await stopChild(proc).catch(() => {})
  while (cleanups.length > 0) {
    const cleanup = cleanups.pop()!
    try {
      await cleanup()
    } catch (error) {
      console.error(`cleanup failed: ${(error as Error).message}`)
    }
  }
}

let interrupted = false
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (interrupted) return
    interrupted = true
    console.error(`\n${signal}: stopping everything this benchmark started…`)
    void runCleanups().finally(() => process.exit(130))
  })
}

function spawnChild(cmd: string[], options: Parameters<typeof Bun.spawn>[1]): Subprocess {
  const proc = Bun.spawn(cmd, options)
  children.add(proc)
  void proc.exited.then(() => children.delete(proc))
  return proc
}

// ---------------------------------------------------------------------------------------------
// Helpers

function freePort(): number {
  const probe = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response() })
  const port = probe.port!
  void probe.stop(true)
  return port
}

function tail(path: string, lines = 20): string {
  try {
    return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n')
  } catch {
    return '(no output)'
  }
}

/** Env for a child: ours, minus anything inherited that would pick another database or port. */
function childEnv(extra: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) {
    if (value === undefined) continue
    if (['DATABASE_URL', 'DATA_DIR', 'PORT', 'HOST', 'PUBLIC_URL', 'LOG_LEVEL'].includes(name)) continue
    env[name] = value
  }
  return { ...env, ...extra }
}

interface Server {
  name: string
  port: number
  proc: Subprocess
  stdoutPath: string
  stderrPath: string
}

async function startServer(name: string, cmd: string[], env: Record<string, string>, port: number, readyPath: string, workDir: string): Promise<Server> {
  const stdoutPath = join(workDir, `${name}.stdout.log`)
  const stderrPath = join(workDir, `${name}.stderr.log`)
  const stdoutFd = openSync(stdoutPath, 'w')
  const stderrFd = openSync(stderrPath, 'w')
  let proc: Subprocess
  try {
    proc = spawnChild(cmd, { cwd: ROOT, env, stdin: 'ignore', stdout: stdoutFd, stderr: stderrFd })
  } finally {
    closeSync(stdoutFd)
    closeSync(stderrFd)
  }
  const server = { name, port, proc, stdoutPath, stderrPath }
  const deadline = Date.now() + 60_000
  let exited = false
  void proc.exited.then(() => (exited = true))
  while (Date.now() < deadline) {
    if (exited) {
      fail(`${name} exited with code ${proc.exitCode} before it was ready.\nstderr:\n${tail(stderrPath)}\nstdout:\n${tail(stdoutPath)}`)
    }
    try {
      const response = await fetch(`http://127.0.0.1:${port}${readyPath}`, { signal: AbortSignal.timeout(1000) })
      await response.arrayBuffer()
      if (response.ok) return server
    } catch {
      // not listening yet
    }
    await sleep(100)
  }
  await stopChild(proc)
  fail(`${name} was not ready on port ${port} within 60 s.\nstderr:\n${tail(stderrPath)}`)
}

async function runCommand(
  cmd: string[],
  env: Record<string, string>,
  timeoutMs: number,
): Promise<{ code: number; stdout: string; stderr: string; cpuSeconds: number }> {
  const proc = spawnChild(cmd, { cwd: ROOT, env, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe', timeout: timeoutMs, killSignal: 'SIGKILL' })
  const [stdout, stderr] = await Promise.all([new Response(proc.stdout as ReadableStream).text(), new Response(proc.stderr as ReadableStream).text()])
  const code = await proc.exited
  const usage = proc.resourceUsage()
  return { code, stdout, stderr, cpuSeconds: usage ? Number(usage.cpuTime.total) / 1e6 : Number.NaN }
}

// ---------------------------------------------------------------------------------------------
// CPU accounting (Linux /proc): who used the 2 cores during a measured phase. Other processes on
// the machine (a test run, another benchmark) show up as "other" and explain outliers.

const CLOCK_TICKS = 100

function processCpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS // utime + stime, all threads
  } catch {
    return Number.NaN
  }
}

function systemBusySeconds(): number {
  try {
    const [, ...ticks] = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/)
    const [user, nice, system, idle, iowait, irq, softirq, steal] = ticks.map(Number) as number[]
    void idle
    void iowait
    return (user! + nice! + system! + irq! + softirq! + steal!) / CLOCK_TICKS
  } catch {
    return Number.NaN
  }
}

// ---------------------------------------------------------------------------------------------
// wrk

interface WrkResult {
  requestsPerSec: number
  /** CPU cores used on average during the measured phase, by our server, by wrk, by everything else. */
  serverCores: number
  wrkCores: number
  otherCores: number
  /** Server CPU time per request, microseconds: the cost of one request, far less noisy than req/s. */
  serverUsPerRequest: number
  requests: number
  avgMs: number | null
  p50Ms: number | null
  p99Ms: number | null
  non2xx: number
  socketErrors: { connect: number; read: number; write: number; timeout: number }
  raw: string
}

function toMs(value: string, unit: string): number {
  const n = Number(value)
  switch (unit) {
    case 'us':
      return n / 1000
    case 'ms':
      return n
    case 's':
      return n * 1000
    case 'm':
      return n * 60_000
    default:
      return Number.NaN
  }
}

function parseWrk(raw: string): WrkResult {
  const rps = raw.match(/Requests\/sec:\s+([\d.]+)/)
  if (!rps) fail(`could not read wrk's output:\n${raw}`)
  const latency = (label: string) => {
    const m = raw.match(new RegExp(`^\\s*${label}\\s+([\\d.]+)(us|ms|s|m)\\b`, 'm'))
    return m ? toMs(m[1]!, m[2]!) : null
  }
  const socket = raw.match(/Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/)
  return {
    requestsPerSec: Number(rps[1]),
    serverCores: Number.NaN,
    wrkCores: Number.NaN,
    otherCores: Number.NaN,
    serverUsPerRequest: Number.NaN,
    requests: Number(raw.match(/(\d+) requests in/)?.[1] ?? Number.NaN),
    avgMs: latency('Latency'),
    p50Ms: latency('50%'),
    p99Ms: latency('99%'),
    non2xx: Number(raw.match(/Non-2xx or 3xx responses:\s+(\d+)/)?.[1] ?? 0),
    socketErrors: socket
      ? { connect: Number(socket[1]), read: Number(socket[2]), write: Number(socket[3]), timeout: Number(socket[4]) }
      : { connect: 0, read: 0, write: 0, timeout: 0 },
    raw,
  }
}

const redact = (text: string) => text.replace(/([?&]key=)[^\s&]+/g, '$1[REDACTED]')

async function wrk(url: string, durationSec: number, serverPid: number): Promise<WrkResult> {
  const cmd = ['wrk', `-t${THREADS}`, `-c${CONNECTIONS}`, `-d${durationSec}s`, '--latency', url]
  const started = performance.now()
  const busyBefore = systemBusySeconds()
  const serverBefore = processCpuSeconds(serverPid)
  const result = await runCommand(cmd, process.env as Record<string, string>, (durationSec + 20) * 1000)
  const serverCpu = processCpuSeconds(serverPid) - serverBefore
  const busy = systemBusySeconds() - busyBefore
  const wall = (performance.now() - started) / 1000
  if (result.code !== 0) fail(`wrk exited with ${result.code}:\n${redact(result.stderr || result.stdout)}`)
  const parsed = parseWrk(result.stdout)
  parsed.serverCores = serverCpu / wall
  parsed.wrkCores = result.cpuSeconds / wall
  parsed.otherCores = Math.max(0, busy - serverCpu - result.cpuSeconds) / wall
  parsed.serverUsPerRequest = (serverCpu / parsed.requests) * 1e6
  return parsed
}

interface Measurement {
  label: string
  db: string
  logLevel: string
  path: string
  result: WrkResult
}

const problems: string[] = []

async function load(label: string, db: string, logLevel: string, server: Server, pathAndQuery: string, displayPath: string): Promise<Measurement> {
  const url = `http://127.0.0.1:${server.port}${pathAndQuery}`
  process.stdout.write(`  ${label.padEnd(34)} warm-up ${WARMUP}s, measure ${DURATION}s … `)
  if (WARMUP > 0) await wrk(url, WARMUP, server.proc.pid)
  const result = await wrk(url, DURATION, server.proc.pid)
  const errors = result.socketErrors
  const errorCount = result.non2xx + errors.connect + errors.read + errors.write + errors.timeout
  console.log(
    `${fmtInt(result.requestsPerSec).padStart(7)} req/s, server ${result.serverUsPerRequest.toFixed(1)} µs CPU/req, ` +
      `CPU cores: server ${result.serverCores.toFixed(2)} wrk ${result.wrkCores.toFixed(2)} other ${result.otherCores.toFixed(2)}` +
      `${errorCount ? '  (ERRORS, see below)' : ''}`,
  )
  if (errorCount) {
    problems.push(
      `${label}: ${result.non2xx} non-2xx/3xx responses, socket errors connect ${errors.connect} read ${errors.read} write ${errors.write} timeout ${errors.timeout}\n` +
        redact(result.raw).replace(/^/gm, '    '),
    )
  }
  return { label, db, logLevel, path: displayPath, result }
}

async function expectOk(url: string, what: string): Promise<unknown> {
  let response: Response
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(5000) })
  } catch (error) {
    fail(`${what}: request failed (${(error as Error).message})`)
  }
  const text = await response.text()
  if (response.status !== 200) fail(`${what}: expected 200, got ${response.status} ${redact(text).slice(0, 500)}`)
  try {
    return JSON.parse(text)
  } catch {
    fail(`${what}: the 200 body is not JSON: ${text.slice(0, 200)}`)
  }
}

// ---------------------------------------------------------------------------------------------
// Databases

interface BenchDatabase {
  describe: string
  env: Record<string, string>
}

function assertLoopback(url: URL): void {
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) fail(`--pg-url must point at loopback (got host ${url.hostname})`)
}

async function createPostgresDatabase(): Promise<BenchDatabase> {
  const admin = new URL(opts['pg-url']!)
  assertLoopback(admin)
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
  cleanups.push(async () => {
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
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
  return { describe: `PGlite, fresh DATA_DIR ${dir} (removed at the end)`, env: { DATA_DIR: dir } }
}

// ---------------------------------------------------------------------------------------------
// Output

const fmtInt = (n: number) => Math.round(n).toLocaleString('en-US')
const fmtMs = (n: number | null) => (n === null ? '–' : n < 1 ? `${n.toFixed(2)} ms` : `${n.toFixed(1)} ms`)
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(s.length / 2)
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
}

function printTable(rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)))
  rows.forEach((row, index) => {
    console.log(row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  '))
    if (index === 0) console.log(widths.map((w) => '-'.repeat(w)).join('  '))
  })
}

// ---------------------------------------------------------------------------------------------
// Main

async function main(): Promise<number> {
  if (!Bun.which('wrk')) {
    console.error('wrk is not installed: apt-get install wrk')
    return 1
  }
  const wrkVersion = (await runCommand(['wrk', '-v'], process.env as Record<string, string>, 5000)).stdout.split('\n')[0]!.replace(/ Copyright.*/, '').trim()
  const nproc = (await runCommand(['nproc'], process.env as Record<string, string>, 5000).catch(() => null))?.stdout.trim() || String(availableParallelism())
  const workDir = mkdtempSync(join(tmpdir(), 'bench-account-'))
  cleanups.push(() => rmSync(workDir, { recursive: true, force: true }))

  console.log('GET /v0/account?key=… on our server vs a bare Bun.serve hello-world')
  console.log(`date        ${new Date().toISOString()}`)
  console.log(`bun         ${Bun.version} (${Bun.revision.slice(0, 9)})`)
  console.log(`nproc       ${nproc} (${cpus()[0]?.model.trim() ?? 'unknown CPU'}), Linux ${release()}, load average ${loadavg().map((n) => n.toFixed(2)).join(' ')}`)
  console.log(`load        ${wrkVersion}: wrk -t${THREADS} -c${CONNECTIONS} -d${DURATION}s --latency after a ${WARMUP}s warm-up, 127.0.0.1 only, ${ROUNDS} round(s)`)
  console.log('servers     each in its own child process (Bun.spawn), one at a time; wrk is a third process on the same 2 cores')

  const database = DB === 'postgres' ? await createPostgresDatabase() : createPgliteDirectory()
  console.log(`database    ${database.describe}`)
  console.log('logging     LOG_LEVEL=info writes one JSON line per request to stdout (here a file in /tmp);')
  console.log('            LOG_LEVEL=warn turns request logging off')
  console.log()

  const measurements: Measurement[] = []
  let secret: string | undefined
  let accountId: string | undefined
  const dbLabel = DB === 'postgres' ? 'postgres' : 'pglite'

  for (let round = 1; round <= ROUNDS; round++) {
    if (ROUNDS > 1) console.log(`round ${round}/${ROUNDS}`)

    // 1. The bare baseline, alone on the machine.
    {
      const port = freePort()
      const bare = await startServer(`bare-r${round}`, [BUN, 'bench/bare-server.ts'], childEnv({ PORT: String(port) }), port, '/', workDir)
      try {
        await expectOk(`http://127.0.0.1:${port}/`, 'bare server')
        measurements.push(await load('bare Bun.serve', '–', '–', bare, '/', '/'))
      } finally {
        await stopChild(bare.proc)
      }
    }

    // 2. Our server, once per log level, each a fresh process on the same database.
    for (const logLevel of ['info', 'warn'] as const) {
      const port = freePort()
      const env = childEnv({ ...database.env, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: logLevel })
      const name = `server-${logLevel}-r${round}`
      const server = await startServer(name, [BUN, 'src/server.ts'], env, port, '/healthz', workDir)
      try {
        if (secret === undefined) {
          // With PGlite the CLI forwards this to the running server over its unix socket.
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

        measurements.push(await load(`account, ${dbLabel}, LOG_LEVEL=${logLevel}`, dbLabel, logLevel, server, accountPath, '/v0/account?key=…'))
        if (!opts['skip-healthz']) {
          measurements.push(await load(`/healthz, ${dbLabel}, LOG_LEVEL=${logLevel}`, dbLabel, logLevel, server, '/healthz', '/healthz'))
        }
      } finally {
        await stopChild(server.proc)
      }
      const stdoutBytes = statSync(server.stdoutPath).size
      const stderrText = readFileSync(server.stderrPath, 'utf8').trim()
      if (server.proc.exitCode !== 0) problems.push(`${name} exited with code ${server.proc.exitCode ?? server.proc.signalCode}`)
      if (stderrText) problems.push(`${name} wrote to stderr:\n${stderrText.slice(-2000)}`)
      const warnings = readFileSync(server.stdoutPath, 'utf8')
        .split('\n')
        .filter((line) => /"level":"(warn|error)"/.test(line))
      if (warnings.length) problems.push(`${name} logged ${warnings.length} warn/error lines, e.g.:\n${warnings.slice(0, 5).join('\n')}`)
      console.log(`  (${name}: ${(stdoutBytes / 1e6).toFixed(1)} MB of stdout)`)
    }
    console.log()
  }

  // Medians per configuration across rounds.
  const labels = [...new Set(measurements.map((m) => m.label))]
  const summary = labels.map((label) => {
    const ms = measurements.filter((m) => m.label === label)
    const pick = (f: (r: WrkResult) => number | null) => {
      const xs = ms.map((m) => f(m.result)).filter((x): x is number => x !== null)
      return xs.length ? median(xs) : null
    }
    return {
      label,
      rps: pick((r) => r.requestsPerSec)!,
      p50: pick((r) => r.p50Ms),
      p99: pick((r) => r.p99Ms),
      usPerRequest: pick((r) => r.serverUsPerRequest)!,
      serverCores: pick((r) => r.serverCores)!,
      otherCores: pick((r) => r.otherCores)!,
      requests: ms.reduce((sum, m) => sum + m.result.requests, 0),
      errors: ms.reduce((sum, m) => sum + m.result.non2xx + Object.values(m.result.socketErrors).reduce((a, b) => a + b, 0), 0),
    }
  })
  const bareRps = summary.find((s) => s.label === 'bare Bun.serve')!.rps

  console.log(`Results (${ROUNDS > 1 ? `medians of ${ROUNDS} rounds` : 'one round'}; wrk -t${THREADS} -c${CONNECTIONS} -d${DURATION}s):`)
  const bareUs = summary.find((s) => s.label === 'bare Bun.serve')!.usPerRequest
  printTable([
    ['configuration', 'req/s', 'vs bare', 'p50', 'p99', 'server µs CPU/req', 'vs bare (CPU)', 'server cores', 'other cores', 'requests', 'errors'],
    ...summary.map((s) => [
      s.label,
      fmtInt(s.rps),
      (s.rps / bareRps).toFixed(2),
      fmtMs(s.p50),
      fmtMs(s.p99),
      s.usPerRequest.toFixed(1),
      (bareUs / s.usPerRequest).toFixed(2),
      s.serverCores.toFixed(2),
      s.otherCores.toFixed(2),
      fmtInt(s.requests),
      String(s.errors),
    ]),
  ])
  console.log('vs bare (CPU): bare server CPU per request / this one: the same ratio measured in CPU cost, less sensitive to')
  console.log('other load on the machine ("other cores" is CPU used by processes this script did not start).')
  console.log()

  if (problems.length) {
    console.log('PROBLEMS:')
    for (const problem of problems) console.log(`- ${problem}`)
    console.log()
  }

  const accountInfo = summary.find((s) => s.label === `account, ${dbLabel}, LOG_LEVEL=info`)!
  const accountWarn = summary.find((s) => s.label === `account, ${dbLabel}, LOG_LEVEL=warn`)!
  console.log(`account/bare ratio, ${dbLabel}, LOG_LEVEL=warn (no request logging): ${(accountWarn.rps / bareRps).toFixed(2)}`)
  const ratio = accountInfo.rps / bareRps
  const verdict = ratio >= TARGET ? '' : ' BELOW TARGET'
  if (DB === 'postgres') {
    console.log(`account/bare ratio: ${ratio.toFixed(2)} (target >= ${TARGET.toFixed(2)})${verdict}`)
  } else {
    console.log(`account/bare ratio: ${ratio.toFixed(2)} (PGlite, LOG_LEVEL=info; the >= ${TARGET.toFixed(2)} target is set for PostgreSQL)`)
  }
  return problems.length ? 1 : 0
}

let exitCode = 1
try {
  exitCode = await main()
} catch (error) {
  if (error instanceof BenchError) console.error(`\nbench/account.ts: ${error.message}`)
  else console.error(error)
  exitCode = 1
} finally {
  await runCleanups()
}
process.exit(exitCode)
