import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { startTestServer } from '../support/server.ts'
import { startReceiver } from '../support/receiver.ts'
import { authorizeAndRedeem, flowFixture, postJson } from '../oauth/support.ts'
import { modernRequest } from '../support/mcp.ts'
import { browserTestsRun as runs, elsewhere, launchChromium, screenshot, seriousAccessibilityViolations, signInOnConsentPage } from './browser.ts'

// The dashboard in a real browser (Debian's chromium, driven by playwright-core), on the real
// service, against a real HTTPS receiver: what an account owner does, step by step. Skipped on a
// machine without chromium; under CI=true it must run. With SCREENSHOTS_DIR set, each page is
// also saved there (docs/dashboard.md shows them).
setDefaultTimeout(60_000)

// /flaky fails its first request (a failed delivery), then answers like /ok; /agent is an MCP
// agent's event callback, which answers the verification challenge.
const receiver = startReceiver((request, nth) => {
  if (request.path === '/agent') {
    const body = JSON.parse(request.body) as { type?: string; challenge?: string }
    return body.type === 'verification' ? Response.json({ challenge: body.challenge }) : new Response(null, { status: 204 })
  }
  return request.path === '/flaky' && nth === 1 ? new Response('upstream down', { status: 500 }) : new Response('thanks', { status: 200 })
})
const server = await startTestServer({
  // One attempt per delivery: a failure is final at once, and only a retry sends it again.
  env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile, WEBHOOK_RETRY_SCHEDULE: '0', WEBHOOK_TIMEOUT_MS: '2000' },
})
const fixture = await flowFixture(server)

let browser: Browser | undefined
let context: BrowserContext
let page: Page
/** Every URL the page asked for, and every message the console printed (CSP violations show there). */
const requested: string[] = []
const consoleErrors: string[] = []

beforeAll(async () => {
  if (!runs) return
  browser = await launchChromium()
  context = await browser.newContext({ viewport: { width: 1200, height: 900 } })
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.origin })
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

async function goTo(section: string) {
  await page.getByRole('navigation', { name: 'Dashboard' }).getByRole('link', { name: section }).click()
  await page.getByRole('heading', { level: 1, name: section }).waitFor()
}

test.if(runs)('signing in: the dashboard sends the browser to the consent page, and back signed in with the code out of the address bar', async () => {
  await page.goto(`${server.origin}/dashboard`)
  await page.waitForURL((url) => url.pathname === '/v0/auth/authorize')
  expect(await page.textContent('h1')).toBe('Sign in to the Messaging dashboard')
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await screenshot(page, 'sign-in')
  await page.fill('#email', fixture.email)
  await page.fill('#password', fixture.password)
  await Promise.all([page.waitForURL((url) => url.pathname === '/dashboard'), page.click('#allow')])
  // The overview is the page after signing in (tests/dashboard/health-browser.test.ts: its figures).
  await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor()
  expect(await page.textContent('#account-name')).toBe('OAuth account')
  const landed = new URL(page.url())
  expect(landed.search).toBe('')
  // The tokens live in the page's memory only.
  expect(await page.evaluate(() => [localStorage.length, sessionStorage.length])).toEqual([0, 0])
})

test.if(runs)('the empty overview and the empty webhooks page say what to do next', async () => {
  await page.locator('#attention-title').waitFor()
  expect(await page.textContent('.empty')).toContain('No webhooks yet')
  expect(await page.getByRole('link', { name: 'Create one' }).count()).toBe(1)
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await goTo('Webhooks')
  expect(await page.textContent('.empty')).toContain('No webhooks yet')
  expect(await page.getByRole('link', { name: 'Create your first webhook' }).count()).toBe(1)
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await screenshot(page, 'webhooks-empty')
})

let okHookPath = ''

