import { describe, expect, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { sql } from 'drizzle-orm'
import { batchedSink, createLogger, redactSecrets, redactedPath } from '../../../src/lib/runtime/logger.ts'
import { startTestServer } from '../../support/server.ts'
import { postJson } from '../../oauth/support.ts'

test('credential query parameters are redacted, others kept', () => {
  expect(redactedPath('http://h/v0/account?key=sk_live_abc')).toBe('/v0/account?key=[REDACTED]')
  expect(redactedPath('http://h/v0/x?limit=5&key=sk&KEY=y&code=c#frag')).toBe('/v0/x?limit=5&key=[REDACTED]&KEY=[REDACTED]&code=[REDACTED]#frag')
  expect(redactedPath('http://h/v0/x?monkey=1')).toBe('/v0/x?monkey=1')
  expect(redactedPath('http://h')).toBe('/')
})

test('one JSON object per line, filtered by level', () => {
  const lines: string[] = []
  const logger = createLogger('warn', (line) => lines.push(line))
  logger.info('hidden')
  logger.warn('shown', { n: 1 })
  expect(lines).toHaveLength(1)
  expect(JSON.parse(lines[0]!)).toMatchObject({ level: 'warn', msg: 'shown', n: 1, time: expect.any(String) })
})

test('batched output: lines wait for the batch, urgent lines flush at once and keep their order', async () => {
  const chunks: string[] = []
  const logger = createLogger('info', batchedSink((chunk, done) => (chunks.push(chunk), done()), { maxDelayMs: 20 }))
  logger.info('one')
  logger.info('two')
  expect(chunks).toHaveLength(0)
  logger.error('three')
  expect(chunks).toHaveLength(1)
  expect(chunks[0]!.trimEnd().split('\n').map((line) => JSON.parse(line).msg)).toEqual(['one', 'two', 'three'])
  logger.info('four')
  await Bun.sleep(40)
  expect(chunks).toHaveLength(2)
  logger.info('five')
  await logger.flush()
  expect(chunks.join('').trimEnd().split('\n')).toHaveLength(5)
})

test('batched output: a large backlog is written without waiting for the timer', () => {
  const chunks: string[] = []
  const sink = batchedSink((chunk, done) => (chunks.push(chunk), done()), { maxDelayMs: 60_000, maxBytes: 100 })
  for (let i = 0; i < 10; i++) sink.write('x'.repeat(30), false)
  expect(chunks.length).toBeGreaterThanOrEqual(2)
})

describe('secrets are redacted from logged URLs and headers', () => {
  const b64url = (n: number) => randomBytes(n).toString('base64url')
  const apiKey = `sk_live_${b64url(32)}`
  const refreshToken = `rt_${b64url(32)}`
  const code = b64url(32)
  const jwt = `eyJhbGciOiJFUzI1NiIsInR5cCI6ImF0K2p3dCJ9.${Buffer.from(JSON.stringify({ sub: 'usr_1', scope: 'account:read' })).toString('base64url')}.${b64url(64)}`
  const shortJwt = 'eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.'
  const webhookSecret = `whsec_${randomBytes(32).toString('base64')}`
  const secrets = { apiKey, refreshToken, code, jwt, shortJwt, webhookSecret }

  test('the credential parameters, however the name is written', () => {
    const forms = [
      '/v0/account?x=1;key=abc',
      '/v0/account?key[]=abc',
      '/v0/account?key[0]=abc',
      '/v0/account?key%5B%5D=abc',
      '/v0/account?%6bey=abc',
      '/v0/account?%6B%65%79=abc',
      '/v0/account?%4bEY=abc',
      '/v0/account?x=1&amp;key=abc',
      '/v0/account?KEY=abc',
      '/v0/auth/token?code%5Fverifier=abc',
      '/v0/auth/token?refresh_token=abc&x=1',
      '/v0/auth/token?x=1;;access_token=abc',
      '/v0/auth/token?id_token=abc#id_token=abc',
    ]
    for (const form of forms) {
      const redacted = redactedPath(`http://h${form}`)
      expect(redacted).not.toContain('abc')
      expect(redacted).toContain('[REDACTED]')
    }
    expect(redactedPath('http://h/v0/account?x=1;key=abc&limit=5')).toBe('/v0/account?x=1;key=[REDACTED]&limit=5')
    expect(redactedPath('http://h/v0/account?key[]=abc')).toBe('/v0/account?key[]=[REDACTED]')
  })

  test('names that only look alike, and identifiers, are kept', () => {
    for (const path of [
      '/v0/x?monkey=1&keys=2&key_id=3&codec=4',
      '/v0/accounts/acc_01jd8xk2n4q6r8t0v2w4y6z8a0/hooks/hook_01jd8xk2n4q6r8t0v2w4y6z8a0?limit=5',
      '/v0/auth/authorize?client_id=cli_01jd8xk2n4q6r8t0v2w4y6z8a0&response_type=code&state=xyz',
      '/v0/.well-known/oauth-authorization-server',
    ]) {
      expect(redactedPath(`http://h${path}`)).toBe(path)
    }
  })

  for (const [name, secret] of Object.entries(secrets)) {
    test(`a ${name} is redacted wherever it appears in a path`, () => {
      for (const path of [`/v0/x/${secret}`, `/v0/x?state=${secret}`, `/v0/x?a=1&b=${encodeURIComponent(secret)}`, `/v0/x?a=${secret}&b=1`, `/v0/x/pre-${secret}/y`]) {
        const redacted = redactedPath(`http://h${path}`)
        expect(redacted).not.toContain(secret)
        expect(redacted).not.toContain(encodeURIComponent(secret))
        // Nothing of the secret's random part survives.
        expect(redacted).not.toContain(secret.slice(-12))
      }
    })

    test(`a ${name} is redacted in a header value`, () => {
      for (const value of [secret, `Bearer ${secret}`, `key=${secret}; Path=/`, `Authorization: Bearer ${secret}`, `"${secret}"`]) {
        const redacted = redactSecrets(value)
        expect(redacted).not.toContain(secret)
        expect(redacted).not.toContain(secret.slice(-12))
      }
    })
  }

  test('the fast path: a path with no query and nothing secret-shaped is returned as is', () => {
    const path = '/v0/account'
    expect(redactedPath(`http://h${path}`)).toBe(path)
  })

  test('warnings and errors are scrubbed of secrets and of the parameters of a failed query', () => {
    const lines: string[] = []
    const logger = createLogger('debug', (line) => lines.push(line))
    logger.error('failed', { error: `Error: Failed query: select * from users where email = $1\nparams: person@example.com,${apiKey}` })
    logger.warn('failed', { error: `fetch https://h/v0/account?key=${apiKey} failed`, detail: `Bearer ${jwt}` })
    logger.error('failed', { error: new Error(`token ${refreshToken} refused`) })
    expect(lines).toHaveLength(3)
    for (const line of lines) {
      for (const secret of [apiKey, jwt, refreshToken, 'person@example.com']) expect(line).not.toContain(secret)
    }
    expect(JSON.parse(lines[0]!).error).toContain('select * from users where email = $1')
    expect(JSON.parse(lines[2]!).error).toContain('refused')
  })

  test("a warning's trace_id and span_id stay (docs/operations.md#traces), though they look like secrets; anything else in those fields does not", () => {
    const lines: string[] = []
    const logger = createLogger('debug', (line) => lines.push(line))
    const traceId = randomBytes(16).toString('hex')
    const spanId = randomBytes(8).toString('hex')
    logger.warn('failed', { trace_id: traceId, span_id: spanId })
    logger.warn('failed', { trace_id: apiKey, span_id: `x${spanId}` })
    expect(JSON.parse(lines[0]!)).toMatchObject({ trace_id: traceId, span_id: spanId })
    expect(lines[1]).not.toContain(apiKey)
  })
})

const server = await startTestServer()

describe('through the server', () => {
  test('a request with ?x=1;key=<a real key> is logged without the key', async () => {
    const { secret } = await server.createAccountWithKey()
    for (const path of [`/v0/account?x=1;key=${secret}`, `/v0/account?%6bey=${secret}`, `/v0/account?key[]=${secret}`, `/v0/account?key=${secret}`]) {
      await server.fetch(path)
    }
    await server.fetch(`/v0/nowhere/${secret}`)
    const requestLines = server.logs.filter((line) => line.msg === 'request')
    expect(requestLines.length).toBeGreaterThanOrEqual(5)
    for (const line of server.rawLogs) expect(line).not.toContain(secret.slice(8))
  })

  test('an unhandled database error is logged with its SQL state, never with the query parameters', async () => {
    const db = server.database.handle.db
    await db.execute(sql`alter table users rename to users_gone`)
    try {
      const email = `param-value-${randomBytes(4).toString('hex')}@example.com`
      const response = await postJson(server, '/v0/auth/login', { email, password: 'whatever password' })
      expect(response.status).toBe(500)
      const failure = server.logs.find((line) => line.msg === 'unhandled error')
      expect(failure).toBeDefined()
      expect(failure!.sql_state).toBe('42P01')
      expect(String(failure!.error)).toContain('users')
      for (const line of server.rawLogs) expect(line).not.toContain(email)
    } finally {
      await db.execute(sql`alter table users_gone rename to users`)
    }
  })
})
