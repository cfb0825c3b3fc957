import type { Static } from 'elysia'
import type { ClientDirectory } from './client-directory.ts'
import type { Database } from '../lib/db/client.ts'
import type { grants } from '../lib/db/schema.ts'
import { OAuthError } from '../lib/http/errors.ts'
import { newSecret } from '../lib/security/crypto.ts'
import type { SecretBox } from '../lib/security/secret-box.ts'
import type { TokenSigner } from './signing-keys.ts'
import type { TokenResponseSchema } from './schemas.ts'

/**
 * What the grants (src/oauth/grants/) share: the token response, how an access token is
 * signed and a refresh token made, and the dependencies they run with.
 */

export const ACCESS_TOKEN_LIFETIME_SECONDS = 15 * 60
export const REFRESH_TOKEN_LIFETIME_SECONDS = 30 * 24 * 3600

export interface TokenDeps {
  db: Database
  /** Where clients are looked up (src/oauth/client-directory.ts). */
  clients: ClientDirectory
  signer: TokenSigner
  secretBox: SecretBox
  baseUrl: string
  refreshGraceSeconds: number
  /** Applies the invalidations just recorded, so this instance refuses revoked tokens at once. */
  syncCaches(): Promise<void>
}

export type TokenResponse = Static<typeof TokenResponseSchema>

/** Claims of our access tokens beyond the registered ones (RFC 9068 §2.2). */
export interface AccessTokenClaims {
  client_id: string
  account_id: string
  scope: string
  /** The grant the token belongs to: revoking the grant revokes the token. */
  grant_id: string
  /** RFC 9449 §6: the thumbprint of the DPoP key the token is bound to, when it is. */
  cnf?: { jkt: string }
}

export type Grant = typeof grants.$inferSelect

export const invalidGrant = (description: string) => new OAuthError(400, 'invalid_grant', description)

async function signAccessToken(deps: TokenDeps, grant: Grant, scope: string, dpopJkt: string | undefined): Promise<string> {
  const claims: AccessTokenClaims = { client_id: grant.clientId, account_id: grant.accountId, scope, grant_id: grant.id, ...(dpopJkt ? { cnf: { jkt: dpopJkt } } : {}) }
  return deps.signer.sign(claims as unknown as Record<string, unknown>, {
    typ: 'at+jwt',
    subject: grant.userId,
    audience: grant.audience.length === 1 ? grant.audience[0]! : grant.audience,
    expiresInSeconds: ACCESS_TOKEN_LIFETIME_SECONDS,
  })
}

/**
 * An access token of the grant, bound to the DPoP key the token request proved (`dpopJkt`;
 * undefined: the request had no DPoP header, a Bearer token). Every access token the service
 * issues is made here, so a proof binds them the same way whatever the grant (RFC 9449 §5, §6):
 * `token_type: DPoP` and `cnf.jkt`. The JWT bearer grant answers with it alone: its client
 * presents a new ID-JAG instead of a refresh token.
 */
export async function newAccessToken(deps: TokenDeps, grant: Grant, scope: string, dpopJkt: string | undefined): Promise<TokenResponse> {
  return {
    access_token: await signAccessToken(deps, grant, scope, dpopJkt),
    token_type: dpopJkt ? 'DPoP' : 'Bearer',
    expires_in: ACCESS_TOKEN_LIFETIME_SECONDS,
    scope,
  }
}

/**
 * `newAccessToken` and a new refresh token; the caller stores the refresh token's hash and,
 * for a public client, the key it is bound to (`refreshTokenBinding`, src/oauth/dpop-binding.ts).
 */
export async function newTokenPair(deps: TokenDeps, grant: Grant, scope: string, dpopJkt: string | undefined): Promise<TokenResponse & { refresh_token: string }> {
  return { ...(await newAccessToken(deps, grant, scope, dpopJkt)), refresh_token: newSecret('rt_') }
}

export const refreshTokenExpiry = () => new Date(Date.now() + REFRESH_TOKEN_LIFETIME_SECONDS * 1000)
