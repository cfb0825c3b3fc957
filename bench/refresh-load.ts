/**
 * The load generator of bench/oauth.ts for the refresh grant, in its own process (never in the
 * server's): N workers, one per grant, each looping `POST /v0/auth/token/refresh
 * {refresh_token, client_id}` with the refresh token returned by its previous call, for a fixed
 * duration, over Bun fetch with keep-alive.
 *
 *   bun bench/refresh-load.ts <input.json>
 *
 * input.json: { url, clientId, refreshTokens: string[], durationSec, requestTimeoutMs }
 * Prints one JSON object on stdout: successes, failures (status and body of the first ones),
 * elapsed seconds, latency percentiles, and each worker's last refresh token (null when its
 * chain broke), so that a following run can continue the same grants.
 *
 * A worker stops at its first failure: a refresh token is single-use, so a chain that got no
 * successor cannot go on (the failure is reported, and must not happen).
 */
import { readFileSync } from 'node:fs'
import { percentiles } from './harness.ts'

export interface RefreshLoadInput {
  url: string
  clientId: string
  refreshTokens: string[]
  durationSec: number
  requestTimeoutMs: number
}

export interface RefreshLoadResult {
  workers: number
  workersAlive: number
  successes: number
  /** Successes that completed after the deadline (still counted in successes). */
  completedAfterDeadline: number
  failureCount: number
  failures: Array<{ worker: number; atMs: number; status: number; body: string }>
  elapsedSec: number
  perSec: number
  p50Ms: number | null
  p99Ms: number | null
  maxMs: number | null
  avgMs: number | null
  finalTokens: Array<string | null>
}

const redactTokens = (text: string) => text.replace(/(rt_|ey)[A-Za-z0-9_.-]{12,}/g, '$1[REDACTED]')

/** One POST: the successor refresh token, or why there is none. */
async function refresh(input: RefreshLoadInput, token: string): Promise<{ next: string } | { status: number; body: string }> {
  let status = 0
  let text = ''
  try {
    const response = await fetch(input.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ refresh_token: token, client_id: input.clientId }),
      signal: AbortSignal.timeout(input.requestTimeoutMs),
    })
    status = response.status
    text = await response.text()
  } catch (error) {
    text = `fetch failed: ${(error as Error).message}`
  }
  if (status === 200) {
    try {
      const body = JSON.parse(text) as { refresh_token?: unknown; access_token?: unknown; token_type?: unknown }
      if (typeof body.refresh_token === 'string' && body.refresh_token.startsWith('rt_') && typeof body.access_token === 'string' && body.token_type === 'Bearer') {
        if (body.refresh_token === token) return { status, body: 'the refresh token was not rotated' }
        return { next: body.refresh_token }
      }
    } catch {
      // reported below
    }
  }
  return { status, body: redactTokens(text.slice(0, 500)) }
}

/** Every worker's chain for `durationSec`; answers what they did. */
export async function runRefreshLoad(input: RefreshLoadInput): Promise<RefreshLoadResult> {
  const latencies: number[] = []
  const failures: RefreshLoadResult['failures'] = []
  let failureCount = 0
  let completedAfterDeadline = 0
  const started = performance.now()
  const deadline = started + input.durationSec * 1000

  const worker = async (index: number, first: string): Promise<string | null> => {
    let token = first
    while (performance.now() < deadline) {
      const t0 = performance.now()
      const outcome = await refresh(input, token)
      const t1 = performance.now()
      if (!('next' in outcome)) {
        failureCount++
        if (failures.length < 10) failures.push({ worker: index, atMs: Math.round(t1 - started), ...outcome })
        return null
      }
      if (t1 > deadline) completedAfterDeadline++
      latencies.push(t1 - t0)
      token = outcome.next
    }
    return token
  }

  const finalTokens = await Promise.all(input.refreshTokens.map((token, index) => worker(index, token)))
  const elapsedSec = (performance.now() - started) / 1000
  const p = percentiles(latencies)
  const orNull = (n: number) => (Number.isFinite(n) ? n : null)
  return {
    workers: input.refreshTokens.length,
    workersAlive: finalTokens.filter((token) => token !== null).length,
    successes: latencies.length,
    completedAfterDeadline,
    failureCount,
    failures,
    elapsedSec,
    perSec: latencies.length / elapsedSec,
    p50Ms: orNull(p.p50),
    p99Ms: orNull(p.p99),
    maxMs: orNull(p.max),
    avgMs: latencies.length ? latencies.reduce((sum, x) => sum + x, 0) / latencies.length : null,
    finalTokens,
  }
}

if (import.meta.main) {
  const input = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as RefreshLoadInput
  console.log(JSON.stringify(await runRefreshLoad(input)))
  process.exit(0)
}
