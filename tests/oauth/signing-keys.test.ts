import { afterAll, describe, expect, test } from 'bun:test'
import { eq, isNull, sql } from 'drizzle-orm'
import { SignJWT, decodeProtectedHeader, exportSPKI, generateKeyPair, importJWK } from 'jose'
import { signingKeys } from '../../src/lib/db/schema.ts'
import { createLogger } from '../../src/lib/runtime/logger.ts'
import { createSecretBox } from '../../src/lib/security/secret-box.ts'
import {
  InvalidTokenError,
  SigningKeyError,
  createTokenSigner,
  rotateSigningKey,
  type InvalidTokenReason,
  type TokenSigner,
  type TokenSignerOptions,
} from '../../src/oauth/signing-keys.ts'
import { createTestDatabase, type TestDatabase } from '../support/database.ts'

const ISSUER = 'http://localhost:3000/v0'
const API = ISSUER
const AUTH = `${ISSUER}/auth`
const PUBLIC_MEMBERS = ['alg', 'crv', 'kid', 'kty', 'use', 'x', 'y']

const databases: TestDatabase[] = []
afterAll(() => Promise.all(databases.map((database) => database.drop())))
async function freshDatabase() {
  const database = await createTestDatabase()
  databases.push(database)
  return database.handle.db
}

const logger = createLogger('silent')
const secretBox = await createSecretBox(crypto.getRandomValues(new Uint8Array(32)))

/** A clock the test moves; starts at the real time because the database stamps retired_at with now(). */
function testClock() {
  let at = Date.now()
  return { now: () => at, advance: (ms: number) => (at += ms) }
}

const startSigner = (db: TokenSignerOptions['db'], options: Partial<TokenSignerOptions> = {}) =>
  createTokenSigner({ db, secretBox, issuer: ISSUER, logger, ...options })

const signAccessToken = (signer: TokenSigner, overrides: { audience?: string | string[]; claims?: Record<string, unknown> } = {}) =>
  signer.sign(
    { account_id: 'acc_1', client_id: 'cli_1', scope: 'account:read', ...overrides.claims },
    { typ: 'at+jwt', subject: 'usr_1', audience: overrides.audience ?? API, expiresInSeconds: 900 },
  )

const signIdToken = (signer: TokenSigner) => signer.sign({ account_id: 'acc_1' }, { typ: 'JWT', subject: 'usr_1', audience: AUTH, expiresInSeconds: 600 })

const kidOf = (token: string) => decodeProtectedHeader(token).kid

async function refusal(promise: Promise<unknown>): Promise<InvalidTokenReason> {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  )
  expect(error).toBeInstanceOf(InvalidTokenError)
  return (error as InvalidTokenError).reason
}

const base64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
const decodeSegment = (segment: string) => JSON.parse(Buffer.from(segment, 'base64url').toString())

async function activeKids(db: TokenSignerOptions['db']) {
  return (await db.select({ kid: signingKeys.kid }).from(signingKeys).where(isNull(signingKeys.retiredAt))).map((row) => row.kid)
}

