import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { freePort, freshDataDir, runCli, startServerProcess, type RunningProcess } from '../support/process.ts'
import { createTestDatabase } from '../support/database.ts'
import { startReceiver } from '../support/receiver.ts'

// METRICS_PORT on the real entry point (src/main.ts), over real sockets, on PGlite and PostgreSQL.
setDefaultTimeout(60_000)
const database = await createTestDatabase()
afterAll(() => database.drop())
const dataDir = freshDataDir()
const env: Record<string, string> = database.url ? { DATABASE_URL: database.url, DATA_DIR: dataDir } : { DATA_DIR: dataDir }
if (database.url) await database.handle.close()
const receiver = startReceiver(() => new Response('ok'))
const webhookEnv = { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile, WEBHOOK_TIMEOUT_MS: '2000' }

interface Sample {
  name: string
  labels: Record<string, string>
  value: number
}

/** The Prometheus text format's samples (comments skipped). */
function parse(text: string): Sample[] {
  const samples: Sample[] = []
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (!match) throw new Error(`not a sample line: ${line}`)
    const labels: Record<string, string> = {}
    for (const [, name, value] of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[name!] = value!.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c))
    samples.push({ name: match[1]!, labels, value: Number(match[3]) })
  }
  return samples
}

const value = (samples: Sample[], name: string, labels: Record<string, string> = {}) =>
  samples.filter((sample) => sample.name === name && Object.entries(labels).every(([key, wanted]) => sample.labels[key] === wanted)).reduce((sum, sample) => sum + sample.value, 0)