test.if(runs)('create a webhook, see its secret once, send a test event and find it in the delivery log', async () => {
  await page.getByRole('link', { name: 'New webhook' }).click()
  await page.getByRole('heading', { level: 1, name: 'New webhook' }).waitFor()
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await page.selectOption('#event', 'message.delivered')
  await page.fill('#target_url', `${receiver.origin}/ok`)
  await screenshot(page, 'webhook-new')
  await page.getByRole('button', { name: 'Create webhook' }).click()
  await page.getByRole('heading', { level: 1, name: 'Webhook created' }).waitFor()
  const secret = await page.textContent('#secret-value')
  expect(secret).toMatch(/^whsec_/)
  // The secret box has the focus, so a screen reader reads it out first.
  await page.waitForFunction(() => document.activeElement?.classList.contains('secret'))
  await page.getByRole('button', { name: 'Copy' }).click()
  await page.getByText('Copied.').waitFor()
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(secret!)

  await page.getByRole('link', { name: 'Open the webhook' }).click()
  await page.getByRole('button', { name: 'Send test event' }).waitFor()
  okHookPath = new URL(page.url()).hash
  await page.getByRole('button', { name: 'Send test event' }).click()
  await page.locator('#test-result').waitFor()
  expect(await page.textContent('#test-result')).toContain('HTTP 200')
  expect(receiver.received.filter((request) => request.path === '/ok')).toHaveLength(1)
  const delivery = page.locator('#deliveries li').first()
  await delivery.getByText('succeeded').waitFor()
  expect(await delivery.textContent()).toContain('test')
  await delivery.getByRole('button', { name: 'Attempts' }).click()
  await delivery.getByText('HTTP 200 in').first().waitFor()
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await screenshot(page, 'webhook')
})

test.if(runs)('a failed delivery is retried from the page and succeeds', async () => {
  await page.getByRole('link', { name: 'Webhooks', exact: true }).first().click()
  await page.getByRole('link', { name: 'New webhook' }).click()
  await page.selectOption('#event', 'message.delivered')
  await page.fill('#target_url', `${receiver.origin}/flaky`)
  await page.getByRole('button', { name: 'Create webhook' }).click()
  await page.getByRole('link', { name: 'Open the webhook' }).click()
  await page.getByRole('heading', { level: 2, name: 'Deliveries' }).waitFor()

  // A message's outcome makes the delivery; the receiver fails it (500) and the schedule has no retry.
  const sent = await postJson(server, `/v0/account/${fixture.accountId}/messages?key=${fixture.apiKey}`, { to: '+14155550123', body: 'hello' })
  expect(sent.status).toBe(202)
  await receiver.waitFor((received) => received.some((request) => request.path === '/flaky'))
  const delivery = page.locator('#deliveries li').first()
  for (let tries = 0; tries < 40 && !(await delivery.getByText('failed', { exact: true }).count()); tries++) {
    await page.getByRole('button', { name: 'Refresh', exact: true }).click()
    await Bun.sleep(250)
  }
  await delivery.getByText('failed', { exact: true }).waitFor()
  expect(await delivery.textContent()).toContain('HTTP 500')

  await delivery.getByRole('button', { name: 'Retry' }).click()
  await delivery.getByText(/Sent again: HTTP 200 in \d+ ms\. Now succeeded\./).waitFor()
  expect(await delivery.locator('.badge-succeeded').count()).toBe(1)
  expect(receiver.received.filter((request) => request.path === '/flaky')).toHaveLength(2)
  // Both attempts, in order, each with its answer.
  expect(await delivery.locator('ol.attempts li').allTextContents()).toEqual([expect.stringContaining('HTTP 500'), expect.stringContaining('HTTP 200')])
  await screenshot(page, 'webhook-deliveries')
})

test.if(runs)('a filter: typed as numbers on create, shown on the page, changed and removed in the settings; a bad number is named', async () => {
  await page.getByRole('link', { name: 'Webhooks', exact: true }).first().click()
  await page.getByRole('link', { name: 'New webhook' }).click()
  // The label names whom the event type filters on.
  await page.selectOption('#event', 'message.inbound')
  await page.getByLabel('Only these senders (optional)').waitFor()
  await page.selectOption('#event', 'message.delivered')
  await page.getByLabel('Only these recipients (optional)').waitFor()
  await page.fill('#target_url', `${receiver.origin}/filtered`)
  await page.fill('#filter', '+14155550101,\n +14155550102\n')
  await page.getByRole('button', { name: 'Create webhook' }).click()
  await page.getByRole('link', { name: 'Open the webhook' }).click()
  await page.locator('#filter-fact').waitFor()
  expect(await page.textContent('#filter-fact')).toBe('only recipients +14155550101, +14155550102')
  expect(await page.inputValue('#edit-filter')).toBe('+14155550101\n+14155550102')
  expect(await seriousAccessibilityViolations(page)).toEqual([])

  await page.fill('#edit-filter', '+14155550103')
  await page.getByRole('button', { name: 'Save' }).click()
  await page.getByText('Saved. The signing secret is unchanged.').waitFor()
  expect(await page.textContent('#filter-fact')).toBe('only recipients +14155550103')

  await page.fill('#edit-filter', 'call me')
  await page.getByRole('button', { name: 'Save' }).click()
  const alert = page.locator('[role=alert]')
  await alert.waitFor()
  expect(await alert.textContent()).toContain('/filter/to/0')
  expect(await page.textContent('#filter-fact')).toBe('only recipients +14155550103')

  await page.fill('#edit-filter', '')
  await page.getByRole('button', { name: 'Save' }).click()
  await page.getByText('none: every message.delivered event').waitFor()
  const hookId = new URL(page.url()).hash.split('/').pop()!
  const hook = (await (await server.fetch(`/v0/account/${fixture.accountId}/hooks/${hookId}?key=${fixture.apiKey}`)).json()) as { filter: unknown }
  expect(hook.filter).toBeNull()
  // The tests after this one count the webhooks they made.
  expect((await server.fetch(`/v0/account/${fixture.accountId}/hooks/${hookId}?key=${fixture.apiKey}`, { method: 'DELETE' })).status).toBe(204)
})

