import { describe, expect, test } from 'bun:test'
import { SignJWT, exportJWK, generateKeyPair } from 'jose'
import { startTestServer } from '../support/server.ts'
import { authorizeAndRedeem, flowFixture } from '../oauth/support.ts'
import { currentNonce, dpopBoundTokens, dpopProof, proofKey, unsignedProof, type ProofClaims, type ProofKey } from '../support/dpop.ts'

// The REST API as a DPoP resource server (RFC 9449 §7, docs/oauth.md#dpop). Two instances on one
// database, both answering for the same PUBLIC_URL as they would behind a load balancer: the
// second is reached at its own address, and proofs name the public one.
const first = await startTestServer()
const second = await startTestServer({ database: first.database, env: { PUBLIC_URL: first.origin } })
const fixture = await flowFixture(first)
const accountUrl = `${first.config.baseUrl}/account`

const key = await proofKey()
const tokens = await dpopBoundTokens(first, fixture, key)

async function proof(claims: Partial<ProofClaims> = {}, signer: ProofKey = key) {
  return dpopProof(signer, { htm: 'GET', htu: accountUrl, nonce: await currentNonce(first), accessToken: tokens.access_token, ...claims })
}

const getAccount = (headers: Record<string, string>, server = first, path = '/v0/account') => server.fetch(path, { headers })
const dpopHeaders = (dpop: string, token = tokens.access_token) => ({ authorization: `DPoP ${token}`, dpop })

/** A 401 challenged with the DPoP scheme for `error`; never anything else, never a 5xx. */
async function expectDpopRefusal(response: Response, error: string) {
  expect(response.status).toBe(401)
  const challenge = response.headers.get('www-authenticate')!
  expect(challenge).toStartWith('DPoP ')
  expect(challenge).toContain(`error="${error}"`)
  expect(challenge).toContain(`resource_metadata="${first.origin}/.well-known/oauth-protected-resource/v0"`)
  expect(challenge).toContain('algs="ES256 ')
  const problem = await response.json()
  expect(problem).toMatchObject({ status: 401, code: 'unauthorized' })
  return { challenge, problem }
}

