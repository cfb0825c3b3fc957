/**
 * What the load scripts in bench/ share, so that each script is only its own phases:
 *   - lifecycle: child processes that are always stopped, cleanups that always run, a main that
 *     always exits (runMain);
 *   - the command line: --help from the script's opening comment, one-line refusals (commandLine);
 *   - the service's storage: a fresh PostgreSQL database or PGlite directory, a temporary
 *     DATA_DIR and a random ENCRYPTION_KEY, all removed at the end (postgresStorage, pgliteStorage);
 *   - servers as child processes: the service, the bare Bun.serve baseline, any other (startServer);
 *   - CPU accounting from /proc, by process and by thread, so that a noisy machine shows up in the
 *     figures instead of silently skewing them (startCpu);
 *   - wrk runs, always bounded in time, and their parsing (wrk, wrkPhase);
 *   - a bearer token from the real OAuth flow over HTTP (registerOAuthClient, oauthAccessToken);
 *   - figures: percentiles, medians, the per-phase line, the comparison table (summarize, printComparison).
 */
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { createHash, randomBytes } from 'node:crypto'
import { availableParallelism, cpus, loadavg, release, tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util'
import type { Subprocess } from 'bun'
import postgres from 'postgres'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
export const BUN = process.execPath

class BenchError extends Error {}
export function fail(message: string): never {
  throw new BenchError(message)
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

// ---------------------------------------------------------------------------------------------
// Lifecycle. Everything started here is registered, and stopped by runCleanups(), which
// runMain() calls whatever happens; Ctrl-C and SIGTERM do the same. This registry is the only
// module-level state of the benchmarks: it has to be process-wide for the signal handlers.

const children = new Set<Subprocess>()
const cleanups: Array<() => void | Promise<void>> = []

export function onCleanup(cleanup: () => void | Promise<void>): void {
  cleanups.push(cleanup)
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
export async function stopChild(proc: Subprocess, graceMs = 5000): Promise<void> {
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

let cleaning: Promise<void> | undefined

/** Stops every child, then runs the cleanups newest first. Concurrent callers share one run. */
function runCleanups(): Promise<void> {
  cleaning ??= (async () => {
    for (const proc of [...children]) await stopChild(proc).catch(() => {})
    while (cleanups.length > 0) {
      const cleanup = cleanups.pop()!
      try {
        await cleanup()
      } catch (error) {
        console.error(`cleanup failed: ${(error as Error).message}`)
      }
    }
  })()
  return cleaning
}

let interrupted = false

function installSignalHandlers(): void {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      if (interrupted) return
      interrupted = true
      console.error(`\n${signal}: stopping everything this benchmark started…`)
      void runCleanups().finally(() => process.exit(130))
    })
  }
}

/**
 * Runs main() and the cleanups whatever happens, then exits with main's code (1 on error).
 * With `watchdogMs`, a run still going after that long is stopped, cleanups included, with code 1.
 */
export async function runMain(name: string, main: () => Promise<number>, options: { watchdogMs?: number } = {}): Promise<never> {
  installSignalHandlers()
  if (options.watchdogMs) {
    const watchdogMs = options.watchdogMs
    const watchdog = setTimeout(() => {
      console.error(`\n${name}: still running after ${watchdogMs / 1000} s; stopping everything it started`)
      void runCleanups().finally(() => process.exit(1))
    }, watchdogMs)
    onCleanup(() => clearTimeout(watchdog))
  }
  let exitCode = 1
  try {
    exitCode = await main()
  } catch (error) {
    // After Ctrl-C, the children it killed make main() fail: that is not news.
    if (!interrupted) console.error(error instanceof BenchError ? `\n${name}: ${error.message}` : error)
    exitCode = 1
  } finally {
    await runCleanups()
  }
  process.exit(interrupted ? 130 : exitCode)
}

function spawnChild(cmd: string[], options: Parameters<typeof Bun.spawn>[1]): Subprocess {
  const proc = Bun.spawn(cmd, options)
  children.add(proc)
  void proc.exited.then(() => children.delete(proc))
  return proc
}

export async function runCommand(
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

/** A fresh temporary directory, removed at the end. */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  onCleanup(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

export function freePort(): number {
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
export function childEnv(extra: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) {
    if (value === undefined) continue
    if (['DATABASE_URL', 'DATA_DIR', 'PORT', 'HOST', 'PUBLIC_URL', 'LOG_LEVEL', 'ENCRYPTION_KEY'].includes(name)) continue
    env[name] = value
  }
  return { ...env, ...extra }
}

// ---------------------------------------------------------------------------------------------
// The command line

/**
 * Parses a bench script's options (plus --help, which prints the script's opening comment). A
 * bad option, or a value out of range, exits 2 with one line naming it.
 */
export function commandLine<const O extends ParseArgsOptionsConfig>(scriptUrl: string, options: O) {
  const path = fileURLToPath(scriptUrl)
  const usage = (message: string): never => {
    console.error(`bench/${basename(path)}: ${message} (--help for the options)`)
    process.exit(2)
  }
  let values: Record<string, string | boolean | undefined> = {}
  try {
    values = parseArgs({ options: { ...options, help: { type: 'boolean', short: 'h', default: false } }, strict: true }).values as typeof values
  } catch (error) {
    usage((error as Error).message)
  }
  if (values.help) {
    console.log(readFileSync(path, 'utf8').split('*/')[0]!.replace(/^#!.*\n\/\*\*\n/, '').replace(/^ \* ?/gm, ''))
    process.exit(0)
  }
  type Name = keyof O & string
  return {
    usage,
    string: (name: Name) => String(values[name]),
    flag: (name: Name) => values[name] === true,
    /** The option's value as an integer within [min, max]; a trailing `s` (seconds) is allowed. */
    integer(name: Name, min: number, max: number): number {
      const raw = String(values[name])
      const n = Number(raw.replace(/s$/, ''))
      if (!Number.isInteger(n) || n < min || n > max) usage(`--${name}: an integer from ${min} to ${max} (got ${raw})`)
      return n
    },
    choice<const C extends string>(name: Name, choices: readonly C[]): C {
      const raw = String(values[name])
      if (!(choices as readonly string[]).includes(raw)) usage(`--${name}: ${choices.slice(0, -1).join(', ')} or ${choices.at(-1)} (got ${raw})`)
      return raw as C
    },
    /** A PostgreSQL URL that must point at loopback; `label` names where it came from (`--pg-url`, `DATABASE_URL`). */
    loopbackUrl(raw: string, label: string): URL {
      let url: URL
      try {
        url = new URL(raw)
      } catch {
        return usage(`${label}: not a URL (got ${raw})`)
      }
      if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) usage(`${label} must point at loopback (got host ${url.hostname})`)
      return url
    },
  }
}

// ---------------------------------------------------------------------------------------------
// The service's storage: what `bun src/main.ts` and `bun src/cli.ts` are given, so that nothing
// is written into the repository and nothing outlives the run.

const DEFAULT_PG_ADMIN_URL = 'postgres://postgres@127.0.0.1:5432/postgres'

export type Sql = ReturnType<typeof postgres>

/** One connection to `url`, quiet, that gives up connecting after 5 s. */
export function connect(url: URL, options: postgres.Options<{}> = {}): Sql {
  return postgres(url.href, { max: 1, onnotice: () => {}, connect_timeout: 5, ...options })
}

export interface Storage {
  describe: string
  /** DATABASE_URL (PostgreSQL only), DATA_DIR and ENCRYPTION_KEY, shared by every server of the run. */
  env: Record<string, string>
  /** The fresh database (PostgreSQL only). */
  database?: { name: string; url: URL }
}

function storageEnv(prefix: string): Record<string, string> {
  return { DATA_DIR: tempDir(`${prefix}-data-`), ENCRYPTION_KEY: randomBytes(32).toString('base64url') }
}

/** A fresh database `name` on the server of `admin`, dropped at the end. `hint` names the option that picks the server. */
export async function postgresStorage(admin: URL, name: string, hint: string, prefix = 'bench'): Promise<Storage> {
  const sql = connect(admin)
  try {
    await sql.unsafe(`create database "${name}"`)
  } catch (error) {
    fail(`cannot create a database on ${admin.host} (${(error as Error).message}); is PostgreSQL running? (${hint})`)
  } finally {
    await sql.end({ timeout: 5 })
  }
  onCleanup(async () => {
    const dropper = connect(admin)
    try {
      await dropper.unsafe(`drop database if exists "${name}" with (force)`)
    } finally {
      await dropper.end({ timeout: 5 })
    }
  })
  const url = new URL(admin.href)
  url.pathname = `/${name}`
  return {
    describe: `PostgreSQL, fresh database ${name} on ${admin.host} (dropped at the end)`,
    env: { DATABASE_URL: url.href, ...storageEnv(prefix) },
    database: { name, url },
  }
}

/** A fresh PGlite DATA_DIR, removed at the end. */
export function pgliteStorage(prefix = 'bench'): Storage {
  const env = storageEnv(prefix)
  return { describe: `PGlite, fresh DATA_DIR ${env.DATA_DIR} (removed at the end)`, env }
}

/** `bench_` and 12 random hex digits. */
const randomDatabaseName = () => `bench_${crypto.randomUUID().replaceAll('-', '').slice(0, 12)}`

// ---------------------------------------------------------------------------------------------
// Servers, each a child process with stdout and stderr going to files in the run's work directory

export interface Server {
  name: string
  port: number
  origin: string
  proc: Subprocess
  stdoutPath: string
  stderrPath: string
  /** The env it was started with (the CLI needs the same). */
  env: Record<string, string>
}

/** Starts a server process; resolves once `readyPath` on `readyPort` answers 2xx. */
export async function startServer(
  name: string,
  cmd: string[],
  env: Record<string, string>,
  readyPort: number,
  readyPath: string,
  workDir: string,
): Promise<Server> {
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
  let exited = false
  void proc.exited.then(() => (exited = true))
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    if (exited) {
      fail(`${name} exited with code ${proc.exitCode} before it was ready.\nstderr:\n${tail(stderrPath)}\nstdout:\n${tail(stdoutPath)}`)
    }
    try {
      const response = await fetch(`http://127.0.0.1:${readyPort}${readyPath}`, { signal: AbortSignal.timeout(1000) })
      await response.arrayBuffer()
      if (response.ok) return { name, port: readyPort, origin: `http://127.0.0.1:${readyPort}`, proc, stdoutPath, stderrPath, env }
    } catch {
      // not listening yet
    }
    await sleep(100)
  }
  await stopChild(proc)
  fail(`${name} was not ready on port ${readyPort} within 60 s.\nstderr:\n${tail(stderrPath)}`)
}

/** `bun src/main.ts` on a free loopback port, with `env` (the storage's, LOG_LEVEL, …). */
export function startService(name: string, env: Record<string, string>, workDir: string): Promise<Server> {
  const port = freePort()
  return startServer(name, [BUN, 'src/main.ts'], childEnv({ ...env, PORT: String(port), HOST: '127.0.0.1' }), port, '/healthz', workDir)
}

/** `bun src/cli.ts demo --json` against the service's storage: a user, an account, an API key. */
export async function createDemo(env: Record<string, string>, redactText: (text: string) => string): Promise<unknown> {
  // With PGlite the CLI hands the command to the running server over its socket in DATA_DIR.
  const run = await runCommand([BUN, 'src/cli.ts', 'demo', '--json'], env, 60_000)
  if (run.code !== 0) fail(`bun src/cli.ts demo --json exited with ${run.code}:\n${redactText(run.stderr + run.stdout)}`)
  try {
    return JSON.parse(run.stdout)
  } catch {
    return fail(`bun src/cli.ts demo --json did not print JSON:\n${redactText(run.stdout)}\n${redactText(run.stderr)}`)
  }
}

export interface LogScan {
  bytes: number
  requestLines: number
  /** Request lines with a status >= 400, and the first few of them. */
  failedRequestLines: number
  failedExamples: string[]
  /** warn and error lines, and the first few of them. */
  warnCount: number
  warnings: string[]
}

/** Streams a server's stdout (at LOG_LEVEL=info, hundreds of MB): counts its request and warning lines. */
async function scanLog(path: string): Promise<LogScan> {
  const result: LogScan = { bytes: statSync(path).size, requestLines: 0, failedRequestLines: 0, failedExamples: [], warnCount: 0, warnings: [] }
  const decoder = new TextDecoder()
  let carry = ''
  const visit = (line: string) => {
    if (line.includes('"msg":"request"')) {
      result.requestLines++
      if (Number(line.match(/"status":(\d+)/)?.[1] ?? 0) >= 400) {
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

/**
 * What a server left that is wrong: a bad exit (once it has been stopped), anything on stderr,
 * warn/error log lines, more requests with a status >= 400 than `expectedFailures`.
 */
export async function inspectServer(server: Server, redactText: (text: string) => string, expectedFailures = 0): Promise<{ problems: string[]; log: LogScan }> {
  const { name, proc } = server
  const problems: string[] = []
  const exited = proc.exitCode !== null || proc.signalCode !== null
  if (exited && proc.exitCode !== 0) problems.push(`${name} exited with ${proc.exitCode ?? proc.signalCode} after SIGTERM`)
  const stderrText = readFileSync(server.stderrPath, 'utf8').trim()
  if (stderrText) problems.push(`${name} wrote to stderr:\n${redactText(stderrText.slice(-2000))}`)
  const log = await scanLog(server.stdoutPath)
  if (log.warnings.length) problems.push(`${name} logged ${log.warnCount} warn/error lines, e.g.:\n${redactText(log.warnings.join('\n'))}`)
  if (log.failedRequestLines > expectedFailures) {
    problems.push(`${name} logged ${log.failedRequestLines} requests with a status >= 400 (${expectedFailures} expected), e.g.:\n${redactText(log.failedExamples.join('\n'))}`)
  }
  return { problems, log }
}

/**
 * The service, started for `use` and stopped after it, whatever happens; then what it left is
 * inspected (inspectServer), summed up in one line, and its stdout removed (at LOG_LEVEL=info
 * that is ~300 MB per phase).
 */
async function withService<T>(
  name: string,
  env: Record<string, string>,
  workDir: string,
  options: { redact: (text: string) => string; expectedFailures?: number },
  use: (server: Server) => Promise<T>,
): Promise<{ result: T; problems: string[] }> {
  const server = await startService(name, env, workDir)
  let result: T
  try {
    result = await use(server)
  } finally {
    await stopChild(server.proc)
  }
  const { problems, log } = await inspectServer(server, options.redact, options.expectedFailures)
  console.log(`  (${name}: ${(log.bytes / 1e6).toFixed(1)} MB on stdout, ${fmtInt(log.requestLines)} request log lines, ${log.failedRequestLines} with status >= 400)`)
  rmSync(server.stdoutPath, { force: true })
  return { result, problems }
}

// ---------------------------------------------------------------------------------------------
// CPU accounting (Linux /proc): who used the cores during a measured phase. Other processes on
// the machine (a test run, another benchmark) show up as "other" and explain outliers.

const CLOCK_TICKS = 100 // USER_HZ, 100 on every Linux we run on (getconf CLK_TCK)

/** utime + stime from a /proc/…/stat line, in seconds. */
function statCpuSeconds(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
}

/** CPU seconds a process has used so far, all its threads. */
export function processCpuSeconds(pid: number): number {
  try {
    return statCpuSeconds(readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return Number.NaN
  }
}

/** CPU seconds every core has spent busy so far. */
function systemBusySeconds(): number {
  try {
    const ticks = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number)
    const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = ticks
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS
  } catch {
    return Number.NaN
  }
}

/** CPU seconds so far of each thread of `pid`, by thread id; the main thread is named `main`. */
function threadCpuSeconds(pid: number): Map<string, { name: string; seconds: number }> {
  const threads = new Map<string, { name: string; seconds: number }>()
  let tids: string[]
  try {
    tids = readdirSync(`/proc/${pid}/task`)
  } catch {
    return threads
  }
  for (const tid of tids) {
    try {
      const seconds = statCpuSeconds(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8'))
      const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim()
      threads.set(tid, { name: tid === String(pid) ? 'main' : name, seconds })
    } catch {
      // the thread ended
    }
  }
  return threads
}

/**
 * CPU seconds so far of the local processes named `postgres`. With `database`, backends
 * connected to another database (their process title names it; a test run next to us) are
 * left out, the shared ones (WAL writer, checkpointer…) kept.
 */
export function postgresCpuSeconds(database?: string): number {
  let total = 0
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() !== 'postgres') continue
      if (database !== undefined) {
        const title = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ')
        const backend = /^postgres: \S+ \S+ (\S+) (\d[\d.:]*\(\d+\)|\[local\])/.exec(title)
        if (backend && backend[1] !== database) continue
      }
    } catch {
      continue
    }
    const seconds = processCpuSeconds(Number(entry))
    if (Number.isFinite(seconds)) total += seconds
  }
  return total
}

/** Threads of a Bun process, grouped: the JavaScript main thread, Workers, Bun's HTTP client, the rest (GC, JIT…). */
export type ThreadGroup = 'main' | 'Worker' | 'HTTP Client' | 'other'

export interface CpuUse<K extends string> {
  /** Seconds the interval lasted. */
  wall: number
  /** CPU seconds used over the interval by each source, and by every other process (`other`). */
  seconds: Record<K | 'other', number>
  /** CPU seconds used by the threads of `threadsOf`, by group (null without it). */
  threads: Record<ThreadGroup, number> | null
}

/** Cores used on average over the interval. */
export const cores = (use: CpuUse<string>, seconds: number) => seconds / use.wall

/**
 * Starts measuring the CPU that each source (a function answering CPU seconds so far, e.g.
 * processCpuSeconds of a pid) and, by thread, the process `threadsOf` use from now on; the
 * function it answers ends the interval. Sources that cannot be sampled while they run (a child
 * that has exited: its resourceUsage) are passed to that function as seconds. What the machine
 * used beyond all of them is `other`.
 */
export function startCpu<K extends string>(sources: Record<K, () => number>, threadsOf?: number) {
  const names = Object.keys(sources) as K[]
  const sample = (): number[] => names.map((name) => sources[name]())
  const at = performance.now()
  const busy = systemBusySeconds()
  const before = sample()
  const threadsBefore = threadsOf === undefined ? null : threadCpuSeconds(threadsOf)
  return <E extends string = never>(measuredElsewhere?: Record<E, number>): CpuUse<K | E> => {
    const threadsAfter = threadsOf === undefined ? null : threadCpuSeconds(threadsOf)
    const after = sample()
    const busyAfter = systemBusySeconds()
    const wall = (performance.now() - at) / 1000
    const seconds = { ...(measuredElsewhere ?? {}) } as Record<K | E | 'other', number>
    names.forEach((name, i) => (seconds[name] = after[i]! - before[i]!))
    let threads: Record<ThreadGroup, number> | null = null
    if (threadsAfter) {
      threads = { main: 0, Worker: 0, 'HTTP Client': 0, other: 0 }
      for (const [tid, thread] of threadsAfter) {
        const group = thread.name in threads ? (thread.name as ThreadGroup) : 'other'
        threads[group] += thread.seconds - (threadsBefore?.get(tid)?.seconds ?? 0)
      }
    }
    const accounted = Object.values<number>(seconds).reduce((sum, s) => sum + s, 0) + (threads ? sumThreads(threads) : 0)
    seconds.other = Math.max(0, busyAfter - busy - accounted)
    return { wall, seconds, threads }
  }
}

export const sumThreads = (threads: Record<ThreadGroup, number>) => threads.main + threads.Worker + threads['HTTP Client'] + threads.other

// ---------------------------------------------------------------------------------------------
// wrk

export interface WrkOptions {
  threads: number
  connections: number
  /** Request headers (`Name: value`), each passed as -H. */
  headers?: string[]
  /** What is printed of wrk's output when it fails (it may hold a credential). */
  redact?: (text: string) => string
}

export interface WrkResult {
  requestsPerSec: number
  requests: number
  avgMs: number | null
  p50Ms: number | null
  p99Ms: number | null
  non2xx: number
  socketErrors: { connect: number; read: number; write: number; timeout: number }
  /** CPU cores used on average during the run: by the server, by wrk, by every other process. */
  serverCores: number
  wrkCores: number
  otherCores: number
  /** Server CPU time per request in microseconds: the cost of one request, far less noisy than req/s. */
  serverUsPerRequest: number
  raw: string
}

function toMs(value: string, unit: string): number {
  const n = Number(value)
  return unit === 'us' ? n / 1000 : unit === 'ms' ? n : unit === 's' ? n * 1000 : unit === 'm' ? n * 60_000 : Number.NaN
}

function parseWrk(raw: string, redactText: (text: string) => string): Omit<WrkResult, 'serverCores' | 'wrkCores' | 'otherCores' | 'serverUsPerRequest'> {
  const rps = raw.match(/Requests\/sec:\s+([\d.]+)/)
  if (!rps) fail(`could not read wrk's output:\n${redactText(raw)}`)
  const latency = (label: string) => {
    const m = raw.match(new RegExp(`^\\s*${label}\\s+([\\d.]+)(us|ms|s|m)\\b`, 'm'))
    return m ? toMs(m[1]!, m[2]!) : null
  }
  const socket = raw.match(/Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/)
  return {
    requestsPerSec: Number(rps[1]),
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

/** API keys travel in the query string; never print one. */
export const redact = (text: string) => text.replace(/([?&]key=)[^\s&]+/g, '$1[REDACTED]')

const errorCount = (r: WrkResult) => r.non2xx + r.socketErrors.connect + r.socketErrors.read + r.socketErrors.write + r.socketErrors.timeout

/** One wrk run against `url`, bounded by its duration (and killed 20 s after it, whatever happens). */
export async function wrk(url: string, durationSec: number, serverPid: number, options: WrkOptions): Promise<WrkResult> {
  const redactText = options.redact ?? redact
  const headers = (options.headers ?? []).flatMap((header) => ['-H', header])
  const cmd = ['wrk', `-t${options.threads}`, `-c${options.connections}`, `-d${durationSec}s`, '--latency', ...headers, url]
  const stop = startCpu({ server: () => processCpuSeconds(serverPid) })
  const result = await runCommand(cmd, process.env as Record<string, string>, (durationSec + 20) * 1000)
  const cpu = stop({ wrk: result.cpuSeconds })
  if (result.code !== 0) fail(`wrk exited with ${result.code}:\n${redactText(result.stderr || result.stdout)}`)
  const parsed = parseWrk(result.stdout, redactText)
  return {
    ...parsed,
    serverCores: cores(cpu, cpu.seconds.server),
    wrkCores: cores(cpu, cpu.seconds.wrk),
    otherCores: cores(cpu, cpu.seconds.other),
    serverUsPerRequest: (cpu.seconds.server / parsed.requests) * 1e6,
  }
}

async function wrkVersion(): Promise<string | null> {
  if (!Bun.which('wrk')) return null
  const { stdout } = await runCommand(['wrk', '-v'], process.env as Record<string, string>, 5000)
  return stdout.split('\n')[0]!.replace(/ Copyright.*/, '').trim()
}

// ---------------------------------------------------------------------------------------------
// Measured phases of bench/account.ts and bench/oauth.ts: each loads one server and answers a
// Measurement (one row of the results) and the problems it saw.

export interface LoadSettings extends WrkOptions {
  /** Seconds measured per phase, after `warmup` seconds of the same load. */
  duration: number
  warmup: number
  redact: (text: string) => string
}

export interface Measurement {
  label: string
  kind: 'wrk' | 'refresh'
  requestsPerSec: number
  requests: number
  p50Ms: number | null
  p99Ms: number | null
  serverUsPerRequest: number
  /** CPU of the local PostgreSQL processes per request, where it was measured. */
  postgresUsPerRequest: number | null
  serverCores: number
  /** Cores used by the load generator (wrk, bench/refresh-load.ts). */
  loadCores: number
  otherCores: number
  errors: number
}

export interface Outcome {
  measurements: Measurement[]
  problems: string[]
}

export const combine = (outcomes: Outcome[]): Outcome => ({
  measurements: outcomes.flatMap((o) => o.measurements),
  problems: outcomes.flatMap((o) => o.problems),
})

const LABEL_WIDTH = 38

/** The start of a phase's line, printed before its load runs. */
export const printPhaseLabel = (label: string) => process.stdout.write(`  ${label.padEnd(LABEL_WIDTH)} `)

/** The rest of a phase's line, once it is measured. */
export function printPhaseFigures(m: Omit<Measurement, 'label' | 'kind'>, loadName: string): void {
  console.log(
    `${fmtInt(m.requestsPerSec).padStart(7)} req/s  p50 ${fmtMs(m.p50Ms).padStart(7)}  p99 ${fmtMs(m.p99Ms).padStart(7)}  ` +
      `server ${fmtFixed(m.serverUsPerRequest, 1).padStart(5)} µs CPU/req  ` +
      (m.postgresUsPerRequest === null ? '' : `PostgreSQL ${fmtFixed(m.postgresUsPerRequest, 0)} µs CPU/req  `) +
      `cores: server ${fmtFixed(m.serverCores, 2)} ${loadName} ${fmtFixed(m.loadCores, 2)} other ${fmtFixed(m.otherCores, 2)}` +
      `${m.errors ? '  ERRORS (see below)' : ''}`,
  )
}

/** `path` on `server` under wrk: a warm-up, then the measured run. Any non-2xx or socket error is a problem. */
export async function wrkPhase(label: string, server: Server, path: string, settings: LoadSettings): Promise<Outcome> {
  const url = `${server.origin}${path}`
  const problems: string[] = []
  const indented = (raw: string) => settings.redact(raw).replace(/^/gm, '    ')
  printPhaseLabel(label)
  const warmup = settings.warmup > 0 ? await wrk(url, settings.warmup, server.proc.pid, settings) : undefined
  if (warmup && errorCount(warmup)) problems.push(`${label}, warm-up: errors under load\n${indented(warmup.raw)}`)
  const result = await wrk(url, settings.duration, server.proc.pid, settings)
  const measurement: Measurement = {
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
    errors: errorCount(result),
  }
  printPhaseFigures(measurement, 'wrk')
  if (measurement.errors) {
    const s = result.socketErrors
    problems.push(`${label}: ${result.non2xx} non-2xx/3xx responses; socket errors connect ${s.connect}, read ${s.read}, write ${s.write}, timeout ${s.timeout}\n${indented(result.raw)}`)
  }
  return { measurements: [measurement], problems }
}

const BARE_LABEL = 'bare Bun.serve'

/** The baseline: bench/bare-server.ts alone on the machine, under the same load. */
async function barePhase(round: number, workDir: string, settings: LoadSettings): Promise<Outcome> {
  const port = freePort()
  const bare = await startServer(`bare-r${round}`, [BUN, 'bench/bare-server.ts'], childEnv({ PORT: String(port) }), port, '/', workDir)
  try {
    await expectStatus(200, 'GET', `${bare.origin}/`, 'bare server')
    return await wrkPhase(BARE_LABEL, bare, '/', settings)
  } finally {
    await stopChild(bare.proc)
  }
}

const LOG_LEVELS = ['info', 'warn'] as const
export type LogLevel = (typeof LOG_LEVELS)[number]

/** What bench/account.ts and bench/oauth.ts both take from their command line. */
export interface ComparisonSettings {
  db: 'postgres' | 'pglite'
  pgAdminUrl: URL
  rounds: number
  load: LoadSettings
}

/**
 * The command line of bench/account.ts and bench/oauth.ts: --db, --rounds, --duration, --warmup,
 * --connections, --threads and --pg-url, which they share, plus `extra` options of their own.
 */
export function comparisonCommandLine<const E extends ParseArgsOptionsConfig>(scriptUrl: string, defaults: { rounds: string }, redactText: (text: string) => string, extra: E) {
  const cli = commandLine(scriptUrl, {
    db: { type: 'string', default: 'postgres' },
    rounds: { type: 'string', default: defaults.rounds },
    duration: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '3' },
    connections: { type: 'string', default: '64' },
    threads: { type: 'string', default: '2' },
    'pg-url': { type: 'string', default: process.env.BENCH_PG_URL ?? DEFAULT_PG_ADMIN_URL },
    ...extra,
  })
  const settings: ComparisonSettings = {
    db: cli.choice('db', ['postgres', 'pglite']),
    rounds: cli.integer('rounds', 1, 10),
    load: {
      duration: cli.integer('duration', 1, 120),
      warmup: cli.integer('warmup', 0, 60),
      threads: cli.integer('threads', 1, 64),
      connections: cli.integer('connections', 1, 1024),
      redact: redactText,
    },
    pgAdminUrl: cli.loopbackUrl(cli.string('pg-url'), '--pg-url'),
  }
  return { cli, settings }
}

/** A run of bench/account.ts or bench/oauth.ts: our server at each log level against the bare one, round after round. */
export interface Comparison<S> extends ComparisonSettings {
  /** The run's first line. */
  title: string
  /** Of the temporary directories. */
  prefix: string
  /** The header lines after the machine's (the load, the rounds…), and after the database's (logging). */
  describe(wrkName: string): Array<[string, string]>
  logging: Array<[string, string]>
  /** Once, against a server of the run's storage (at LOG_LEVEL=warn), before the rounds: the data `measure` needs. */
  setup(server: Server): Promise<S>
  /** What is measured on our server at one log level, a fresh process in each round; `workDir` is the run's temporary directory. */
  measure(server: Server, logLevel: LogLevel, setup: S, workDir: string): Promise<Outcome>
  /** Requests with a status >= 400 that `measure` makes on purpose, per server. */
  expectedFailures?: number
  /** Settings of our server besides the storage's and LOG_LEVEL, in every phase. */
  serviceEnv?: Record<string, string>
}

/**
 * The storage (a fresh database or PGlite directory), `setup`, then each round: the bare
 * baseline alone on the machine, then our server once per log level, each a fresh process on
 * the same storage. Answers every configuration's medians and every problem seen.
 */
export async function compareWithBare<S>(c: Comparison<S>): Promise<{ summary: Summary[]; problems: string[] }> {
  const wrkName = await wrkVersion()
  if (!wrkName) fail('wrk is not installed: apt-get install wrk')
  const workDir = tempDir(`${c.prefix}-`)
  console.log(c.title)
  printFields([...machineFields('nproc', await nproc()), ...c.describe(wrkName)], 10)
  const storage = c.db === 'postgres' ? await postgresStorage(c.pgAdminUrl, randomDatabaseName(), '--pg-url', c.prefix) : pgliteStorage(c.prefix)
  printFields([['database', storage.describe], ...c.logging], 10)
  console.log()

  const inspect = { redact: c.load.redact, expectedFailures: c.expectedFailures ?? 0 }
  const setup = await withService('server-setup', { ...storage.env, ...c.serviceEnv, LOG_LEVEL: 'warn' }, workDir, { redact: c.load.redact }, c.setup)
  const outcomes: Outcome[] = [{ measurements: [], problems: setup.problems }]
  for (let round = 1; round <= c.rounds; round++) {
    console.log(`round ${round}/${c.rounds}`)
    outcomes.push(await barePhase(round, workDir, c.load))
    for (const logLevel of LOG_LEVELS) {
      const env = { ...storage.env, ...c.serviceEnv, LOG_LEVEL: logLevel }
      const run = await withService(`server-${logLevel}-r${round}`, env, workDir, inspect, (server) => c.measure(server, logLevel, setup.result, workDir))
      outcomes.push(run.result, { measurements: [], problems: run.problems })
    }
  }
  console.log()
  const { measurements, problems } = combine(outcomes)
  return { summary: summarize(measurements), problems }
}

// ---------------------------------------------------------------------------------------------
// HTTP checks before a load: the server must answer what the load expects

export async function call(
  method: string,
  url: string,
  what: string,
  options: { body?: unknown; headers?: Record<string, string> } = {},
): Promise<{ status: number; json: any; text: string }> {
  const { body, headers = {} } = options
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

/** The JSON body of a response that must have `status`. */
export async function expectStatus(
  status: number,
  method: string,
  url: string,
  what: string,
  options: { body?: unknown; headers?: Record<string, string>; redact?: (text: string) => string } = {},
): Promise<any> {
  const redactText = options.redact ?? redact
  const result = await call(method, url, what, options)
  if (result.status !== status) fail(`${what}: expected ${status}, got ${result.status}: ${redactText(result.text).slice(0, 500)}`)
  if (result.json === undefined) fail(`${what}: the ${status} body is not JSON: ${redactText(result.text).slice(0, 200)}`)
  return result.json
}

// ---------------------------------------------------------------------------------------------
// OAuth over HTTP, as a client does it (README, "OAuth in five steps"): a bearer token for a load

export const OAUTH_REDIRECT_URI = 'http://127.0.0.1:8765/callback'

/** Access, id and refresh tokens never reach the output (API keys neither). */
export const redactTokens = (text: string) => redact(text).replace(/(Bearer |rt_|eyJ)[A-Za-z0-9_.-]{8,}/g, '$1[REDACTED]')

/** Step 1: one registered client (registration is limited to 20 per address per hour: one per run). */
export async function registerOAuthClient(origin: string, clientName: string): Promise<string> {
  const registration = { client_name: clientName, redirect_uris: [OAUTH_REDIRECT_URI] }
  const registered = await expectStatus(201, 'POST', `${origin}/v0/auth/register`, 'POST /v0/auth/register', { body: registration, redact: redactTokens })
  if (typeof registered.client_id !== 'string') fail('POST /v0/auth/register answered no client_id')
  return registered.client_id
}

/** Steps 3–4: the user signs in, then a PKCE authorization code and its token pair. Answers the access token. */
export async function oauthAccessToken(origin: string, clientId: string, user: { email: string; password: string }): Promise<string> {
  const base = `${origin}/v0`
  const login = await expectStatus(200, 'POST', `${base}/auth/login`, 'POST /v0/auth/login', { body: user, redact: redactTokens })
  if (typeof login.id_token !== 'string') fail('POST /v0/auth/login answered no id_token')
  const verifier = randomBytes(48).toString('base64url')
  const challenge = createHash('sha256').update(verifier).digest('base64url')
  const authorize = { client_id: clientId, redirect_uri: OAUTH_REDIRECT_URI, id_token: login.id_token, code_challenge: challenge, code_challenge_method: 'S256', state: 'bench' }
  const authorized = await expectStatus(200, 'POST', `${base}/auth/authorize`, 'POST /v0/auth/authorize', { body: authorize, redact: redactTokens })
  if (typeof authorized.code !== 'string') fail('POST /v0/auth/authorize answered no code')
  const exchange = { grant_type: 'authorization_code', code: authorized.code, client_id: clientId, redirect_uri: OAUTH_REDIRECT_URI, code_verifier: verifier }
  const tokens = await expectStatus(200, 'POST', `${base}/auth/token`, 'POST /v0/auth/token (authorization_code)', { body: exchange, redact: redactTokens })
  if (typeof tokens.access_token !== 'string') fail('POST /v0/auth/token answered no access_token')
  return tokens.access_token
}

// ---------------------------------------------------------------------------------------------
// Figures and output

export const fmtInt = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–')
export const fmtMs = (n: number | null) => (n === null || !Number.isFinite(n) ? '–' : n < 1 ? `${n.toFixed(2)} ms` : `${n.toFixed(1)} ms`)
export const fmtFixed = (n: number | null, digits: number) => (n === null || !Number.isFinite(n) ? '–' : n.toFixed(digits))

function median(xs: number[]): number {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b)
  if (s.length === 0) return Number.NaN
  const mid = Math.floor(s.length / 2)
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
}

export interface Percentiles {
  n: number
  p50: number
  p95: number
  p99: number
  max: number
}

/** Nearest-rank percentiles (NaN when there is no value). */
export function percentiles(values: ArrayLike<number>): Percentiles {
  const sorted = Float64Array.from(values).sort()
  const rank = (q: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]! : Number.NaN)
  return { n: sorted.length, p50: rank(0.5), p95: rank(0.95), p99: rank(0.99), max: sorted.length ? sorted[sorted.length - 1]! : Number.NaN }
}

/** A plain-text table: the first `textColumns` columns left-aligned, the rest (numbers) right-aligned. */
export function printTable(rows: string[][], textColumns = 1): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)))
  rows.forEach((row, index) => {
    console.log(row.map((cell, i) => (i < textColumns ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  '))
    if (index === 0) console.log(widths.map((w) => '-'.repeat(w)).join('  '))
  })
}

/** `name` padded to `width`, then the value, one line each. */
export function printFields(fields: Array<[string, string]>, width: number): void {
  for (const [name, value] of fields) console.log(`${name.padEnd(width)}${value}`)
}

export function printProblems(problems: string[]): void {
  if (problems.length === 0) return
  console.log('PROBLEMS:')
  for (const problem of problems) console.log(`- ${problem}`)
  console.log()
}

/** When, with what, on what: the first lines of every run; `count` is how many cores, as `label` counts them. */
export function machineFields(label: 'nproc' | 'machine', count: string): Array<[string, string]> {
  return [
    ['date', new Date().toISOString()],
    ['bun', `${Bun.version} (${Bun.revision.slice(0, 9)})`],
    [label, `${count} (${cpus()[0]?.model.trim() ?? 'unknown CPU'}), Linux ${release()}, load average ${loadavg().map((n) => n.toFixed(2)).join(' ')}`],
  ]
}

/** `nproc`: the cores this process may use. */
async function nproc(): Promise<string> {
  return (await runCommand(['nproc'], process.env as Record<string, string>, 5000).catch(() => null))?.stdout.trim() || String(availableParallelism())
}

export interface Summary {
  label: string
  kind: Measurement['kind']
  rps: number
  p50: number
  p99: number
  us: number
  pgUs: number
  serverCores: number
  otherCores: number
  maxOtherCores: number
  requests: number
  errors: number
}

/** Medians per configuration (label) across rounds; totals of requests and errors. */
function summarize(measurements: Measurement[]): Summary[] {
  const labels = [...new Set(measurements.map((m) => m.label))]
  return labels.map((label) => {
    const rows = measurements.filter((m) => m.label === label)
    const pick = (f: (m: Measurement) => number | null) => median(rows.map(f).filter((x): x is number => x !== null))
    return {
      label,
      kind: rows[0]!.kind,
      rps: pick((m) => m.requestsPerSec),
      p50: pick((m) => m.p50Ms),
      p99: pick((m) => m.p99Ms),
      us: pick((m) => m.serverUsPerRequest),
      pgUs: pick((m) => m.postgresUsPerRequest),
      serverCores: pick((m) => m.serverCores),
      otherCores: pick((m) => m.otherCores),
      maxOtherCores: Math.max(...rows.map((m) => m.otherCores).filter(Number.isFinite), 0),
      requests: rows.reduce((sum, m) => sum + m.requests, 0),
      errors: rows.reduce((sum, m) => sum + m.errors, 0),
    }
  })
}

/** The results table: every configuration against the bare server, in req/s and in CPU per request. */
export function printComparison(summary: Summary[], options: { postgresColumn: boolean }): Summary {
  const bare = summary.find((s) => s.label === BARE_LABEL)!
  const postgres = (cells: string[]) => (options.postgresColumn ? cells : [])
  printTable([
    ['configuration', 'req/s', 'vs bare', 'p50', 'p99', 'server µs CPU/req', 'vs bare (CPU)', ...postgres(['PostgreSQL µs CPU/req']), 'server cores', 'other cores', 'requests', 'errors'],
    ...summary.map((s) => [
      s.label,
      fmtInt(s.rps),
      s.kind === 'wrk' ? fmtFixed(s.rps / bare.rps, 2) : '–',
      fmtMs(s.p50),
      fmtMs(s.p99),
      fmtFixed(s.us, 1),
      s.kind === 'wrk' ? fmtFixed(bare.us / s.us, 2) : '–',
      ...postgres([fmtFixed(s.pgUs, 0)]),
      fmtFixed(s.serverCores, 2),
      fmtFixed(s.otherCores, 2),
      fmtInt(s.requests),
      String(s.errors),
    ]),
  ])
  return bare
}
