import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import type { Browser, Page } from 'playwright-core'
import { startTestServer } from '../support/server.ts'
import { startTestIdentityProvider } from '../support/identity-provider.ts'
import { flowFixture, postForm, postJson } from '../oauth/support.ts'
import { browserTestsRun as runs, elsewhere, launchChromium, screenshot, seriousAccessibilityViolations, signInOnConsentPage } from './browser.ts'

// The Identity providers page (docs/dashboard.md) in Debian's chromium on the real service: an
// owner trusts a provider the test runs, links one of its subjects to a team member, sees the
// agent it connects under Connected apps, unlinks and stops trusting; by keyboard, checked with
// axe-core, and at 390 px. SCREENSHOTS_DIR=docs/dashboard saves the page for the docs.
setDefaultTimeout(60_000)

const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' } })
const fixture = await flowFixture(server)
const idp = await startTestIdentityProvider()
const registration = await postJson(server, '/v0/auth/register', {
  client_name: 'Enterprise agent',
  redirect_uris: [],
  grant_types: ['urn:ietf:params:oauth:grant-type:jwt-bearer'],
  token_endpoint_auth_method: 'client_secret_post',
})
const { client_id: agentId, client_secret: agentSecret } = (await registration.json()) as { client_id: string; client_secret: string }

let browser: Browser | undefined
let page: Page
const requested: string[] = []
const consoleErrors: string[] = []

beforeAll(async () => {
  if (!runs) return
  browser = await launchChromium()
  page = await (await browser.newContext({ viewport: { width: 1200, height: 900 } })).newPage()
  page.setDefaultTimeout(15_000)
  page.on('request', (request) => requested.push(request.url()))
  page.on('console', (message) => {
    if (message.type() === 'error') consoleErrors.push(message.text())
  })
  await page.goto(`${server.origin}/dashboard#/identity-providers`)
  await signInOnConsentPage(page, fixture)
})
afterAll(async () => {
  await browser?.close()
})

const providers = () => page.locator('#providers > li')

test.if(runs)('the page says what trusting a provider does, and that none is trusted yet', async () => {
  await page.getByRole('heading', { level: 1, name: 'Identity providers' }).waitFor()
  expect(await page.getByRole('link', { name: 'Identity providers' }).getAttribute('aria-current')).toBe('page')
  await page.locator('.empty').waitFor()
  expect(await page.textContent('.empty')).toContain('No identity provider is trusted')
  expect(await seriousAccessibilityViolations(page)).toEqual([])
})

test.if(runs)('trusting a provider by keyboard: the form, the choice of mapping with the arrow keys, Enter to send', async () => {
  await page.getByLabel('Issuer').focus()
  await page.keyboard.type(idp.issuer)
  await page.keyboard.press('Tab')
  expect(await page.evaluate(() => document.activeElement?.id)).toBe('jwks_uri')
  await page.keyboard.type(idp.jwksUri)
  await page.keyboard.press('Tab')
  await page.keyboard.type(agentId)
  await page.keyboard.press('Tab')
  expect(await page.evaluate(() => (document.activeElement as HTMLInputElement).value)).toBe('email')
  await page.keyboard.press('ArrowDown')
  expect(await page.evaluate(() => (document.activeElement as HTMLInputElement).value)).toBe('subject')
  await page.keyboard.press('Tab')
  expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Trust provider')
  await page.keyboard.press('Enter')
  await page.getByText(`Now trusting ${idp.issuer}.`).waitFor()
  const card = providers().first()
  expect(await card.getByRole('heading', { level: 2 }).textContent()).toBe(idp.issuer)
  expect(await card.textContent()).toContain(agentId)
  expect(await card.textContent()).toContain('by subject')
  expect(await page.getByLabel('Issuer').inputValue()).toBe('')
})

