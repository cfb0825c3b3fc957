import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import type { Browser, Page, Request } from 'playwright-core'
import { startTestServer } from '../support/server.ts'
import { startReceiver } from '../support/receiver.ts'
import { flowFixture, postJson } from '../oauth/support.ts'
import { browserTestsRun as runs, elsewhere, launchChromium, screenshot, seriousAccessibilityViolations, signInOnConsentPage } from './browser.ts'

// The account overview and a subscription's charts (issue 34), in Debian's chromium on the real
// service, with figures made through the public API by a real HTTPS receiver: every number the
// pages show is checked against the stats API's answer to the very range the page asked for.
// SCREENSHOTS_DIR=docs/dashboard saves the pages docs/dashboard.md shows.
setDefaultTimeout(60_000)

// /mixed fails its first two requests (503), then answers after a short wait so latency has a
// shape; /down always fails (its circuit opens); /reject answers 400, a failure from a receiver
// that is up, which opens no circuit.
const receiver = startReceiver(async (request, nth) => {
  if (request.path === '/mixed') {
    if (nth <= 2) return new Response('busy', { status: 503 })
    await Bun.sleep(5 + (nth % 3) * 20)
    return new Response('thanks')
  }
  if (request.path === '/down') return new Response('down', { status: 500 })
  return new Response('no', { status: 400 })
})
const server = await startTestServer({
  // One attempt per delivery: each failure is final, so the figures settle and stay put.
  env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile, WEBHOOK_RETRY_SCHEDULE: '0', WEBHOOK_TIMEOUT_MS: '2000' },
})
const fixture = await flowFixture(server)
const account = `/v0/account/${fixture.accountId}`

interface Figures {
  attempts: number
  succeeded: number
  failed: number
  failures: Record<string, number>
  latency_ms: { p50: number; p95: number; p99: number } | null
}
interface Messages {
  sent: number
  delivered: number
  failed: number
  received: number
}
interface AccountStats {
  interval: string
  since: string
  until: string
  pending: number
  totals: Figures & { messages: Messages }
  buckets: (Figures & { start: string; messages: Messages })[]
}
interface HookStats {
  interval: string
  since: string
  until: string
  pending: number
  totals: Figures
  buckets: (Figures & { start: string })[]
}
interface Hook {
  id: string
  target_url: string
  circuit: { state: string; consecutive_failures: number }
}

const get = async <T,>(path: string): Promise<T> => {
  const response = await server.fetch(`${path}${path.includes('?') ? '&' : '?'}key=${fixture.apiKey}`)
  expect(response.status).toBe(200)
  return (await response.json()) as T
}

/** Reads until `done` holds: the attempts are recorded a moment after the receiver answers. */
async function settled<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string): Promise<T> {
  for (let tries = 0; tries < 200; tries++) {
    const value = await read()
    if (done(value)) return value
    await Bun.sleep(50)
  }
  throw new Error(`${what} did not happen`)
}

async function createHook(event: string, path: string): Promise<Hook> {
  const response = await postJson(server, `${account}/hooks?key=${fixture.apiKey}`, { event, target_url: `${receiver.origin}${path}` })
  expect(response.status).toBe(201)
  return (await response.json()) as Hook
}

const send = async (to: string, count: number) => {
  for (let i = 0; i < count; i++) expect((await postJson(server, `${account}/messages?key=${fixture.apiKey}`, { to, body: `hello ${i}` })).status).toBe(202)
}
const lastHourOf = (hook: Hook) => get<HookStats>(`${account}/hooks/${hook.id}/stats?interval=minute&since=${new Date(Date.now() - 3_600_000).toISOString()}`)

let mixed: Hook
let down: Hook
let reject: Hook
let browser: Browser | undefined
let page: Page
const requested: string[] = []
const consoleErrors: string[] = []

