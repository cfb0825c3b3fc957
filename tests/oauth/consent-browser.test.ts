import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { chromium, type Browser } from 'playwright-core'
import { startTestServer } from '../support/server.ts'
import { flowFixture, pkcePair, postJson } from './support.ts'

// The consent page in a real browser: Debian's chromium driven by playwright-core. A developer
// without chromium skips this file; CI installs it, and there it must run.
const CHROMIUM = '/usr/bin/chromium'
const chromiumAvailable = Bun.file(CHROMIUM).size > 0
setDefaultTimeout(60_000)

const server = await startTestServer()
const fixture = await flowFixture(server)

// The client's redirect target: a real page on loopback that records what it was sent.
const callbacks: URL[] = []
const receiver = Bun.serve({
  port: 0,
  hostname: '127.0.0.1',
  fetch(request) {
    callbacks.push(new URL(request.url))
    return new Response('<!doctype html><title>Back at the client</title><p id="done">done</p>', { headers: { 'content-type': 'text/html' } })
  },
})
const redirectUri = `http://127.0.0.1:${receiver.port}/callback`
const registration = await postJson(server, '/v0/auth/register', { client_name: 'Browser <b>Client</b>', redirect_uris: [redirectUri] })
const { client_id: clientId } = await registration.json()

let browser: Browser | undefined
afterAll(async () => {
  await browser?.close()
  receiver.stop(true)
})

async function openConsentPage(state: string) {
  browser ??= await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
  const page = await browser.newPage()
  const { verifier, challenge } = pkcePair()
  const url = new URL(`${server.origin}/v0/auth/authorize`)
  for (const [name, value] of Object.entries({ client_id: clientId, redirect_uri: redirectUri, response_type: 'code', code_challenge: challenge, code_challenge_method: 'S256', state, scope: 'account:read hooks:read' })) {
    url.searchParams.set(name, value)
  }
  await page.goto(url.href)
  return { page, verifier }
}

const runs = chromiumAvailable || process.env.CI === 'true'

test.if(runs)('sign in and Allow: the browser lands on the redirect URI with code, state and iss, and the code works', async () => {
  const { page, verifier } = await openConsentPage('browser-allow')
  expect(await page.textContent('#client-name')).toBe('Browser <b>Client</b>')
  expect(await page.textContent('#redirect-host')).toBe(`127.0.0.1:${receiver.port}`)
  expect(await page.textContent('#runs-on-device')).toBe('This app runs on your device.')
  expect(await page.locator('#scopes li').allTextContents()).toEqual(["See your account's name and id", 'See your webhook subscriptions and their delivery logs'])

  await page.fill('#email', fixture.email)
  await page.fill('#password', fixture.password)
  await Promise.all([page.waitForURL((url) => url.pathname === '/callback'), page.click('#allow')])
  const landed = new URL(page.url())
  expect(landed.searchParams.get('state')).toBe('browser-allow')
  expect(landed.searchParams.get('iss')).toBe(`${server.origin}/v0`)
  const code = landed.searchParams.get('code')!
  expect(code.length).toBeGreaterThan(20)

  const tokens = await postJson(server, '/v0/auth/token', { grant_type: 'authorization_code', code, client_id: clientId, redirect_uri: redirectUri, code_verifier: verifier })
  expect(tokens.status).toBe(200)
  expect((await tokens.json()).scope).toBe('account:read hooks:read')
  await page.close()
})

test.if(runs)('a wrong password is shown on the page, which stays put', async () => {
  const { page } = await openConsentPage('browser-wrong')
  await page.fill('#email', fixture.email)
  await page.fill('#password', 'not the password')
  await page.click('#allow')
  await page.waitForFunction(() => document.getElementById('error')?.textContent !== '')
  expect(await page.textContent('#error')).toBe('The email or password is wrong.')
  expect(new URL(page.url()).pathname).toBe('/v0/auth/authorize')
  await page.close()
})

test.if(runs)('Deny: the browser lands on the redirect URI with error=access_denied', async () => {
  const { page } = await openConsentPage('browser-deny')
  await Promise.all([page.waitForURL((url) => url.pathname === '/callback'), page.click('#deny')])
  const landed = new URL(page.url())
  expect(Object.fromEntries(landed.searchParams)).toEqual({ error: 'access_denied', state: 'browser-deny', iss: `${server.origin}/v0` })
  await page.close()
})

test.if(runs)('the page cannot be framed', async () => {
  browser ??= await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'] })
  const page = await browser.newPage()
  const { challenge } = pkcePair()
  const target = `${server.origin}/v0/auth/authorize?${new URLSearchParams({ client_id: clientId, redirect_uri: redirectUri, response_type: 'code', code_challenge: challenge, code_challenge_method: 'S256' })}`
  await page.goto(`http://127.0.0.1:${receiver.port}/framer`)
  await page.setContent(`<iframe id="frame" src="${target}"></iframe>`)
  await page.waitForTimeout(1_000)
  const frame = page.frames().find((candidate) => candidate !== page.mainFrame())
  const framedText = frame ? await frame.evaluate(() => document.body?.innerText ?? '').catch(() => '') : ''
  expect(framedText).not.toContain('wants to access your messaging account')
  await page.close()
})

test.if(runs)('an error for a web redirect URI: the browser stays on an error page whose link back carries the error', async () => {
  browser ??= await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'] })
  const registered = await postJson(server, '/v0/auth/register', { client_name: 'Web app', redirect_uris: ['https://app.example.invalid/cb'] })
  const { client_id: webClient } = await registered.json()
  const page = await browser.newPage()
  const url = `${server.origin}/v0/auth/authorize?${new URLSearchParams({ client_id: webClient, redirect_uri: 'https://app.example.invalid/cb', response_type: 'token', code_challenge: pkcePair().challenge, code_challenge_method: 'S256', state: 'web-error' })}`
  const response = await page.goto(url)
  expect(response?.status()).toBe(400)
  expect(new URL(page.url()).pathname).toBe('/v0/auth/authorize')
  expect(await page.textContent('h1')).toBe('This authorization request cannot go on')
  expect(await page.textContent('#error-code')).toBe('unsupported_response_type')
  const link = page.getByRole('link', { name: 'Return to app.example.invalid' })
  const href = new URL((await link.getAttribute('href'))!)
  expect(`${href.origin}${href.pathname}`).toBe('https://app.example.invalid/cb')
  expect(href.searchParams.get('error')).toBe('unsupported_response_type')
  expect(href.searchParams.get('state')).toBe('web-error')
  await page.close()
})