describe('start-up', () => {
  test('the first start creates a sealed key, the next start reuses it', async () => {
    const db = await freshDatabase()
    const first = await startSigner(db)
    const rows = await db.select().from(signingKeys)
    expect(rows).toHaveLength(1)
    const [row] = rows
    expect(row!.alg).toBe('ES256')
    expect(row!.privateJwkCiphertext).toStartWith('v1.')
    expect(row!.privateJwkCiphertext).not.toContain('"d"')
    expect(Object.keys(row!.publicJwk as object).sort()).toEqual(PUBLIC_MEMBERS)

    const second = await startSigner(db)
    expect(await db.select().from(signingKeys)).toHaveLength(1)
    expect(kidOf(await signAccessToken(first))).toBe(row!.kid)
    expect(kidOf(await signAccessToken(second))).toBe(row!.kid)
  })

  test('instances starting together on one database end with exactly one active key', async () => {
    const db = await freshDatabase()
    const lines: string[] = []
    const recording = createLogger('info', (line) => lines.push(line))
    // On PostgreSQL all four usually find no key and insert; the partial unique index lets one win.
    const signers = await Promise.all(Array.from({ length: 4 }, () => startSigner(db, { logger: recording })))
    const kids = await activeKids(db)
    expect(kids).toHaveLength(1)
    expect(lines.filter((line) => line.includes('created a signing key'))).toHaveLength(1)
    for (const signer of signers) expect(kidOf(await signAccessToken(signer))).toBe(kids[0])
  })

  test('a key sealed under another ENCRYPTION_KEY stops start-up with a message naming ENCRYPTION_KEY', async () => {
    const db = await freshDatabase()
    await startSigner(db)
    const otherBox = await createSecretBox(crypto.getRandomValues(new Uint8Array(32)))
    const error = await startSigner(db, { secretBox: otherBox }).catch((caught: unknown) => caught)
    expect(error).toBeInstanceOf(SigningKeyError)
    expect((error as Error).message).toContain('ENCRYPTION_KEY')
  })
})

