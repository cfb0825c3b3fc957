import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium, type Browser } from 'playwright-core'
import { startTestServer } from '../support/server.ts'
import { freePort, ROOT } from '../support/process.ts'
import { flowFixture, postJson } from './support.ts'

// `conformance authorization` (@modelcontextprotocol/conformance 0.2.0) against our authorization
// server: its metadata scenario, then its authorization code grant, where the runner prints an
// authorization URL for a person and waits for the redirect on its own loopback callback server.
// The person is Debian's chromium driven by playwright-core: it signs in on our consent page with
// a test user's email and password and clicks Allow. Everything runs on 127.0.0.1. A developer
// without chromium skips this file; CI installs it, and there it must run.
const CHROMIUM = '/usr/bin/chromium'
const runs = Bun.file(CHROMIUM).size > 0 || process.env.CI === 'true'
// The runner waits 5 minutes for the callback; this file gives up long before that.
const RUN_DEADLINE_MS = 40_000
const STEP_TIMEOUT_MS = 10_000
setDefaultTimeout(RUN_DEADLINE_MS + 15_000)

const server = await startTestServer()
const fixture = await flowFixture(server)
const issuer = server.config.baseUrl
const resource = `${issuer}/mcp`

// The runner's redirect URI is http://127.0.0.1:<port>/callback, registered as it is, the way an
// MCP client registers the loopback address it listens on.
const callbackPort = freePort()
const redirectUri = `http://127.0.0.1:${callbackPort}/callback`
const registration = await postJson(server, '/v0/auth/register', { client_name: 'MCP conformance runner', redirect_uris: [redirectUri] })
const { client_id: clientId } = (await registration.json()) as { client_id: string }

const workDir = mkdtempSync(join(tmpdir(), 'as-conformance-'))
let browser: Browser | undefined
afterAll(async () => {
  await browser?.close()
  rmSync(workDir, { recursive: true, force: true })
})

interface Check {
  id: string
  status: 'SUCCESS' | 'FAILURE' | 'WARNING' | 'SKIPPED' | 'INFO'
  errorMessage?: string
  specReferences?: { id: string; url: string }[]
}

/** Collects a stream's text and resolves waiters when it first contains what they wait for. */
function recorder(stream: ReadableStream<Uint8Array>) {
  let text = ''
  const waiters: { test: (text: string) => boolean; resolve: () => void }[] = []
  const done = (async () => {
    const decoder = new TextDecoder()
    for await (const chunk of stream) {
      text += decoder.decode(chunk, { stream: true })
      for (const waiter of waiters.filter((candidate) => candidate.test(text))) {
        waiters.splice(waiters.indexOf(waiter), 1)
        waiter.resolve()
      }
    }
  })()
  return {
    text: () => text,
    done,
    until: (test: (text: string) => boolean) => (test(text) ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ test, resolve }))),
  }
}

/** Sign in on the consent page and Allow: the browser ends on the runner's callback page. */
async function consent(url: string) {
  browser ??= await chromium.launch({
    executablePath: CHROMIUM,
    timeout: STEP_TIMEOUT_MS,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-proxy-server',
      // Loopback only: no host name resolves, so nothing leaves the machine whatever a page asks for.
      '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1',
    ],
  })
  const page = await browser.newPage()
  page.setDefaultTimeout(STEP_TIMEOUT_MS)
  try {
    await page.goto(url)
    await page.fill('#email', fixture.email)
    await page.fill('#password', fixture.password)
    await Promise.all([page.waitForURL((landed) => landed.origin === `http://127.0.0.1:${callbackPort}`), page.click('#allow')])
    return new URL(page.url())
  } catch (error) {
    // Say where the browser stopped: the consent page's error line, or the error page's text.
    const shown = await page.evaluate(() => document.getElementById('error')?.textContent || document.body?.innerText.slice(0, 500)).catch(() => undefined)
    throw new Error(`${error instanceof Error ? error.message.split('\n')[0] : error}\n  at ${page.url()}\n  the page says: ${shown ?? '(nothing)'}`)
  } finally {
    await page.close()
  }
}

