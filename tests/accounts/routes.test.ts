import { describe, expect, test } from 'bun:test'
import { startTestServer } from '../support/server.ts'
import { revokeApiKey } from '../../src/auth/api-keys.ts'
import { isId } from '../../src/lib/db/ids.ts'

const server = await startTestServer()
const alice = await server.createAccountWithKey('Alice Ltd')
const bob = await server.createAccountWithKey('Bob GmbH')

const expectProblem = async (response: Response, status: number, code: string) => {
  expect(response.status).toBe(status)
  expect(response.headers.get('content-type')).toBe('application/problem+json')
  const body = await response.json()
  expect(body).toMatchObject({ status, code, type: expect.stringContaining(code), title: expect.any(String), detail: expect.any(String) })
  expect(body.request_id).toBe(response.headers.get('x-request-id'))
  return body
}

describe('GET /v0/account', () => {
  test('returns the account the API key belongs to', async () => {
    const response = await server.fetch(`/v0/account?key=${alice.secret}`)
    expect(response.status).toBe(200)
    const body = await response.json()
    expect(body).toEqual({ id: alice.accountId, name: 'Alice Ltd', created_at: expect.any(String) })
    expect(new Date(body.created_at).toISOString()).toBe(body.created_at)
    expect(isId('req', response.headers.get('x-request-id')!)).toBe(true)
  })

  test("each key sees only its own account", async () => {
    const body = await (await server.fetch(`/v0/account?key=${bob.secret}`)).json()
    expect(body.id).toBe(bob.accountId)
    expect(body.name).toBe('Bob GmbH')
  })

  test('no credential: 401 with a WWW-Authenticate challenge naming the resource metadata', async () => {
    const response = await server.fetch('/v0/account')
    await expectProblem(response, 401, 'unauthorized')
    expect(response.headers.get('www-authenticate')).toBe(
      `Bearer resource_metadata="${server.origin}/.well-known/oauth-protected-resource/v0", scope="account:read"`,
    )
  })

  const refused: [string, () => string][] = [
    ['an empty key', () => ''],
    ['a key in another case', () => alice.secret.toUpperCase()],
    ['a key with one character changed', () => alice.secret.slice(0, -1) + (alice.secret.endsWith('A') ? 'B' : 'A')],
    ['a key without its prefix', () => alice.secret.replace('sk_live_', '')],
    ['a key of 10,000 characters', () => 'sk_live_' + 'a'.repeat(10_000)],
    ['SQL in the key', () => "sk_live_' OR '1'='1"],
  ]
  for (const [name, key] of refused) {
    test(`${name} is refused with 401`, async () => {
      const response = await server.fetch(`/v0/account?key=${encodeURIComponent(key())}`)
      await expectProblem(response, 401, 'unauthorized')
      expect(response.headers.get('www-authenticate')).toContain('resource_metadata=')
    })
  }

  test('the key given twice: 400, whichever the values', async () => {
    await expectProblem(await server.fetch(`/v0/account?key=${alice.secret}&key=${alice.secret}`), 400, 'ambiguous_credentials')
    await expectProblem(await server.fetch(`/v0/account?key=${bob.secret}&key=${alice.secret}`), 400, 'ambiguous_credentials')
  })

  test('a key and an Authorization header together: 400', async () => {
    const response = await server.fetch(`/v0/account?key=${alice.secret}`, { headers: { authorization: 'Bearer abc' } })
    await expectProblem(response, 400, 'ambiguous_credentials')
  })

  test('a bearer token that is not valid: 401 with error="invalid_token"', async () => {
    const response = await server.fetch('/v0/account', { headers: { authorization: 'Bearer not-a-token' } })
    await expectProblem(response, 401, 'unauthorized')
    expect(response.headers.get('www-authenticate')).toContain('error="invalid_token"')
  })

  test('a revoked key is refused at once on the instance that revoked it', async () => {
    const carol = await server.createAccountWithKey('Carol')
    expect((await server.fetch(`/v0/account?key=${carol.secret}`)).status).toBe(200)
    expect(await revokeApiKey(server.database.handle.db, carol.keyId)).toBe(true)
    await server.instance.syncCaches()
    await expectProblem(await server.fetch(`/v0/account?key=${carol.secret}`), 401, 'unauthorized')
    expect(await revokeApiKey(server.database.handle.db, carol.keyId)).toBe(false)
  })

  test('the secret never appears in a log line', async () => {
    await server.fetch(`/v0/account?key=${alice.secret}`)
    await server.fetch(`/v0/nope?key=${alice.secret}`)
    const requestLines = server.logs.filter((line) => line.msg === 'request')
    expect(requestLines.length).toBeGreaterThan(0)
    expect(requestLines.some((line) => line.path === '/v0/account?key=[REDACTED]' && line.status === 200)).toBe(true)
    expect(server.rawLogs.join('\n')).not.toContain(alice.secret)
    expect(server.rawLogs.join('\n')).not.toContain(alice.secret.slice(8))
  })
})

