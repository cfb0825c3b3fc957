/**
 * What every script in bench/ shares:
 *   - lifecycle: child processes and cleanups that always run, a main that always exits, a
 *     watchdog (runMain);
 *   - the command line: --help from the script's opening comment, one-line refusals (commandLine);
 *   - the service's storage: a fresh PostgreSQL database or PGlite DATA_DIR and a random
 *     ENCRYPTION_KEY, removed at the end (storage);
 *   - servers as child processes, their logs checked at the end (startServer, startService, serverProblems);
 *   - CPU from /proc: per process, PostgreSQL's backends of one database, a broker found by its
 *     listening port (listenerPid), and the rest of the machine as "other", so that a busy machine
 *     shows in the figures (startCpu);
 *   - wrk runs (wrk), HTTP checks (call, expectStatus), percentiles, tables, met / NOT MET lines.
 */
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync } from 'node:fs'
import { randomBytes } from 'node:crypto'
import { cpus, loadavg, release, tmpdir } from 'node:os'
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
/** Epoch ms with sub-ms precision (the receiver's clock too). */
export const epochNow = () => performance.timeOrigin + performance.now()

// ---------------------------------------------------------------------------------------------
// Lifecycle: everything started is registered and stopped by runCleanups(), which runMain()
// calls whatever happens (an error, Ctrl-C, SIGTERM, the watchdog).

const children = new Set<Subprocess>()
const cleanups: Array<() => void | Promise<void>> = []
export const onCleanup = (cleanup: () => void | Promise<void>) => void cleanups.push(cleanup)

/** SIGTERM, then SIGKILL after `graceMs`. */
export async function stopChild(proc: Subprocess, graceMs = 5000): Promise<void> {
  if (proc.exitCode === null && proc.signalCode === null) {
    proc.kill('SIGTERM')
    if (!(await Promise.race([proc.exited.then(() => true), sleep(graceMs).then(() => false)]))) {
      proc.kill('SIGKILL')
      await proc.exited
    }
  }
  children.delete(proc)
}

let cleaning: Promise<void> | undefined
function runCleanups(): Promise<void> {
  cleaning ??= (async () => {
    for (const proc of [...children]) await stopChild(proc).catch(() => {})
    while (cleanups.length > 0) {
      try {
        await cleanups.pop()!()
      } catch (error) {
        console.error(`cleanup failed: ${(error as Error).message}`)
      }
    }
  })()
  return cleaning
}

let interrupted = false