test.if(runs)('conformance authorization: every scenario and check passes, with no warning, consent given in chromium', async () => {
  const started = Date.now()
  const runner = Bun.spawn(
    [
      'bun',
      join(ROOT, 'node_modules/.bin/conformance'),
      'authorization',
      '--url',
      issuer,
      '--client-id',
      clientId,
      '--resource',
      resource,
      '--port',
      String(callbackPort),
      '-o',
      join(workDir, 'results'),
    ],
    { cwd: workDir, stdout: 'pipe', stderr: 'pipe', env: { ...process.env, NO_COLOR: '1' } },
  )
  const deadline = setTimeout(() => runner.kill('SIGKILL'), RUN_DEADLINE_MS)
  const stdout = recorder(runner.stdout)
  const stderr = recorder(runner.stderr)
  const output = () => `--- conformance authorization stdout ---\n${stdout.text()}\n--- stderr ---\n${stderr.text()}`

  let landed: URL | undefined
  let consentError: unknown
  try {
    // The URL is printed on a line of its own; open it only once the callback server listens.
    const authorizeLine = new RegExp(`^${issuer.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}/auth/authorize\\?.*$`, 'm')
    const ready = stdout.until((text) => authorizeLine.test(text) && text.includes('Callback server started'))
    const outcome = await Promise.race([ready.then(() => 'ready' as const), runner.exited.then(() => 'exited' as const)])
    if (outcome === 'ready') {
      const authorizationUrl = stdout.text().match(authorizeLine)![0]
      const requested = new URL(authorizationUrl)
      expect(requested.searchParams.get('redirect_uri')).toBe(redirectUri)
      expect(requested.searchParams.get('resource')).toBe(resource)
      landed = await consent(authorizationUrl).catch((error) => {
        consentError = error
        runner.kill('SIGKILL') // no callback is coming: do not wait out the runner's 5 minutes
        return undefined
      })
    }
    await runner.exited
  } finally {
    clearTimeout(deadline)
    runner.kill('SIGKILL')
  }
  await Promise.all([stdout.done, stderr.done])

  // One folder per scenario, authorization-server-<scenario>-<timestamp>/checks.json; a scenario
  // that never finished (the run was stopped) has a folder and no checks.json.
  const resultsDir = join(workDir, 'results')
  const results = Object.fromEntries(
    (existsSync(resultsDir) ? readdirSync(resultsDir, { withFileTypes: true }) : [])
      .filter((entry) => entry.isDirectory())
      .map(({ name }) => {
        const scenario = name.replace(/^authorization-server-/, '').replace(/-\d{4}-\d\d-\d\dT.*$/, '')
        const file = join(resultsDir, name, 'checks.json')
        const checks: Check[] = existsSync(file)
          ? JSON.parse(readFileSync(file, 'utf8'))
          : [{ id: scenario, status: 'FAILURE', errorMessage: 'no checks.json: the run was stopped before this scenario finished' }]
        return [scenario, checks]
      }),
  )
  const checks = Object.entries(results).flatMap(([scenario, list]) => list.map((check) => ({ scenario, ...check })))
  const notPassed = checks.filter((check) => check.status !== 'SUCCESS')
  if (notPassed.length > 0 || runner.exitCode !== 0 || consentError || !landed) console.log(output(), consentError ?? '')

  expect(consentError).toBeUndefined()
  // The runner's callback page, reached with our code, state and iss (RFC 9207).
  expect(landed?.searchParams.get('iss')).toBe(issuer)
  expect(Object.keys(results).sort()).toEqual(['authorization-code-grant', 'authorization-server-metadata-endpoint'])
  expect(checks.map((check) => check.id).sort()).toEqual(['authorization-code-grant', 'authorization-server-metadata', 'authorization-server-metadata-cimd'])
  expect(notPassed.map(({ scenario, id, status, errorMessage }) => ({ scenario, id, status, errorMessage }))).toEqual([])
  expect(runner.exitCode).toBe(0)
  expect(Date.now() - started).toBeLessThan(RUN_DEADLINE_MS)
})
