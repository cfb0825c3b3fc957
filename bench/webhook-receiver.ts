// The HTTPS webhook receiver for bench/webhooks.ts, in its own process so that it does not share
// the measuring process's JavaScript thread. It answers every POST with 200 "ok" and counts.
//
//   PORT=<https port> CONTROL_PORT=<http port> CERT_DIR=<dir with server.pem, server.key> bun bench/webhook-receiver.ts
//
// The HTTPS side listens on 127.0.0.1 with the certificate made by fixtures/tls.ts
// (localhost and 127.0.0.1). For every request it notes the receipt time (epoch ms, sub-ms
// precision) and, when the JSON body has a "timestamp" field (an event's), receipt time minus
// that timestamp: the end-to-end latency of the event. The plain-HTTP control port (127.0.0.1
// only) answers:
//   GET  /stats            {count, unique, firstAt, lastAt}       (epoch ms; unique = distinct webhook-id)
//   GET  /stats?samples=1  the same plus latencies: [ms, …]
//   POST /reset            forgets everything counted so far
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

/** What arrived since the start or the last POST /reset. */
function newTally() {
  return { count: 0, firstAt: 0, lastAt: 0, ids: new Set<string>(), latencies: new Float64Array(MAX_SAMPLES), sampleCount: 0 }
}
let tally = newTally()

// "timestamp":"2026-11-22T10:58:18.645Z": found without parsing the whole body.
const TIMESTAMP = /"timestamp":"([^"]{20,40})"/

const receiver = Bun.serve({
  port,
  hostname: '127.0.0.1',
  tls: { key: readFileSync(join(certDir, 'server.key'), 'utf8'), cert: readFileSync(join(certDir, 'server.pem'), 'utf8') },
  async fetch(request) {
    const body = await request.text()
    const at = now()
    const t = tally
    t.count++
    if (t.firstAt === 0) t.firstAt = at
    t.lastAt = at
    const id = request.headers.get('webhook-id')
    if (id) t.ids.add(id)
    const match = TIMESTAMP.exec(body)
    if (match && t.sampleCount < MAX_SAMPLES) {
      const sentAt = Date.parse(match[1]!)
      if (Number.isFinite(sentAt)) t.latencies[t.sampleCount++] = at - sentAt
    }
    return new Response('ok')
  },
})

const control = Bun.serve({
  port: controlPort,
  hostname: '127.0.0.1',
  fetch(request) {
    const url = new URL(request.url)
    if (url.pathname === '/reset' && request.method === 'POST') {
      tally = newTally()
      return Response.json({ ok: true })
    }
    if (url.pathname === '/stats') {
      const t = tally
      const stats: Record<string, unknown> = { count: t.count, unique: t.ids.size, firstAt: t.firstAt, lastAt: t.lastAt, samples: t.sampleCount }
      if (url.searchParams.get('samples') === '1') stats.latencies = Array.from(t.latencies.subarray(0, t.sampleCount))
      return Response.json(stats)
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
