import { expect, test } from 'bun:test'
import { eq, sql } from 'drizzle-orm'
import { queryRows } from '../../src/lib/db/client.ts'
import { startTestServer } from '../support/server.ts'
import { createTestDatabase } from '../support/database.ts'
import { oauthClients } from '../../src/lib/db/schema.ts'
import { DASHBOARD_CLIENT_ID, ensureDashboardClient } from '../../src/dashboard/client.ts'
import { pkcePair } from '../oauth/support.ts'

const server = await startTestServer()

const settingsOf = (html: string) => JSON.parse(/<script type="application\/json" id="dashboard-settings">(.*?)<\/script>/s.exec(html)![1]!)

test('GET /dashboard: the page with a fresh nonce per response, a CSP that allows nothing else, and the settings of this deployment', async () => {
  const first = await server.fetch('/dashboard')
  expect(first.status).toBe(200)
  expect(first.headers.get('content-type')).toBe('text/html; charset=utf-8')
  expect(first.headers.get('cache-control')).toBe('no-store')
  expect(first.headers.get('referrer-policy')).toBe('no-referrer')
  const csp = first.headers.get('content-security-policy')!
  const nonce = /script-src 'nonce-([^']+)'/.exec(csp)![1]!
  for (const directive of ["default-src 'none'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"]) expect(csp).toContain(directive)
  expect(csp).not.toContain('unsafe')
  const html = await first.text()
  // One executable script, carrying the nonce; the settings are a data block.
  expect(html.match(/<script(?![^>]*application\/json)[^>]*>/g)).toEqual([expect.stringContaining(`nonce="${nonce}"`)])
  expect(settingsOf(html)).toEqual({
    apiBase: '/v0',
    clientId: DASHBOARD_CLIENT_ID,
    redirectUri: `${server.origin}/dashboard`,
    resource: `${server.origin}/v0`,
    scope: 'account:read hooks:read hooks:write messages:read keys:read keys:write grants:read grants:write identity_providers:read identity_providers:write',
    assetPath: '/dashboard/assets',
    assetVersion: expect.stringMatching(/^[0-9a-f]{16}$/),
  })
  const second = await server.fetch('/dashboard/')
  expect(second.status).toBe(200)
  expect(/script-src 'nonce-([^']+)'/.exec(second.headers.get('content-security-policy')!)![1]).not.toBe(nonce)
})

test('the assets: cached for good under their version, revalidated under any other', async () => {
  const { assetVersion } = settingsOf(await (await server.fetch('/dashboard')).text())
  const script = await server.fetch(`/dashboard/assets/dashboard.js?v=${assetVersion}`)
  expect(script.status).toBe(200)
  expect(script.headers.get('content-type')).toBe('text/javascript; charset=utf-8')
  expect(script.headers.get('cache-control')).toBe('public, max-age=31536000, immutable')
  expect(script.headers.get('x-content-type-options')).toBe('nosniff')
  const source = await script.text()
  // Bundled: no import left for the browser to fetch from anywhere. (`from` after a name, `*` or
  // `}`, as in an import: the string "from", a filter's key, is no import.)
  expect(source).not.toMatch(/\bimport\s*[{("'*]|[\w*}\s]from\s*["']/)
  const stale = await server.fetch('/dashboard/assets/dashboard.css?v=0000')
  expect(stale.headers.get('content-type')).toBe('text/css; charset=utf-8')
  expect(stale.headers.get('cache-control')).toBe('no-cache')
})

test('the dashboard signs in on the consent page as itself, and cannot be given a scope it was not registered for', async () => {
  const authorize = (scope: string) => {
    const query = new URLSearchParams({
      client_id: DASHBOARD_CLIENT_ID,
      redirect_uri: `${server.origin}/dashboard`,
      response_type: 'code',
      code_challenge: pkcePair().challenge,
      code_challenge_method: 'S256',
      state: 's',
      scope,
    })
    return server.fetch(`/v0/auth/authorize?${query}`, { redirect: 'manual' })
  }
  const page = await (await authorize('hooks:read keys:read')).text()
  expect(page).toContain('<h1>Sign in to the <strong id="client-name">Messaging dashboard</strong></h1>')
  expect(page).toContain('<button type="submit" id="allow">Sign in</button>')
  expect(page).toContain('See your API keys (names and prefixes, never the secrets)')
  const refused = await authorize('messages:send')
  expect(refused.status).toBe(302)
  expect(new URL(refused.headers.get('location')!).searchParams.get('error')).toBe('invalid_scope')
})

test("the dashboard's registration follows PUBLIC_URL, and starting again with the same one writes nothing", async () => {
  const database = await createTestDatabase()
  try {
    const { db } = database.handle
    await ensureDashboardClient(db, 'https://one.example')
    await ensureDashboardClient(db, 'https://two.example/messaging')
    const [moved] = await db.select().from(oauthClients).where(eq(oauthClients.id, DASHBOARD_CLIENT_ID))
    expect(moved!.redirectUris).toEqual(['https://two.example/messaging/dashboard'])
    expect(moved!.tokenEndpointAuthMethod).toBe('none')
    // xmin changes with every write of the row: the same PUBLIC_URL again leaves it as it was.
    const version = async () => (await queryRows<{ xmin: string }>(db, sql`select xmin::text from oauth_clients where id = ${DASHBOARD_CLIENT_ID}`))[0]!.xmin
    const before = await version()
    await ensureDashboardClient(db, 'https://two.example/messaging')
    expect(await version()).toBe(before)
  } finally {
    await database.drop()
  }
})
