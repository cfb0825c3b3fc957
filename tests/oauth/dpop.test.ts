import { describe, expect, test } from 'bun:test'
import { decodeJwt } from 'jose'
import * as oauth from 'oauth4webapi'
import { eq } from 'drizzle-orm'
import { grants, refreshTokens } from '../../src/lib/db/schema.ts'
import { sha256Hex } from '../../src/lib/security/crypto.ts'
import { startTestServer } from '../support/server.ts'
import { currentNonce, dpopProof, proofKey, type ProofKey } from '../support/dpop.ts'
import { REDIRECT_URI, authorizationCode, flowFixture } from './support.ts'

// DPoP at the token endpoint (RFC 9449 §5, docs/oauth.md#dpop): a proof binds the tokens to its
// key; a public client's refresh token is then usable only with that key.
const server = await startTestServer()
const fixture = await flowFixture(server)
const tokenUrl = `${server.config.baseUrl}/auth/token`

const approved = () => authorizationCode(server, fixture)

const tokenRequest = (path: string, body: Record<string, string>, dpop?: string) =>
  server.fetch(path, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(dpop ? { dpop } : {}) },
    body: new URLSearchParams(body).toString(),
  })

const codeBody = ({ code, verifier }: { code: string; verifier: string }) => ({
  grant_type: 'authorization_code',
  code,
  redirect_uri: REDIRECT_URI,
  code_verifier: verifier,
  client_id: fixture.clientId,
})

const proofFor = async (key: ProofKey, url = tokenUrl) => dpopProof(key, { htm: 'POST', htu: url, nonce: await currentNonce(server) })

/** The authorization code redeemed with a proof by `key`: a DPoP-bound pair. */
async function boundPair(key: ProofKey) {
  const response = await tokenRequest('/v0/auth/token', codeBody(await approved()), await proofFor(key))
  expect(response.status).toBe(200)
  return (await response.json()) as { access_token: string; refresh_token: string; token_type: string; expires_in: number; scope: string }
}

async function expectOAuthError(response: Response, status: number, error: string) {
  expect({ status: response.status, body: await response.json() }).toMatchObject({ status, body: { error } })
}

describe('a token request with a DPoP proof', () => {
  test('without a nonce: 400 use_dpop_nonce with one in DPoP-Nonce; the code is still good, and with the nonce the tokens are DPoP-bound', async () => {
    const key = await proofKey()
    const code = await approved()
    const first = await tokenRequest('/v0/auth/token', codeBody(code), await dpopProof(key, { htm: 'POST', htu: tokenUrl }))
    expect(first.status).toBe(400)
    expect(first.headers.get('cache-control')).toBe('no-store')
    const nonce = first.headers.get('dpop-nonce')!
    expect(nonce).toMatch(/^[A-Za-z0-9_-]{43}$/)
    expect(await first.json()).toMatchObject({ error: 'use_dpop_nonce' })

    const second = await tokenRequest('/v0/auth/token', codeBody(code), await dpopProof(key, { htm: 'POST', htu: tokenUrl, nonce }))
    expect(second.status).toBe(200)
    // Token responses to a proof carry the current nonce (RFC 9449 §8.2).
    expect(second.headers.get('dpop-nonce')).toMatch(/^[A-Za-z0-9_-]{43}$/)
    const tokens = await second.json()
    expect(tokens.token_type).toBe('DPoP')
    expect(decodeJwt(tokens.access_token).cnf).toEqual({ jkt: key.jkt })
    // RFC 9449 §5: a public client's refresh token is bound to the key too.
    const [row] = await server.database.handle.db.select().from(refreshTokens).where(eq(refreshTokens.tokenHash, sha256Hex(tokens.refresh_token)))
    expect(row!.dpopJkt).toBe(key.jkt)
  })

  test('an invalid proof is 400 invalid_dpop_proof, and the code is not spent', async () => {
    const key = await proofKey()
    const code = await approved()
    const nonce = await currentNonce(server)
    const refused = [
      await dpopProof(key, { htm: 'POST', htu: `${server.config.baseUrl}/auth/revoke`, nonce }),
      await dpopProof(key, { htm: 'GET', htu: tokenUrl, nonce }),
      await dpopProof(key, { htm: 'POST', htu: tokenUrl, nonce, iat: Math.floor(Date.now() / 1000) - 120 }),
      await dpopProof(key, { htm: 'POST', htu: tokenUrl, nonce }, { typ: 'JWT' }),
    ]
    for (const proof of refused) {
      const response = await tokenRequest('/v0/auth/token', codeBody(code), proof)
      expect(response.status).toBe(400)
      const body = await response.json()
      expect(body.error).toBe('invalid_dpop_proof')
      expect(body.error_description.length).toBeGreaterThan(10)
    }
    const redeemed = await tokenRequest('/v0/auth/token', codeBody(code), await proofFor(key))
    expect(redeemed.status).toBe(200)
  })

  test('a proof is taken once at the token endpoint too', async () => {
    const key = await proofKey()
    const proof = await proofFor(key)
    expect((await tokenRequest('/v0/auth/token', codeBody(await approved()), proof)).status).toBe(200)
    await expectOAuthError(await tokenRequest('/v0/auth/token', codeBody(await approved()), proof), 400, 'invalid_dpop_proof')
  })

  test('without a proof the answer is a Bearer token, as before', async () => {
    const response = await tokenRequest('/v0/auth/token', codeBody(await approved()))
    expect(response.status).toBe(200)
    expect(response.headers.get('dpop-nonce')).toBeNull()
    const tokens = await response.json()
    expect(tokens.token_type).toBe('Bearer')
    expect(decodeJwt(tokens.access_token).cnf).toBeUndefined()
  })
})

