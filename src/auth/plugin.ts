import { Elysia } from 'elysia'
import { ApiError } from '../lib/errors.ts'
import type { AuthenticateApiKey, Caller } from './authenticator.ts'
import type { Scope } from './scopes.ts'

export interface AuthRequirement {
  /** The scope the credential must carry (API keys carry every scope); null: any valid credential. */
  scope: Scope | null
}

export interface AuthPluginDeps {
  authenticateApiKey: AuthenticateApiKey
  /** Absolute URL of the protected-resource metadata (RFC 9728) named in WWW-Authenticate. */
  resourceMetadataUrl: string
}

function unauthorized(deps: AuthPluginDeps, detail: string, tokenSent: boolean): ApiError {
  const challenge = tokenSent
    ? `Bearer resource_metadata="${deps.resourceMetadataUrl}", error="invalid_token"`
    : `Bearer resource_metadata="${deps.resourceMetadataUrl}"`
  return new ApiError(401, 'unauthorized', detail, { headers: { 'www-authenticate': challenge } })
}

// Elysia keeps one value of a repeated parameter; which one must not be left to chance.
function hasRepeatedKeyParameter(url: string): boolean {
  const first = url.indexOf('key=')
  return url.indexOf('key=', first + 4) !== -1 && new URL(url).searchParams.getAll('key').length > 1
}

/**
 * The one place that decides who is calling. Routes opt in with `{ auth: { scope } }` and
 * receive `caller`; everything else about credentials stays here.
 */
export function authPlugin(deps: AuthPluginDeps) {
  return new Elysia().macro({
    auth: (requirement: AuthRequirement) => ({
      async resolve({ request, query }): Promise<{ caller: Caller }> {
        const authorization = request.headers.get('authorization')
        const key = (query as Record<string, unknown>).key
        if (key !== undefined && hasRepeatedKeyParameter(request.url)) {
          throw new ApiError(400, 'ambiguous_credentials', 'Send ?key= once.')
        }
        if (authorization !== null && key !== undefined) {
          throw new ApiError(400, 'ambiguous_credentials', 'Send either ?key= or an Authorization header, not both.')
        }
        if (authorization !== null) {
          throw unauthorized(deps, 'The access token is invalid.', true)
        }
        if (key === undefined) {
          throw unauthorized(deps, 'Authenticate with ?key=<API key> or Authorization: Bearer <access token>.', false)
        }
        const caller = typeof key === 'string' ? await deps.authenticateApiKey(key) : null
        if (!caller) throw unauthorized(deps, 'The API key is invalid or has been revoked.', false)
        if (requirement.scope && !caller.scopes.includes(requirement.scope)) {
          throw new ApiError(403, 'forbidden', `This credential lacks the ${requirement.scope} scope.`, {
            headers: { 'www-authenticate': `Bearer error="insufficient_scope", scope="${requirement.scope}"` },
          })
        }
        return { caller }
      },
    }),
  })
}
