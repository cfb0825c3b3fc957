import { expect, test } from 'bun:test'
import { startTestServer, type TestServer } from '../../support/server.ts'
import { authorizeAndRedeem, flowFixture } from '../../oauth/support.ts'
import { isAcceptableRequestId, loggedUserAgent } from '../../../src/lib/http/foundation.ts'

const server = await startTestServer()
const proxied = await startTestServer({ env: { TRUSTED_PROXIES: '127.0.0.0/8' } })

/** The one request line of the response, once the batched logger wrote it. */
async function lineOf(target: TestServer, response: Response): Promise<Record<string, unknown>> {
  const requestId = response.headers.get('x-request-id')
  for (let i = 0; i < 50; i++) {
    const lines = target.logs.filter((line) => line.msg === 'request' && line.request_id === requestId)
    if (lines.length > 0) {
      expect(lines).toHaveLength(1)
      return lines[0]!
    }
    await Bun.sleep(5)
  }
  throw new Error(`no request line for ${requestId}`)
}

test('an acceptable X-Request-Id is kept: in the header, the problem body and the log line', async () => {
  const id = 'trace-01.ABC_xyz'
  const ok = await server.fetch('/healthz', { headers: { 'x-request-id': id } })
  expect(ok.headers.get('x-request-id')).toBe(id)
  expect((await lineOf(server, ok)).request_id).toBe(id)

  const refusedId = 'trace-02'
  const refused = await server.fetch('/v0/account', { headers: { 'x-request-id': refusedId } })
  expect(refused.status).toBe(401)
  expect(refused.headers.get('x-request-id')).toBe(refusedId)
  expect(((await refused.json()) as { request_id: string }).request_id).toBe(refusedId)
  expect((await lineOf(server, refused)).status).toBe(401)

  const longest = 'a'.repeat(128)
  expect((await server.fetch('/healthz', { headers: { 'x-request-id': longest } })).headers.get('x-request-id')).toBe(longest)
})

test('an unacceptable X-Request-Id is replaced by one of ours, everywhere', async () => {
  const refusedIds = ['a'.repeat(129), 'has space', 'quote"d', "it's", 'tab\there', 'ünïcode', 'a,b', 'a;b', 'x<script>', 'a:b', 'a/b', '{"json":1}']
  for (const id of refusedIds) {
    const response = await server.fetch('/v0/missing', { headers: { 'x-request-id': id } })
    expect(response.status).toBe(404)
    const answered = response.headers.get('x-request-id')!
    expect(answered).toMatch(/^req_[0-9a-z]+$/)
    expect(((await response.json()) as { request_id: string }).request_id).toBe(answered)
    expect((await lineOf(server, response)).request_id).toBe(answered)
  }
  // An empty header is no id either.
  expect((await server.fetch('/healthz', { headers: { 'x-request-id': '' } })).headers.get('x-request-id')).toMatch(/^req_/)
})

test('isAcceptableRequestId: 1 to 128 characters of A-Za-z0-9._-', () => {
  expect(isAcceptableRequestId('a')).toBe(true)
  expect(isAcceptableRequestId('Z9._-')).toBe(true)
  expect(isAcceptableRequestId('')).toBe(false)
  expect(isAcceptableRequestId('a'.repeat(129))).toBe(false)
  for (const bad of ['a\r\nb', 'a\nX-Injected: 1', 'a\u0000', 'a b', 'é', '\u2028', 'a%0d']) expect(isAcceptableRequestId(bad)).toBe(false)
})

test('an API key call is logged with its account, credential kind and key id, address and user agent; never the secret', async () => {
  const { accountId, keyId, secret } = await server.createAccountWithKey()
  const response = await server.fetch(`/v0/account?key=${secret}`, { headers: { 'user-agent': 'acme-client/1.2 (+https://acme.example)' } })
  expect(response.status).toBe(200)
  const line = await lineOf(server, response)
  expect(line).toMatchObject({
    account_id: accountId,
    credential: 'api_key',
    credential_id: keyId,
    client_address: '127.0.0.1',
    user_agent: 'acme-client/1.2 (+https://acme.example)',
  })
  const raw = server.rawLogs.find((text) => text.includes(String(line.request_id)))!
  expect(raw).not.toContain(secret)

  // Refused after authentication (a schema failure): the caller is still named.
  const invalid = await server.fetch(`/v0/account?key=${secret}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: '{"name":5}' })
  expect(invalid.status).toBe(422)
  expect(await lineOf(server, invalid)).toMatchObject({ account_id: accountId, credential: 'api_key', credential_id: keyId })
})

test('a bearer call is logged with the OAuth client_id; never the token', async () => {
  const fixture = await flowFixture(server)
  const { tokens } = await authorizeAndRedeem(server, fixture)
  const response = await server.fetch('/v0/account', { headers: { authorization: `Bearer ${tokens.access_token}` } })
  expect(response.status).toBe(200)
  const line = await lineOf(server, response)
  expect(line).toMatchObject({ account_id: fixture.accountId, credential: 'bearer', credential_id: fixture.clientId })
  const raw = server.rawLogs.find((text) => text.includes(String(line.request_id)))!
  expect(raw).not.toContain(tokens.access_token)
  expect(raw).not.toContain(tokens.access_token.split('.')[2]!)
})

test('a request nobody authenticated has no account or credential fields', async () => {
  const response = await server.fetch('/v0/account?key=sk_live_wrong')
  expect(response.status).toBe(401)
  const line = await lineOf(server, response)
  expect(line).not.toHaveProperty('account_id')
  expect(line).not.toHaveProperty('credential')
  expect(line).not.toHaveProperty('credential_id')
  expect(line.client_address).toBe('127.0.0.1')
})

test('the user agent is cut to 200 characters, without control characters or secrets', async () => {
  // A tab is the one control character HTTP lets through; the runtime refuses the others itself.
  const response = await server.fetch('/healthz', { headers: { 'user-agent': `a\tb c${' x'.repeat(150)}` } })
  const line = await lineOf(server, response)
  expect(line.user_agent).toBe(`ab c${' x'.repeat(98)}`)
  expect(loggedUserAgent('a\u0001b\u007fc\u009bd\r\ne')).toBe('abcde')
  const secret = `sk_live_${'A'.repeat(43)}`
  expect(loggedUserAgent(`curl with ${secret}`)).toBe('curl with [REDACTED]')
  expect(loggedUserAgent('bidi\u202eevil\u2028line')).toBe('bidievilline')
  expect(loggedUserAgent(null)).toBeUndefined()
  const none = await fetch(`${server.origin}/healthz`, { headers: { 'user-agent': '' } })
  expect((await lineOf(server, none)).user_agent).toBe('')
})

test('behind TRUSTED_PROXIES the logged address is the forwarded client', async () => {
  const response = await proxied.fetch('/healthz', { headers: { 'x-forwarded-for': '198.51.100.7, 127.0.0.2' } })
  expect((await lineOf(proxied, response)).client_address).toBe('198.51.100.7')
  // Without TRUSTED_PROXIES, X-Forwarded-For is ignored.
  const direct = await server.fetch('/healthz', { headers: { 'x-forwarded-for': '198.51.100.7' } })
  expect((await lineOf(server, direct)).client_address).toBe('127.0.0.1')
})
