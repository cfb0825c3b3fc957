import { Elysia } from 'elysia'
import { ApiError, notFound } from '../lib/http/errors.ts'
import { noteCaller, noteResponseHeaders, readJsonBody } from '../lib/http/foundation.ts'
import type { AuthenticateApiKey, Caller } from './authenticator.ts'
import type { Scope } from './scopes.ts'
import type { BearerAuthenticator } from './bearer.ts'
import { DpopProofError, type DpopVerifier } from '../lib/security/dpop.ts'
import { dpopUnauthorized, insufficientScope, schemeOf, unauthorized as unauthorizedChallenge, type TokenScheme } from './challenges.ts'
import { rateLimitKey, type RequestRateLimiter } from './request-rate-limit.ts'
import type { NoteUse } from './usage.ts'

export interface AuthRequirement {
  /** The scope the credential must carry (API keys carry every scope); null: any valid credential. */
  scope: Scope | null
  /** Which credentials the route takes; default both. */
  accepts?: 'api_key' | 'bearer'
  /** Audiences a bearer token may have here; default `{base_url}` (the REST API). */
  audiences?: readonly string[]
  /** A check that comes before authentication (MCP's Origin check); throws what the caller sees. */
  before?(request: Request): void
  /**
   * The scopes a 401 challenge suggests asking for (its `scope` parameter); default the route's
   * `scope`. MCP names the scopes of its tools: one endpoint, several operations.
   */
  scopeHint?: readonly Scope[]
}

export interface AuthPluginDeps {
  authenticateApiKey: AuthenticateApiKey
  bearer: BearerAuthenticator
  /** Checks the proof that comes with a DPoP-bound token (src/lib/security/dpop.ts). */
  dpop: DpopVerifier
  baseUrl: string
  /** Absolute URL of the protected-resource metadata (RFC 9728) named in WWW-Authenticate. */
  resourceMetadataUrl: string
  /** API_RATE_LIMIT; absent when it is 0 (no limit, no RateLimit headers). */
  rateLimiter?: RequestRateLimiter
  /** Records when a key or grant was last used (src/auth/usage.ts). */
  noteUse?: NoteUse
}

const scopeHintOf = (requirement: AuthRequirement) => requirement.scopeHint ?? (requirement.scope ? [requirement.scope] : [])

function unauthorized(deps: AuthPluginDeps, requirement: AuthRequirement, detail: string, tokenSent: boolean): ApiError {
  return unauthorizedChallenge({ resourceMetadataUrl: deps.resourceMetadataUrl, detail, tokenSent, scopes: scopeHintOf(requirement) })
}

function dpopRefusal(deps: AuthPluginDeps, requirement: AuthRequirement, error: 'invalid_token' | 'invalid_dpop_proof' | 'use_dpop_nonce', detail: string, nonce?: string): ApiError {
  return dpopUnauthorized({ resourceMetadataUrl: deps.resourceMetadataUrl, detail, error, scopes: scopeHintOf(requirement), nonce })
}

/**
 * The token is the caller's only if it came the way it is bound (RFC 9449 §7): a DPoP-bound
 * token with the DPoP scheme and a proof by its key for this request, never as Bearer (§7.2);
 * a Bearer token as Bearer. Runs on every request, whatever the token cache knew.
 */
async function checkPossession(deps: AuthPluginDeps, requirement: AuthRequirement, request: Request, scheme: TokenScheme, token: string, caller: Caller): Promise<Caller> {
  const boundTo = caller.credential.kind === 'access_token' ? caller.credential.dpopJkt : undefined
  if (scheme === 'Bearer') {
    if (boundTo) throw unauthorized(deps, requirement, 'This access token is bound to a DPoP key: send it as Authorization: DPoP <token> with a DPoP proof.', true)
    return caller
  }
  if (!boundTo) throw dpopRefusal(deps, requirement, 'invalid_token', 'This access token is not bound to a DPoP key: send it as Authorization: Bearer <token>.')
  let proven: string | undefined
  try {
    proven = await deps.dpop.check(request, { accessToken: token, boundTo })
  } catch (error) {
    if (!(error instanceof DpopProofError)) throw error
    throw dpopRefusal(deps, requirement, error.error, error.message, error.error === 'use_dpop_nonce' ? await deps.dpop.nonces.current() : undefined)
  }
  if (proven === undefined) throw dpopRefusal(deps, requirement, 'invalid_dpop_proof', 'Authorization: DPoP needs a DPoP proof for this request in the DPoP header.')
  return caller
}

