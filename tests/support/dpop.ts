import { randomBytes } from 'node:crypto'
import { SignJWT, calculateJwkThumbprint, exportJWK, generateKeyPair, type CryptoKey, type JWK } from 'jose'
import { accessTokenHash } from '../../src/lib/security/dpop.ts'
import type { TestServer } from './server.ts'
import { REDIRECT_URI, authorizationCode, type Fixture } from '../oauth/support.ts'

/** A DPoP key as a client holds it: the private key signs, the public JWK travels in each proof. */
export interface ProofKey {
  alg: string
  privateKey: CryptoKey
  publicJwk: JWK
  /** Its RFC 7638 thumbprint: what a token bound to it carries as `cnf.jkt`. */
  jkt: string
}

export async function proofKey(alg = 'ES256'): Promise<ProofKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true })
  const publicJwk = await exportJWK(publicKey)
  return { alg, privateKey, publicJwk, jkt: await calculateJwkThumbprint(publicJwk, 'sha256') }
}

export interface ProofClaims {
  htm: string
  htu: string
  nonce?: string
  /** The access token the proof goes with: its hash becomes `ath`. */
  accessToken?: string
  iat?: number
  jti?: string
  [claim: string]: unknown
}

/**
 * A proof as RFC 9449 §4.2 builds it, signed by `key`. `header` replaces members of the
 * protected header (a wrong `typ`, a private `jwk`, ...) for the tests that refuse them.
 */
export async function dpopProof(key: ProofKey, claims: ProofClaims, header: Record<string, unknown> = {}): Promise<string> {
  const { accessToken, iat, jti, ...rest } = claims
  return new SignJWT({ ...rest, jti: jti ?? randomBytes(16).toString('base64url'), iat: iat ?? Math.floor(Date.now() / 1000), ...(accessToken ? { ath: accessTokenHash(accessToken) } : {}) })
    .setProtectedHeader({ alg: key.alg, typ: 'dpop+jwt', jwk: key.publicJwk, ...header })
    .sign(key.privateKey)
}

/** The server's current DPoP nonce, as a client learns it: from the `use_dpop_nonce` answer to a proof without one. */
export async function currentNonce(server: TestServer): Promise<string> {
  const key = await proofKey()
  const response = await server.fetch('/v0/auth/token', {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', dpop: await dpopProof(key, { htm: 'POST', htu: `${server.config.baseUrl}/auth/token` }) },
    body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: 'none', client_id: 'cli_none' }).toString(),
  })
  const body = (await response.json()) as { error: string }
  if (response.status !== 400 || body.error !== 'use_dpop_nonce') throw new Error(`expected use_dpop_nonce, got ${response.status} ${JSON.stringify(body)}`)
  return response.headers.get('dpop-nonce')!
}

/** An `alg: none` token with the proof's claims: unsigned, which no server may take (RFC 9449 §11.6). */
export function unsignedProof(key: ProofKey, claims: ProofClaims): string {
  const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
  const { accessToken, ...rest } = claims
  const payload = { jti: randomBytes(16).toString('base64url'), iat: Math.floor(Date.now() / 1000), ...rest, ...(accessToken ? { ath: accessTokenHash(accessToken) } : {}) }
  return `${encode({ alg: 'none', typ: 'dpop+jwt', jwk: key.publicJwk })}.${encode(payload)}.`
}

export interface DpopTokens {
  access_token: string
  refresh_token: string
  token_type: string
  expires_in: number
  scope: string
}

/** Tokens bound to `key`: a code the user approved (`extra`: its scope, resource), redeemed with a proof by the key. */
export async function dpopBoundTokens(server: TestServer, fixture: Fixture, key: ProofKey, extra: Record<string, unknown> = {}): Promise<DpopTokens> {
  const { code, verifier } = await authorizationCode(server, fixture, extra)
  const response = await server.fetch('/v0/auth/token', {
    method: 'POST',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      dpop: await dpopProof(key, { htm: 'POST', htu: `${server.config.baseUrl}/auth/token`, nonce: await currentNonce(server) }),
    },
    body: new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI, code_verifier: verifier, client_id: fixture.clientId }).toString(),
  })
  if (response.status !== 200) throw new Error(`the token request failed: ${response.status} ${await response.text()}`)
  return (await response.json()) as DpopTokens
}
