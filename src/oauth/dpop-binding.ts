import { OAuthError } from '../lib/http/errors.ts'
import { DpopProofError, type DpopVerifier } from '../lib/security/dpop.ts'
import type { OAuthClient } from './client-model.ts'
import { invalidGrant } from './tokens.ts'

/**
 * DPoP at the token endpoint (RFC 9449 §5, docs/oauth.md#dpop): the proof is read once per
 * token request and the thumbprint of its key handed to the grant, which binds what it issues
 * to it (`newAccessToken`, `newTokenPair` in src/oauth/tokens.ts; `refreshTokenBinding` below).
 */

/**
 * The thumbprint of the key the token request's DPoP proof was signed with, or undefined when
 * it has none (Bearer tokens). A bad proof is 400 `invalid_dpop_proof`; one without the
 * server's current nonce is 400 `use_dpop_nonce` with the nonce in `DPoP-Nonce` (RFC 9449 §8):
 * the token endpoint always asks for one.
 */
export async function tokenRequestDpopKey(dpop: DpopVerifier, request: Request): Promise<string | undefined> {
  try {
    return await dpop.check(request)
  } catch (error) {
    if (!(error instanceof DpopProofError)) throw error
    if (error.error === 'use_dpop_nonce') throw new OAuthError(400, 'use_dpop_nonce', error.message, { 'dpop-nonce': await dpop.nonces.current() })
    throw new OAuthError(400, 'invalid_dpop_proof', error.message)
  }
}

/**
 * The key a new refresh token is bound to (RFC 9449 §5): a public client's is bound to the key
 * of the proof that obtained it. A confidential client's is not: its client authentication
 * already constrains who may use it.
 */
export const refreshTokenBinding = (client: Pick<OAuthClient, 'tokenEndpointAuthMethod'>, dpopJkt: string | undefined): string | null =>
  client.tokenEndpointAuthMethod === 'none' ? (dpopJkt ?? null) : null

/** A bound refresh token is used only with a proof signed by its key (RFC 9449 §5). */
export function requireRefreshKey(boundTo: string | null, dpopJkt: string | undefined): void {
  if (boundTo === null || boundTo === dpopJkt) return
  throw invalidGrant(
    dpopJkt === undefined
      ? 'The refresh token is bound to a DPoP key: send a DPoP proof signed by that key.'
      : 'The refresh token is bound to another DPoP key than the one that signed this proof.',
  )
}