describe('sign and verify', async () => {
  const db = await freshDatabase()
  const clock = testClock()
  const signer = await startSigner(db, { now: clock.now })

  test('a round trip keeps the claims and sets the registered ones', async () => {
    const token = await signAccessToken(signer)
    const header = decodeProtectedHeader(token)
    expect(header).toEqual({ alg: 'ES256', typ: 'at+jwt', kid: (await activeKids(db))[0] })
    const payload = await signer.verify(token, { typ: 'at+jwt', audience: API })
    expect(payload).toEqual({
      account_id: 'acc_1',
      client_id: 'cli_1',
      scope: 'account:read',
      iss: ISSUER,
      sub: 'usr_1',
      aud: API,
      iat: Math.floor(clock.now() / 1000),
      exp: Math.floor(clock.now() / 1000) + 900,
      jti: expect.any(String),
    })
  })

  test('every token gets its own jti unless one is given, and the registered claims win over the caller', async () => {
    const a = await signer.verify(await signAccessToken(signer), { typ: 'at+jwt', audience: API })
    const b = await signer.verify(await signAccessToken(signer), { typ: 'at+jwt', audience: API })
    expect(a.jti).not.toBe(b.jti)
    const given = await signer.sign({ iss: 'https://evil.example', sub: 'usr_evil' }, { typ: 'JWT', subject: 'usr_1', audience: AUTH, expiresInSeconds: 60, jti: 'jti_given' })
    expect(await signer.verify(given, { typ: 'JWT', audience: AUTH })).toMatchObject({ iss: ISSUER, sub: 'usr_1', jti: 'jti_given' })
  })

  test('a token for several audiences verifies for each of them', async () => {
    const token = await signAccessToken(signer, { audience: [API, `${API}/mcp`] })
    expect((await signer.verify(token, { typ: 'at+jwt', audience: `${API}/mcp` })).aud).toEqual([API, `${API}/mcp`])
    expect(await refusal(signer.verify(token, { typ: 'at+jwt', audience: AUTH }))).toBe('audience')
  })

  test('sign refuses a lifetime longer than 15 minutes, or not a whole number of seconds', async () => {
    for (const expiresInSeconds of [901, 0, -1, 1.5, Number.NaN]) {
      await expect(signer.sign({}, { typ: 'at+jwt', subject: 'usr_1', audience: API, expiresInSeconds })).rejects.toThrow(RangeError)
    }
  })

  test('refuses another audience', async () => {
    expect(await refusal(signer.verify(await signAccessToken(signer), { typ: 'at+jwt', audience: `${API}/mcp` }))).toBe('audience')
  })

  test('refuses an id_token where an access token is expected, and the reverse', async () => {
    const idToken = await signer.sign({ account_id: 'acc_1' }, { typ: 'JWT', subject: 'usr_1', audience: API, expiresInSeconds: 600 })
    expect(await refusal(signer.verify(idToken, { typ: 'at+jwt', audience: API }))).toBe('type')
    const accessToken = await signAccessToken(signer, { audience: AUTH })
    expect(await refusal(signer.verify(accessToken, { typ: 'JWT', audience: AUTH }))).toBe('type')
    expect((await signer.verify(await signIdToken(signer), { typ: 'JWT', audience: AUTH })).sub).toBe('usr_1')
  })

  test('refuses an expired token, past the 5 s tolerance', async () => {
    const token = await signAccessToken(signer)
    const withinTolerance = await startSigner(db, { now: () => clock.now() + 904_000 })
    expect((await withinTolerance.verify(token, { typ: 'at+jwt', audience: API })).sub).toBe('usr_1')
    const pastTolerance = await startSigner(db, { now: () => clock.now() + 906_000 })
    expect(await refusal(pastTolerance.verify(token, { typ: 'at+jwt', audience: API }))).toBe('expired')
  })

  test('refuses a token issued in the future or not yet valid, past the tolerance', async () => {
    const issuedLater = await startSigner(db, { now: () => clock.now() + 60_000 })
    expect(await refusal(signer.verify(await signAccessToken(issuedLater), { typ: 'at+jwt', audience: API }))).toBe('not_yet_valid')
    const slightlyAhead = await startSigner(db, { now: () => clock.now() + 3_000 })
    expect((await signer.verify(await signAccessToken(slightlyAhead), { typ: 'at+jwt', audience: API })).sub).toBe('usr_1')
    const notBefore = await signAccessToken(signer, { claims: { nbf: Math.floor(clock.now() / 1000) + 60 } })
    expect(await refusal(signer.verify(notBefore, { typ: 'at+jwt', audience: API }))).toBe('not_yet_valid')
  })

  test('refuses a token of another issuer, even signed with our key', async () => {
    const elsewhere = await startSigner(db, { issuer: 'https://elsewhere.example/v0' })
    expect(await refusal(signer.verify(await signAccessToken(elsewhere), { typ: 'at+jwt', audience: API }))).toBe('issuer')
  })

  test('refuses a tampered payload and a tampered signature', async () => {
    const [header, payload, signature] = (await signAccessToken(signer)).split('.') as [string, string, string]
    const escalated = base64url({ ...decodeSegment(payload), scope: 'account:read hooks:write messages:send' })
    expect(await refusal(signer.verify(`${header}.${escalated}.${signature}`, { typ: 'at+jwt', audience: API }))).toBe('signature')
    const middle = Math.floor(signature.length / 2)
    const flipped = `${signature.slice(0, middle)}${signature[middle] === 'A' ? 'B' : 'A'}${signature.slice(middle + 1)}`
    expect(await refusal(signer.verify(`${header}.${payload}.${flipped}`, { typ: 'at+jwt', audience: API }))).toBe('signature')
  })

  test('refuses alg none', async () => {
    const [header, payload] = (await signAccessToken(signer)).split('.') as [string, string]
    const unsigned = base64url({ ...decodeSegment(header), alg: 'none' })
    expect(await refusal(signer.verify(`${unsigned}.${payload}.`, { typ: 'at+jwt', audience: API }))).toBe('algorithm')
    expect(await refusal(signer.verify(`${unsigned}.${payload}`, { typ: 'at+jwt', audience: API }))).toBe('malformed')
  })

  test('refuses HS256 signed with the public key as the secret (algorithm confusion)', async () => {
    const { keys } = await signer.jwks()
    const publicJwk = keys[0]!
    const publicKey = await importJWK(publicJwk, 'ES256', { extractable: true })
    const now = Math.floor(clock.now() / 1000)
    for (const secret of [await exportSPKI(publicKey as CryptoKey), JSON.stringify(publicJwk)]) {
      const forged = await new SignJWT({ account_id: 'acc_1', scope: 'account:read' })
        .setProtectedHeader({ alg: 'HS256', typ: 'at+jwt', kid: publicJwk.kid })
        .setIssuer(ISSUER)
        .setSubject('usr_1')
        .setAudience(API)
        .setIssuedAt(now)
        .setExpirationTime(now + 900)
        .setJti('forged')
        .sign(new TextEncoder().encode(secret))
      expect(await refusal(signer.verify(forged, { typ: 'at+jwt', audience: API }))).toBe('algorithm')
    }
  })

  test('refuses a foreign ES256 key, whether it claims one of our kids or an unknown one', async () => {
    const foreign = await generateKeyPair('ES256')
    const now = Math.floor(clock.now() / 1000)
    const forge = (kid: string | undefined) =>
      new SignJWT({ account_id: 'acc_1' })
        .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', ...(kid === undefined ? {} : { kid }) })
        .setIssuer(ISSUER)
        .setSubject('usr_1')
        .setAudience(API)
        .setIssuedAt(now)
        .setExpirationTime(now + 900)
        .setJti('forged')
        .sign(foreign.privateKey)
    const [ourKid] = await activeKids(db)
    expect(await refusal(signer.verify(await forge(ourKid), { typ: 'at+jwt', audience: API }))).toBe('signature')
    expect(await refusal(signer.verify(await forge('no-such-kid'), { typ: 'at+jwt', audience: API }))).toBe('unknown_key')
    expect(await refusal(signer.verify(await forge(undefined), { typ: 'at+jwt', audience: API }))).toBe('unknown_key')
  })

  test('refuses junk without calling it anything but malformed', async () => {
    for (const junk of ['', 'not a token', 'a.b.c', `${base64url({ alg: 'ES256', kid: 'k' })}.e30`, 'x'.repeat(10_000), 42 as unknown as string]) {
      expect(await refusal(signer.verify(junk, { typ: 'at+jwt', audience: API }))).toBe('malformed')
    }
  })
})

