import { ApiError } from '../lib/http/errors.ts'
import { SCOPES, type Scope } from './scopes.ts'

/**
 * The `WWW-Authenticate` challenges of the protected resources (RFC 6750 §3, RFC 9728 §5.1), built
 * here and nowhere else: the 401 of the auth plugin, its 403 for a missing scope, and MCP's step-up
 * 403 (src/mcp/step-up.ts). Clients parse these with simple patterns (the MCP SDK matches
 * `name="value"` anywhere in the header), so parameters come in a fixed order, the error
 * description last, and no value holds a quote, a backslash or another parameter's `name=`.
 */

/** A value as an RFC 7235 quoted-string we never need to escape: quotes and backslashes become apostrophes. */
const quoted = (value: string) => `"${value.replace(/["\\]/g, "'")}"`

function bearer(params: [name: string, value: string | undefined][]): string {
  return `Bearer ${params
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
  const challenge = bearer([
    ['resource_metadata', options.resourceMetadataUrl],
    ['scope', inScopeOrder(options.scopes).join(' ')],
    ['error', options.tokenSent ? 'invalid_token' : undefined],
    ['error_description', options.tokenSent ? options.detail : undefined],
  ])
  return new ApiError(401, 'unauthorized', options.detail, { headers: { 'www-authenticate': challenge } })
}

/**
 * 403 `insufficient_scope` (RFC 6750 §3.1; MCP 2025-11-25 "Runtime Insufficient Scope Errors").
 * `scopes` is what the client should hold after re-authorizing: a client doing step-up requests
 * exactly this set, so it must name everything the request needs. `description` goes in the
 * header (short, ASCII), `detail` in the problem body.
 */
export function insufficientScope(options: { resourceMetadataUrl: string; scopes: readonly Scope[]; description: string; detail: string }): ApiError {
  const challenge = bearer([
    ['error', 'insufficient_scope'],
    ['scope', inScopeOrder(options.scopes).join(' ')],
    ['resource_metadata', options.resourceMetadataUrl],
    ['error_description', options.description],
  ])
  return new ApiError(403, 'insufficient_scope', options.detail, { headers: { 'www-authenticate': challenge } })
}
