import { expect, test } from 'bun:test'
import { startTestServer } from '../support/server.ts'
import { REDIRECT_URI, pkcePair, postJson } from './support.ts'

const server = await startTestServer()
const registration = await postJson(server, '/v0/auth/register', {
  client_name: '<script>alert("x")</script> & Co',
  redirect_uris: [REDIRECT_URI],
})
const { client_id: clientId } = await registration.json()
const page = (params: Record<string, string>) => server.fetch(`/v0/auth/authorize?${new URLSearchParams(params)}`, { redirect: 'manual' })
const valid = () => ({ client_id: clientId, redirect_uri: REDIRECT_URI, response_type: 'code', code_challenge: pkcePair().challenge, code_challenge_method: 'S256', state: 's1' })

test('a valid request shows the consent page: escaped client name, redirect host, scopes, unframeable', async () => {
  const response = await page(valid())
  expect(response.status).toBe(200)
  expect(response.headers.get('x-frame-options')).toBe('DENY')
  expect(response.headers.get('content-security-policy')).toContain("frame-ancestors 'none'")
  expect(response.headers.get('cache-control')).toBe('no-store')
  const html = await response.text()
  expect(html).not.toContain('<script>alert')
  expect(html).toContain('&#60;script&#62;alert(&#34;x&#34;)&#60;/script&#62; &#38; Co')
  expect(html).toContain('127.0.0.1:8765')
  expect(html).toContain('Create and delete webhook subscriptions')
  expect(html).toContain("post('login'")
  expect(html).toContain('error=access_denied')
})

test('the same request with a loopback redirect on another port is accepted (RFC 8252)', async () => {
  expect((await page({ ...valid(), redirect_uri: 'http://127.0.0.1:9999/callback' })).status).toBe(200)
})

test('an unknown client or an unregistered redirect shows an error page and never redirects', async () => {
  for (const params of [
    { ...valid(), client_id: 'cli_00000000000000000000000000' },
    { ...valid(), redirect_uri: 'https://attacker.example/cb' },
    { ...valid(), redirect_uri: 'http://127.0.0.1:8765/callback/../steal' },
  ]) {
    const response = await page(params)
    expect(response.status).toBe(400)
    expect(response.headers.get('location')).toBeNull()
    expect(await response.text()).toContain('cannot go on')
  }
})

test('other errors go back to the client with error, state and iss', async () => {
  for (const [change, error] of [
    [{ code_challenge_method: 'plain' }, 'invalid_request'],
    [{ response_type: 'token' }, 'unsupported_response_type'],
    [{ scope: 'admin' }, 'invalid_scope'],
    [{ resource: 'https://elsewhere.example' }, 'invalid_target'],
  ] as const) {
    const response = await page({ ...valid(), ...change })
    expect(response.status).toBe(302)
    const location = new URL(response.headers.get('location')!)
    expect(`${location.origin}${location.pathname}`).toBe(REDIRECT_URI)
    expect(location.searchParams.get('error')).toBe(error)
    expect(location.searchParams.get('state')).toBe('s1')
    expect(location.searchParams.get('iss')).toBe(`${server.origin}/v0`)
  }
})
