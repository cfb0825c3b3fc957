// The HTTPS webhook receiver for bench/webhooks.ts, in its own process so that it does not share
// the measuring process's JavaScript thread. It answers every POST with 200 "ok" and counts.
//
//   PORT=<https port> CONTROL_PORT=<http port> CERT_DIR=<dir with server.pem, server.key> bun bench/webhook-receiver.ts
//
// The HTTPS side listens on 127.0.0.1 with the certificate made by fixtures/tls.ts (localhost and
// 127.0.0.1). A path /delay/<ms>/… is answered after <ms> milliseconds (at most 60,000): a slow
// subscriber; every other path at once. For every request it notes the receipt time (epoch ms,
// sub-ms precision, taken when the body has arrived, before any delay) and two latencies, found
// without parsing the whole body:
//   - event latency: receipt − the body's "timestamp" (an event's: set in the dispatch transaction);
//   - send latency: receipt − the send time that bench/webhooks.ts writes into the message text,
//     `"body":"t=<epoch ms>"`, which the event carries as data.message.body.
// Everything is counted in total and per path (so /delay/2000/slow and /healthy are told apart).
// The plain-HTTP control port (127.0.0.1 only) answers:
//   GET  /stats              {count, unique, firstAt, lastAt, samples, stale, paths: {<path>: {count, unique, firstAt, lastAt, samples, stale}}}
//                            (epoch ms; unique = distinct webhook-id)
//   GET  /stats?samples=1    the same, plus latencies (event) and sendLatencies ([ms, …]) in total and per path
//   POST /reset[?since=<ms>] forgets everything counted so far; with `since`, a body whose send time
//                            is older than that (a delivery left over from an earlier phase) is
//                            counted only as `stale` from now on
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

const port = Number(process.env.PORT)
const controlPort = Number(process.env.CONTROL_PORT)
const certDir = process.env.CERT_DIR
if (!port || !controlPort || !certDir) {
  console.error('bench/webhook-receiver.ts: PORT, CONTROL_PORT and CERT_DIR are required')
  process.exit(2)
}

const now = () => performance.timeOrigin + performance.now()
const MAX_SAMPLES = 500_000
const MAX_DELAY_MS = 60_000

interface Tally {
  count: number
  stale: number
  firstAt: number
  lastAt: number
  ids: Set<string>
  latencies: number[]
  sendLatencies: number[]
}

const newTally = (): Tally => ({ count: 0, stale: 0, firstAt: 0, lastAt: 0, ids: new Set(), latencies: [], sendLatencies: [] })

/** What arrived since the start or the last POST /reset, in total and per path. */
let total = newTally()
let paths = new Map<string, Tally>()
let since = 0

// "timestamp":"2026-11-22T10:58:18.645Z" and "body":"t=1795000000000.123": found without parsing the whole body.
const TIMESTAMP = /"timestamp":"([^"]{20,40})"/
const SENT_AT = /"body":"t=(\d+(?:\.\d+)?)/
const DELAY = /^\/delay\/(\d+)(?:\/|$)/

function note(t: Tally, at: number, id: string | null, eventLatency: number, sendLatency: number) {
  t.count++
  if (t.firstAt === 0) t.firstAt = at
  t.lastAt = at
  if (id) t.ids.add(id)
  if (Number.isFinite(eventLatency) && t.latencies.length < MAX_SAMPLES) t.latencies.push(eventLatency)
  if (Number.isFinite(sendLatency) && t.sendLatencies.length < MAX_SAMPLES) t.sendLatencies.push(sendLatency)
}

const receiver = Bun.serve({
  port,
  hostname: '127.0.0.1',
  tls: { key: readFileSync(join(certDir, 'server.key'), 'utf8'), cert: readFileSync(join(certDir, 'server.pem'), 'utf8') },
  // A slow answer must not be cut by the server's idle timeout (10 s by default).
  idleTimeout: 120,
  async fetch(request) {
    const body = await request.text()
    const at = now()
    // The path without the query, from the request line's URL, without a URL object.
    const url = request.url
    const pathStart = url.indexOf('/', url.indexOf('//') + 2)
    const queryStart = url.indexOf('?', pathStart)
    const path = pathStart < 0 ? '/' : url.slice(pathStart, queryStart < 0 ? undefined : queryStart)

    const sent = SENT_AT.exec(body)
    const sentAt = sent ? Number(sent[1]) : Number.NaN
    let tally = paths.get(path)
    if (!tally) paths.set(path, (tally = newTally()))
    if (since > 0 && sentAt < since) {
      total.stale++
      tally.stale++
    } else {
      const stamp = TIMESTAMP.exec(body)
      const eventLatency = stamp ? at - Date.parse(stamp[1]!) : Number.NaN
      const id = request.headers.get('webhook-id')
      note(total, at, id, eventLatency, at - sentAt)
      note(tally, at, id, eventLatency, at - sentAt)
    }

    const delay = DELAY.exec(path)
    if (delay) await Bun.sleep(Math.min(MAX_DELAY_MS, Number(delay[1])))
    return new Response('ok')
  },
})

function summary(t: Tally, samples: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = { count: t.count, unique: t.ids.size, firstAt: t.firstAt, lastAt: t.lastAt, samples: t.latencies.length, stale: t.stale }
  if (samples) {
    out.latencies = t.latencies
    out.sendLatencies = t.sendLatencies
  }
  return out
}

const control = Bun.serve({
  port: controlPort,
  hostname: '127.0.0.1',
  fetch(request) {
    const url = new URL(request.url)
    if (url.pathname === '/reset' && request.method === 'POST') {
      total = newTally()
      paths = new Map()
      since = Number(url.searchParams.get('since') ?? 0) || 0
      return Response.json({ ok: true })
    }
    if (url.pathname === '/stats') {
      const samples = url.searchParams.get('samples') === '1'
      const perPath: Record<string, unknown> = {}
      for (const [path, t] of paths) perPath[path] = summary(t, samples)
      return Response.json({ ...summary(total, samples), paths: perPath })
    }
    return new Response('not found', { status: 404 })
  },
})

console.log(`webhook receiver: https://127.0.0.1:${receiver.port}, control http://127.0.0.1:${control.port}`)

const shutdown = () => {
  void receiver.stop(true)
  void control.stop(true)
  process.exit(0)
}
process.on('SIGTERM', shutdown)
process.on('SIGINT', shutdown)