describe('METRICS_PORT', () => {
  test('GET /metrics: requests by route and status, durations, deliveries by outcome, the queue; anything else 404', async () => {
    const metricsPort = freePort()
    const server: RunningProcess = await startServerProcess(['bun', 'src/main.ts'], { ...env, ...webhookEnv, METRICS_PORT: String(metricsPort) })
    const metricsUrl = `http://127.0.0.1:${metricsPort}`
    const scrape = async () => {
      const response = await fetch(`${metricsUrl}/metrics`)
      expect(response.status).toBe(200)
      expect(response.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8')
      return parse(await response.text())
    }
    try {
      await server.waitForOutput(`"metrics_url":"http://127.0.0.1:${metricsPort}/metrics"`)
      const cli = await runCli(['demo', '--json'], { ...env, PORT: new URL(server.origin).port })
      expect(cli.exitCode).toBe(0)
      const demo = JSON.parse(cli.stdout)
      const key = demo.api_key.secret as string
      const accountId = demo.account.id as string

      const before = await scrape()
      for (let i = 0; i < 3; i++) expect((await fetch(`${server.origin}/v0/account?key=${key}`)).status).toBe(200)
      expect((await fetch(`${server.origin}/v0/account?key=wrong`)).status).toBe(401)
      expect((await fetch(`${server.origin}/no/such/${crypto.randomUUID()}`)).status).toBe(404)
      const call = (method: string, path: string, body?: unknown) =>
        fetch(`${server.origin}/v0/account/${accountId}${path}?key=${key}`, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) })
      expect((await call('POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/metrics-hook` })).status).toBe(201)
      expect((await call('POST', '/sandbox/inbound', { from: '+447700900700', body: 'count me' })).status).toBe(201)
      await receiver.waitFor((received) => received.some((request) => request.path === '/metrics-hook'))

      // The worker reports in batches (≤ 50 ms) and the attempt is recorded after it ends: poll.
      let after = await scrape()
      for (let i = 0; i < 50 && (value(after, 'messaging_webhook_attempts_total', { outcome: 'delivered' }) < 1 || value(after, 'messaging_webhook_deliveries_pending') > 0); i++) {
        await Bun.sleep(100)
        after = await scrape()
      }

      const requests = (labels: Record<string, string>) => value(after, 'messaging_http_requests_total', labels) - value(before, 'messaging_http_requests_total', labels)
      expect(requests({ method: 'GET', route: '/v0/account', status: '200' })).toBe(3)
      expect(requests({ method: 'GET', route: '/v0/account', status: '401' })).toBe(1)
      expect(requests({ method: 'GET', route: 'unmatched', status: '404' })).toBe(1)
      expect(requests({ method: 'POST', route: '/v0/account/:account_id/hooks', status: '201' })).toBe(1)
      expect(requests({ method: 'POST', route: '/v0/account/:account_id/sandbox/inbound', status: '201' })).toBe(1)
      // Never the raw path (cardinality).
      expect(after.some((sample) => Object.values(sample.labels).some((label) => label.includes(accountId) || label.includes('/no/such')))).toBe(false)
      const durationCount = (samples: Sample[]) => value(samples, 'messaging_http_request_duration_seconds_count', { route: '/v0/account' })
      expect(durationCount(after) - durationCount(before)).toBe(4)
      expect(value(after, 'messaging_http_request_duration_seconds_bucket', { route: '/v0/account', le: '+Inf' })).toBe(durationCount(after))
      expect(value(after, 'messaging_http_request_duration_seconds_sum', { route: '/v0/account' })).toBeGreaterThan(0)

      expect(value(after, 'messaging_webhook_attempts_total', { outcome: 'delivered' })).toBe(1)
      expect(after.find((sample) => sample.name === 'messaging_webhook_attempts_total' && sample.labels.outcome === 'retry')?.value).toBe(0)
      expect(value(after, 'messaging_webhook_attempts_in_flight')).toBe(0)
      expect(value(after, 'messaging_webhook_deliveries_pending')).toBe(0)
      expect(value(after, 'messaging_webhook_oldest_pending_age_seconds')).toBe(0)
      expect(value(after, 'messaging_webhook_worker_restarts_total')).toBe(0)
      expect(value(after, 'messaging_metrics_query_errors_total')).toBe(0)
      if (database.url) {
        expect(value(after, 'messaging_db_pool_max_connections', { pool: 'api' })).toBe(10)
        expect(value(after, 'messaging_db_pool_max_connections', { pool: 'worker' })).toBe(4)
        expect(value(after, 'messaging_db_connections', { state: 'active' })).toBeGreaterThanOrEqual(1)
      } else {
        expect(after.some((sample) => sample.name.startsWith('messaging_db_'))).toBe(false)
      }
      expect(value(after, 'process_resident_memory_bytes')).toBeGreaterThan(0)

      // A pending delivery shows in the queue: a subscription whose receiver is away.
      expect((await call('POST', '/hooks', { event: 'message.inbound', target_url: `http://127.0.0.1:${freePort()}/nobody` })).status).toBe(201)
      expect((await call('POST', '/sandbox/inbound', { from: '+447700900700', body: 'wait for me' })).status).toBe(201)
      // The same event goes to /metrics-hook too: its delivery is recorded before the queue is read. The counters
      // are reported as attempts end, before they are recorded, so the queue (read from the database) is polled too.
      let queued = await scrape()
      for (let i = 0; i < 50 && (value(queued, 'messaging_webhook_attempts_total', { outcome: 'retry' }) < 1 || value(queued, 'messaging_webhook_attempts_total', { outcome: 'delivered' }) < 2 || value(queued, 'messaging_webhook_deliveries_pending') !== 1); i++) {
        await Bun.sleep(100)
        queued = await scrape()
      }
      expect(value(queued, 'messaging_webhook_attempts_total', { outcome: 'retry' })).toBe(1)
      expect(value(queued, 'messaging_webhook_attempts_total', { outcome: 'delivered' })).toBe(2)
      expect(value(queued, 'messaging_webhook_deliveries_pending')).toBe(1)
      expect(value(queued, 'messaging_webhook_oldest_pending_age_seconds')).toBeGreaterThan(0)

      expect((await fetch(`${metricsUrl}/`)).status).toBe(404)
      expect((await fetch(`${metricsUrl}/metrics/extra`)).status).toBe(404)
      expect((await fetch(`${metricsUrl}/v0/account?key=${key}`)).status).toBe(404)
      // The API port does not serve the metrics.
      expect((await fetch(`${server.origin}/metrics`)).status).toBe(404)
    } finally {
      expect(await server.stop('SIGTERM')).toBe(0)
    }
    // Stopped with the process.
    expect(await fetch(`${metricsUrl}/metrics`).then(() => 'answered', () => 'refused')).toBe('refused')
  })

  test('METRICS_PORT unset: no listener, nothing measured', async () => {
    const server = await startServerProcess(['bun', 'src/main.ts'], env)
    try {
      await server.waitForOutput('"msg":"listening"')
      expect(server.output()).not.toContain('metrics_url')
    } finally {
      expect(await server.stop('SIGTERM')).toBe(0)
    }
  })
})
