import { describe, expect, test } from 'bun:test'
import { keyParameter } from '../../src/auth/plugin.ts'

const url = (query: string) => `http://127.0.0.1:3000/v0/account${query}`

test('keyParameter finds ?key= wherever it stands in the query', () => {
  expect(keyParameter(url('?key=sk_live_a'))).toBe('sk_live_a')
  expect(keyParameter(url('?limit=5&key=sk_live_a&x=1'))).toBe('sk_live_a')
  expect(keyParameter(url('?key='))).toBe('')
  expect(keyParameter(url('?key=sk_live_a#key=other'))).toBe('sk_live_a')
})

test('keyParameter ignores look-alikes', () => {
  expect(keyParameter(url(''))).toBeUndefined()
  expect(keyParameter(url('?monkey=1&keys=2&KEY=3&key'))).toBeUndefined()
  expect(keyParameter(url('?x=1#&key=sk_live_a'))).toBeUndefined()
})

test('keyParameter decodes percent-encoding and refuses nothing silently', () => {
  expect(keyParameter(url('?key=sk_live_a%2Db'))).toBe('sk_live_a-b')
  expect(keyParameter(url('?key=a+b'))).toBe('a b')
  expect(keyParameter(url('?key=%E0%A4%A'))).toBe('%E0%A4%A')
})

test('keyParameter reports a repeated key rather than choosing one', () => {
  expect(typeof keyParameter(url('?key=a&key=b'))).toBe('symbol')
  expect(typeof keyParameter(url('?key=a&x=1&key=a'))).toBe('symbol')
})

