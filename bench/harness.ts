/**
 * What the load scripts in bench/ share: child processes that are always stopped, wrk runs that
 * are always bounded in time, and CPU accounting from /proc so that a noisy machine shows up in
 * the figures instead of silently skewing them.
 */
import { closeSync, openSync, readFileSync } from 'node:fs'
import { basename, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Subprocess } from 'bun'

export const ROOT = fileURLToPath(new URL('..', import.meta.url))
export const BUN = process.execPath

export class BenchError extends Error {}
export function fail(message: string): never {
  throw new BenchError(message)
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

// ---------------------------------------------------------------------------------------------
// Everything started here is registered, and stopped by runCleanups(): call it in `finally`;
// installSignalHandlers() makes Ctrl-C and SIGTERM do the same.

const children = new Set<Subprocess>()
const cleanups: Array<() => void | Promise<void>> = []

export function onCleanup(cleanup: () => void | Promise<void>): void {
  cleanups.push(cleanup)
}

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
export function runCleanups(): Promise<void> {
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

export function installSignalHandlers(): void {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      if (interrupted) return
      interrupted = true
      console.error(`\n${signal}: stopping everything this benchmark started…`)
      void runCleanups().finally(() => process.exit(130))
    })
  }
}

/** Runs main() and the cleanups whatever happens, then exits with main's code (1 on error). */
export async function runMain(name: string, main: () => Promise<number>): Promise<never> {
  installSignalHandlers()
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

export function spawnChild(cmd: string[], options: Parameters<typeof Bun.spawn>[1]): Subprocess {
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

export function freePort(): number {
  const probe = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response() })
  const port = probe.port!
  void probe.stop(true)
  return port
}

export function tail(path: string, lines = 20): string {
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
    if (['DATABASE_URL', 'DATA_DIR', 'PORT', 'HOST', 'PUBLIC_URL', 'LOG_LEVEL'].includes(name)) continue
    env[name] = value
  }
  return { ...env, ...extra }
}

export interface Server {
  name: string
  port: number
  proc: Subprocess
  stdoutPath: string
  stderrPath: string
}

/** Starts a server process with stdout/stderr going to files in workDir; resolves once readyPath answers 2xx. */
export async function startServer(
  name: string,
  cmd: string[],
  env: Record<string, string>,
  port: number,
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
      const response = await fetch(`http://127.0.0.1:${port}${readyPath}`, { signal: AbortSignal.timeout(1000) })
      await response.arrayBuffer()
      if (response.ok) return { name, port, proc, stdoutPath, stderrPath }
    } catch {
      // not listening yet
    }
    await sleep(100)
  }
  await stopChild(proc)
  fail(`${name} was not ready on port ${port} within 60 s.\nstderr:\n${tail(stderrPath)}`)
}

// ---------------------------------------------------------------------------------------------
// CPU accounting (Linux /proc): who used the cores during a measured phase. Other processes on
// the machine (a test run, another benchmark) show up as "other" and explain outliers.

const CLOCK_TICKS = 100 // USER_HZ, 100 on every Linux we run on (getconf CLK_TCK)

export function processCpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS // utime + stime, all threads
  } catch {
    return Number.NaN
  }
}

export function systemBusySeconds(): number {
  try {
    const ticks = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number)
    const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = ticks
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS
  } catch {
    return Number.NaN
  }
}

// ---------------------------------------------------------------------------------------------
// wrk

export interface WrkOptions {
  threads: number
  connections: number
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

export function parseWrk(raw: string): Omit<WrkResult, 'serverCores' | 'wrkCores' | 'otherCores' | 'serverUsPerRequest'> {
  const rps = raw.match(/Requests\/sec:\s+([\d.]+)/)
  if (!rps) fail(`could not read wrk's output:\n${redact(raw)}`)
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

export const errorCount = (r: WrkResult) => r.non2xx + r.socketErrors.connect + r.socketErrors.read + r.socketErrors.write + r.socketErrors.timeout

/** One wrk run against `url`, bounded by its duration (and killed 20 s after it, whatever happens). */
export async function wrk(url: string, durationSec: number, serverPid: number, options: WrkOptions): Promise<WrkResult> {
  const cmd = ['wrk', `-t${options.threads}`, `-c${options.connections}`, `-d${durationSec}s`, '--latency', url]
  const started = performance.now()
  const busyBefore = systemBusySeconds()
  const serverBefore = processCpuSeconds(serverPid)
  const result = await runCommand(cmd, process.env as Record<string, string>, (durationSec + 20) * 1000)
  const serverCpu = processCpuSeconds(serverPid) - serverBefore
  const busy = systemBusySeconds() - busyBefore
  const wall = (performance.now() - started) / 1000
  if (result.code !== 0) fail(`wrk exited with ${result.code}:\n${redact(result.stderr || result.stdout)}`)
  const parsed = parseWrk(result.stdout)
  return {
    ...parsed,
    serverCores: serverCpu / wall,
    wrkCores: result.cpuSeconds / wall,
    otherCores: Math.max(0, busy - serverCpu - result.cpuSeconds) / wall,
    serverUsPerRequest: (serverCpu / parsed.requests) * 1e6,
  }
}

export async function wrkVersion(): Promise<string | null> {
  if (!Bun.which('wrk')) return null
  const { stdout } = await runCommand(['wrk', '-v'], process.env as Record<string, string>, 5000)
  return stdout.split('\n')[0]!.replace(/ Copyright.*/, '').trim()
}

// ---------------------------------------------------------------------------------------------
// Output

export const fmtInt = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–')
export const fmtMs = (n: number | null) => (n === null || !Number.isFinite(n) ? '–' : n < 1 ? `${n.toFixed(2)} ms` : `${n.toFixed(1)} ms`)
export const fmtFixed = (n: number | null, digits: number) => (n === null || !Number.isFinite(n) ? '–' : n.toFixed(digits))

export function median(xs: number[]): number {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b)
  if (s.length === 0) return Number.NaN
  const mid = Math.floor(s.length / 2)
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
}

/** A plain-text table: the first `textColumns` columns left-aligned, the rest (numbers) right-aligned. */
export function printTable(rows: string[][], textColumns = 1): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)))
  rows.forEach((row, index) => {
    console.log(row.map((cell, i) => (i < textColumns ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  '))
    if (index === 0) console.log(widths.map((w) => '-'.repeat(w)).join('  '))
  })
}

/**
 * Command-line helpers of a bench script: `--help` prints the script's opening comment, a bad
 * option exits 2 with one line naming it.
 */
export function benchOptions(scriptUrl: string) {
  const path = fileURLToPath(scriptUrl)
  const usage = (message: string): never => {
    console.error(`bench/${basename(path)}: ${message} (--help for the options)`)
    process.exit(2)
  }
  return {
    exitWithHelpIf(help: boolean) {
      if (!help) return
      console.log(readFileSync(path, 'utf8').split('*/')[0]!.replace(/^#!.*\n\/\*\*\n/, '').replace(/^ \* ?/gm, ''))
      process.exit(0)
    },
    usage,
    /** `--name`'s value as an integer within [min, max]; a trailing `s` (seconds) is allowed. */
    integer(name: string, raw: string, min: number, max: number): number {
      const n = Number(raw.replace(/s$/, ''))
      if (!Number.isInteger(n) || n < min || n > max) usage(`--${name}: an integer from ${min} to ${max} (got ${raw})`)
      return n
    },
  }
}
