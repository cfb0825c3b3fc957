import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startTestServer } from '../support/server.ts'
import { ROOT } from '../support/process.ts'
import { authorizeAndRedeem, flowFixture } from '../oauth/support.ts'

// @modelcontextprotocol/conformance's server scenarios that apply to a tools-only server. Each
// also validates every JSON-RPC message we send against the spec's schema (check
// `wire-schema-valid`). The others need tools, resources, prompts or sessions we do not have.
const SCENARIOS = ['server-initialize', 'ping', 'tools-list', 'dns-rebinding-protection']
setDefaultTimeout(120_000)

const server = await startTestServer()
const fixture = await flowFixture(server)
const { tokens } = await authorizeAndRedeem(server, fixture, { resource: `${server.config.baseUrl}/mcp` })

/**
 * The runner's client sends no Authorization header, so it talks to the real endpoint through
 * this loopback proxy, which adds the bearer token and changes nothing else: method, path,
 * body, and the Host and Origin headers the runner chose (the DNS-rebinding scenario forges
 * them) reach the server as sent.
 */
const proxy = Bun.serve({
  port: 0,
  hostname: '127.0.0.1',
  async fetch(request) {
    const url = new URL(request.url)
    const headers = new Headers(request.headers)
    headers.set('authorization', `Bearer ${tokens.access_token}`)
    const body = request.method === 'GET' || request.method === 'HEAD' ? undefined : await request.arrayBuffer()
    const answer = await fetch(`${server.origin}${url.pathname}${url.search}`, { method: request.method, headers, body, redirect: 'manual' })
    return new Response(answer.body, answer)
  },
})
const workDir = mkdtempSync(join(tmpdir(), 'mcp-conformance-'))
afterAll(() => {
  proxy.stop(true)
  rmSync(workDir, { recursive: true, force: true })
})

test.each(SCENARIOS)('conformance scenario %s passes', async (scenario) => {
  const runner = Bun.spawn(['bun', join(ROOT, 'node_modules/.bin/conformance'), 'server', '--url', `http://127.0.0.1:${proxy.port}/v0/mcp`, '--scenario', scenario, '-o', join(workDir, 'results')], {
    cwd: workDir,
    stdout: 'pipe',
    stderr: 'pipe',
  })
  const [stdout, stderr, exitCode] = await Promise.all([new Response(runner.stdout).text(), new Response(runner.stderr).text(), runner.exited])
  const resultDir = readdirSync(join(workDir, 'results')).find((name) => name.startsWith(`server-${scenario}-`))
  expect(resultDir).toBeDefined()
  const checks = JSON.parse(readFileSync(join(workDir, 'results', resultDir!, 'checks.json'), 'utf8')) as { id: string; status: string; errorMessage?: string }[]
  // FAILURE and WARNING both count; INFO (such as "no MCP-Session-Id: sessions are optional") does not.
  const failed = checks.filter((check) => check.status === 'FAILURE' || check.status === 'WARNING')
  if (failed.length > 0 || exitCode !== 0) console.log(stdout, stderr)
  expect(failed).toEqual([])
  expect(checks.length).toBeGreaterThan(0)
  expect(exitCode).toBe(0)
})
