import type { Subprocess } from 'bun'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export const ROOT = new URL('../..', import.meta.url).pathname

export const freshDataDir = () => join(mkdtempSync(join(tmpdir(), 'msgsvc-')), 'data')

/** A free loopback port, found by binding port 0 and letting it go. */
export function freePort(): number {
  const probe = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response() })
  const port = probe.port!
  probe.stop(true)
  return port
}

export interface RunningProcess {
  process: Subprocess<'ignore', 'pipe', 'pipe'>
  origin: string
  output(): string
  /** Resolves once the output contains `text`; fails after `timeoutMs`. */
  waitForOutput(text: string, timeoutMs?: number): Promise<void>
  stop(signal?: NodeJS.Signals): Promise<number>
}

/** Starts a server entry point (`bun src/main.ts`, `deno run … src/main.deno.ts`) and waits for /healthz. */
export async function startServerProcess(command: string[], env: Record<string, string>, timeoutMs = 30_000): Promise<RunningProcess> {
  const port = env.PORT ?? String(freePort())
  const child = Bun.spawn(command, {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'info', HOST: '127.0.0.1', ...env, PORT: port },
    stdin: 'ignore',
    stdout: 'pipe',
    stderr: 'pipe',
  })
  let output = ''
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream) output += new TextDecoder().decode(chunk)
  }
  const collecting = Promise.all([collect(child.stdout), collect(child.stderr)])
  const origin = `http://127.0.0.1:${port}`
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (child.exitCode !== null) throw new Error(`server exited with ${child.exitCode}:\n${output}`)
    const ok = await fetch(`${origin}/healthz`).then((r) => r.ok, () => false)
    if (ok) break
    if (Date.now() > deadline) {
      child.kill('SIGKILL')
      throw new Error(`server did not answer /healthz within ${timeoutMs} ms:\n${output}`)
    }
    await Bun.sleep(100)
  }
  return {
    process: child,
    origin,
    output: () => output,
    async waitForOutput(text, waitMs = 10_000) {
      const until = Date.now() + waitMs
      while (!output.includes(text)) {
        if (Date.now() > until) throw new Error(`no "${text}" in the output within ${waitMs} ms:\n${output}`)
        await Bun.sleep(20)
      }
    },
    async stop(signal = 'SIGTERM') {
      child.kill(signal)
      const code = await child.exited
      await collecting
      return code
    },
  }
}

/** Runs `bun src/cli.ts …` and returns its exit code and output. */
export async function runCli(argv: string[], env: Record<string, string>) {
  const child = Bun.spawn(['bun', 'src/cli.ts', ...argv], { cwd: ROOT, env: { ...process.env, ...env }, stdout: 'pipe', stderr: 'pipe' })
  const [stdout, stderr, exitCode] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  return { exitCode, stdout, stderr }
}