/** Runs main() and the cleanups, then exits with main's code (1 on error, or when the watchdog fires). */
export async function runMain(name: string, main: () => Promise<number>, watchdogMs: number): Promise<never> {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      if (interrupted) return
      interrupted = true
      console.error(`\n${signal}: stopping everything this benchmark started…`)
      void runCleanups().finally(() => process.exit(130))
    })
  }
  const watchdog = setTimeout(() => {
    console.error(`\n${name}: still running after ${watchdogMs / 1000} s; stopping everything it started`)
    void runCleanups().finally(() => process.exit(1))
  }, watchdogMs)
  let exitCode = 1
  try {
    exitCode = await main()
  } catch (error) {
    if (!interrupted) console.error(error instanceof BenchError ? `\n${name}: ${error.message}` : error)
  } finally {
    clearTimeout(watchdog)
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

export async function runCommand(cmd: string[], env: Record<string, string>, timeoutMs: number) {
  const proc = spawnChild(cmd, { cwd: ROOT, env, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe', timeout: timeoutMs, killSignal: 'SIGKILL' })
  const [stdout, stderr] = await Promise.all([new Response(proc.stdout as ReadableStream).text(), new Response(proc.stderr as ReadableStream).text()])
  const code = await proc.exited
  const usage = proc.resourceUsage()
  return { code, stdout, stderr, cpuSeconds: usage ? Number(usage.cpuTime.total) / 1e6 : Number.NaN }
}

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

/** Env for a child: ours, minus anything that would pick another database, port or log level. */
export function childEnv(extra: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {}
  const dropped = ['DATABASE_URL', 'DATA_DIR', 'PORT', 'HOST', 'PUBLIC_URL', 'LOG_LEVEL', 'ENCRYPTION_KEY', 'METRICS_PORT']
  for (const [name, value] of Object.entries(process.env)) if (value !== undefined && !dropped.includes(name) && !name.startsWith('WEBHOOK_')) env[name] = value
  return { ...env, ...extra }
}

// ---------------------------------------------------------------------------------------------
// The command line

/** Parses the script's options (plus --help: its opening comment). A bad value exits 2 with one line. */
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
    string: (name: Name) => String(values[name]),
    flag: (name: Name) => values[name] === true,
    integer(name: Name, min: number, max: number): number {
      const n = Number(String(values[name]).replace(/s$/, ''))
      if (!Number.isInteger(n) || n < min || n > max) usage(`--${name}: an integer from ${min} to ${max} (got ${values[name]})`)
      return n
    },
    choice<const C extends string>(name: Name, choices: readonly C[]): C {
      const raw = String(values[name])
      if (!(choices as readonly string[]).includes(raw)) usage(`--${name}: one of ${choices.join(', ')} (got ${raw})`)
      return raw as C
    },
    /** A PostgreSQL URL that must point at loopback. */
    loopbackUrl(raw: string, label: string): URL {
      let url: URL | undefined
      try {
        url = new URL(raw)
      } catch {
        usage(`${label}: not a URL`)
      }
      if (!['127.0.0.1', 'localhost', '[::1]'].includes(url!.hostname)) usage(`${label} must point at loopback (got host ${url!.hostname})`)
      return url!
    },
  }
}

// ---------------------------------------------------------------------------------------------
// The service's storage

export type Sql = ReturnType<typeof postgres>
export const DEFAULT_PG_URL = 'postgres://postgres@127.0.0.1:5432/postgres'

/** One quiet connection to `url`. */
export const connect = (url: URL, options: postgres.Options<{}> = {}): Sql => postgres(url.href, { max: 1, onnotice: () => {}, connect_timeout: 5, ...options })

/**
 * `--otlp`: an OTLP/HTTP sink on loopback that answers every export at once and counts them, and the
 * server variables that turn tracing on at 100 % sampling (docs/operations.md#traces), so the server
 * pays for its spans and nothing downstream slows it.
 */
export function startOtlpSink(): { env: Record<string, string>; describe(): string } {
  let exports = 0
  let bytes = 0
  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    async fetch(request) {
      bytes += (await request.arrayBuffer()).byteLength
      exports++
      return new Response(new Uint8Array(0), { headers: { 'content-type': 'application/x-protobuf' } })
    },
  })
  onCleanup(() => server.stop(true))
  return {
    env: { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${server.port}`, OTEL_TRACES_SAMPLER: 'always_on', OTEL_BSP_MAX_QUEUE_SIZE: '65536' },
    describe: () => `${fmtInt(exports)} OTLP exports, ${fmtInt(bytes / 1024)} KiB (protobuf, 100 % sampled)`,
  }
}

export interface Storage {
  describe: string
  /** DATABASE_URL (PostgreSQL), DATA_DIR and ENCRYPTION_KEY for every server and CLI call of the run. */
  env: Record<string, string>
  /** PostgreSQL only: the fresh database. */
  database?: { name: string; url: URL }
}

/** A fresh database `bench_<prefix>_<random>` on the server of `admin` (dropped at the end), or a fresh PGlite DATA_DIR. */
export async function storage(kind: 'postgres' | 'pglite', admin: URL, prefix: string): Promise<Storage> {
  const env = { DATA_DIR: tempDir(`bench-${prefix}-data-`), ENCRYPTION_KEY: randomBytes(32).toString('base64url') }
  if (kind === 'pglite') return { describe: `PGlite, fresh DATA_DIR ${env.DATA_DIR}`, env }
  const name = `bench_${prefix}_${crypto.randomUUID().replaceAll('-', '').slice(0, 8)}`
  const sql = connect(admin)
  try {
    await sql.unsafe(`create database "${name}"`)
  } catch (error) {
    fail(`cannot create a database on ${admin.host} (${(error as Error).message}); is PostgreSQL running?`)
  } finally {
    await sql.end({ timeout: 5 })
  }
  onCleanup(async () => {
    const dropper = connect(admin)
    await dropper.unsafe(`drop database if exists "${name}" with (force)`).finally(() => dropper.end({ timeout: 5 }))
  })
  const url = new URL(admin.href)
  url.pathname = `/${name}`
  return { describe: `PostgreSQL, fresh database ${name} on ${admin.host} (dropped at the end)`, env: { ...env, DATABASE_URL: url.href }, database: { name, url } }
}

// ---------------------------------------------------------------------------------------------
// Servers: child processes, stdout and stderr to files in the run's work directory

export interface Server {
  name: string
  origin: string
  proc: Subprocess
  stdoutPath: string
  stderrPath: string
  env: Record<string, string>
}

const tail = (path: string) => {
  try {
    return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-20).join('\n')
  } catch {
    return '(no output)'
  }
}

/** Starts `cmd`; resolves once http://127.0.0.1:`readyPort``readyPath` answers 2xx (60 s at most). */
export async function startServer(name: string, cmd: string[], env: Record<string, string>, readyPort: number, readyPath: string, workDir: string): Promise<Server> {
  const stdoutPath = join(workDir, `${name}.stdout.log`)
  const stderrPath = join(workDir, `${name}.stderr.log`)
  const [out, err] = [openSync(stdoutPath, 'w'), openSync(stderrPath, 'w')]
  const proc = spawnChild(cmd, { cwd: ROOT, env, stdin: 'ignore', stdout: out, stderr: err })
  closeSync(out)
  closeSync(err)
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) fail(`${name} exited with code ${proc.exitCode} before it was ready.\nstderr:\n${tail(stderrPath)}\nstdout:\n${tail(stdoutPath)}`)
    try {
      const response = await fetch(`http://127.0.0.1:${readyPort}${readyPath}`, { signal: AbortSignal.timeout(1000) })
      await response.arrayBuffer()
      if (response.ok) return { name, origin: `http://127.0.0.1:${readyPort}`, proc, stdoutPath, stderrPath, env }
    } catch {}
    await sleep(100)
  }
  await stopChild(proc)
  fail(`${name} was not ready on port ${readyPort} within 60 s.\nstderr:\n${tail(stderrPath)}`)
}

