import { mkdirSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { chromium, type Browser, type Locator, type Page } from 'playwright-core'
import type { TestServer } from '../support/server.ts'

// What the dashboard's browser tests share: Debian's chromium driven by playwright-core, axe-core
// evaluated in the page, signing in through the consent page, and screenshots for the docs.

export const CHROMIUM = '/usr/bin/chromium'
/** Skipped on a machine without chromium; under CI=true the tests must run (and fail without it). */
export const browserTestsRun = Bun.file(CHROMIUM).size > 0 || process.env.CI === 'true'

export const launchChromium = (): Promise<Browser> =>
  chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

/** axe-core in the page (evaluated through the DevTools protocol, which the page's CSP does not govern): serious and critical violations. */
export async function seriousAccessibilityViolations(page: Page): Promise<string[]> {
  await page.evaluate(axeSource)
  const violations = await page.evaluate(async () => {
    const result = await (window as unknown as { axe: { run(): Promise<{ violations: { id: string; impact: string; help: string; nodes: { target: string[] }[] }[] }> } }).axe.run()
    return result.violations
  })
  return violations.filter((violation) => violation.impact === 'serious' || violation.impact === 'critical').map((violation) => `${violation.id}: ${violation.help} (${violation.nodes.map((node) => node.target.join(' ')).join(', ')})`)
}

/** On the consent page the dashboard sent the browser to: signs in and waits to be back on the dashboard. */
export async function signInOnConsentPage(page: Page, user: { email: string; password: string }): Promise<void> {
  await page.waitForURL((url) => url.pathname === '/v0/auth/authorize')
  await page.fill('#email', user.email)
  await page.fill('#password', user.password)
  await Promise.all([page.waitForURL((url) => url.pathname === '/dashboard'), page.click('#allow')])
}

/** With SCREENSHOTS_DIR set, the page as it is now (or only `part` of it), saved there for the docs. */
export async function screenshot(page: Page, name: string, part?: Locator): Promise<void> {
  const dir = process.env.SCREENSHOTS_DIR
  if (!dir) return
  mkdirSync(dir, { recursive: true })
  const path = `${dir}/${name}.png`
  await (part ? part.screenshot({ path }) : page.screenshot({ path, fullPage: true }))
}

/** The origin every request of the page must have gone to. */
export const elsewhere = (server: TestServer, requested: string[]) => requested.filter((url) => new URL(url).origin !== server.origin)
