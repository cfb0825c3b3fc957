import { describe, expect, test } from 'bun:test'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ERROR_CATALOG, OAUTH_CODES, PROBLEM_CODES } from '../../src/ops/error-catalog.ts'
import { startTestServer } from '../support/server.ts'

// {PUBLIC_URL}/docs/errors (SPEC §3): the page every problem body's `type` links to, rendered
// from the catalog in src/ops/error-catalog.ts, which must name every code the source throws.

const server = await startTestServer()

/** The ids of the page's sections, in order. */
const sectionIds = (html: string) => [...html.matchAll(/<section id="([^"]+)"/g)].map((match) => match[1]!)

async function page(origin = server.origin) {
  const response = await fetch(`${origin}/docs/errors`)
  return { response, html: await response.text() }
}

const SRC = join(import.meta.dir, '../../src')

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(path)
    return entry.name.endsWith('.ts') ? [path] : []
  })
}

/**
 * Every code string the source passes to an error: `new ApiError(status, 'code'`,
 * `new OAuthError(status, 'code'`, `badRequest('code'`, the authorization request's
 * `fail('code'` (also across lines), the helpers notFound/validationFailed, and every member of
 * the OAuthErrorCode type.
 */
function thrownCodes(): Map<string, string[]> {
  const found = new Map<string, string[]>()
  const note = (code: string, file: string) => found.set(code, [...(found.get(code) ?? []), file.slice(SRC.length + 1)])
  const call = /(?:new\s+(?:ApiError|OAuthError)\(\s*[\w.]+\s*,\s*|\bbadRequest\(\s*|\bfail\(\s*)['"`]([a-z_]+)['"`]/g
  for (const file of sourceFiles(SRC)) {
    const text = readFileSync(file, 'utf8')
    for (const match of text.matchAll(call)) note(match[1]!, file)
    if (/\bnotFound\(/.test(text)) note('not_found', file)
    if (/\bvalidationFailed\(/.test(text)) note('validation_failed', file)
  }
  const errorsTs = readFileSync(join(SRC, 'lib/http/errors.ts'), 'utf8')
  const union = /export type OAuthErrorCode =([^;]*?)\n\n/s.exec(errorsTs)![1]!
  for (const match of union.matchAll(/'([a-z_]+)'/g)) note(match[1]!, join(SRC, 'lib/http/errors.ts'))
  return found
}

describe('the errors page', () => {
  test('is served as static, cacheable HTML under a strict CSP, without scripts or third-party assets', async () => {
    const { response, html } = await page()
    expect(response.status).toBe(200)
    expect(response.headers.get('content-type')).toBe('text/html; charset=utf-8')
    expect(response.headers.get('cache-control')).toBe('public, max-age=3600')
    expect(response.headers.get('x-content-type-options')).toBe('nosniff')
    expect(response.headers.get('x-request-id')).toMatch(/^req_/)
    const csp = response.headers.get('content-security-policy')!
    const directives = csp.split(';').map((directive) => directive.trim())
    expect(directives).toContain("default-src 'none'")
    expect(directives).toContain("frame-ancestors 'none'")
    expect(directives.some((directive) => directive.startsWith('script-src'))).toBe(false)
    const styleSrc = directives.find((directive) => directive.startsWith('style-src '))!
    expect(styleSrc).toMatch(/^style-src 'sha256-[A-Za-z0-9+/]+=*'$/)
    // The hash is the one of the page's only stylesheet, so the browser applies it.
    const style = /<style>([\s\S]*?)<\/style>/.exec(html)![1]!
    const hash = new Bun.CryptoHasher('sha256').update(style).digest('base64')
    expect(styleSrc).toBe(`style-src 'sha256-${hash}'`)
    expect(html.match(/<style/g)).toHaveLength(1)
    expect(html).not.toMatch(/<script|<link|<img|<iframe|\son[a-z]+=|style="/i)
    expect(html).not.toMatch(/(?:src|href)="(?:https?:)?\/\//)
    // The same bytes for everyone: cacheable.
    expect((await page()).html).toBe(html)
  })

  test('has one section per catalog code, its id the code, saying what happened and what to do', async () => {
    const { html } = await page()
    const codes = ERROR_CATALOG.map((entry) => entry.code)
    expect(new Set(codes).size).toBe(codes.length)
    expect(sectionIds(html)).toEqual(codes)
    for (const entry of ERROR_CATALOG) {
      expect(entry.code).toMatch(/^[a-z_]+$/)
      expect(entry.title.length).toBeGreaterThan(0)
      expect(entry.happened.length).toBeGreaterThan(10)
      expect(entry.todo.length).toBeGreaterThan(10)
      const start = html.indexOf(`<section id="${entry.code}">`)
      const sectionHtml = html.slice(start, html.indexOf('</section>', start))
      expect(sectionHtml).toContain('What happened')
      expect(sectionHtml).toContain('What to do')
      expect(html).toContain(`href="#${entry.code}"`)
    }
  })

  test('the catalog names every code the source throws (a new code without a section fails here)', () => {
    const thrown = thrownCodes()
    // The scan itself works: codes thrown across lines, by helpers and by the authorization request's fail().
    for (const code of ['hooks_limit_reached', 'subscription_not_active', 'unsupported_response_type', 'invalid_target', 'not_found', 'validation_failed', 'database_unavailable', 'internal_error', 'insufficient_scope', 'origin_not_allowed', 'method_not_allowed', 'rate_limited', 'not_ready', 'temporarily_unavailable', 'slow_down']) {
      expect(thrown.has(code)).toBe(true)
    }
    const catalog = new Set(ERROR_CATALOG.map((entry) => entry.code))
    const missing = [...thrown].filter(([code]) => !catalog.has(code)).map(([code, files]) => `${code} (${[...new Set(files)].join(', ')})`)
    expect(missing).toEqual([])
    // Every OAuth error code is in the OAuth part of the page.
    const oauth = new Set(OAUTH_CODES.map((entry) => entry.code))
    for (const code of ['invalid_client', 'invalid_grant', 'unauthorized_client', 'unsupported_grant_type', 'invalid_scope', 'access_denied', 'invalid_redirect_uri', 'invalid_client_metadata', 'unsupported_response_type', 'invalid_target', 'temporarily_unavailable', 'slow_down']) {
      expect(oauth.has(code)).toBe(true)
    }
    expect(PROBLEM_CODES.some((entry) => entry.code === 'invalid_request')).toBe(true)
  })

  test("a problem's type is the code's section of the page, which exists", async () => {
    const { html } = await page()
    const ids = sectionIds(html)

    const missing = await server.fetch('/v0/no-such-endpoint')
    expect(missing.status).toBe(404)
    const notFound = await missing.json()
    expect(notFound.type).toBe(`${server.origin}/docs/errors#not_found`)

    const { secret } = await server.createAccountWithKey()
    const invalid = await server.fetch(`/v0/account?key=${secret}`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 42 }),
    })
    expect(invalid.status).toBe(422)
    const validation = await invalid.json()
    expect(validation.code).toBe('validation_failed')
    expect(validation.type).toBe(`${server.origin}/docs/errors#validation_failed`)

    for (const problem of [notFound, validation]) {
      const url = new URL(problem.type)
      expect(`${url.origin}${url.pathname}`).toBe(`${server.origin}/docs/errors`)
      expect(ids).toContain(url.hash.slice(1))
      // The link works: the page it names is this one.
      expect((await fetch(problem.type)).status).toBe(200)
    }
  })

  test('type follows PUBLIC_URL, path included', async () => {
    const other = await startTestServer({ env: { PUBLIC_URL: 'https://messaging.example.test/svc' } })
    const body = await (await other.fetch('/v0/no-such-endpoint')).json()
    expect(body).toMatchObject({ code: 'not_found', type: 'https://messaging.example.test/svc/docs/errors#not_found' })
    // Behind the proxy that PUBLIC_URL names, the page is this server's /docs/errors.
    const { response, html } = await page(other.origin)
    expect(response.status).toBe(200)
    expect(sectionIds(html)).toContain('not_found')
    await other.stop()
  })
})