beforeAll(async () => {
  if (!runs) return
  mixed = await createHook('message.delivered', '/mixed')
  down = await createHook('message.failed', '/down')
  reject = await createHook('message.inbound', '/reject')
  const attemptsOf = async (hook: Hook, count: number) =>
    settled(() => lastHourOf(hook), (stats) => stats.totals.attempts === count && stats.pending === 0, `${count} attempts of ${hook.target_url}`)

  // The two failures first and recorded, then the successes: the subscription ends healthy
  // (its last attempts succeeded), whatever order concurrent attempts are recorded in.
  await send('+14155550123', 2)
  await attemptsOf(mixed, 2)
  await send('+14155550123', 4)
  await attemptsOf(mixed, 6)
  // Numbers ending in 0000 fail at the sandbox carrier: three message.failed events, three 500s, the circuit opens.
  await send('+14155550000', 3)
  await attemptsOf(down, 3)
  for (let i = 0; i < 2; i++) expect((await postJson(server, `${account}/sandbox/inbound?key=${fixture.apiKey}`, { from: '+14155550999', body: 'hi back' })).status).toBe(201)
  await attemptsOf(reject, 2)
  expect((await get<Hook>(`${account}/hooks/${down.id}`)).circuit.state).not.toBe('closed')
  expect((await get<Hook>(`${account}/hooks/${mixed.id}`)).circuit.consecutive_failures).toBe(0)

  browser = await launchChromium()
  // en-US: the test reads figures as the page formats them.
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 }, locale: 'en-US' })
  page = await context.newPage()
  page.setDefaultTimeout(15_000)
  page.on('request', (request) => requested.push(request.url()))
  page.on('console', (message) => {
    if (message.type() === 'error') consoleErrors.push(message.text())
  })
})
afterAll(async () => {
  await browser?.close()
})

const isStatsRequest = (path: string) => (request: Request) => new URL(request.url()).pathname === path && request.method() === 'GET'

/** The same range the page asked for, read with the API key: what the page must show. */
const sameRange = <T,>(request: Request) => get<T>(`${new URL(request.url()).pathname}${new URL(request.url()).search}`)

const percent = (share: number) => new Intl.NumberFormat('en-US', { style: 'percent', maximumFractionDigits: 1 }).format(share)

/** A definition list's figures, by name. */
const figuresIn = (id: string) =>
  page.evaluate((id) => Object.fromEntries([...document.querySelectorAll(`#${id} > div`)].map((pair) => [pair.querySelector('dt')!.textContent, pair.querySelector('dd')!.textContent])), id)

/** Opens a table alternative from the keyboard, as a screen reader user would. */
async function openTable(summary: string) {
  const disclosure = page.locator('summary', { hasText: summary })
  await disclosure.focus()
  await page.keyboard.press('Enter')
  await page.waitForFunction((text) => [...document.querySelectorAll('details')].some((details) => details.open && details.querySelector('summary')!.textContent === text), summary)
}

/** A figures table's rows: the bucket's start (its datetime) and each cell's text. */
const tableRows = (id: string) =>
  page.evaluate((id) => [...document.querySelectorAll(`#${id} tbody tr`)].map((row) => [row.querySelector('th time')!.getAttribute('datetime'), ...[...row.querySelectorAll('td')].map((cell) => cell.textContent)]), id)

const latency = (figures: Figures, pick: 'p50' | 'p99') => (figures.latency_ms ? String(figures.latency_ms[pick]) : 'none')
const attemptRow = (bucket: Figures & { start: string }) => [bucket.start, String(bucket.attempts), String(bucket.succeeded), String(bucket.failed), latency(bucket, 'p50'), latency(bucket, 'p99')]

/** How many pixels of a canvas are drawn in `hex` (within anti-aliasing): a chart with its series drawn has some. */
const pixelsOf = (canvasId: string, hex: string) =>
  page.evaluate(
    ({ canvasId, hex }) => {
      const canvas = document.getElementById(canvasId) as HTMLCanvasElement
      const pixels = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data
      const [r, g, b] = [1, 3, 5].map((at) => parseInt(hex.slice(at, at + 2), 16)) as [number, number, number]
      let count = 0
      for (let i = 0; i < pixels.length; i += 4) {
        if (pixels[i + 3]! > 200 && Math.abs(pixels[i]! - r) + Math.abs(pixels[i + 1]! - g) + Math.abs(pixels[i + 2]! - b) < 30) count++
      }
      return count
    },
    { canvasId, hex },
  )
const GREEN = '#1b6e3a'
const RED = '#b3261e'
const BLUE = '#3451b2'

const fitsAt390 = () => page.evaluate(() => document.documentElement.scrollWidth)

