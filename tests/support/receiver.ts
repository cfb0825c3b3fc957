import { afterAll } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { makeCertificates } from '../../fixtures/tls.ts'

export interface ReceivedWebhook {
  path: string
  headers: Record<string, string>
  body: string
  /** performance.now() when the request arrived and when it was answered. */
  arrivedAt: number
  answeredAt: number
}

export interface Receiver {
  origin: string
  /** WEBHOOK_CA_FILE: the CA that signed the receiver's certificate. */
  caFile: string
  caPem: string
  received: ReceivedWebhook[]
  /** The most requests ever in progress at once on a path. */
  maxConcurrent(path: string): number
  /** Resolves once `predicate` holds over what arrived; fails after `timeoutMs`. */
  waitFor(predicate: (received: ReceivedWebhook[]) => boolean, timeoutMs?: number): Promise<void>
  stop(): void
}

/**
 * A real HTTPS webhook receiver for tests, with a certificate for `localhost` and 127.0.0.1
 * signed by a CA made for this run. `answer` decides each response (it may wait, to play a
 * slow receiver); every request is recorded before it is answered.
 */
export function startReceiver(answer: (request: ReceivedWebhook, nthOnPath: number) => Response | Promise<Response>): Receiver {
  const dir = mkdtempSync(join(tmpdir(), 'receiver-tls-'))
  const tls = makeCertificates(dir)
  const received: ReceivedWebhook[] = []
  const current = new Map<string, number>()
  const most = new Map<string, number>()
  const seenOnPath = new Map<string, number>()
  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    tls: { key: tls.key, cert: tls.cert },
    async fetch(request) {
      const path = new URL(request.url).pathname
      const entry: ReceivedWebhook = { path, headers: Object.fromEntries(request.headers), body: await request.text(), arrivedAt: performance.now(), answeredAt: 0 }
      received.push(entry)
      const nth = (seenOnPath.get(path) ?? 0) + 1
      seenOnPath.set(path, nth)
      current.set(path, (current.get(path) ?? 0) + 1)
      most.set(path, Math.max(most.get(path) ?? 0, current.get(path)!))
      try {
        return await answer(entry, nth)
      } finally {
        current.set(path, current.get(path)! - 1)
        entry.answeredAt = performance.now()
      }
    },
  })
  const stop = () => {
    server.stop(true)
    rmSync(dir, { recursive: true, force: true })
  }
  afterAll(stop)
  return {
    origin: `https://localhost:${server.port}`,
    caFile: join(dir, 'ca.pem'),
    caPem: tls.ca,
    received,
    maxConcurrent: (path) => most.get(path) ?? 0,
    async waitFor(predicate, timeoutMs = 10_000) {
      const until = Date.now() + timeoutMs
      while (!predicate(received)) {
        if (Date.now() > until) throw new Error(`the receiver did not get what was expected within ${timeoutMs} ms (${received.length} requests so far)`)
        await Bun.sleep(10)
      }
    },
    stop,
  }
}