/**
 * A bearer token without the route's scope: 403 naming that scope and the metadata to start OAuth
 * from, so a client can re-authorize for it. Only the scope the endpoint needs (RFC 6750 §3.1);
 * MCP also names the scopes the token holds (src/mcp/step-up.ts, docs/mcp.md). API keys carry
 * every scope.
 */
function checkScope(deps: AuthPluginDeps, caller: Caller, requirement: AuthRequirement): Caller {
  if (requirement.scope && !caller.scopes.includes(requirement.scope)) {
    throw insufficientScope({
      resourceMetadataUrl: deps.resourceMetadataUrl,
      scopes: [requirement.scope],
      description: `This endpoint needs the ${requirement.scope} scope`,
      detail: `This credential lacks the ${requirement.scope} scope, which this endpoint needs. Authorize again asking for it (WWW-Authenticate names it).`,
      scheme: schemeOf(caller),
    })
  }
  return caller
}

// RFC 6750 §2.1 and RFC 9449 §7.1: the scheme, then the token as a token68.
const ACCESS_TOKEN = /^(Bearer|DPoP) +([A-Za-z0-9\-._~+/]+=*) *$/i

const REPEATED = Symbol('repeated')

/**
 * The `key` query parameter, read straight from the URL: asking Elysia for `query` would parse
 * every parameter of every request. A repeated `key` is reported, never resolved by picking one.
 */
export function keyParameter(url: string): string | undefined | typeof REPEATED {
  const queryStart = url.indexOf('?')
  if (queryStart === -1) return undefined
  const fragment = url.indexOf('#', queryStart)
  const queryEnd = fragment === -1 ? url.length : fragment
  let found: string | undefined
  for (let at = queryStart; at !== -1 && at < queryEnd; at = url.indexOf('&', at + 1)) {
    if (!url.startsWith('key=', at + 1)) continue
    if (found !== undefined) return REPEATED
    const next = url.indexOf('&', at + 1)
    found = url.slice(at + 5, next === -1 || next > queryEnd ? queryEnd : next)
  }
  if (found === undefined || (!found.includes('%') && !found.includes('+'))) return found
  try {
    return decodeURIComponent(found.replaceAll('+', ' '))
  } catch {
    // Not valid percent-encoding: it cannot be one of our keys either.
    return found
  }
}

/** The route's OpenAPI `security`: which credentials it takes, and the scope a bearer token needs. */
function securityOf(requirement: AuthRequirement): Record<string, string[]>[] {
  const bearer = { oauth2: requirement.scope ? [requirement.scope] : [] }
  if (requirement.accepts === 'api_key') return [{ apiKey: [] }]
  if (requirement.accepts === 'bearer') return [bearer]
  return [{ apiKey: [] }, bearer]
}

/** A path naming another account than the caller's reads as missing: other accounts' ids are not confirmed to exist. */
export function ownAccount(caller: Caller, accountId: string): string {
  if (caller.accountId !== accountId) throw notFound('No such account.')
  return accountId
}

/**
 * Counts the request against its credential's rate limit (after authentication, before the scope
 * check: a credential that keeps asking for what it may not do is counted too). Every answer to
 * it carries the RateLimit headers; over the limit it is 429 with Retry-After.
 */
function limitRate(deps: AuthPluginDeps, request: Request, caller: Caller): void {
  const limiter = deps.rateLimiter
  if (!limiter) return
  const decision = limiter.take(rateLimitKey(caller.credential))
  noteResponseHeaders(request, { 'ratelimit-policy': limiter.policy, ratelimit: limiter.header(decision) })
  if (!decision.allowed) {
    throw new ApiError(
      429,
      'rate_limited',
      `Too many requests with this credential: wait ${decision.retryAfterSeconds} s (Retry-After), then keep within the RateLimit-Policy header.`,
      { headers: { 'retry-after': String(decision.retryAfterSeconds) } },
    )
  }
}

