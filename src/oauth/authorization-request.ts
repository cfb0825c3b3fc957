import type { Static } from 'elysia'
import { Value } from '@sinclair/typebox/value'
import type { OAuthErrorCode } from '../lib/http/errors.ts'
import { isLoopbackHost } from '../lib/http/loopback.ts'
import { SCOPES, isScope, splitScope, type Scope } from '../auth/scopes.ts'
import type { ClientDirectory } from './client-directory.ts'
import { ClientLookupError, type OAuthClient } from './client-model.ts'
import { AuthorizeQuery } from './schemas.ts'

export const DEFAULT_SCOPE: readonly Scope[] = ['account:read', 'hooks:read', 'hooks:write']

/** What a client sends to start the flow (query of GET /auth/authorize, body of POST). */
export type AuthorizationParams = Static<typeof AuthorizeQuery>

export interface ValidAuthorizationRequest {
  client: OAuthClient
  redirectUri: string
  state: string | undefined
  codeChallenge: string
  scopes: Scope[]
  /** RFC 8707: the resources the tokens will be good for (their `aud`). */
  audience: string[]
}

export type AuthorizationCheck =
  | { ok: true; request: ValidAuthorizationRequest }
  /** Unknown client or redirect: shown to the user, never redirected (RFC 9700 §4.1). */
  | { ok: false; redirect: false; description: string }
  /** Anything else: sent back to the client's (verified) redirect URI. */
  | { ok: false; redirect: true; redirectUri: string; state: string | undefined; error: OAuthErrorCode; description: string }

/** RFC 8707 §2: `resource` may be given several times; any other parameter only once (RFC 6749 §3.1). */
const REPEATABLE_PARAMETERS: ReadonlySet<string> = new Set(['resource'])
const KNOWN_PARAMETERS: ReadonlySet<string> = new Set(Object.keys(AuthorizeQuery.properties))
const MAX_NAME_SHOWN = 64
const resourceSchema = AuthorizeQuery.properties.resource as unknown as { anyOf: [{ maxLength: number }, { maxItems: number }] }
const MAX_RESOURCE_LENGTH = resourceSchema.anyOf[0].maxLength
const MAX_RESOURCES = resourceSchema.anyOf[1].maxItems

export type AuthorizationQueryReading = { ok: true; params: AuthorizationParams } | { ok: false; description: string }

/**
 * The parameters of GET /auth/authorize, read from the query as sent (RFC 6749 §3.1): a
 * parameter sent twice (other than `resource`) is refused, whatever it is, because two
 * readers could each take a different copy; one sent without a value is treated as omitted;
 * one the service does not know (`prompt`, `nonce`, …) is ignored; the known ones are held to
 * AuthorizeQuery. Elysia's own query parser keeps the last of repeated values silently, which
 * is why the route reads the URL itself.
 */
export function readAuthorizationQuery(query: URLSearchParams): AuthorizationQueryReading {
  const seen = new Set<string>()
  const params: Record<string, string | string[]> = {}
  const resources: string[] = []
  for (const [name, value] of query) {
    if (seen.has(name) && !REPEATABLE_PARAMETERS.has(name)) {
      const shown = name.length > MAX_NAME_SHOWN ? `${name.slice(0, MAX_NAME_SHOWN)}…` : name
      return { ok: false, description: `The ${shown} parameter is sent more than once; an authorization request may name each parameter only once (RFC 6749 §3.1).` }
    }
    seen.add(name)
    if (!KNOWN_PARAMETERS.has(name) || value === '') continue
    if (name === 'resource') resources.push(value)
    else params[name] = value
  }
  if (resources.length > MAX_RESOURCES) return { ok: false, description: `The resource parameter may be sent at most ${MAX_RESOURCES} times.` }
  if (resources.length > 0) params.resource = resources.length === 1 ? resources[0]! : resources
  for (const [name, value] of Object.entries(params)) {
    const longest = name === 'resource' ? MAX_RESOURCE_LENGTH : (AuthorizeQuery.properties[name as keyof typeof AuthorizeQuery.properties] as { maxLength: number }).maxLength
    if ((Array.isArray(value) ? value : [value]).some((one) => one.length > longest)) {
      return { ok: false, description: `The ${name} parameter must be at most ${longest} characters.` }
    }
  }
  // What the checks above cannot have missed, unless the schema and this reader drift apart.
  if (!Value.Check(AuthorizeQuery, params)) return { ok: false, description: 'The authorization request is malformed.' }
  return { ok: true, params: params as AuthorizationParams }
}

// RFC 7636 §4.2: an S256 challenge is the base64url SHA-256 of the verifier: 43 characters.
const S256_CHALLENGE = /^[A-Za-z0-9_-]{43}$/
const MAX_STATE_LENGTH = 2048

/**
 * Exact match with a registered URI, except that a loopback redirect may use any port
 * (RFC 8252 §7.3: native apps listen on an ephemeral port).
 */