describe('a DPoP-bound access token at the REST API', () => {
  test('with a fresh proof for each request: 200, on either instance, however often the token was seen before', async () => {
    for (const server of [first, second, first, second]) {
      const response = await getAccount(dpopHeaders(await proof()), server)
      expect(response.status).toBe(200)
      expect((await response.json()).id).toBe(fixture.accountId)
    }
  })

  test('the query string is not part of htu', async () => {
    const response = await first.fetch('/v0/account?expand=nothing', { headers: dpopHeaders(await proof()) })
    expect(response.status).toBe(200)
  })

  test('sent as Bearer: 401 with a Bearer challenge saying it is DPoP-bound (RFC 9449 §7.2)', async () => {
    const response = await getAccount({ authorization: `Bearer ${tokens.access_token}` })
    expect(response.status).toBe(401)
    const challenge = response.headers.get('www-authenticate')!
    expect(challenge).toStartWith('Bearer ')
    expect(challenge).toContain('error="invalid_token"')
    expect(challenge).toContain('bound to a DPoP key')
  })

  test('a replayed proof is refused, on the instance that took it and on the other one', async () => {
    const once = await proof()
    expect((await getAccount(dpopHeaders(once))).status).toBe(200)
    await expectDpopRefusal(await getAccount(dpopHeaders(once)), 'invalid_dpop_proof')
    const elsewhere = await proof()
    expect((await getAccount(dpopHeaders(elsewhere), second)).status).toBe(200)
    const { problem } = await expectDpopRefusal(await getAccount(dpopHeaders(elsewhere), first), 'invalid_dpop_proof')
    expect(problem.detail).toContain('already used')
  })

  test('a nonce handed out by one instance is good on the other', async () => {
    const nonce = await currentNonce(second)
    expect((await getAccount(dpopHeaders(await proof({ nonce })), first)).status).toBe(200)
  })

  test('each bad proof is refused one by one, with a 401 naming the DPoP error', async () => {
    const hmac = await new SignJWT({ htm: 'GET', htu: accountUrl, nonce: await currentNonce(first), iat: Math.floor(Date.now() / 1000), jti: crypto.randomUUID() })
      .setProtectedHeader({ alg: 'HS256', typ: 'dpop+jwt', jwk: key.publicJwk })
      .sign(new Uint8Array(32))
    const privatePair = await generateKeyPair('ES256', { extractable: true })
    const withPrivateJwk = await proof({}, { ...key, privateKey: privatePair.privateKey, publicJwk: await exportJWK(privatePair.privateKey) })
    const cases: [string, Record<string, string>, string][] = [
      ['a proof for another URL', dpopHeaders(await proof({ htu: `${first.config.baseUrl}/hooks` })), 'invalid_dpop_proof'],
      ['a proof for another method', dpopHeaders(await proof({ htm: 'POST' })), 'invalid_dpop_proof'],
      ['a proof for another host', dpopHeaders(await proof({ htu: `https://evil.example${new URL(accountUrl).pathname}` })), 'invalid_dpop_proof'],
      ['a stale iat', dpopHeaders(await proof({ iat: Math.floor(Date.now() / 1000) - 300 })), 'invalid_dpop_proof'],
      ['alg none', dpopHeaders(unsignedProof(key, { htm: 'GET', htu: accountUrl, nonce: await currentNonce(first), accessToken: tokens.access_token })), 'invalid_dpop_proof'],
      ['HS256', dpopHeaders(hmac), 'invalid_dpop_proof'],
      ['a private key in jwk', dpopHeaders(withPrivateJwk), 'invalid_dpop_proof'],
      ['a wrong ath', dpopHeaders(await proof({ accessToken: `${tokens.access_token}x` })), 'invalid_dpop_proof'],
      ['no proof at all', { authorization: `DPoP ${tokens.access_token}` }, 'invalid_dpop_proof'],
      // The token copied to a client without the key: its own key signs a perfect proof.
      ['a proof by another key', dpopHeaders(await proof({}, await proofKey())), 'invalid_token'],
      ['no nonce', dpopHeaders(await proof({ nonce: undefined })), 'use_dpop_nonce'],
      ['a token that is not a token', dpopHeaders(await proof(), 'not.a.token'), 'invalid_token'],
    ]
    for (const [name, headers, error] of cases) {
      const response = await getAccount(headers)
      expect({ name, status: response.status }).toEqual({ name, status: 401 })
      await expectDpopRefusal(response, error)
    }
  })

  test('an expired nonce: use_dpop_nonce with the current one in DPoP-Nonce, and the request signed with it goes through', async () => {
    const response = await getAccount(dpopHeaders(await proof({ nonce: 'expired-long-ago' })))
    await expectDpopRefusal(response, 'use_dpop_nonce')
    const nonce = response.headers.get('dpop-nonce')!
    expect(nonce).toMatch(/^[A-Za-z0-9_-]{43}$/)
    expect((await getAccount(dpopHeaders(await proof({ nonce })))).status).toBe(200)
  })

  test('a Bearer token sent with the DPoP scheme is refused: it is not bound to a key', async () => {
    const bearer = (await authorizeAndRedeem(first, fixture)).tokens.access_token
    expect((await getAccount({ authorization: `Bearer ${bearer}` })).status).toBe(200)
    const { problem } = await expectDpopRefusal(await getAccount(dpopHeaders(await proof({ accessToken: bearer }), bearer)), 'invalid_token')
    expect(problem.detail).toContain('not bound to a DPoP key')
  })

  test('a missing scope is a 403 challenged with DPoP', async () => {
    const narrow = await dpopBoundTokens(first, fixture, key, { scope: 'hooks:read' })
    const response = await getAccount(dpopHeaders(await dpopProof(key, { htm: 'GET', htu: accountUrl, nonce: await currentNonce(first), accessToken: narrow.access_token }), narrow.access_token))
    expect(response.status).toBe(403)
    expect(response.headers.get('www-authenticate')).toStartWith('DPoP error="insufficient_scope", scope="account:read"')
  })

  test('the browser preflight allows the DPoP header and exposes DPoP-Nonce', async () => {
    const preflight = await first.fetch('/v0/auth/token', {
      method: 'OPTIONS',
      headers: { origin: 'https://agent.example.org', 'access-control-request-method': 'POST', 'access-control-request-headers': 'dpop, content-type' },
    })
    expect(preflight.status).toBe(204)
    expect(preflight.headers.get('access-control-allow-headers')!.toLowerCase().split(/,\s*/)).toContain('dpop')
    expect(preflight.headers.get('access-control-expose-headers')!.toLowerCase().split(/,\s*/)).toContain('dpop-nonce')
  })
})