describe('PATCH /v0/account', () => {
  const patch = (body: BodyInit, contentType = 'application/json', key = alice.secret) =>
    server.fetch(`/v0/account?key=${key}`, { method: 'PATCH', body, headers: { 'content-type': contentType } })

  test('renames the account, and the next read shows the new name', async () => {
    const response = await patch(JSON.stringify({ name: '  Alice Holdings ' }))
    expect(response.status).toBe(200)
    expect((await response.json()).name).toBe('Alice Holdings')
    expect((await (await server.fetch(`/v0/account?key=${alice.secret}`)).json()).name).toBe('Alice Holdings')
  })

  test('malformed JSON: 400 invalid_json', async () => {
    await expectProblem(await patch('{"name": '), 400, 'invalid_json')
  })

  test('a wrong type: 422 naming the field', async () => {
    const body = await expectProblem(await patch(JSON.stringify({ name: 42 })), 422, 'validation_failed')
    expect(body.errors).toContainEqual({ path: '/name', message: expect.any(String) })
  })

  test('an unknown field: 422 naming the field', async () => {
    const body = await expectProblem(await patch(JSON.stringify({ name: 'x', plan: 'enterprise' })), 422, 'validation_failed')
    expect(body.errors).toContainEqual({ path: '/plan', message: expect.any(String) })
  })

  test('a name that is too long or blank: 422', async () => {
    await expectProblem(await patch(JSON.stringify({ name: 'x'.repeat(201) })), 422, 'validation_failed')
    await expectProblem(await patch(JSON.stringify({ name: '   ' })), 422, 'validation_failed')
    await expectProblem(await patch(JSON.stringify({})), 422, 'validation_failed')
  })

  test('a JSON array, null or a string instead of an object: 422', async () => {
    for (const body of ['[]', 'null', '"name"', '7']) await expectProblem(await patch(body), 422, 'validation_failed')
  })

  test('an empty body: 400 invalid_json', async () => {
    await expectProblem(await patch(''), 400, 'invalid_json')
  })

  test('a wrong content type: 415', async () => {
    await expectProblem(await patch('name=x', 'application/x-www-form-urlencoded'), 415, 'unsupported_media_type')
    await expectProblem(await patch('{"name":"x"}', 'text/plain'), 415, 'unsupported_media_type')
  })

  test('a 2 MB body: 413, whether its length is declared or streamed', async () => {
    const big = JSON.stringify({ name: 'x'.repeat(2 * 1024 * 1024) })
    await expectProblem(await patch(big), 413, 'payload_too_large')
    const chunks = (async function* () {
      for (let i = 0; i < 32; i++) yield new TextEncoder().encode('x'.repeat(64 * 1024))
    })()
    await expectProblem(await patch(chunks as unknown as BodyInit), 413, 'payload_too_large')
  })

  test('bytes that are not UTF-8 never cause a 5xx', async () => {
    const response = await patch(new Uint8Array([0x7b, 0x22, 0x6e, 0x61, 0x6d, 0x65, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]))
    expect(response.status).toBeLessThan(500)
  })

  test('unicode junk and SQL are stored as plain text', async () => {
    const name = "Ω'; drop table accounts; -- 🦀\u200b"
    const response = await patch(JSON.stringify({ name }))
    expect(response.status).toBe(200)
    expect((await response.json()).name).toBe(name)
    expect((await (await server.fetch(`/v0/account?key=${bob.secret}`)).json()).name).toBe('Bob GmbH')
  })

  test('no credential: 401', async () => {
    const response = await server.fetch('/v0/account', { method: 'PATCH', body: '{"name":"x"}', headers: { 'content-type': 'application/json' } })
    await expectProblem(response, 401, 'unauthorized')
  })
})

describe('every failure is a problem+json body', () => {
  test('an unknown path: 404 not_found', async () => {
    await expectProblem(await server.fetch('/v0/no-such-thing'), 404, 'not_found')
  })

  test('an unsupported method: 404 not_found', async () => {
    await expectProblem(await server.fetch(`/v0/account?key=${alice.secret}`, { method: 'DELETE' }), 404, 'not_found')
  })
})