test.if(runs)('an Ed25519 webhook: chosen on create, its public key shown and copyable on its page with how to verify, rotated to a new key', async () => {
  await page.getByRole('link', { name: 'Webhooks', exact: true }).first().click()
  await page.getByRole('link', { name: 'New webhook' }).click()
  await page.selectOption('#event', 'message.delivered')
  await page.fill('#target_url', `${receiver.origin}/ed25519`)
  // The own-secret field is for HMAC only: it goes while Ed25519 is chosen.
  expect(await page.getByText('Use a signing secret of your own (optional)').count()).toBe(1)
  await page.getByRole('radio', { name: /Ed25519/ }).check()
  expect(await page.getByText('Use a signing secret of your own (optional)').count()).toBe(0)
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await page.getByRole('button', { name: 'Create webhook' }).click()
  await page.getByRole('heading', { level: 1, name: 'Webhook created' }).waitFor()
  expect(await page.locator('#secret-value').count()).toBe(0)
  const publicKey = await page.textContent('#public-key')
  expect(publicKey).toMatch(/^whpk_[A-Za-z0-9+/]{43}=$/)

  await page.getByRole('link', { name: 'Open the webhook' }).click()
  await page.getByRole('heading', { level: 2, name: 'Signature', exact: true }).waitFor()
  expect(await page.textContent('#signature-fact')).toContain('Ed25519')
  expect(await page.textContent('#public-key')).toBe(publicKey)
  expect(await page.getByRole('link', { name: 'API reference' }).getAttribute('href')).toBe('/v0/docs')
  await page.getByRole('button', { name: 'Copy public key' }).click()
  await page.getByText('Copied.').waitFor()
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(publicKey!)
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await screenshot(page, 'webhook-ed25519')

  await page.getByRole('button', { name: 'Rotate key' }).click()
  await page.waitForFunction(() => document.activeElement?.textContent === 'Cancel')
  await page.getByRole('button', { name: 'Rotate', exact: true }).click()
  await page.locator('#previous-public-key').waitFor()
  expect(await page.textContent('#previous-public-key')).toBe(publicKey)
  expect(await page.textContent('#public-key')).not.toBe(publicKey)
  expect(await page.getByText('New key pair made').count()).toBe(1)
  const hookId = new URL(page.url()).hash.split('/').pop()!
  const hook = (await (await server.fetch(`/v0/account/${fixture.accountId}/hooks/${hookId}?key=${fixture.apiKey}`)).json()) as { public_key: string; previous_public_key: string }
  expect([hook.public_key, hook.previous_public_key]).toEqual([(await page.textContent('#public-key'))!, publicKey!])
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  // The tests after this one count the webhooks they made.
  expect((await server.fetch(`/v0/account/${fixture.accountId}/hooks/${hookId}?key=${fixture.apiKey}`, { method: 'DELETE' })).status).toBe(204)
})

