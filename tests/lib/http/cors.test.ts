import { describe, expect, test } from 'bun:test'
import { like } from 'drizzle-orm'
import { startTestServer } from '../../support/server.ts'
import { rateLimits } from '../../../src/lib/db/schema.ts'
import { CORS_ALLOWED_HEADERS, CORS_MAX_AGE_SECONDS, preflightHeaders } from '../../../src/lib/http/cors.ts'
import {
  API_RESOURCE_METADATA_PATHS,
  AUTHORIZATION_SERVER_METADATA_PATHS,
  MCP_RESOURCE_METADATA_PATHS,
} from '../../../src/oauth/discovery.ts'

const server = await startTestServer()
const BROWSER_ORIGIN = 'https://agent.example.org'

const discoveryPaths = [...AUTHORIZATION_SERVER_METADATA_PATHS, ...API_RESOURCE_METADATA_PATHS, ...MCP_RESOURCE_METADATA_PATHS]
const corsPaths: [string, string][] = [...discoveryPaths.map((path): [string, string] => [path, 'GET']), ['/v0/auth/register', 'POST']]

const preflight = (path: string, method: string, requestHeaders = 'authorization, content-type, mcp-protocol-version') =>
  server.fetch(path, {
    method: 'OPTIONS',
    headers: { origin: BROWSER_ORIGIN, 'access-control-request-method': method, 'access-control-request-headers': requestHeaders },
  })

function expectCorsResponseHeaders(response: Response) {
  expect(response.headers.get('access-control-allow-origin')).toBe('*')
  expect(response.headers.get('access-control-allow-credentials')).toBeNull()
  const exposed = response.headers.get('access-control-expose-headers')!.toLowerCase().split(/,\s*/)
  expect(exposed).toContain('www-authenticate')
  expect(exposed).toContain('mcp-session-id')
  expect(exposed).toContain('dpop-nonce')
}

describe('preflight', () => {
  for (const [path, method] of corsPaths) {
    test(`OPTIONS ${path}: 204 allowing ${method} and the MCP headers`, async () => {
      const response = await preflight(path, method)
      expect(response.status).toBe(204)
      expect(await response.text()).toBe('')
      expectCorsResponseHeaders(response)
      expect(response.headers.get('access-control-allow-methods')!.split(', ')).toContain(method)
      const allowed = response.headers.get('access-control-allow-headers')!.toLowerCase().split(/,\s*/)
      for (const header of ['authorization', 'content-type', 'mcp-protocol-version', 'mcp-session-id', 'last-event-id', 'dpop']) {
        expect(allowed).toContain(header)
      }
      expect(response.headers.get('access-control-max-age')).toBe(String(CORS_MAX_AGE_SECONDS))
    })
  }

  test('never 401, whatever credential the preflight carries', async () => {
    for (const [path, method] of corsPaths) {
      const response = await server.fetch(`${path}?key=sk_live_nope`, {
        method: 'OPTIONS',
        headers: { origin: BROWSER_ORIGIN, 'access-control-request-method': method, authorization: 'Bearer nope' },
      })
      expect(response.status).toBe(204)
    }
  })

  test('preflightHeaders lists OPTIONS once with the given methods', () => {
    expect(preflightHeaders(['POST', 'OPTIONS'])).toMatchObject({
      'access-control-allow-methods': 'POST, OPTIONS',
      'access-control-allow-headers': CORS_ALLOWED_HEADERS,
    })
  })
})

describe('actual responses carry Access-Control-Allow-Origin', () => {
  test('GET of every discovery document', async () => {
    for (const path of discoveryPaths) {
      const response = await server.fetch(path, { headers: { origin: BROWSER_ORIGIN } })
      expect(response.status).toBe(200)
      expectCorsResponseHeaders(response)
    }
  })

  const register = (body: string, contentType = 'application/json') =>
    server.fetch('/v0/auth/register', { method: 'POST', body, headers: { origin: BROWSER_ORIGIN, 'content-type': contentType } })

  test('a successful registration', async () => {
    await server.database.handle.db.delete(rateLimits).where(like(rateLimits.key, 'register:ip:%'))
    const response = await register(JSON.stringify({ redirect_uris: ['https://agent.example.org/cb'] }))
    expect(response.status).toBe(201)
    expectCorsResponseHeaders(response)
  })

  // A browser hides the body of a cross-origin response without this header: the client would
  // see a network error instead of the OAuth error.
  const failures: [string, () => Promise<Response>, number][] = [
    ['a schema violation', () => register(JSON.stringify({ redirect_uris: 'x' })), 400],
    ['an invalid redirect URI', () => register(JSON.stringify({ redirect_uris: ['javascript:alert(1)'] })), 400],
    ['malformed JSON', () => register('{'), 400],
    ['a wrong content type', () => register('redirect_uris=x', 'application/x-www-form-urlencoded'), 415],
  ]
  for (const [name, send, status] of failures) {
    test(`an OAuth error at /v0/auth/register: ${name}`, async () => {
      const response = await send()
      expect(response.status).toBe(status)
      expect((await response.json()).error).toEqual(expect.any(String))
      expectCorsResponseHeaders(response)
    })
  }
})

describe('CORS stays where it belongs', () => {
  test('the REST API and operations answer without CORS headers', async () => {
    const { secret } = await server.createAccountWithKey()
    for (const path of [`/v0/account?key=${secret}`, '/v0/account', '/healthz']) {
      const response = await server.fetch(path, { headers: { origin: BROWSER_ORIGIN } })
      expect(response.headers.get('access-control-allow-origin')).toBeNull()
    }
  })

  test('the authorization endpoint has no CORS', async () => {
    const response = await server.fetch('/v0/auth/authorize', { headers: { origin: BROWSER_ORIGIN } })
    expect(response.headers.get('access-control-allow-origin')).toBeNull()
    const preflightResponse = await preflight('/v0/auth/authorize', 'POST')
    expect(preflightResponse.headers.get('access-control-allow-origin')).toBeNull()
  })
})
