import { expect, test } from 'bun:test'
import { startTestServer } from '../../support/server.ts'

const server = await startTestServer()

test('every request, refused or not, gets one log line with its status and request id', async () => {
  const { secret } = await server.createAccountWithKey()
  const calls: [string, RequestInit | undefined, number][] = [
    [`/v0/account?key=${secret}`, undefined, 200],
    ['/v0/account', undefined, 401],
    ['/v0/missing', undefined, 404],
    [`/v0/account?key=${secret}`, { method: 'PATCH', headers: { 'content-type': 'text/plain' }, body: 'x' }, 415],
    [`/v0/account?key=${secret}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: '{' }, 400],
    [`/v0/account?key=${secret}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: 'x'.repeat(1024 * 1024 + 1) }, 413],
  ]
  for (const [path, init, status] of calls) {
    const response = await server.fetch(path, init)
    expect(response.status).toBe(status)
    const requestId = response.headers.get('x-request-id')
    await Bun.sleep(5)
    const lines = server.logs.filter((line) => line.msg === 'request' && line.request_id === requestId)
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatchObject({ status, method: init?.method ?? 'GET', duration_ms: expect.any(Number) })
  }
})

test('a body of exactly 1 MB is accepted by the limit', async () => {
  const { secret } = await server.createAccountWithKey()
  const name = 'x'.repeat(1024 * 1024 - JSON.stringify({ name: '' }).length)
  const response = await server.fetch(`/v0/account?key=${secret}`, {
    method: 'PATCH',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name }),
  })
  // Past the size limit, the schema's 200-character rule is what refuses it.
  expect(response.status).toBe(422)
})