test.if(runs)('edit, pause and resume a webhook, rotate its secret, then delete it after confirming', async () => {
  await page.goto('about:blank')
  await page.goto(`${server.origin}/dashboard${okHookPath}`)
  // A reload drops the in-memory tokens: signing in again goes through the consent page.
  await signInOnConsentPage(page, fixture)
  await page.getByRole('button', { name: 'Send test event' }).waitFor()
  expect(new URL(page.url()).hash).toBe(okHookPath)

  await page.fill('#edit-rate-limit', '25')
  await page.getByRole('button', { name: 'Save' }).click()
  await page.getByText('Saved. The signing secret is unchanged.').waitFor()
  expect(await page.textContent('.facts')).toContain('25 per second')

  await page.getByRole('button', { name: 'Pause' }).click()
  await page.getByRole('button', { name: 'Resume' }).waitFor()
  expect(await page.locator('.facts .badge').textContent()).toBe('paused')
  await page.getByRole('button', { name: 'Resume' }).click()
  await page.getByRole('button', { name: 'Pause' }).waitFor()

  await page.getByRole('button', { name: 'Rotate secret' }).click()
  // The question takes the focus on Cancel: Enter on a stray keypress does nothing destructive.
  await page.waitForFunction(() => document.activeElement?.textContent === 'Cancel')
  await page.getByRole('button', { name: 'Rotate', exact: true }).click()
  await page.getByRole('heading', { name: 'New signing secret' }).waitFor()
  expect(await page.textContent('#secret-value')).toMatch(/^whsec_/)

  await page.getByRole('button', { name: 'Delete' }).click()
  await page.waitForFunction(() => document.activeElement?.textContent === 'Cancel')
  await page.keyboard.press('Escape')
  await page.waitForFunction(() => document.activeElement?.textContent === 'Delete')
  await page.getByRole('button', { name: 'Delete' }).click()
  await page.getByRole('button', { name: 'Delete webhook' }).click()
  await page.getByRole('heading', { level: 1, name: 'Webhooks' }).waitFor()
  expect(await page.textContent('[role=status]')).toContain(`Deleted the webhook to ${receiver.origin}/ok`)
  await page.waitForFunction(() => document.querySelectorAll('#webhooks tbody tr').length === 1)
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await screenshot(page, 'webhooks')
})

test.if(runs)('an API key: created with its secret shown once, used, listed with its last use, revoked and then refused', async () => {
  await goTo('API keys')
  await page.fill('#key-name', 'billing server')
  await page.getByRole('button', { name: 'Create key' }).click()
  const secret = (await page.locator('#secret-value').textContent())!
  expect(secret).toMatch(/^sk_live_/)
  expect((await server.fetch(`/v0/account?key=${secret}`)).status).toBe(200)

  await goTo('Events')
  await goTo('API keys')
  const row = page.locator('#keys tbody tr', { hasText: 'billing server' })
  expect(await row.textContent()).toContain(secret.slice(0, 12))
  expect(await row.textContent()).not.toContain(secret)
  expect(await row.locator('td[data-label="Last used"] time').count()).toBe(1)
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await screenshot(page, 'api-keys')

  await row.getByRole('button', { name: 'Revoke' }).click()
  await row.getByRole('button', { name: 'Revoke key' }).click()
  await page.getByText('Revoked billing server.').waitFor()
  await page.locator('#keys tbody tr', { hasText: 'billing server' }).waitFor({ state: 'detached' })
  const refused = await server.fetch(`/v0/account?key=${secret}`)
  expect(refused.status).toBe(401)
})

test.if(runs)('an agent connected through OAuth is listed under Connected apps, revoked there, and its token refused', async () => {
  const { tokens } = await authorizeAndRedeem(server, fixture, { scope: 'hooks:read' })
  const agentToken = tokens.access_token
  const asAgent = () => server.fetch(`/v0/account/${fixture.accountId}/hooks`, { headers: { authorization: `Bearer ${agentToken}` } })
  expect((await asAgent()).status).toBe(200)

  await goTo('Connected apps')
  const card = page.locator('#grants li.grant', { hasText: 'Flow test client' })
  await card.waitFor()
  expect(await card.textContent()).toContain('See your webhook subscriptions and their delivery logs')
  // This page's own session is marked; the earlier sign-in (before the reload) is another session.
  expect(await page.locator('#grants li.grant', { hasText: 'this session' }).count()).toBe(1)
  expect(await page.locator('#grants li.grant', { hasText: 'another session' }).count()).toBe(1)
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await screenshot(page, 'connected-apps')

  await card.getByRole('button', { name: 'Revoke access' }).click()
  await card.getByRole('button', { name: 'Revoke', exact: true }).click()
  await page.getByText('Revoked the access of Flow test client.').waitFor()
  expect((await asAgent()).status).toBe(401)
})

