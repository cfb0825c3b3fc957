import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { like } from 'drizzle-orm'
import { randomBytes } from 'node:crypto'
import { createUser } from '../../src/accounts/service.ts'
import { rateLimits } from '../../src/lib/db/schema.ts'
import { startTestServer, type TestServer } from '../support/server.ts'
import { postJson } from './support.ts'

// The test client connects from 127.0.0.1: trusting it as a proxy lets each test speak from
// addresses of its own through X-Forwarded-For.
const server = await startTestServer({ env: { TRUSTED_PROXIES: '127.0.0.1/32' } })
// Every sign-in checks a memory-hard hash (about 0.1 s), and these tests make hundreds.
setDefaultTimeout(30_000)
const PASSWORD = 'correct horse battery staple'

async function newUser(target: TestServer = server) {
  const { accountId } = await target.createAccountWithKey('Sign-in account')
  const email = `user-${randomBytes(4).toString('hex')}@example.com`
  await createUser(target.database.handle.db, { accountId, email, password: PASSWORD })
  return email
}

const signIn = (email: string, password: string, forwardedFor?: string, target: TestServer = server) =>
  postJson(target, '/v0/auth/login', { email, password }, forwardedFor === undefined ? {} : { 'x-forwarded-for': forwardedFor })

/** How many of the responses had each status. */
function statuses(responses: Response[]): Record<number, number> {
  const counts: Record<number, number> = {}
  for (const response of responses) counts[response.status] = (counts[response.status] ?? 0) + 1
  return counts
}

const simultaneously = (n: number, attempt: (i: number) => Promise<Response>) => Promise.all(Array.from({ length: n }, (_, i) => attempt(i)))

describe('sign-in throttling is counted before the password is checked', () => {
  test('40 simultaneous wrong passwords for one email from one address: at most 5 are checked, the rest are 429', async () => {
    const email = await newUser()
    const counts = statuses(await simultaneously(40, () => signIn(email, 'wrong password', '198.51.100.1')))
    expect(counts[401] ?? 0).toBeGreaterThanOrEqual(1)
    expect(counts[401] ?? 0).toBeLessThanOrEqual(5)
    expect((counts[401] ?? 0) + (counts[429] ?? 0)).toBe(40)

    const correct = await signIn(email, PASSWORD, '198.51.100.1')
    expect(correct.status).toBe(429)
    expect(Number(correct.headers.get('retry-after'))).toBeGreaterThan(0)
    expect((await correct.json()).code).toBe('rate_limited')
  })

  test('a correct password among 40 simultaneous guesses: no more than 5 passwords are checked in all', async () => {
    const email = await newUser()
    const responses = await simultaneously(40, (i) => signIn(email, i === 39 ? PASSWORD : 'wrong password', '198.51.100.2'))
    const counts = statuses(responses)
    expect((counts[401] ?? 0) + (counts[200] ?? 0)).toBeLessThanOrEqual(5)
    expect((counts[401] ?? 0) + (counts[200] ?? 0) + (counts[429] ?? 0)).toBe(40)
  })

  test('a correct password clears the failures of its own (email, address) pair', async () => {
    const email = await newUser()
    for (let i = 0; i < 4; i++) expect((await signIn(email, 'wrong password', '198.51.100.3')).status).toBe(401)
    expect((await signIn(email, PASSWORD, '198.51.100.3')).status).toBe(200)
    for (let i = 0; i < 5; i++) expect((await signIn(email, 'wrong password', '198.51.100.3')).status).toBe(401)
    expect((await signIn(email, PASSWORD, '198.51.100.3')).status).toBe(429)
  })

  test('unknown emails are throttled exactly like known ones', async () => {
    const counts = statuses(await simultaneously(20, () => signIn('nobody-here@example.com', 'wrong password', '198.51.100.4')))
    expect(counts[401] ?? 0).toBeLessThanOrEqual(5)
    expect((counts[401] ?? 0) + (counts[429] ?? 0)).toBe(20)
  })
})