/** Who is calling, per the route's requirement: rate-limited and scope-checked; throws the 400, 401, 403 or 429 the caller sees. */
async function authorizeCaller(deps: AuthPluginDeps, requirement: AuthRequirement, request: Request): Promise<Caller> {
  const caller = await identifyCaller(deps, requirement, request)
  // Noted for the request's log line (account, credential kind and id; never the secret) as
  // soon as it is known, so that a refusal after authentication (403, 413, 422, 429, ...) names it too.
  noteCaller(request, caller)
  deps.noteUse?.(caller.credential)
  limitRate(deps, request, caller)
  return checkScope(deps, caller, requirement)
}

/** Who is calling, per the route's requirement; throws the 400 or 401 the caller sees. */
async function identifyCaller(deps: AuthPluginDeps, requirement: AuthRequirement, request: Request): Promise<Caller> {
  requirement.before?.(request)
  const authorization = request.headers.get('authorization')
  const key = keyParameter(request.url)
  if (key === REPEATED) throw new ApiError(400, 'ambiguous_credentials', 'Send ?key= once.')
  if (authorization !== null && key !== undefined) {
    throw new ApiError(400, 'ambiguous_credentials', 'Send either ?key= or an Authorization header, not both.')
  }
  if (authorization !== null) {
    if (requirement.accepts === 'api_key') {
      throw new ApiError(403, 'forbidden', 'This endpoint acts on the account itself and takes an API key only.')
    }
    const presented = ACCESS_TOKEN.exec(authorization)
    if (!presented) throw unauthorized(deps, requirement, 'Send the access token as Authorization: Bearer <token>, or Authorization: DPoP <token> with a DPoP proof.', true)
    const scheme: TokenScheme = presented[1]!.toLowerCase() === 'dpop' ? 'DPoP' : 'Bearer'
    const token = presented[2]!
    let lastError = 'The access token is invalid.'
    for (const audience of requirement.audiences ?? [deps.baseUrl]) {
      const result = await deps.bearer.authenticate(token, audience)
      if ('caller' in result) return checkPossession(deps, requirement, request, scheme, token, result.caller)
      lastError = result.error
    }
    throw scheme === 'DPoP' ? dpopRefusal(deps, requirement, 'invalid_token', lastError) : unauthorized(deps, requirement, lastError, true)
  }
  if (key === undefined) {
    const how = requirement.accepts === 'bearer' ? 'Authorization: Bearer <access token>' : '?key=<API key> or Authorization: Bearer <access token>'
    throw unauthorized(deps, requirement, `Authenticate with ${how}.`, false)
  }
  if (requirement.accepts === 'bearer') throw unauthorized(deps, requirement, 'This endpoint takes a bearer access token, not an API key.', false)
  const caller = await deps.authenticateApiKey(key)
  if (!caller) throw unauthorized(deps, requirement, 'The API key is invalid or has been revoked.', false)
  return caller
}

/**
 * The one place that decides who is calling. Routes opt in with `{ auth: { scope } }` and
 * receive `caller`; the OpenAPI document's `security` of the route follows from the same
 * requirement. Everything else about credentials stays here.
 */
export function authPlugin(deps: AuthPluginDeps) {
  return new Elysia().macro({
    auth: (requirement: AuthRequirement) => {
      // Once per request, whichever hook comes first: parse for requests with a body, transform
      // for the others; both run before validation, so a caller who is nobody learns nothing
      // about the route's schema and has no byte of its body read.
      const callers = new WeakMap<Request, Promise<Caller>>()
      const authenticate = (request: Request) => {
        let caller = callers.get(request)
        if (!caller) {
          caller = authorizeCaller(deps, requirement, request)
          callers.set(request, caller)
        }
        return caller
      }
      const readBodyOfCaller = async ({ request }: { request: Request }) => {
        await authenticate(request)
        return readJsonBody(request)
      }
      return {
        detail: { security: securityOf(requirement) },
        // After the reader, which always answers, 'json' is never run: it names the media type
        // in the OpenAPI document. Elysia runs named parsers in a macro but does not type them.
        parse: [readBodyOfCaller, 'json'] as unknown as typeof readBodyOfCaller,
        async transform({ request }: { request: Request }) {
          await authenticate(request)
        },
        async resolve({ request }): Promise<{ caller: Caller }> {
          return { caller: await authenticate(request) }
        },
      }
    },
  })
}