describe('authentication comes before the body', async () => {
  const { startTestServer } = await import('../support/server.ts')
  const server = await startTestServer()
  const owner = await server.createAccountWithKey('Auth first')
  const hooksPath = `/v0/account/${owner.accountId}/hooks`

  test('no credential and a body that breaks the schema: 401, not 422', async () => {
    const response = await server.fetch(hooksPath, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ event: 42 }) })
    expect(response.status).toBe(401)
    expect(response.headers.get('www-authenticate')).toContain('resource_metadata=')
  })

  test('a revoked or junk key with a body of the wrong media type or size: 401', async () => {
    for (const init of [
      { headers: { 'content-type': 'text/plain' }, body: 'x' },
      { headers: { 'content-type': 'application/json' }, body: '{' },
      { headers: { 'content-type': 'application/json' }, body: 'x'.repeat(1024 * 1024 + 1) },
    ]) {
      expect((await server.fetch(`${hooksPath}?key=sk_live_junk`, { method: 'POST', ...init })).status).toBe(401)
    }
  })

  test('a query that breaks the schema from nobody: 401, not 422', async () => {
    expect((await server.fetch(`${hooksPath}?limit=abc`)).status).toBe(401)
  })

  test("nobody's body is never read: the 401 comes while the body is still arriving", async () => {
    let pushed = 0
    const neverEnding = new ReadableStream<Uint8Array>({
      async pull(controller) {
        // A trickle that would take minutes to reach the size limit.
        await Bun.sleep(50)
        pushed++
        controller.enqueue(new TextEncoder().encode(pushed === 1 ? '{"event":"message.delivered","target_url":"' : 'x'))
      },
    })
    const started = performance.now()
    const response = await server.fetch(hooksPath, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: neverEnding,
      signal: AbortSignal.timeout(5000),
    })
    expect(response.status).toBe(401)
    expect(performance.now() - started).toBeLessThan(4000)
    await neverEnding.cancel().catch(() => {})
  })

  test('with a valid key the same bodies are judged as before', async () => {
    const bad = await server.fetch(`${hooksPath}?key=${owner.secret}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ event: 42 }) })
    expect(bad.status).toBe(422)
    const wrongType = await server.fetch(`${hooksPath}?key=${owner.secret}`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' })
    expect(wrongType.status).toBe(415)
    const form = await server.fetch(`${hooksPath}?key=${owner.secret}`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'event=message.delivered' })
    expect(form.status).toBe(415)
  })
})

describe('challenges of the REST API', async () => {
  const { startTestServer } = await import('../support/server.ts')
  const { authorizeAndRedeem, flowFixture } = await import('../oauth/support.ts')
  const server = await startTestServer()
  const fixture = await flowFixture(server)
  const metadataUrl = `${server.origin}/.well-known/oauth-protected-resource/v0`
  const hooksPath = `/v0/account/${fixture.accountId}/hooks`
  const tokenWith = async (scope: string) => (await authorizeAndRedeem(server, fixture, { scope })).tokens.access_token
  const bearer = (token: string, init: RequestInit = {}) => ({ ...init, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...(init.headers as Record<string, string>) } })
  const newHook = (path: string) => JSON.stringify({ event: 'message.failed', target_url: `https://hooks.example.com/${path}` })

  test("a 401 suggests the endpoint's scope, with or without a token; an endpoint that needs none suggests none", async () => {
    const cases: [string, RequestInit, string][] = [
      ['/v0/account', {}, 'account:read'],
      [hooksPath, {}, 'hooks:read'],
      [hooksPath, { method: 'POST', headers: { 'content-type': 'application/json' }, body: newHook('anonymous') }, 'hooks:write'],
      [`/v0/account/${fixture.accountId}/events`, {}, 'messages:read'],
    ]
    for (const [path, init, scope] of cases) {
      const anonymous = await server.fetch(path, init)
      expect(anonymous.status).toBe(401)
      expect(anonymous.headers.get('www-authenticate')).toBe(`Bearer resource_metadata="${metadataUrl}", scope="${scope}"`)
      const junk = await server.fetch(path, bearer('junk', init))
      expect(junk.status).toBe(401)
      expect(junk.headers.get('www-authenticate')).toStartWith(`Bearer resource_metadata="${metadataUrl}", scope="${scope}", error="invalid_token", error_description="`)
    }
    const session = await server.fetch('/v0/auth/session')
    expect(session.status).toBe(401)
    expect(session.headers.get('www-authenticate')).toBe(`Bearer resource_metadata="${metadataUrl}"`)
  })

  test('a bearer token without the scope: 403 naming the scope the endpoint needs, the metadata and why; a problem body', async () => {
    const readOnly = await tokenWith('hooks:read')
    const cases: [string, RequestInit, string][] = [
      [hooksPath, { method: 'POST', body: newHook('read-only') }, 'hooks:write'],
      ['/v0/account', {}, 'account:read'],
      [`/v0/account/${fixture.accountId}/messages`, { method: 'POST', body: JSON.stringify({ to: '+14155550126', body: 'x' }) }, 'messages:send'],
    ]
    for (const [path, init, scope] of cases) {
      const response = await server.fetch(path, bearer(readOnly, init))
      expect(response.status).toBe(403)
      expect(response.headers.get('www-authenticate')).toBe(
        `Bearer error="insufficient_scope", scope="${scope}", resource_metadata="${metadataUrl}", error_description="This endpoint needs the ${scope} scope"`,
      )
      expect(response.headers.get('content-type')).toStartWith('application/problem+json')
      const problem = (await response.json()) as { status: number; code: string; detail: string; request_id: string }
      expect(problem).toMatchObject({ status: 403, code: 'insufficient_scope' })
      expect(problem.detail).toContain(scope)
      expect(problem.request_id).toBe(response.headers.get('x-request-id')!)
    }
    const hooks = (await (await server.fetch(`${hooksPath}?key=${fixture.apiKey}`)).json()) as { data: unknown[] }
    expect(hooks.data).toEqual([])
  })

  test('a token holding every scope never sees a 403 from a bearer endpoint; neither does an API key', async () => {
    const everything = await tokenWith('account:read hooks:read hooks:write messages:read messages:send')
    const created = await server.fetch(hooksPath, bearer(everything, { method: 'POST', body: newHook('everything') }))
    expect(created.status).toBe(201)
    const hookId = ((await created.json()) as { id: string }).id
    const requests: [string, RequestInit][] = [
      ['/v0/account', {}],
      [hooksPath, {}],
      [`${hooksPath}/${hookId}`, {}],
      [`${hooksPath}/${hookId}`, { method: 'PATCH', body: JSON.stringify({ status: 'paused' }) }],
      [`${hooksPath}/${hookId}/deliveries`, {}],
      [`/v0/account/${fixture.accountId}/events`, {}],
      [`/v0/account/${fixture.accountId}/messages`, { method: 'POST', body: JSON.stringify({ to: '+14155550126', body: 'x' }) }],
      [`${hooksPath}/${hookId}`, { method: 'DELETE' }],
    ]
    for (const [path, init] of requests) {
      const response = await server.fetch(path, bearer(everything, init))
      expect(`${init.method ?? 'GET'} ${path} ${response.status}`).toMatch(/ 20[0-9]$/)
    }
    for (const [path, init] of requests.slice(0, -1)) {
      const byKey = await server.fetch(`${path}?key=${fixture.apiKey}`, { ...init, headers: { 'content-type': 'application/json' } })
      expect(byKey.status).not.toBe(403)
    }
  })
})
