import { afterAll, describe, expect, test } from 'bun:test'
import { SignJWT, exportJWK, generateKeyPair } from 'jose'
import { DPOP_IAT_WINDOW_SECONDS, DpopProofError, createDpopVerifier, normalizedHtu } from '../../../src/lib/security/dpop.ts'
import { DPOP_NONCE_SLOT_SECONDS, createDpopNonces } from '../../../src/lib/security/dpop-nonce.ts'
import { createTestDatabase } from '../../support/database.ts'
import { dpopProof, proofKey, unsignedProof, type ProofClaims } from '../../support/dpop.ts'

const database = await createTestDatabase()
afterAll(() => database.drop())

// The public origin clients address, and the address this process sees behind the proxy.
const PUBLIC_URL = 'https://api.example.com'
const SEEN_URL = 'http://10.0.0.5:3000'
const secret = crypto.getRandomValues(new Uint8Array(32))
let clock = Date.now()
const nonces = await createDpopNonces(secret, () => clock)
const verifier = createDpopVerifier({ db: database.handle.db, nonces, publicUrl: PUBLIC_URL, now: () => clock })
const key = await proofKey()

const request = (proof: string | null, path = '/v0/account', method = 'GET') =>
  new Request(`${SEEN_URL}${path}`, { method, headers: proof === null ? {} : { dpop: proof } })

async function claims(extra: Partial<ProofClaims> = {}): Promise<ProofClaims> {
  return { htm: 'GET', htu: `${PUBLIC_URL}/v0/account`, nonce: await nonces.current(), iat: Math.floor(clock / 1000), ...extra }
}

async function refusal(check: Promise<unknown>): Promise<DpopProofError> {
  const error = await check.then(
    () => null,
    (thrown: unknown) => thrown,
  )
  expect(error).toBeInstanceOf(DpopProofError)
  return error as DpopProofError
}

describe('normalizedHtu (RFC 9449 §4.3 step 9, RFC 3986 §6.2.2–6.2.3)', () => {
  test('scheme and host case, default port, dot segments, unreserved escapes: one URL', () => {
    const expected = 'https://api.example.com/v0/~me'
    for (const form of ['HTTPS://API.Example.COM:443/v0/~me', 'https://api.example.com/v0/x/../%7Eme', 'https://api.example.com/v0/%7eme?query=1#fragment']) {
      expect(normalizedHtu(form)).toBe(expected)
    }
    expect(normalizedHtu('https://api.example.com')).toBe('https://api.example.com/')
    expect(normalizedHtu('https://api.example.com/a%2fb')).toBe('https://api.example.com/a%2Fb')
  })

  test('another port, scheme or path stays another URL; what is not an http(s) URL is nothing', () => {
    expect(normalizedHtu('https://api.example.com:8443/v0/account')).not.toBe(normalizedHtu('https://api.example.com/v0/account'))
    expect(normalizedHtu('http://api.example.com/v0/account')).not.toBe(normalizedHtu('https://api.example.com/v0/account'))
    expect(normalizedHtu('/v0/account')).toBeNull()
    expect(normalizedHtu('ftp://api.example.com/v0/account')).toBeNull()
  })
})