/** `bun src/main.ts` on a free loopback port with `env` (storage, settings). */
export function startService(name: string, env: Record<string, string>, workDir: string): Promise<Server> {
  const port = freePort()
  return startServer(name, [BUN, 'src/main.ts'], childEnv({ ...env, PORT: String(port), HOST: '127.0.0.1' }), port, '/healthz', workDir)
}

/** API keys travel in the query string, tokens in headers: never print one. */
export const redact = (text: string) => text.replace(/([?&]key=)[^\s&"]+/g, '$1[REDACTED]').replace(/(Bearer |rt_|eyJ|sk_live_)[A-Za-z0-9_.-]{8,}/g, '$1[REDACTED]')

/**
 * What a server left that is wrong: a bad exit, anything on stderr, warn/error log lines, more
 * request lines with a status >= 400 than `expectedFailures`. Its stdout is read as a stream
 * (hundreds of MB at LOG_LEVEL=info) and then removed.
 */
export async function serverProblems(server: Server, expectedFailures = 0, warningsExpected = false): Promise<string[]> {
  const problems: string[] = []
  if (server.proc.exitCode !== null && server.proc.exitCode !== 0) problems.push(`${server.name} exited with ${server.proc.exitCode}`)
  const stderr = readFileSync(server.stderrPath, 'utf8').trim()
  if (stderr) problems.push(`${server.name} wrote to stderr:\n${redact(stderr.slice(-2000))}`)
  let failed = 0
  let warns = 0
  const examples: string[] = []
  let carry = ''
  const decoder = new TextDecoder()
  const visit = (line: string) => {
    const bad = line.includes('"msg":"request"') && Number(/"status":(\d+)/.exec(line)?.[1] ?? 0) >= 400
    const warn = /"level":"(warn|error)"/.test(line)
    failed += bad ? 1 : 0
    warns += warn ? 1 : 0
    if ((bad || (warn && !warningsExpected)) && examples.length < 3) examples.push(redact(line.slice(0, 400)))
  }
  for await (const chunk of Bun.file(server.stdoutPath).stream()) {
    const lines = (carry + decoder.decode(chunk, { stream: true })).split('\n')
    carry = lines.pop()!
    lines.forEach(visit)
  }
  visit(carry)
  if (failed > expectedFailures || (warns && !warningsExpected)) problems.push(`${server.name} logged ${failed} requests with status >= 400 (${expectedFailures} expected) and ${warns} warn/error lines, e.g.:\n${examples.join('\n')}`)
  else if (warns) console.log(`(${server.name} logged ${warns} warn/error lines, expected in this scenario)`)
  rmSync(server.stdoutPath, { force: true })
  return problems
}

// ---------------------------------------------------------------------------------------------
// CPU from /proc

const CLOCK_TICKS = 100 // USER_HZ

const statSeconds = (stat: string) => {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
}

/** CPU seconds a process (all its threads) has used so far. */
export function processCpuSeconds(pid: number): number {
  try {
    return statSeconds(readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return Number.NaN
  }
}

function systemBusySeconds(): number {
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number)
  return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS
}

/** CPU seconds so far of the local `postgres` processes, less the backends of other databases than `database`. */
export function postgresCpuSeconds(database?: string): number {
  let total = 0
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() !== 'postgres') continue
      const backend = /^postgres: \S+ \S+ (\S+) /.exec(readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' '))
      if (database !== undefined && backend && backend[1] !== database) continue
    } catch {
      continue
    }
    const seconds = processCpuSeconds(Number(entry))
    if (Number.isFinite(seconds)) total += seconds
  }
  return total
}

