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