test.if(runs)("linking a subject to a team member lets the provider's agent in; it shows under Connected apps", async () => {
  const card = providers().first()
  await card.getByLabel("Subject (the provider's user id)").fill('00u8a9kq2zTr5vH3x697')
  await card.getByLabel("Team member's sign-in email").fill(fixture.email)
  await card.getByLabel("Team member's sign-in email").press('Enter')
  await page.getByText(`Linked 00u8a9kq2zTr5vH3x697 to ${fixture.email}.`).waitFor()
  const row = card.locator('tr[data-link-id]')
  expect(await row.locator('td').nth(1).textContent()).toBe(fixture.email)
  expect(await seriousAccessibilityViolations(page)).toEqual([])
  await screenshot(page, 'identity-providers')

  const assertion = await idp.idJag({ audience: server.config.baseUrl, clientId: agentId, subject: '00u8a9kq2zTr5vH3x697', scope: 'hooks:read' })
  const exchanged = await postForm(server, '/v0/auth/token', { grant_type: 'urn:ietf:params:oauth:grant-type:jwt-bearer', assertion, client_id: agentId, client_secret: agentSecret })
  expect(exchanged.status).toBe(200)
  await page.getByRole('navigation', { name: 'Dashboard' }).getByRole('link', { name: 'Connected apps' }).click()
  await page.getByRole('heading', { level: 2, name: 'Enterprise agent' }).waitFor()
  await page.getByRole('navigation', { name: 'Dashboard' }).getByRole('link', { name: 'Identity providers' }).click()
  await providers().first().waitFor()
})

test.if(runs)('at 390 px wide the page fits without sideways scrolling', async () => {
  await page.setViewportSize({ width: 390, height: 844 })
  await page.waitForLoadState('networkidle')
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBe(390)
  await screenshot(page, 'identity-providers-390px')
  await page.setViewportSize({ width: 1200, height: 900 })
})

test.if(runs)("a refused provider says why, naming the field", async () => {
  await page.getByLabel('Issuer').fill(idp.issuer)
  await page.getByLabel('Signing keys URL').fill(idp.jwksUri)
  await page.getByLabel('Agents it may connect').fill('not-a-client')
  await page.getByRole('button', { name: 'Trust provider' }).click()
  const alert = page.getByRole('alert')
  await alert.waitFor()
  expect(await alert.textContent()).toContain('/allowed_client_ids/0')
  await page.getByLabel('Agents it may connect').fill(agentId)
  await page.getByRole('button', { name: 'Trust provider' }).click()
  await page.getByText(/This account already trusts the issuer/).waitFor()
  await page.getByLabel('Issuer').fill('')
  await page.getByLabel('Signing keys URL').fill('')
  await page.getByLabel('Agents it may connect').fill('')
})

test.if(runs)('unlinking asks first, then the subject is gone; stopping trust removes the provider', async () => {
  const card = providers().first()
  await card.getByRole('button', { name: 'Unlink' }).click()
  // The question takes the focus on Cancel; Escape keeps the link, and the focus goes back to the button.
  await page.waitForFunction(() => document.activeElement?.textContent === 'Cancel')
  await page.keyboard.press('Escape')
  await card.getByRole('group').waitFor({ state: 'detached' })
  await page.waitForFunction(() => document.activeElement?.textContent === 'Unlink')
  expect(await card.locator('tr[data-link-id]').count()).toBe(1)
  await card.getByRole('button', { name: 'Unlink' }).click()
  await card.getByRole('group').getByRole('button', { name: 'Unlink' }).click()
  await page.getByText('Unlinked 00u8a9kq2zTr5vH3x697.').waitFor()
  // The list is read again after the notice: wait for the row to go.
  await card.locator('tr[data-link-id]').waitFor({ state: 'detached' })
  expect(await card.textContent()).toContain('No subject is linked yet')

  await card.getByRole('button', { name: 'Stop trusting' }).click()
  await card.getByRole('group').getByRole('button', { name: 'Stop trusting' }).click()
  await page.getByText(`No longer trusting ${idp.issuer}.`).waitFor()
  await providers().first().waitFor({ state: 'detached' })
  expect(await page.textContent('.empty')).toContain('No identity provider is trusted')
})

test.if(runs)('nothing is loaded from elsewhere and nothing broke the CSP', async () => {
  expect(elsewhere(server, requested)).toEqual([])
  expect(consoleErrors.filter((text) => /Content Security Policy|Refused to/i.test(text))).toEqual([])
})