/** A disk stall (watchDiskStalls): requests in flight and none completed for at least this long. */
export const DISK_STALL_MS = 200

/**
 * Watches the block device of PostgreSQL's WAL (`pg_wal` under `dataDir`, or `dataDir` itself
 * when that cannot be read) in /proc/diskstats every 50 ms for stalls: DISK_STALL_MS or more in
 * which requests were in flight and none completed, and the longest such span of any length.
 * Every commit waits for the WAL's flush, so a disk that stops answering for 400 ms delays every
 * account's deliveries as long (docs/performance.md, issue 37, twentieth pass). A span is
 * measured from the last sample before it to its last stuck sample: at least that long. Null
 * when the device cannot be found (no /proc, a directory of another machine or a container).
 */
export function watchDiskStalls(dataDir: string): { device: string; stop(): { stalls: number; longestMs: number } } | null {
  const dev = [join(dataDir, 'pg_wal'), dataDir].map(deviceOf).find((found) => found !== null)
  if (!dev) return null
  // Fields per Documentation/admin-guide/iostats.rst: completions of reads (4), writes (8), discards (15) and flushes (19),
  // the last two absent on older kernels; requests in flight (12).
  const sample = () => {
    try {
      for (const line of readFileSync('/proc/diskstats', 'utf8').split('\n')) {
        const f = line.trim().split(/\s+/)
        if (`${f[0]} ${f[1]}` !== dev) continue
        const completed = [3, 7, 14, 18].reduce((sum, i) => sum + (Number(f[i]) || 0), 0)
        return { device: f[2]!, completed, inFlight: Number(f[11]) || 0 }
      }
    } catch {}
    return null
  }
  const first = sample()
  if (!first) return null
  let last = { ...first, at: performance.now() }
  let span: { from: number; to: number } | null = null
  let stalls = 0
  let longestMs = 0
  const endSpan = () => {
    if (!span) return
    if (span.to - span.from >= DISK_STALL_MS) stalls++
    longestMs = Math.max(longestMs, span.to - span.from)
    span = null
  }
  const timer = setInterval(() => {
    const current = sample()
    if (!current) return
    const at = performance.now()
    if (current.completed === last.completed && current.inFlight > 0) span = { from: span?.from ?? last.at, to: at }
    else endSpan()
    last = { ...current, at }
  }, 50)
  timer.unref()
  return {
    device: first.device,
    stop() {
      clearInterval(timer)
      endSpan()
      return { stalls, longestMs }
    },
  }
}