describe('refreshing a DPoP-bound refresh token', () => {
  const refreshBody = (refreshToken: string) => ({ grant_type: 'refresh_token', refresh_token: refreshToken, client_id: fixture.clientId })

  test('with a proof by its key: a new DPoP pair, still bound to it, at both addresses', async () => {
    const key = await proofKey()
    const tokens = await boundPair(key)
    const refreshed = await tokenRequest('/v0/auth/token', refreshBody(tokens.refresh_token), await proofFor(key))
    expect(refreshed.status).toBe(200)
    const pair = await refreshed.json()
    expect(pair.token_type).toBe('DPoP')
    expect(decodeJwt(pair.access_token).cnf).toEqual({ jkt: key.jkt })
    const again = await tokenRequest('/v0/auth/token/refresh', refreshBody(pair.refresh_token), await proofFor(key, `${server.config.baseUrl}/auth/token/refresh`))
    expect(again.status).toBe(200)
    expect((await again.json()).token_type).toBe('DPoP')
  })

  test('without a proof, or with another key: invalid_grant, and the grant lives on for its key', async () => {
    const key = await proofKey()
    const tokens = await boundPair(key)
    const withoutProof = await tokenRequest('/v0/auth/token', refreshBody(tokens.refresh_token))
    expect(withoutProof.status).toBe(400)
    expect(await withoutProof.json()).toMatchObject({ error: 'invalid_grant', error_description: expect.stringContaining('bound to a DPoP key') })
    const otherKey = await tokenRequest('/v0/auth/token', refreshBody(tokens.refresh_token), await proofFor(await proofKey()))
    expect(otherKey.status).toBe(400)
    expect(await otherKey.json()).toMatchObject({ error: 'invalid_grant', error_description: expect.stringContaining('another DPoP key') })

    const grantId = decodeJwt(tokens.access_token).grant_id as string
    const [grant] = await server.database.handle.db.select().from(grants).where(eq(grants.id, grantId))
    expect(grant!.revokedAt).toBeNull()
    expect((await tokenRequest('/v0/auth/token', refreshBody(tokens.refresh_token), await proofFor(key))).status).toBe(200)
  })

  test('an unbound refresh token refreshed with a proof: a DPoP access token, and the new refresh token bound to that key', async () => {
    const plain = await (await tokenRequest('/v0/auth/token', codeBody(await approved()))).json()
    const key = await proofKey()
    const refreshed = await (await tokenRequest('/v0/auth/token', refreshBody(plain.refresh_token), await proofFor(key))).json()
    expect(refreshed.token_type).toBe('DPoP')
    const [row] = await server.database.handle.db.select().from(refreshTokens).where(eq(refreshTokens.tokenHash, sha256Hex(refreshed.refresh_token)))
    expect(row!.dpopJkt).toBe(key.jkt)
    await expectOAuthError(await tokenRequest('/v0/auth/token', refreshBody(refreshed.refresh_token)), 400, 'invalid_grant')
  })
})

test('oauth4webapi with DPoP(client, keyPair): code flow (meeting the nonce challenge), an API call with a proof, a refresh', async () => {
  const insecure = { [oauth.allowInsecureRequests]: true }
  const issuer = new URL(server.config.baseUrl)
  const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
  expect(as.dpop_signing_alg_values_supported).toContain('ES256')
  const client: oauth.Client = { client_id: fixture.clientId }
  const keyPair = await oauth.generateKeyPair('ES256')
  const DPoP = oauth.DPoP(client, keyPair)

  const { code, verifier } = await approved()
  const callback = new URL(`${REDIRECT_URI}?code=${encodeURIComponent(code)}&iss=${encodeURIComponent(as.issuer)}`)
  const parameters = oauth.validateAuthResponse(as, client, callback, oauth.expectNoState)
  const redeem = () => oauth.authorizationCodeGrantRequest(as, client, oauth.None(), parameters, REDIRECT_URI, verifier, { DPoP, ...insecure })
  let response = await redeem()
  // The library surfaces the challenge; its handle kept the nonce, so the same call again carries it.
  const challenged = await oauth.processAuthorizationCodeResponse(as, client, response).then(
    () => false,
    (error: unknown) => oauth.isDPoPNonceError(error),
  )
  expect(challenged).toBe(true)
  response = await redeem()
  const tokens = await oauth.processAuthorizationCodeResponse(as, client, response)
  expect(tokens.token_type).toBe('dpop')
  expect(decodeJwt(tokens.access_token).cnf).toEqual({ jkt: await DPoP.calculateThumbprint() })

  const account = await oauth.protectedResourceRequest(tokens.access_token, 'GET', new URL(`${server.config.baseUrl}/account`), undefined, undefined, { DPoP, ...insecure })
  expect(account.status).toBe(200)
  expect((await account.json()).id).toBe(fixture.accountId)

  const refreshed = await oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, oauth.None(), tokens.refresh_token!, { DPoP, ...insecure }))
  expect(refreshed.token_type).toBe('dpop')
  const again = await oauth.protectedResourceRequest(refreshed.access_token, 'GET', new URL(`${server.config.baseUrl}/account`), undefined, undefined, { DPoP, ...insecure })
  expect(again.status).toBe(200)
})