describe('rotation', async () => {
  const db = await freshDatabase()
  const clock = testClock()
  const instanceA = await startSigner(db, { now: clock.now })
  const instanceB = await startSigner(db, { now: clock.now })

  test('tokens signed before a rotation still verify; new tokens carry the new kid; other instances follow', async () => {
    const [oldKid] = await activeKids(db)
    const beforeRotation = await signAccessToken(instanceA)

    const rotated = await rotateSigningKey(db, secretBox)
    expect(rotated).toEqual({ kid: expect.any(String), retiredKid: oldKid! })
    expect(await activeKids(db)).toEqual([rotated.kid])
    const [event] = await db.execute(sql`select kind, subject_id from cache_invalidations where kind = 'signing_key'`).then((result) =>
      Array.isArray(result) ? result : (result as unknown as { rows: unknown[] }).rows,
    )
    expect(event).toEqual({ kind: 'signing_key', subject_id: rotated.kid })

    await instanceA.reload()
    expect(instanceA.hasKey(rotated.kid)).toBe(true)
    const afterRotation = await signAccessToken(instanceA)
    expect(kidOf(afterRotation)).toBe(rotated.kid)
    expect((await instanceA.verify(beforeRotation, { typ: 'at+jwt', audience: API })).sub).toBe('usr_1')
    expect((await instanceA.verify(afterRotation, { typ: 'at+jwt', audience: API })).sub).toBe('usr_1')

    // B has not heard of the rotation: within a second of its last load it does not ask the database…
    expect(instanceB.hasKey(rotated.kid)).toBe(false)
    expect(await refusal(instanceB.verify(afterRotation, { typ: 'at+jwt', audience: API }))).toBe('unknown_key')
    // …after that, an unknown kid makes it reload once, and from then on it signs with the new key.
    clock.advance(1_000)
    expect((await instanceB.verify(afterRotation, { typ: 'at+jwt', audience: API })).sub).toBe('usr_1')
    expect(kidOf(await signAccessToken(instanceB))).toBe(rotated.kid)
    expect((await instanceB.verify(beforeRotation, { typ: 'at+jwt', audience: API })).sub).toBe('usr_1')
  })

  test('junk kids cost the database at most one key read per second', async () => {
    let keyReads = 0
    const countingDb = new Proxy(db, {
      get(target, property) {
        if (property === 'select') keyReads++
        const value = Reflect.get(target, property)
        return typeof value === 'function' ? value.bind(target) : value
      },
    })
    const signer = await startSigner(countingDb, { now: clock.now })
    expect(keyReads).toBe(1)
    const foreign = await generateKeyPair('ES256')
    const forged = await new SignJWT({}).setProtectedHeader({ alg: 'ES256', kid: 'junk' }).sign(foreign.privateKey)
    const spray = () => Promise.all(Array.from({ length: 20 }, () => refusal(signer.verify(forged, { typ: 'at+jwt', audience: API }))))

    expect(new Set(await spray())).toEqual(new Set(['unknown_key']))
    expect(keyReads).toBe(1)
    clock.advance(1_000)
    await spray()
    expect(keyReads).toBe(2)
    await spray()
    expect(keyReads).toBe(2)
  })

  test('the JWKS holds the active key and keys retired within 24 h, public members only', async () => {
    await instanceA.reload()
    const { keys } = await instanceA.jwks()
    const rows = await db.select().from(signingKeys)
    expect(keys.map((key) => key.kid).sort()).toEqual(rows.map((row) => row.kid).sort())
    for (const key of keys) {
      expect(Object.keys(key).sort()).toEqual(PUBLIC_MEMBERS)
      expect(key).not.toHaveProperty('d')
    }
  })

  test('a key retired more than 24 h ago is neither published nor accepted', async () => {
    const token = await signAccessToken(instanceA)
    const kid = kidOf(token)!
    await rotateSigningKey(db, secretBox)
    await db.update(signingKeys).set({ retiredAt: new Date(clock.now() - 24 * 3_600_000 - 1_000) }).where(eq(signingKeys.kid, kid))
    await instanceA.reload()
    expect((await instanceA.jwks()).keys.map((key) => key.kid)).not.toContain(kid)
    expect(await refusal(instanceA.verify(token, { typ: 'at+jwt', audience: API }))).toBe('unknown_key')
  })

  test('a retired key drops out after 24 h even without a reload', async () => {
    await instanceB.reload()
    const token = await signAccessToken(instanceB)
    await rotateSigningKey(db, secretBox)
    await instanceB.reload()
    const retiredKid = kidOf(token)!
    expect((await instanceB.jwks()).keys.map((key) => key.kid)).toContain(retiredKid)
    // The database stamped retired_at with its own clock, which has moved on from the test's frozen one: start from it.
    const [retired] = await db.select().from(signingKeys).where(eq(signingKeys.kid, retiredKid))
    const later = await startSigner(db, { now: () => retired!.retiredAt!.getTime() + 24 * 3_600_000 + 1_000 })
    expect((await later.jwks()).keys.map((key) => key.kid)).not.toContain(retiredKid)
  })

  test('rotation with another ENCRYPTION_KEY is refused and changes nothing', async () => {
    const before = await activeKids(db)
    const otherBox = await createSecretBox(crypto.getRandomValues(new Uint8Array(32)))
    const error = await rotateSigningKey(db, otherBox).catch((caught: unknown) => caught)
    expect(error).toBeInstanceOf(SigningKeyError)
    expect((error as Error).message).toContain('ENCRYPTION_KEY')
    expect(await activeKids(db)).toEqual(before)
  })

  test('rotation on a database without a key creates the first one', async () => {
    const empty = await freshDatabase()
    const rotated = await rotateSigningKey(empty, secretBox)
    expect(rotated.retiredKid).toBeNull()
    expect(await activeKids(empty)).toEqual([rotated.kid])
  })
})