test.if(runs)('the overview is the page after signing in, and shows the account stats of the last 24 hours, per hour', async () => {
  const statsRequest = page.waitForRequest(isStatsRequest(`${account}/stats`))
  await page.goto(`${server.origin}/dashboard`)
  await signInOnConsentPage(page, fixture)
  await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor()
  const request = await statsRequest
  const query = new URL(request.url()).searchParams
  expect(query.get('interval')).toBe('hour')
  expect(Date.parse(query.get('until')!) - Date.parse(query.get('since')!)).toBe(24 * 3_600_000)
  await page.locator('#webhook-figures').waitFor()

  const stats = await sameRange<AccountStats>(request)
  // What the seeding made: 9 messages sent (3 to a failing number), 2 received; 11 attempts, 4 of them succeeded.
  expect(stats.totals.messages).toEqual({ sent: 9, delivered: 6, failed: 3, received: 2 })
  expect(stats.totals).toMatchObject({ attempts: 11, succeeded: 4, failed: 7 })
  expect(await figuresIn('message-figures')).toEqual({
    Sent: String(stats.totals.messages.sent),
    Delivered: String(stats.totals.messages.delivered),
    Failed: String(stats.totals.messages.failed),
    Received: String(stats.totals.messages.received),
  })
  expect(await figuresIn('webhook-figures')).toEqual({
    Attempts: String(stats.totals.attempts),
    'Success rate': percent(stats.totals.succeeded / stats.totals.attempts),
    Succeeded: String(stats.totals.succeeded),
    Failed: String(stats.totals.failed),
    'Waiting now': String(stats.pending),
    'Latency p50 / p99': `${stats.totals.latency_ms!.p50} / ${stats.totals.latency_ms!.p99} ms`,
  })
  expect(await page.textContent('#failure-reasons')).toBe(`Failed attempts: ${stats.totals.failures.http_5xx} HTTP 5xx, ${stats.totals.failures.http_4xx} HTTP 4xx.`)

  // The charts are drawn: their bars and lines are on the canvas.
  expect(await pixelsOf('chart-attempts', GREEN)).toBeGreaterThan(0)
  expect(await pixelsOf('chart-attempts', RED)).toBeGreaterThan(0)
  expect(await pixelsOf('chart-messages', BLUE)).toBeGreaterThan(0)
  expect(await page.getAttribute('#chart-attempts', 'aria-label')).toContain(`${stats.totals.succeeded} succeeded and ${stats.totals.failed} failed`)
  await screenshot(page, 'overview')

  // Each chart's table alternative holds the API's buckets.
  await openTable('Webhook attempts per hour as a table')
  expect(await tableRows('attempts-table')).toEqual(stats.buckets.map(attemptRow))
  await openTable('Messages per hour as a table')
  expect(await tableRows('messages-table')).toEqual(
    stats.buckets.map((bucket) => [bucket.start, ...[bucket.messages.sent, bucket.messages.delivered, bucket.messages.failed, bucket.messages.received].map(String)]),
  )
  expect(await seriousAccessibilityViolations(page)).toEqual([])
})

test.if(runs)('the overview lists the subscription whose circuit is open, and only it, linking to its page', async () => {
  const rows = page.locator('#attention tbody tr')
  expect(await rows.count()).toBe(1)
  const link = rows.getByRole('link')
  expect(await link.textContent()).toBe(down.target_url)
  expect(await link.getAttribute('href')).toBe(`#/webhooks/${down.id}`)
  expect(await rows.locator('td[data-label="Why"]').textContent()).toMatch(/^Circuit (open|half open) after 3 failed attempts in a row/)
  // A 400 is an answer from a receiver that is up: that subscription's failures are in the figures, not this list.
  expect(await page.locator('#attention').textContent()).not.toContain(reject.target_url)

  const statsRequest = page.waitForRequest(isStatsRequest(`${account}/hooks/${down.id}/stats`))
  await link.click()
  await page.locator('#health-summary').waitFor()
  const stats = await sameRange<HookStats>(await statsRequest)
  expect(stats.totals).toMatchObject({ attempts: 3, succeeded: 0, failed: 3 })
  expect(await page.textContent('#health-summary')).toContain('3 attempts, 0 succeeded (0%), 3 failed (3 HTTP 5xx)')
  expect(await pixelsOf('chart-attempts', RED)).toBeGreaterThan(0)
  expect(await pixelsOf('chart-attempts', GREEN)).toBe(0)
})

