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

interface Input {
  url: string
  clientId: string
  refreshTokens: string[]
  durationSec: number
  requestTimeoutMs: number
}

interface Failure {
  worker: number
  atMs: number
  status: number
  body: string
}

const input = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as Input
const latencies: number[] = []
const failures: Failure[] = []
let failureCount = 0
let successes = 0
let outside = 0 // successes that completed after the deadline (still counted in successes)

const redactTokens = (text: string) => text.replace(/(rt_|ey)[A-Za-z0-9_.-]{12,}/g, '$1[REDACTED]')

const started = performance.now()
const deadline = started + input.durationSec * 1000

async function worker(index: number, first: string): Promise<string | null> {
  let token = first
  while (performance.now() < deadline) {
    const t0 = performance.now()
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
    const t1 = performance.now()
    let next: string | undefined
    if (status === 200) {
      try {
        const body = JSON.parse(text) as { refresh_token?: unknown; access_token?: unknown; token_type?: unknown }
        if (typeof body.refresh_token === 'string' && body.refresh_token.startsWith('rt_') && typeof body.access_token === 'string' && body.token_type === 'Bearer') {
          next = body.refresh_token
        }
      } catch {
        // reported below
      }
    }
    if (next === undefined) {
      failureCount++
      if (failures.length < 10) failures.push({ worker: index, atMs: Math.round(t1 - started), status, body: redactTokens(text.slice(0, 500)) })
      return null
    }
    if (next === token) {
      failureCount++
      if (failures.length < 10) failures.push({ worker: index, atMs: Math.round(t1 - started), status, body: 'the refresh token was not rotated' })
      return null
    }
    successes++
    if (t1 > deadline) outside++
    latencies.push(t1 - t0)
    token = next
  }
  return token
}

const finalTokens = await Promise.all(input.refreshTokens.map((token, index) => worker(index, token)))
const elapsedSec = (performance.now() - started) / 1000

latencies.sort((a, b) => a - b)
const percentile = (p: number) => (latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))]! : null)

console.log(
  JSON.stringify({
    workers: input.refreshTokens.length,
    workersAlive: finalTokens.filter((token) => token !== null).length,
    successes,
    completedAfterDeadline: outside,
    failureCount,
    failures,
    elapsedSec,
    perSec: successes / elapsedSec,
    p50Ms: percentile(50),
    p99Ms: percentile(99),
    maxMs: latencies.length ? latencies[latencies.length - 1] : null,
    avgMs: latencies.length ? latencies.reduce((sum, x) => sum + x, 0) / latencies.length : null,
    finalTokens,
  }),
)
process.exit(0)