describe('a DPoP proof', () => {
  test('valid: the thumbprint of its key, checked against PUBLIC_URL whatever address the request reached', async () => {
    expect(await verifier.check(request(await dpopProof(key, await claims())))).toBe(key.jkt)
    // Its query is not part of htu, nor is the case of the host.
    const withQuery = await dpopProof(key, await claims({ htu: 'https://API.example.com:443/v0/account' }))
    expect(await verifier.check(request(withQuery, '/v0/account?limit=5'))).toBe(key.jkt)
  })

  test('none at all: undefined, for the caller to decide', async () => {
    expect(await verifier.check(request(null))).toBeUndefined()
  })

  test('each broken rule of RFC 9449 §4.3 is refused as invalid_dpop_proof, naming it', async () => {
    const privateJwk = await (async () => {
      const pair = await generateKeyPair('ES256', { extractable: true })
      return { pair, jwk: await exportJWK(pair.privateKey) }
    })()
    const hmacProof = await new SignJWT(await claims()).setProtectedHeader({ alg: 'HS256', typ: 'dpop+jwt', jwk: key.publicJwk }).sign(new Uint8Array(32))
    const other = await proofKey()
    const cases: [string, string, RegExp][] = [
      ['two headers', `${await dpopProof(key, await claims())}, ${await dpopProof(key, await claims())}`, /exactly one JWT/],
      ['not a JWT', 'not-a-jwt', /exactly one JWT/],
      ['typ JWT', await dpopProof(key, await claims(), { typ: 'JWT' }), /typ "dpop\+jwt"/],
      ['alg none', unsignedProof(key, await claims()), /asymmetric algorithm/],
      ['HS256', hmacProof, /asymmetric algorithm/],
      ['no jwk', await dpopProof(key, await claims(), { jwk: undefined }), /public key in the jwk header/],
      ['a private jwk', await dpopProof({ ...key, privateKey: privateJwk.pair.privateKey, publicJwk: privateJwk.jwk }, await claims()), /private key material/],
      ['signed by another key than its jwk', await dpopProof({ ...other, publicJwk: key.publicJwk }, await claims()), /signature does not verify/],
      ['no jti', await dpopProof(key, await claims({ jti: '' })), /jti/],
      ['another method', await dpopProof(key, await claims({ htm: 'POST' })), /htm must be this request's method, GET/],
      ['another path', await dpopProof(key, await claims({ htu: `${PUBLIC_URL}/v0/hooks` })), /htu must be .*https:\/\/api\.example\.com\/v0\/account/],
      ['the address behind the proxy', await dpopProof(key, await claims({ htu: `${SEEN_URL}/v0/account` })), /htu must be/],
      ['iat too old', await dpopProof(key, await claims({ iat: Math.floor(clock / 1000) - DPOP_IAT_WINDOW_SECONDS - 1 })), /iat must be within 60 seconds/],
      ['iat in the future', await dpopProof(key, await claims({ iat: Math.floor(clock / 1000) + DPOP_IAT_WINDOW_SECONDS + 1 })), /iat must be within 60 seconds/],
    ]
    for (const [name, proof, message] of cases) {
      const error = await refusal(verifier.check(request(proof)))
      expect({ name, error: error.error }).toEqual({ name, error: 'invalid_dpop_proof' })
      expect(error.message).toMatch(message)
    }
  })

  test('at a resource server: ath must hash the token, and the key must be the one the token is bound to', async () => {
    const good = await verifier.check(request(await dpopProof(key, await claims({ accessToken: 'token-a' }))), { accessToken: 'token-a', boundTo: key.jkt })
    expect(good).toBe(key.jkt)
    const wrongAth = await refusal(verifier.check(request(await dpopProof(key, await claims({ accessToken: 'token-b' }))), { accessToken: 'token-a', boundTo: key.jkt }))
    expect(wrongAth.error).toBe('invalid_dpop_proof')
    expect(wrongAth.message).toMatch(/ath/)
    const noAth = await refusal(verifier.check(request(await dpopProof(key, await claims())), { accessToken: 'token-a', boundTo: key.jkt }))
    expect(noAth.message).toMatch(/ath/)
    const otherKey = await proofKey()
    const copied = await refusal(verifier.check(request(await dpopProof(otherKey, await claims({ accessToken: 'token-a' }))), { accessToken: 'token-a', boundTo: key.jkt }))
    expect(copied.error).toBe('invalid_token')
  })

  test('is taken once: the same proof again is refused, and a refused proof was not remembered', async () => {
    const proof = await dpopProof(key, await claims())
    expect(await verifier.check(request(proof))).toBe(key.jkt)
    expect((await refusal(verifier.check(request(proof)))).message).toMatch(/already used/)
    // Refused for its ath, then sent where no ath is asked: its jti was not spent by the refusal.
    const retried = await dpopProof(key, await claims({ accessToken: 'token-b' }))
    await refusal(verifier.check(request(retried), { accessToken: 'token-a' }))
    expect(await verifier.check(request(retried))).toBe(key.jkt)
  })
})

describe('server nonces (RFC 9449 §8, §9)', () => {
  test('a proof without one, or with an unknown one, is use_dpop_nonce', async () => {
    expect((await refusal(verifier.check(request(await dpopProof(key, await claims({ nonce: undefined })))))).error).toBe('use_dpop_nonce')
    expect((await refusal(verifier.check(request(await dpopProof(key, await claims({ nonce: 'made-up' })))))).error).toBe('use_dpop_nonce')
  })

  test("a nonce is accepted in its slot and the next, refused after; another deployment's key makes other nonces", async () => {
    const start = clock
    try {
      const issued = await nonces.current()
      clock += DPOP_NONCE_SLOT_SECONDS * 1000
      expect(await nonces.current()).not.toBe(issued)
      expect(await nonces.accepts(issued)).toBe(true)
      clock += DPOP_NONCE_SLOT_SECONDS * 1000
      expect(await nonces.accepts(issued)).toBe(false)
      expect((await refusal(verifier.check(request(await dpopProof(key, await claims({ nonce: issued })))))).error).toBe('use_dpop_nonce')
    } finally {
      clock = start
    }
    // Every instance with the same ENCRYPTION_KEY makes the same nonces; another key does not.
    expect(await (await createDpopNonces(secret, () => clock)).current()).toBe(await nonces.current())
    const elsewhere = await createDpopNonces(crypto.getRandomValues(new Uint8Array(32)), () => clock)
    expect(await elsewhere.accepts(await nonces.current())).toBe(false)
  })
})