test.if(runs)("an agent's MCP event subscriptions are shown with its grant, and ended there", async () => {
  const mcpUrl = `${server.config.baseUrl}/mcp`
  const { tokens } = await authorizeAndRedeem(server, fixture, { scope: 'messages:read', resource: mcpUrl })
  const secret = `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`
  const subscribed = await modernRequest(mcpUrl, tokens.access_token, 'events/subscribe', {
    name: 'message.inbound',
    arguments: { from: ['+14155550123'] },
    delivery: { mode: 'webhook', url: `${receiver.origin}/agent`, secret },
  })
  const { id } = ((await subscribed.json()) as { result: { id: string } }).result
  expect(id).toMatch(/^evs_/)

  // The previous test left the page on Connected apps: come back to it so it loads again.
  await goTo('Webhooks')
  await goTo('Connected apps')
  const row = page.locator('#grants li.grant table.event-subscriptions tbody tr', { hasText: 'message.inbound' })
  await row.waitFor()
  expect(await row.getAttribute('data-subscription-id')).toBe(id)
  expect(await row.textContent()).toContain('from +14155550123')
  expect(await row.textContent()).toContain(`${receiver.origin}/agent`)
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await screenshot(page, 'connected-apps-events')

  await row.getByRole('button', { name: 'End', exact: true }).click()
  await row.getByRole('button', { name: 'End subscription' }).click()
  await page.getByText('Ended its message.inbound subscription.').waitFor()
  await row.waitFor({ state: 'detached' })
  const grants = (await (await server.fetch(`/v0/account/${fixture.accountId}/grants?key=${fixture.apiKey}`)).json()) as { data: { id: string }[] }
  for (const grant of grants.data) {
    const left = (await (await server.fetch(`/v0/account/${fixture.accountId}/grants/${grant.id}/event-subscriptions?key=${fixture.apiKey}`)).json()) as { data: unknown[] }
    expect(left.data).toEqual([])
  }
})

test.if(runs)('the event log lists what happened, filtered by type', async () => {
  await postJson(server, `/v0/account/${fixture.accountId}/messages?key=${fixture.apiKey}`, { to: '+14155550000', body: 'to a failing number' })
  await goTo('Events')
  await page.locator('#events tbody tr').first().waitFor()
  await page.waitForFunction(() => document.querySelectorAll('#events tbody tr').length >= 2)
  await page.selectOption('#event-type', 'message.failed')
  await page.waitForFunction(() => [...document.querySelectorAll('#events tbody tr td[data-label="Type"]')].every((cell) => cell.textContent === 'message.failed'))
  expect(await page.locator('#events tbody tr').count()).toBeGreaterThan(0)
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await screenshot(page, 'events')
})

test.if(runs)('a problem from the API is shown in words with its request id', async () => {
  await goTo('Webhooks')
  await page.getByRole('link', { name: 'New webhook' }).click()
  // Plain http to a host on the internet: refused even where private targets are allowed.
  await page.fill('#target_url', 'http://example.com/hook')
  await page.getByRole('button', { name: 'Create webhook' }).click()
  const alert = page.getByRole('alert')
  await alert.waitFor()
  expect(await alert.textContent()).toMatch(/Creating the webhook failed: .+Request id: req_/)
})

test.if(runs)('at 390 px wide every page fits without sideways scrolling', async () => {
  await page.setViewportSize({ width: 390, height: 844 })
  for (const section of ['Overview', 'Webhooks', 'API keys', 'Connected apps', 'Events']) {
    await goTo(section)
    await page.waitForLoadState('networkidle')
    expect({ section, width: await page.evaluate(() => document.documentElement.scrollWidth) }).toEqual({ section, width: 390 })
  }
  await goTo('Webhooks')
  await page.locator('#webhooks a.url').first().click()
  await page.getByRole('heading', { level: 2, name: 'Deliveries' }).waitFor()
  await page.waitForLoadState('networkidle')
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBe(390)
  await screenshot(page, 'webhook-390px')
  await page.setViewportSize({ width: 1200, height: 900 })
})

test.if(runs)('nothing is loaded from elsewhere and nothing broke the CSP', async () => {
  expect(elsewhere(server, requested)).toEqual([])
  expect(consoleErrors.filter((text) => /Content Security Policy|Refused to/i.test(text))).toEqual([])
})

test.if(runs)('opened under another name for this host, the page moves to PUBLIC_URL first, where signing in returns', async () => {
  const other = await context.newPage()
  const elsewhere = server.origin.replace('127.0.0.1', 'localhost')
  await other.goto(`${elsewhere}/dashboard#/events`)
  await other.waitForURL((url) => url.pathname === '/v0/auth/authorize')
  expect(new URL(other.url()).origin).toBe(server.origin)
  await other.close()
})

test.if(runs)('sign out revokes the session: the page offers to sign in again', async () => {
  await page.getByRole('button', { name: 'Sign out' }).click()
  await page.getByText('You are signed out.').waitFor()
  expect(await page.getByRole('button', { name: 'Sign in' }).count()).toBe(1)
  expect(await seriousAccessibilityViolations(page)).toEqual([])
})