export function matchesRegisteredRedirect(registered: readonly string[], requested: string): boolean {
  if (registered.includes(requested)) return true
  let asked: URL
  try {
    asked = new URL(requested)
  } catch {
    return false
  }
  if (asked.protocol !== 'http:' || !isLoopbackHost(asked.hostname)) return false
  return registered.some((uri) => {
    try {
      const known = new URL(uri)
      return (
        known.protocol === 'http:' &&
        known.hostname === asked.hostname &&
        known.pathname === asked.pathname &&
        known.search === asked.search &&
        !asked.username &&
        !asked.password &&
        !asked.hash
      )
    } catch {
      return false
    }
  })
}

export function parseScope(raw: string | undefined, client: OAuthClient): Scope[] | null {
  const registered = client.scope ? (splitScope(client.scope) as Scope[]) : null
  if (raw === undefined || raw.trim() === '') return registered ?? [...DEFAULT_SCOPE]
  const requested = splitScope(raw)
  const allowed: readonly string[] = registered ?? SCOPES
  if (requested.some((scope) => !isScope(scope) || !allowed.includes(scope))) return null
  return requested as Scope[]
}

/** The audiences a `resource` parameter names: `{base_url}` and/or `{base_url}/mcp`; none = both. */
export function parseResource(raw: string | string[] | undefined, baseUrl: string): string[] | null {
  const resources = raw === undefined ? [] : Array.isArray(raw) ? raw : [raw]
  const known = [baseUrl, `${baseUrl}/mcp`]
  if (resources.length === 0) return known
  if (resources.some((resource) => !known.includes(resource))) return null
  return [...new Set(resources)]
}

/**
 * The checks of an authorization request, in the order RFC 6749 §4.1.2.1 requires: client and
 * redirect URI first (failures are shown, never redirected), then everything else.
 */
export async function checkAuthorizationRequest(
  clients: ClientDirectory,
  baseUrl: string,
  given: AuthorizationParams,
  options: { requireResponseType: boolean },
): Promise<AuthorizationCheck> {
  // RFC 6749 §3.1: a parameter without a value is treated as omitted (the query reader drops them already).
  const params = Object.fromEntries(Object.entries(given).filter(([, value]) => value !== '')) as AuthorizationParams
  let client: OAuthClient | null
  try {
    client = await clients.find(params.client_id)
  } catch (error) {
    if (error instanceof ClientLookupError) return { ok: false, redirect: false, description: error.message }
    throw error
  }
  if (!client) return { ok: false, redirect: false, description: 'This application is not registered (unknown client_id).' }
  // A confidential client may be registered for the JWT bearer grant alone: it has no redirect to send anyone to.
  if (!client.grantTypes.includes('authorization_code')) {
    return { ok: false, redirect: false, description: 'This application is not registered for sign-in through this page (its grant_types do not include authorization_code).' }
  }
  if (!params.redirect_uri || !matchesRegisteredRedirect(client.redirectUris, params.redirect_uri)) {
    return { ok: false, redirect: false, description: 'The redirect_uri is not one this application registered.' }
  }
  const redirectUri = params.redirect_uri
  const state = typeof params.state === 'string' && params.state.length <= MAX_STATE_LENGTH ? params.state : undefined
  const fail = (error: OAuthErrorCode, description: string): AuthorizationCheck => ({ ok: false, redirect: true, redirectUri, state, error, description })

  if (params.state !== undefined && state === undefined) return fail('invalid_request', `state must be at most ${MAX_STATE_LENGTH} characters.`)
  if (options.requireResponseType && params.response_type !== 'code') {
    return fail('unsupported_response_type', 'response_type must be code.')
  }
  if (params.code_challenge_method !== 'S256') return fail('invalid_request', 'code_challenge_method must be S256 (PKCE).')
  if (!params.code_challenge || !S256_CHALLENGE.test(params.code_challenge)) {
    return fail('invalid_request', 'code_challenge must be the base64url SHA-256 of the code verifier (43 characters).')
  }
  const scopes = parseScope(params.scope, client)
  if (!scopes) return fail('invalid_scope', `scope must be among: ${(client.scope ?? SCOPES.join(' '))}.`)
  const audience = parseResource(params.resource, baseUrl)
  if (!audience) return fail('invalid_target', `resource must be ${baseUrl} or ${baseUrl}/mcp.`)
  return { ok: true, request: { client, redirectUri, state, codeChallenge: params.code_challenge, scopes, audience } }
}

/** The redirect URI with the response parameters appended (RFC 6749 §4.1.2, RFC 9207 `iss`). */
export function redirectWith(redirectUri: string, parameters: Record<string, string | undefined>): string {
  const url = new URL(redirectUri)
  for (const [name, value] of Object.entries(parameters)) if (value !== undefined) url.searchParams.set(name, value)
  return url.toString()
}