test.if(runs)("a subscription's charts and table follow the range picker: 24 hours per hour, the last hour per minute, 7 days per hour", async () => {
  const first = page.waitForRequest(isStatsRequest(`${account}/hooks/${mixed.id}/stats`))
  await page.getByRole('navigation', { name: 'Dashboard' }).getByRole('link', { name: 'Webhooks' }).click()
  await page.getByRole('link', { name: mixed.target_url }).click()
  const day = await first
  await page.locator('#health-summary').waitFor()
  expect(await page.getByRole('group', { name: 'Range' }).getByRole('radio', { name: 'Last 24 hours' }).isChecked()).toBe(true)
  const dayQuery = new URL(day.url()).searchParams
  expect(dayQuery.get('interval')).toBe('hour')
  const dayStats = await sameRange<HookStats>(day)
  expect(dayStats.totals).toMatchObject({ attempts: 6, succeeded: 4, failed: 2 })
  expect(await pixelsOf('chart-attempts', GREEN)).toBeGreaterThan(0)
  expect(await pixelsOf('chart-attempts', RED)).toBeGreaterThan(0)
  expect(await pixelsOf('chart-latency', BLUE)).toBeGreaterThan(0)
  await screenshot(page, 'webhook-health', page.locator('section.health'))
  await openTable('Attempts and latency per hour as a table')
  expect(await tableRows('health-table')).toEqual(dayStats.buckets.map(attemptRow))
  expect(dayStats.buckets).toHaveLength(24)
  expect(await seriousAccessibilityViolations(page)).toEqual([])

  // From the keyboard: the checked radio, then the arrow key to the one before it.
  const hourRequest = page.waitForRequest(isStatsRequest(`${account}/hooks/${mixed.id}/stats`))
  await page.getByRole('radio', { name: 'Last 24 hours' }).focus()
  await page.keyboard.press('ArrowLeft')
  const hour = await hourRequest
  const hourQuery = new URL(hour.url()).searchParams
  expect(hourQuery.get('interval')).toBe('minute')
  expect(hourQuery.get('since')).not.toBe(dayQuery.get('since'))
  expect(Date.parse(hourQuery.get('until')!) - Date.parse(hourQuery.get('since')!)).toBe(3_600_000)
  expect(await page.getByRole('radio', { name: 'Last hour' }).isChecked()).toBe(true)
  await page.getByRole('heading', { level: 3, name: 'Attempts per minute' }).waitFor()
  const hourStats = await sameRange<HookStats>(hour)
  expect(hourStats.buckets).toHaveLength(60)
  expect(await tableRows('health-table')).toEqual(hourStats.buckets.map(attemptRow))
  expect(hourStats.totals).toMatchObject({ attempts: 6, succeeded: 4, failed: 2 })
  expect(await pixelsOf('chart-attempts', GREEN)).toBeGreaterThan(0)
  expect(await pixelsOf('chart-latency', BLUE)).toBeGreaterThan(0)

  const weekRequest = page.waitForRequest(isStatsRequest(`${account}/hooks/${mixed.id}/stats`))
  await page.getByRole('radio', { name: 'Last 7 days' }).check()
  const week = await weekRequest
  const weekQuery = new URL(week.url()).searchParams
  expect(weekQuery.get('interval')).toBe('hour')
  expect(Date.parse(weekQuery.get('until')!) - Date.parse(weekQuery.get('since')!)).toBe(7 * 24 * 3_600_000)
  await page.waitForFunction(() => document.querySelectorAll('#health-table tbody tr').length === 168)
  const weekStats = await sameRange<HookStats>(week)
  expect(await tableRows('health-table')).toEqual(weekStats.buckets.map(attemptRow))
  expect(await page.textContent('#health-summary')).toStartWith('Last 7 days: 6 attempts, 4 succeeded')
  expect(await seriousAccessibilityViolations(page)).toEqual([])
})

test.if(runs)('at 390 px wide the overview and a subscription with its charts and tables fit without sideways scrolling', async () => {
  await page.setViewportSize({ width: 390, height: 844 })
  // The charts follow their box's width, redrawn in the frame after the box changed.
  await page.waitForFunction(() => [...document.querySelectorAll('canvas')].every((canvas) => canvas.getBoundingClientRect().right <= 390))
  expect(await fitsAt390()).toBe(390)

  await page.getByRole('navigation', { name: 'Dashboard' }).getByRole('link', { name: 'Overview' }).click()
  await page.locator('#webhook-figures').waitFor()
  await page.locator('#attention').waitFor()
  await page.waitForLoadState('networkidle')
  expect(await fitsAt390()).toBe(390)
  await screenshot(page, 'overview-390px')
  await openTable('Webhook attempts per hour as a table')
  await openTable('Messages per hour as a table')
  expect(await fitsAt390()).toBe(390)
  await page.setViewportSize({ width: 1200, height: 900 })
})

test.if(runs)('nothing is loaded from elsewhere and nothing broke the CSP', async () => {
  expect(requested.length).toBeGreaterThan(0)
  expect(elsewhere(server, requested)).toEqual([])
  expect(consoleErrors.filter((text) => /Content Security Policy|Refused to/i.test(text))).toEqual([])
})