/** "major minor" of the block device holding `path`, as /proc/diskstats names it (Linux's new_encode_dev), or null. */
function deviceOf(path: string): string | null {
  try {
    const dev = statSync(path).dev
    return `${Math.floor(dev / 256) & 0xfff} ${(dev & 0xff) | ((Math.floor(dev / 1048576) & 0xfff) << 8)}`
  } catch {
    return null
  }
}

/** The process listening on loopback or any address at TCP `port` (a broker, whose CPU a phase reports), from /proc/net/tcp* and /proc/<pid>/fd. */
export function listenerPid(port: number): number | undefined {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, '0')}`
  const inodes = new Set<string>()
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    try {
      // Fields: sl, local address, remote address, state (0A: LISTEN), …, inode (the tenth).
      for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
        const f = line.trim().split(/\s+/)
        if (f[1]?.endsWith(hex) && f[3] === '0A') inodes.add(`socket:[${f[9]}]`)
      }
    } catch {}
  }
  if (inodes.size === 0) return undefined
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      for (const fd of readdirSync(`/proc/${entry}/fd`)) if (inodes.has(readlinkSync(`/proc/${entry}/fd/${fd}`))) return Number(entry)
    } catch {}
  }
  return undefined
}

export interface CpuUse {
  wall: number
  /** CPU seconds per source over the interval, and `other`: what the rest of the machine used. */
  seconds: Record<string, number>
}

/** Starts measuring the CPU of each source (CPU seconds so far); the function it answers ends the interval. */
export function startCpu(sources: Record<string, () => number>) {
  const names = Object.keys(sources)
  const at = performance.now()
  const busy = systemBusySeconds()
  const before = names.map((n) => sources[n]!())
  return (measuredElsewhere: Record<string, number> = {}): CpuUse => {
    const seconds: Record<string, number> = { ...measuredElsewhere }
    names.forEach((n, i) => (seconds[n] = sources[n]!() - before[i]!))
    const accounted = Object.values(seconds).reduce((a, b) => a + b, 0)
    seconds.other = Math.max(0, systemBusySeconds() - busy - accounted)
    return { wall: (performance.now() - at) / 1000, seconds }
  }
}

/** `server 0.85, postgres 0.90, …` cores on average over the interval. */
export const fmtCores = (use: CpuUse) => Object.entries(use.seconds).map(([name, s]) => `${name} ${(s / use.wall).toFixed(2)}`).join(', ')

// ---------------------------------------------------------------------------------------------
// wrk

const toMs = (value: string, unit: string) => Number(value) * ({ us: 0.001, ms: 1, s: 1000, m: 60_000 }[unit] ?? Number.NaN)

export async function wrkVersion(): Promise<string> {
  if (!Bun.which('wrk')) fail('wrk is not installed: apt-get install wrk')
  return (await runCommand(['wrk', '-v'], process.env as Record<string, string>, 5000)).stdout.split('\n')[0]!.replace(/ Copyright.*/, '').trim()
}

/** One wrk run, bounded by its duration (killed 20 s after it whatever happens); CPU of `serverPid`, wrk and the rest. */
export async function wrk(
  url: string,
  o: { seconds: number; threads: number; connections: number; headers?: string[]; serverPid: number; script?: { path: string; args: string[] } },
) {
  const script = o.script ? ['-s', o.script.path] : []
  const cmd = ['wrk', `-t${o.threads}`, `-c${o.connections}`, `-d${o.seconds}s`, '--latency', ...script, ...(o.headers ?? []).flatMap((h) => ['-H', h]), url, ...(o.script ? ['--', ...o.script.args] : [])]
  const stop = startCpu({ server: () => processCpuSeconds(o.serverPid) })
  const run = await runCommand(cmd, process.env as Record<string, string>, (o.seconds + 20) * 1000)
  const cpu = stop({ wrk: run.cpuSeconds })
  const raw = run.stdout
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(raw)
  if (run.code !== 0 || !rps) fail(`wrk exited with ${run.code}:\n${redact(run.stderr || raw)}`)
  const latency = (label: string) => {
    const m = new RegExp(`^\\s*${label}\\s+([\\d.]+)(us|ms|s|m)\\b`, 'm').exec(raw)
    return m ? toMs(m[1]!, m[2]!) : Number.NaN
  }
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(raw)
  const errors = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(raw)?.[1] ?? 0) + (socket ? socket.slice(1).reduce((a, b) => a + Number(b), 0) : 0)
  return { rps: Number(rps[1]), requests: Number(/(\d+) requests in/.exec(raw)?.[1]), p50: latency('50%'), p99: latency('99%'), errors, raw, cpu }
}

// ---------------------------------------------------------------------------------------------
// HTTP checks

export async function call(method: string, url: string, { body }: { body?: unknown } = {}) {
  let response: Response
  try {
    response = await fetch(url, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    })
  } catch (error) {
    fail(`${method} ${redact(url)}: ${(error as Error).message}`)
  }
  const text = await response.text()
  let json: any
  try {
    json = JSON.parse(text)
  } catch {}
  return { status: response.status, json, text }
}

/** The JSON body of a response that must have `status`. */
export async function expectStatus(status: number, method: string, url: string, options: { body?: unknown } = {}): Promise<any> {
  const result = await call(method, url, options)
  if (result.status !== status || result.json === undefined) fail(`${method} ${redact(url)}: expected ${status} and JSON, got ${result.status}: ${redact(result.text).slice(0, 500)}`)
  return result.json
}

// ---------------------------------------------------------------------------------------------
// Figures and output

export const fmtInt = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–')
export const fmtMs = (n: number) => (n === Infinity ? '∞' : !Number.isFinite(n) ? '–' : n < 1 ? `${n.toFixed(2)} ms` : n < 10_000 ? `${n.toFixed(1)} ms` : `${(n / 1000).toFixed(1)} s`)
export const fmtFixed = (n: number, digits: number) => (Number.isFinite(n) ? n.toFixed(digits) : '–')
export const verdict = (met: boolean) => (met ? 'met' : 'NOT MET')

export function median(xs: number[]): number {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b)
  if (s.length === 0) return Number.NaN
  const mid = Math.floor(s.length / 2)
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
}

/** Nearest-rank percentiles (NaN when there is no value; Infinity counts as a value). */
export function percentiles(values: ArrayLike<number>) {
  const s = Float64Array.from(values).sort()
  const rank = (q: number) => (s.length ? s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]! : Number.NaN)
  return { n: s.length, p50: rank(0.5), p95: rank(0.95), p99: rank(0.99), max: s.length ? s[s.length - 1]! : Number.NaN }
}

/** A plain-text table: the first column left-aligned, the others right-aligned. */
export function printTable(rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => (row[i] ?? '').length)))
  rows.forEach((row, index) => {
    console.log(row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ').trimEnd())
    if (index === 0) console.log(widths.map((w) => '-'.repeat(w)).join('  '))
  })
}

/** When, with what, on what: the first lines of every run. */
export function printMachine(extra: Array<[string, string]>): void {
  const fields: Array<[string, string]> = [
    ['date', new Date().toISOString()],
    ['bun', `${Bun.version} (${Bun.revision.slice(0, 9)})`],
    ['machine', `${cpus().length} cores (${cpus()[0]?.model.trim() ?? 'unknown CPU'}), Linux ${release()}, load average ${loadavg().map((n) => n.toFixed(2)).join(' ')}`],
    ...extra,
  ]
  for (const [name, value] of fields) console.log(`${name.padEnd(10)}${value}`)
}

export function printProblems(problems: string[]): void {
  if (problems.length === 0) return
  console.log('\nPROBLEMS:')
  for (const problem of problems) console.log(`- ${problem}`)
}
