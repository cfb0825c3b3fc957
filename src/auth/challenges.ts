import { ApiError } from '../lib/http/errors.ts'
import { DPOP_SIGNING_ALGS } from '../lib/security/dpop.ts'
import { SCOPES, type Scope } from './scopes.ts'
import type { Caller } from './authenticator.ts'

/**
 * The `WWW-Authenticate` challenges of the protected resources (RFC 6750 §3, RFC 9449 §7.1,
 * RFC 9728 §5.1), built here and nowhere else: the 401 of the auth plugin, its 403 for a missing
 * scope, and MCP's step-up 403 (src/mcp/step-up.ts). Clients parse these with simple patterns
 * (the MCP SDK reads the scheme before the first space and matches `name="value"` anywhere in the
 * header), so each header holds one challenge, parameters come in a fixed order, the error
 * description last, and no value holds a quote, a backslash or another parameter's `name=`.
 * A request that used the DPoP scheme is challenged with `DPoP`, any other with `Bearer`.
 */

/** A value as an RFC 7235 quoted-string we never need to escape: quotes and backslashes become apostrophes. */
const quoted = (value: string) => `"${value.replace(/["\\]/g, "'")}"`

/** How the access token was presented: `Authorization: Bearer` (RFC 6750) or `Authorization: DPoP` with a proof (RFC 9449). */
export type TokenScheme = 'Bearer' | 'DPoP'

/** The scheme a caller's token came with: a DPoP-bound token is only ever accepted with DPoP. */
export const schemeOf = (caller: Caller): TokenScheme => (caller.credential.kind === 'access_token' && caller.credential.dpopJkt ? 'DPoP' : 'Bearer')

function challenge(scheme: TokenScheme, params: [name: string, value: string | undefined][]): string {
  return `${scheme} ${params
    .filter((param): param is [string, string] => param[1] !== undefined && param[1] !== '')
    .map(([name, value]) => `${name}=${quoted(value)}`)
    .join(', ')}`
}

/** Scopes each once, in the order SCOPES lists them: the same set always reads the same. */
export const inScopeOrder = (scopes: Iterable<string>): Scope[] => {
  const wanted = new Set(scopes)
  return SCOPES.filter((scope) => wanted.has(scope))
}

/**
 * 401: no credential, or a bad one. `scopes` is the hint of what to ask for (MCP 2025-11-25 §
 * "Protected Resource Metadata Discovery Requirements": the SDK client requests exactly these);
 * `error="invalid_token"` only when a token was sent.
 */
export function unauthorized(options: { resourceMetadataUrl: string; detail: string; tokenSent: boolean; scopes: readonly Scope[] }): ApiError {
  const header = challenge('Bearer', [
    ['resource_metadata', options.resourceMetadataUrl],
    ['scope', inScopeOrder(options.scopes).join(' ')],
    ['error', options.tokenSent ? 'invalid_token' : undefined],
    ['error_description', options.tokenSent ? options.detail : undefined],
  ])
  return new ApiError(401, 'unauthorized', options.detail, { headers: { 'www-authenticate': header } })
}

/**
 * 401 to a request that presented its token with the DPoP scheme (RFC 9449 §7.1): the same
 * parameters as the Bearer challenge, the algorithms a proof may use, and the error:
 * `invalid_token` (the token, or its binding to the proof's key), `invalid_dpop_proof`, or
 * `use_dpop_nonce` with the nonce to sign with in `DPoP-Nonce` (§9).
 */
export function dpopUnauthorized(options: {
  resourceMetadataUrl: string
  detail: string
  error: 'invalid_token' | 'invalid_dpop_proof' | 'use_dpop_nonce'
  scopes: readonly Scope[]
  nonce?: string
}): ApiError {
  const header = challenge('DPoP', [
    ['resource_metadata', options.resourceMetadataUrl],
    ['scope', inScopeOrder(options.scopes).join(' ')],
    ['algs', DPOP_SIGNING_ALGS.join(' ')],
    ['error', options.error],
    ['error_description', options.detail],
  ])
  const headers: Record<string, string> = { 'www-authenticate': header }
  if (options.nonce) headers['dpop-nonce'] = options.nonce
  return new ApiError(401, 'unauthorized', options.detail, { headers })
}

/**
 * 403 `insufficient_scope` (RFC 6750 §3.1; MCP 2025-11-25 "Runtime Insufficient Scope Errors").
 * `scopes` is what the client should hold after re-authorizing: a client doing step-up requests
 * exactly this set, so it must name everything the request needs. `description` goes in the
 * header (short, ASCII), `detail` in the problem body.
 */
export function insufficientScope(options: { resourceMetadataUrl: string; scopes: readonly Scope[]; description: string; detail: string; scheme: TokenScheme }): ApiError {
  const header = challenge(options.scheme, [
    ['error', 'insufficient_scope'],
    ['scope', inScopeOrder(options.scopes).join(' ')],
    ['resource_metadata', options.resourceMetadataUrl],
    ['error_description', options.description],
  ])
  return new ApiError(403, 'insufficient_scope', options.detail, { headers: { 'www-authenticate': header } })
}
