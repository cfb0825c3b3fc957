import { expect, test } from 'bun:test'
import { json, startTestServer } from '../support/server.ts'
import { authorizeAndRedeem, flowFixture } from '../oauth/support.ts'

// API_RATE_LIMIT=2: bursts of 4, then 2 a second, per credential. A token comes back every 500 ms,
// far longer than a burst of these requests takes, even on a busy machine.
const server = await startTestServer({ env: { API_RATE_LIMIT: '2' } })
const unlimited = await startTestServer({ env: { API_RATE_LIMIT: '0' } })

const burst = async (call: () => Promise<Response>, count: number) => {
  const responses: Response[] = []
  for (let n = 0; n < count; n++) responses.push(await call())
  return responses
}

test('every authenticated answer carries RateLimit-Policy and RateLimit; past the burst the answer is 429 rate_limited with Retry-After', async () => {
  const { secret, keyId } = await server.createAccountWithKey()
  const first = await server.fetch(`/v0/account?key=${secret}`)
  expect(first.status).toBe(200)
  expect(first.headers.get('ratelimit-policy')).toBe('"credential";q=2;w=1')
  expect(first.headers.get('ratelimit')).toBe('"credential";r=3;t=1')

  const rest = await burst(() => server.fetch(`/v0/account?key=${secret}`), 4)
  expect(rest.slice(0, 3).map((response) => response.status)).toEqual(Array(3).fill(200))
  const refused = rest[3]!
  expect(refused.status).toBe(429)
  expect(refused.headers.get('content-type')).toBe('application/problem+json')
  expect(refused.headers.get('retry-after')).toBe('1')
  expect(refused.headers.get('ratelimit-policy')).toBe('"credential";q=2;w=1')
  expect(refused.headers.get('ratelimit')).toMatch(/^"credential";r=0;t=2$/)
  const body = await json(refused)
  expect(body).toMatchObject({ status: 429, code: 'rate_limited', type: `${server.origin}/docs/errors#rate_limited` })
  expect(body.request_id).toBe(refused.headers.get('x-request-id'))
  // The refusal's log line names the credential, as any other request's does.
  const line = server.logs.find((entry) => entry.msg === 'request' && entry.request_id === body.request_id)
  expect(line).toMatchObject({ status: 429, credential: 'api_key', credential_id: keyId })

  // After Retry-After the credential may go on.
  await Bun.sleep(1_000)
  expect((await server.fetch(`/v0/account?key=${secret}`)).status).toBe(200)
})

test('errors after authentication carry the headers too; answers to no credential do not', async () => {
  const { secret, accountId } = await server.createAccountWithKey()
  const missing = await server.fetch(`/v0/account/${accountId}/hooks/hook_nothing?key=${secret}`)
  expect(missing.status).toBe(404)
  expect(missing.headers.get('ratelimit')).toBe('"credential";r=3;t=1')
  const invalid = await server.fetch(`/v0/account/${accountId}/hooks?key=${secret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event: 'nope' }),
  })
  expect(invalid.status).toBe(422)
  expect(invalid.headers.get('ratelimit')).toBe('"credential";r=2;t=1')

  const anonymous = await server.fetch('/v0/account')
  expect(anonymous.status).toBe(401)
  expect(anonymous.headers.get('ratelimit')).toBeNull()
  expect(anonymous.headers.get('ratelimit-policy')).toBeNull()
  // Public endpoints are not counted per credential.
  expect((await server.fetch('/v0/.well-known/oauth-authorization-server')).headers.get('ratelimit')).toBeNull()
})

test('a refused scope still counts: a credential cannot probe without limit', async () => {
  const fixture = await flowFixture(server, { scope: 'account:read' })
  const { tokens } = await authorizeAndRedeem(server, fixture)
  const call = () => server.fetch(`/v0/account/${fixture.accountId}/hooks`, { headers: { authorization: `Bearer ${tokens.access_token}` } })
  const statuses = (await burst(call, 5)).map((response) => response.status)
  expect(statuses).toEqual([403, 403, 403, 403, 429])
})

test('keys are counted apart, and a bearer token is counted per grant: a new access token from the same grant does not reset it', async () => {
  const a = await server.createAccountWithKey()
  const b = await server.createAccountWithKey()
  expect((await burst(() => server.fetch(`/v0/account?key=${a.secret}`), 5)).at(-1)!.status).toBe(429)
  expect((await server.fetch(`/v0/account?key=${b.secret}`)).status).toBe(200)

  const fixture = await flowFixture(server)
  const { tokens } = await authorizeAndRedeem(server, fixture)
  const asBearer = (token: string) => () => server.fetch('/v0/account', { headers: { authorization: `Bearer ${token}` } })
  expect((await burst(asBearer(tokens.access_token), 5)).at(-1)!.status).toBe(429)
  const refreshed = await json(
    await server.fetch('/v0/auth/token', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: tokens.refresh_token, client_id: fixture.clientId }),
    }),
  )
  expect(refreshed.access_token).toBeString()
  expect((await asBearer(refreshed.access_token)()).status).toBe(429)
  // Another authorization of the same user and client is another grant, with its own bucket.
  const other = await authorizeAndRedeem(server, fixture)
  expect((await asBearer(other.tokens.access_token)()).status).toBe(200)
})

test('the MCP endpoint is limited like any other', async () => {
  const fixture = await flowFixture(server)
  const { tokens } = await authorizeAndRedeem(server, fixture, { resource: `${server.config.baseUrl}/mcp` })
  const call = () =>
    server.fetch('/v0/mcp', {
      method: 'POST',
      headers: { authorization: `Bearer ${tokens.access_token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
    })
  const responses = await burst(call, 5)
  expect(responses[0]!.status).toBe(200)
  expect(responses[0]!.headers.get('ratelimit')).toBe('"credential";r=3;t=1')
  expect(responses[4]!.status).toBe(429)
  expect(responses[4]!.headers.get('retry-after')).toBe('1')
})

test('API_RATE_LIMIT=0: no limit and no RateLimit headers', async () => {
  const { secret } = await unlimited.createAccountWithKey()
  const responses = await burst(() => unlimited.fetch(`/v0/account?key=${secret}`), 300)
  expect(responses.every((response) => response.status === 200)).toBe(true)
  expect(responses[0]!.headers.get('ratelimit')).toBeNull()
  expect(responses[0]!.headers.get('ratelimit-policy')).toBeNull()
})