describe('lockouts cannot be aimed at someone', () => {
  test("someone else's guesses from another address do not lock the real user out", async () => {
    const email = await newUser()
    const counts = statuses(await simultaneously(40, () => signIn(email, 'wrong password', '198.51.100.10')))
    expect(counts[401] ?? 0).toBeLessThanOrEqual(5)
    expect((await signIn(email, 'wrong password', '198.51.100.10')).status).toBe(429)
    expect((await signIn(email, PASSWORD, '192.0.2.10')).status).toBe(200)
  })

  test('until the per-email ceiling: 50 failures from any addresses lock the email everywhere', async () => {
    const email = await newUser()
    // Ten addresses at once, five failures each: exactly the ceiling, so every one is checked.
    await Promise.all(
      Array.from({ length: 10 }, async (_, address) => {
        for (let i = 0; i < 5; i++) expect((await signIn(email, 'wrong password', `198.51.100.${100 + address}`)).status).toBe(401)
      }),
    )
    expect((await signIn(email, 'wrong password', '198.51.100.120')).status).toBe(429)
    const locked = await signIn(email, PASSWORD, '192.0.2.11')
    expect(locked.status).toBe(429)
    expect(Number(locked.headers.get('retry-after'))).toBeGreaterThan(0)
    // Other emails are not affected.
    expect((await signIn(await newUser(), PASSWORD, '192.0.2.11')).status).toBe(200)
  })

  test('30 failures per client address across many emails, counted before the password is checked', async () => {
    const counts = statuses(await simultaneously(40, (i) => signIn(`guess-${i}@example.com`, 'wrong password', '198.51.100.30')))
    expect(counts[401] ?? 0).toBeGreaterThanOrEqual(1)
    expect(counts[401] ?? 0).toBeLessThanOrEqual(30)
    expect((counts[401] ?? 0) + (counts[429] ?? 0)).toBe(40)
    // Even a real user's correct password is refused from that address, and accepted from another.
    const email = await newUser()
    expect((await signIn(email, PASSWORD, '198.51.100.30')).status).toBe(429)
    expect((await signIn(email, PASSWORD, '192.0.2.30')).status).toBe(200)
  })

  test('addresses of one IPv6 /64 count as one client', async () => {
    const email = await newUser()
    for (let i = 1; i <= 5; i++) expect((await signIn(email, 'wrong password', `2001:db8:5:6::${i}`)).status).toBe(401)
    expect((await signIn(email, PASSWORD, '2001:db8:5:6:ffff::1')).status).toBe(429)
    expect((await signIn(email, PASSWORD, '2001:db8:5:7::1')).status).toBe(200)
  })
})

describe('the client address behind proxies', () => {
  test('through a trusted proxy, X-Forwarded-For names the client', async () => {
    const email = await newUser()
    for (let i = 0; i < 5; i++) expect((await signIn(email, 'wrong password', '198.51.100.40')).status).toBe(401)
    expect((await signIn(email, PASSWORD, '198.51.100.40')).status).toBe(429)
    expect((await signIn(email, PASSWORD, '198.51.100.41')).status).toBe(200)
  })

  test('several hops: the first untrusted hop from the right; what the client prepends cannot dodge the limit', async () => {
    const email = await newUser()
    for (let i = 0; i < 5; i++) {
      expect((await signIn(email, 'wrong password', `6.6.6.${i}, 198.51.100.50, 127.0.0.1`)).status).toBe(401)
    }
    expect((await signIn(email, PASSWORD, '7.7.7.7, 198.51.100.50, 127.0.0.1')).status).toBe(429)
    expect((await signIn(email, PASSWORD, '198.51.100.50')).status).toBe(429)
    expect((await signIn(email, PASSWORD, '6.6.6.0, 198.51.100.51')).status).toBe(200)
  })

  test('junk in the header counts against the proxy that passed it, never as an address of its own', async () => {
    const db = server.database.handle.db
    for (const junk of ['junk', '198.51.100.60, not-an-address', '', 'x'.repeat(2000)]) {
      expect((await signIn('nobody-junk@example.com', 'wrong password', junk)).status).toBe(401)
    }
    const keys = (await db.select({ key: rateLimits.key }).from(rateLimits).where(like(rateLimits.key, 'sign-in:ip:%'))).map((row) => row.key)
    expect(keys).toContain('sign-in:ip:127.0.0.1')
    expect(keys.some((key) => key.includes('junk') || key.includes('not-an-address') || key.includes('xxx') || key.includes('198.51.100.60'))).toBe(false)
  })

  test('without TRUSTED_PROXIES, X-Forwarded-For is ignored: a spoofed header cannot dodge the per-address limit', async () => {
    const direct = await startTestServer()
    const spoofed = await Promise.all(
      Array.from({ length: 30 }, (_, i) => signIn(`spoof-${i}@example.com`, 'wrong password', `203.0.113.${i}`, direct)),
    )
    expect(statuses(spoofed)[401]).toBe(30)
    const email = await newUser(direct)
    const refused = await signIn(email, PASSWORD, '203.0.113.200', direct)
    expect(refused.status).toBe(429)
    const keys = (await direct.database.handle.db.select({ key: rateLimits.key }).from(rateLimits)).map((row) => row.key)
    expect(keys).toContain('sign-in:ip:127.0.0.1')
    expect(keys.some((key) => key.includes('203.0.113.'))).toBe(false)
    await direct.stop()
  })
})
