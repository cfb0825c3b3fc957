import { describe, expect, test } from 'bun:test'
import { startTestServer } from '../../support/server.ts'

// Hostile input at every layer of the HTTP foundation: NUL and control characters, bodies over
// every size limit. None of it may reach the database or yield anything but a problem body.
const server = await startTestServer()
const owner = await server.createAccountWithKey('Hostile input')

const sendJson = (path: string, body: unknown, method = 'POST') =>
  server.fetch(path, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })

async function expectProblem(response: Response, status: number, code: string) {
  expect(response.status).toBe(status)
  expect(response.headers.get('content-type')).toContain('application/problem+json')
  expect(response.headers.get('x-request-id')).toMatch(/^req_/)
  const body = await response.json()
  expect(body.code).toBe(code)
  return body
}

describe('a NUL character in any JSON string is refused at validation, never a 500', () => {
  test('the account name', async () => {
    const body = await expectProblem(await sendJson(`/v0/account?key=${owner.secret}`, { name: 'Acme\u0000Ltd' }, 'PATCH'), 422, 'validation_failed')
    expect(body.errors).toContainEqual({ path: '/name', message: expect.any(String) })
  })
  test('a message body and an inbound body', async () => {
    await expectProblem(await sendJson(`/v0/account/${owner.accountId}/messages?key=${owner.secret}`, { to: '+14155550123', body: 'hi\u0000' }), 422, 'validation_failed')
    await expectProblem(await sendJson(`/v0/account/${owner.accountId}/sandbox/inbound?key=${owner.secret}`, { from: '+14155550123', body: '\u0000' }), 422, 'validation_failed')
  })
  test('a webhook target URL', async () => {
    await expectProblem(
      await sendJson(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, { event: 'message.delivered', target_url: 'https://example.com/\u0000' }),
      422,
      'validation_failed',
    )
  })
  test('the sign-in email and password (public)', async () => {
    await expectProblem(await sendJson('/v0/auth/login', { email: 'a\u0000@example.com', password: 'correct horse battery' }), 422, 'validation_failed')
    await expectProblem(await sendJson('/v0/auth/login', { email: 'ada@example.com', password: 'pass\u0000word-long' }), 422, 'validation_failed')
  })
  test('an OAuth client name (public): an OAuth error body', async () => {
    const response = await sendJson('/v0/auth/register', { client_name: 'App\u0000', redirect_uris: ['http://127.0.0.1:8765/cb'] })
    expect(response.status).toBe(400)
    expect(await response.json()).toMatchObject({ error: 'invalid_client_metadata' })
  })
  test('a NUL in an object key or deep in an array', async () => {
    await expectProblem(await sendJson(`/v0/account?key=${owner.secret}`, { name: 'ok', ['x\u0000']: 1 }, 'PATCH'), 422, 'validation_failed')
    const response = await sendJson('/v0/auth/register', { redirect_uris: ['http://127.0.0.1:8765/cb', 'http://127.0.0.1:8765/\u0000'] })
    expect(response.status).toBe(400)
  })
  test('a NUL in the query or the path', async () => {
    await expectProblem(await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}&cursor=%00`), 422, 'validation_failed')
    await expectProblem(await server.fetch(`/v0/account/${owner.accountId}/hooks/hook_%00?key=${owner.secret}`), 422, 'validation_failed')
    const page = await server.fetch(`/v0/auth/authorize?client_id=cli_%00&redirect_uri=x`)
    expect(page.status).toBeLessThan(500)
  })
  test('nothing reached the database: no unhandled error was logged', () => {
    expect(server.logs.filter((line) => line.level === 'error')).toEqual([])
  })
})

describe('control characters where a person types the text', () => {
  test('an account name with a bell, an escape or a line break is refused', async () => {
    for (const name of ['Acme\u0007', '\u001b[31mAcme', 'Acme\nLtd', 'Acme\u007f']) {
      await expectProblem(await sendJson(`/v0/account?key=${owner.secret}`, { name }, 'PATCH'), 422, 'validation_failed')
    }
  })
  test('a message may hold line breaks and tabs, not other control characters', async () => {
    const path = `/v0/account/${owner.accountId}/messages?key=${owner.secret}`
    expect((await sendJson(path, { to: '+14155550123', body: 'line one\nline two\r\n\tindented' })).status).toBe(202)
    await expectProblem(await sendJson(path, { to: '+14155550123', body: 'ring \u0007' }), 422, 'validation_failed')
  })
})

describe('every size refusal is a problem body with a request id', () => {
  test('a declared length far above every limit (Bun\'s own included)', async () => {
    const response = await new Promise<Response>((resolve, reject) => {
      // fetch would correct Content-Length from the body: speak HTTP/1.1 directly.
      const url = new URL(server.origin)
      let raw = ''
      Bun.connect({
        hostname: url.hostname,
        port: Number(url.port),
        socket: {
          open(socket) {
            socket.write(`PATCH /v0/account?key=${owner.secret} HTTP/1.1\r\nhost: ${url.host}\r\ncontent-type: application/json\r\ncontent-length: 500000000\r\nconnection: close\r\n\r\n{"name":"x"}`)
          },
          data(_socket, chunk) {
            raw += chunk.toString()
          },
          close() {
            const [head, ...rest] = raw.split('\r\n\r\n')
            const [statusLine, ...headerLines] = head!.split('\r\n')
            const headers = new Headers(headerLines.map((line) => line.split(/:\s*/, 2) as [string, string]))
            const body = headers.get('transfer-encoding') === 'chunked' ? rest.join('\r\n\r\n').split('\r\n').filter((_, i) => i % 2 === 1).join('') : rest.join('\r\n\r\n')
            resolve(new Response(body, { status: Number(statusLine!.split(' ')[1]), headers }))
          },
          error: reject,
        },
      }).catch(reject)
    })
    await expectProblem(response, 413, 'payload_too_large')
  })
})
