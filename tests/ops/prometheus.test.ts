import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createTestDatabase } from '../support/database.ts'
import { freePort, freshDataDir, runCli, startServerProcess } from '../support/process.ts'
import { OUTCOMES } from '../../src/delivery/outcomes.ts'

// docs/operations.md#metrics, checked by the real thing: Debian's Prometheus server scrapes the
// METRICS_PORT listener of the real entry point. A developer without /usr/bin/prometheus skips
// this file; CI installs it (.ci/run), and there it must run.
const PROMETHEUS = '/usr/bin/prometheus'
const available = Bun.file(PROMETHEUS).size > 0 || process.env.CI === 'true'
setDefaultTimeout(90_000)

test.skipIf(!available)('a Prometheus server scrapes /metrics without an error and has the service’s series', async () => {
  const database = await createTestDatabase()
  afterAll(() => database.drop())
  const metricsPort = freePort()
  const env: Record<string, string> = { ...(database.url ? { DATABASE_URL: database.url } : {}), DATA_DIR: freshDataDir(), METRICS_PORT: String(metricsPort) }
  if (database.url) await database.handle.close()
  const demo = JSON.parse((await runCli(['demo', '--json'], env)).stdout) as { api_key: { secret: string } }
  const server = await startServerProcess(['bun', 'src/main.ts'], env)
  afterAll(() => server.stop())
  expect((await fetch(`${server.origin}/v0/account?key=${demo.api_key.secret}`)).status).toBe(200)

  const dir = mkdtempSync(join(tmpdir(), 'prometheus-'))
  afterAll(() => rmSync(dir, { recursive: true, force: true }))
  const config = join(dir, 'prometheus.yml')
  writeFileSync(config, `global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: messaging\n    static_configs:\n      - targets: ['127.0.0.1:${metricsPort}']\n`)
  const webPort = freePort()
  const prometheus = Bun.spawn([PROMETHEUS, `--config.file=${config}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${webPort}`], { stdout: 'pipe', stderr: 'pipe' })
  afterAll(async () => {
    prometheus.kill('SIGKILL')
    await prometheus.exited
  })
  const api = async (path: string) => {
    const response = await fetch(`http://127.0.0.1:${webPort}/api/v1/${path}`).catch(() => null)
    return response?.ok ? ((await response.json()) as { data: any }).data : null
  }

  type Target = { health: string; lastError: string; scrapeUrl: string }
  let target: Target | undefined
  for (const until = Date.now() + 60_000; Date.now() < until; await Bun.sleep(250)) {
    const targets = (await api('targets'))?.activeTargets as Target[] | undefined
    target = targets?.find((found) => found.scrapeUrl.includes(`:${metricsPort}/metrics`))
    if (target && target.health !== 'unknown') break
  }
  expect(target).toMatchObject({ health: 'up', lastError: '' })

  // The series Prometheus stored from its scrapes, queried through its own API.
  const requests = await api(`query?query=${encodeURIComponent('messaging_http_requests_total{route="/v0/account",status="200"}')}`)
  expect(requests.result.map((sample: { metric: Record<string, string> }) => sample.metric)).toContainEqual(expect.objectContaining({ job: 'messaging', method: 'GET', route: '/v0/account', status: '200' }))
  const attempts = await api(`query?query=${encodeURIComponent('messaging_webhook_attempts_total')}`)
  expect(attempts.result.map((sample: { metric: Record<string, string> }) => sample.metric.outcome).sort()).toEqual([...OUTCOMES].sort())
  const up = await api(`query?query=${encodeURIComponent('up{job="messaging"}')}`)
  expect(up.result[0].value[1]).toBe('1')
})
