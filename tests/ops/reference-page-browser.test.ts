import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { chromium, type Browser } from 'playwright-core'
import { startTestServer } from '../support/server.ts'
import { flowFixture, postJson } from '../oauth/support.ts'

// The reference page at /v0/docs (Swagger UI from swagger-ui-dist) in Debian's chromium: its
// Authorize button runs the oauth2 scheme of the OpenAPI document, authorization code with PKCE,
// through our consent page, and "Try it out" then calls the API with the token it got.
const CHROMIUM = '/usr/bin/chromium'
const runs = Bun.file(CHROMIUM).size > 0 || process.env.CI === 'true'
setDefaultTimeout(60_000)

const server = await startTestServer()
let browser: Browser | undefined
afterAll(() => browser?.close())

test.if(runs)('Authorize on the reference page runs the OAuth flow with a registered client, and Try it out calls the API with the token', async () => {
  const fixture = await flowFixture(server)
  // The one-time setup docs/api.md describes: a client whose redirect URI is the page's.
  const registered = await postJson(server, '/v0/auth/register', {
    client_name: 'API reference',
    redirect_uris: [`${server.origin}/v0/docs/assets/oauth2-redirect.html`],
  })
  expect(registered.status).toBe(201)
  const { client_id: clientId } = (await registered.json()) as { client_id: string }

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
  const context = await browser.newContext()
  const page = await context.newPage()
  await page.goto(`${server.origin}/v0/docs`)
  await page.click('button.authorize')
  const dialog = page.locator('.auth-container', { hasText: 'oauth2' })
  await dialog.locator('input[data-name="clientId"], #client_id').first().fill(clientId)
  // Swagger UI hides the checkbox behind its label.
  await dialog.locator('label[for="account:read-authorizationCode-checkbox-oauth2"]').click()
  const [consent] = await Promise.all([context.waitForEvent('page'), dialog.locator('button.authorize').click()])
  await consent.waitForLoadState()
  expect(new URL(consent.url()).pathname).toBe('/v0/auth/authorize')
  expect(await consent.textContent('#client-name')).toBe('API reference')
  await consent.fill('#email', fixture.email)
  await consent.fill('#password', fixture.password)
  await Promise.all([consent.waitForEvent('close'), consent.click('#allow')])

  // Swagger UI redeemed the code and now offers to log out of the scheme.
  await page.waitForSelector('.auth-container button.btn-done, .auth-container button.logout', { timeout: 15_000 })
  expect(await page.locator('.auth-container', { hasText: 'oauth2' }).textContent()).toContain('Authorized')
  await page.locator('.auth-container button.btn-done').first().click()

  // Try it out: GET /v0/account with the bearer token the flow gave.
  const operation = page.locator('#operations-Accounts-getAccount, [id$="-getAccount"]').first()
  await operation.locator('.opblock-summary').click()
  await operation.locator('button.try-out__btn').click()
  const [answer] = await Promise.all([page.waitForResponse((response) => new URL(response.url()).pathname === '/v0/account'), operation.locator('button.execute').click()])
  expect(answer.status()).toBe(200)
  expect(answer.request().headers().authorization).toStartWith('Bearer ')
  expect(((await answer.json()) as { id: string }).id).toBe(fixture.accountId)
})
