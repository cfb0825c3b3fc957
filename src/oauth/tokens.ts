import { createHash } from 'node:crypto'
import { and, eq, isNull, sql } from 'drizzle-orm'
import { queryRows, type Database, type DatabaseTransaction } from '../lib/db/client.ts'
import { authorizationCodes, grants, refreshTokens, users } from '../lib/db/schema.ts'
import { OAuthError } from '../lib/errors.ts'
import { constantTimeEqual, newSecret, sha256Hex } from '../lib/crypto.ts'
import { newId } from '../lib/ids.ts'
import { recordInvalidation } from '../lib/invalidation-feed.ts'
import type { SecretBox } from '../lib/secret-box.ts'
import type { TokenSigner } from './signing-keys.ts'
import { findClient, type OAuthClient, type ValidAuthorizationRequest } from './authorization-request.ts'
import { idTokenAudience } from './sign-in.ts'

export const ACCESS_TOKEN_LIFETIME_SECONDS = 15 * 60
export const REFRESH_TOKEN_LIFETIME_SECONDS = 30 * 24 * 3600
export const AUTHORIZATION_CODE_LIFETIME_SECONDS = 60

export interface TokenDeps {
  db: Database
  signer: TokenSigner
  secretBox: SecretBox
  baseUrl: string
  refreshGraceSeconds: number
  /** Applies the invalidations just recorded, so this instance refuses revoked tokens at once. */
  syncCaches(): Promise<void>
}

export interface TokenResponse {
  access_token: string
  token_type: 'Bearer'
  expires_in: number
  refresh_token: string
  scope: string
}

/** Claims of our access tokens beyond the registered ones (RFC 9068 §2.2). */
export interface AccessTokenClaims {
  client_id: string
  account_id: string
  scope: string
  /** The grant the token belongs to: revoking the grant revokes the token. */
  grant_id: string
}

const invalidGrant = (description: string) => new OAuthError(400, 'invalid_grant', description)
export const invalidClient = () =>
  new OAuthError(401, 'invalid_client', 'Unknown client_id: register the client again (POST /auth/register).')

// RFC 7636 §4.1: 43 to 128 unreserved characters.
const CODE_VERIFIER = /^[A-Za-z0-9._~-]{43,128}$/

export async function requireClient(db: Database, clientId: string | undefined): Promise<OAuthClient> {
  const client = await findClient(db, clientId)
  if (!client) throw invalidClient()
  return client
}

/** Verifies the signed-in user's id_token and stores a single-use code bound to the request. */
export async function issueAuthorizationCode(deps: TokenDeps, request: ValidAuthorizationRequest, idToken: string): Promise<string> {
  let userId: string
  try {
    const verified = await deps.signer.verify(idToken, { typ: 'JWT', audience: idTokenAudience(deps.baseUrl) })
    userId = String(verified.sub)
  } catch {
    throw new OAuthError(401, 'access_denied', 'The id_token is invalid or expired: sign in again.')
  }
  const [user] = await deps.db.select({ id: users.id, accountId: users.accountId }).from(users).where(eq(users.id, userId))
  if (!user) throw new OAuthError(401, 'access_denied', 'The signed-in user no longer exists.')
  const code = newSecret('')
  await deps.db.insert(authorizationCodes).values({
    codeHash: sha256Hex(code),
    clientId: request.client.id,
    userId: user.id,
    accountId: user.accountId,
    redirectUri: request.redirectUri,
    codeChallenge: request.codeChallenge,
    scope: request.scopes.join(' '),
    audience: request.audience,
    expiresAt: new Date(Date.now() + AUTHORIZATION_CODE_LIFETIME_SECONDS * 1000),
  })
  return code
}

/** Revokes a grant and every token issued from it, on every instance (through the invalidation feed). */
export async function revokeGrant(db: Database | DatabaseTransaction, grantId: string, reason: string): Promise<void> {
  const revoked = await db
    .update(grants)
    .set({ revokedAt: sql`now()`, revokedReason: reason })
    .where(and(eq(grants.id, grantId), isNull(grants.revokedAt)))
    .returning({ id: grants.id })
  if (revoked.length > 0) await recordInvalidation(db, 'grant', grantId)
}

type Grant = typeof grants.$inferSelect

async function signAccessToken(deps: TokenDeps, grant: Grant, scope: string): Promise<string> {
  const claims: AccessTokenClaims = { client_id: grant.clientId, account_id: grant.accountId, scope, grant_id: grant.id }
  return deps.signer.sign(claims as unknown as Record<string, unknown>, {
    typ: 'at+jwt',
    subject: grant.userId,
    audience: grant.audience.length === 1 ? grant.audience[0]! : grant.audience,
    expiresInSeconds: ACCESS_TOKEN_LIFETIME_SECONDS,
  })
}

/** A new refresh token row for the grant, and the access token that goes with it. */
/** A new token pair for the grant; the caller stores the refresh token's hash. */
async function newTokenPair(deps: TokenDeps, grant: Grant, scope: string): Promise<TokenResponse> {
  return {
    access_token: await signAccessToken(deps, grant, scope),
    token_type: 'Bearer',
    expires_in: ACCESS_TOKEN_LIFETIME_SECONDS,
    refresh_token: newSecret('rt_'),
    scope,
  }
}

const refreshTokenExpiry = () => new Date(Date.now() + REFRESH_TOKEN_LIFETIME_SECONDS * 1000)

/** What a grant transaction decided; errors are thrown after it commits, so revocations stick. */
type GrantOutcome = { tokens: TokenResponse } | { error: string }

function settle(outcome: GrantOutcome): TokenResponse {
  if ('tokens' in outcome) return outcome.tokens
  throw invalidGrant(outcome.error)
}

/**
 * RFC 6749 §4.1.3 with PKCE (RFC 7636 §4.6). The code is consumed by its first presentation,
 * valid or not; presented again, it revokes everything issued from it (RFC 6749 §4.1.2).
 */
export async function redeemAuthorizationCode(
  deps: TokenDeps,
  input: { code?: string; clientId?: string; redirectUri?: string; codeVerifier?: string },
): Promise<TokenResponse> {
  const client = await requireClient(deps.db, input.clientId)
  if (!input.code || input.code.length > 256) throw invalidGrant('The authorization code is missing or malformed.')
  const outcome = await deps.db.transaction(async (tx): Promise<GrantOutcome> => {
    const [code] = await tx
      .select()
      .from(authorizationCodes)
      .where(eq(authorizationCodes.codeHash, sha256Hex(input.code!)))
      .for('update')
    if (!code) return { error: 'The authorization code is unknown.' }
    if (code.redeemedAt) {
      if (code.grantId) await revokeGrant(tx, code.grantId, 'authorization code presented twice')
      return { error: 'The authorization code was already used; the tokens issued from it are revoked.' }
    }
    await tx.update(authorizationCodes).set({ redeemedAt: sql`now()` }).where(eq(authorizationCodes.codeHash, code.codeHash))
    if (code.clientId !== client.id) return { error: 'The authorization code was issued to another client.' }
    if (code.expiresAt.getTime() <= Date.now()) return { error: 'The authorization code has expired.' }
    if (input.redirectUri !== code.redirectUri) return { error: 'redirect_uri differs from the one in the authorization request.' }
    if (!input.codeVerifier || !CODE_VERIFIER.test(input.codeVerifier)) return { error: 'code_verifier is missing or malformed.' }
    const challenge = createHash('sha256').update(input.codeVerifier).digest('base64url')
    if (!constantTimeEqual(challenge, code.codeChallenge)) return { error: 'code_verifier does not match the code_challenge.' }

    const [grant] = await tx
      .insert(grants)
      .values({ id: newId('grt'), clientId: client.id, userId: code.userId, accountId: code.accountId, scope: code.scope, audience: code.audience })
      .returning()
    await tx.update(authorizationCodes).set({ grantId: grant!.id }).where(eq(authorizationCodes.codeHash, code.codeHash))
    const tokens = await newTokenPair(deps, grant!, code.scope)
    await tx.insert(refreshTokens).values({ tokenHash: sha256Hex(tokens.refresh_token), grantId: grant!.id, expiresAt: refreshTokenExpiry() })
    return { tokens }
  })
  return settle(outcome)
}

interface SealedSuccessor {
  response: TokenResponse
  issuedAt: number
}

/**
 * RFC 6749 §6 with rotation (OAuth 2.1 §4.3.1). A rotated token presented within the grace
 * window gets the same successor pair; after it, the presentation is taken as theft and the
 * whole grant is revoked.
 *
 * The rotation is one statement (refreshes are hot: bench/oauth.ts): it marks the token rotated
 * only if it still is not, and inserts the successor only if that happened. Of two concurrent
 * refreshes one wins; the other finds the winner's committed successor on its second read and
 * answers from the grace window.
 */
export async function refreshTokenGrant(
  deps: TokenDeps,
  input: { refreshToken?: string; clientId?: string; scope?: string },
): Promise<TokenResponse> {
  const client = await requireClient(deps.db, input.clientId)
  if (!input.refreshToken || input.refreshToken.length > 256) throw invalidGrant('The refresh token is missing or malformed.')
  const tokenHash = sha256Hex(input.refreshToken)
  for (let read = 0; read < 2; read++) {
    const [row] = await deps.db
      .select({ token: refreshTokens, grant: grants, graceOpen: sql<boolean>`${refreshTokens.rotatedAt} > now() - make_interval(secs => ${deps.refreshGraceSeconds})` })
      .from(refreshTokens)
      .innerJoin(grants, eq(grants.id, refreshTokens.grantId))
      .where(eq(refreshTokens.tokenHash, tokenHash))
    if (!row || row.grant.clientId !== client.id) throw invalidGrant('The refresh token is unknown.')
    if (row.grant.revokedAt) throw invalidGrant('The refresh token has been revoked.')
    if (row.token.expiresAt.getTime() <= Date.now()) throw invalidGrant('The refresh token has expired.')

    if (row.token.rotatedAt) {
      if (row.graceOpen && row.token.successorCiphertext) {
        const successor = JSON.parse(await deps.secretBox.open(row.token.successorCiphertext)) as SealedSuccessor
        const elapsed = Math.floor((Date.now() - successor.issuedAt) / 1000)
        return { ...successor.response, expires_in: Math.max(0, successor.response.expires_in - elapsed) }
      }
      await deps.db.transaction((tx) => revokeGrant(tx, row.grant.id, 'rotated refresh token presented again'))
      await deps.syncCaches()
      throw invalidGrant('The refresh token was already used; the grant is revoked.')
    }

    let scope = row.grant.scope
    if (input.scope !== undefined && input.scope.trim() !== '') {
      const granted = row.grant.scope.split(' ')
      const requested = [...new Set(input.scope.split(' ').filter(Boolean))]
      if (requested.some((item) => !granted.includes(item))) throw new OAuthError(400, 'invalid_scope', `scope must be within: ${row.grant.scope}.`)
      scope = requested.join(' ')
    }
    const tokens = await newTokenPair(deps, row.grant, scope)
    const sealed = await deps.secretBox.seal(JSON.stringify({ response: tokens, issuedAt: Date.now() } satisfies SealedSuccessor))
    const inserted = await queryRows<{ token_hash: string }>(
      deps.db,
      sql`with rotated as (
            update ${refreshTokens} set rotated_at = now(), successor_ciphertext = ${sealed}
            where token_hash = ${tokenHash} and rotated_at is null
            returning grant_id
          )
          insert into ${refreshTokens} (token_hash, grant_id, expires_at)
          select ${sha256Hex(tokens.refresh_token)}, grant_id, ${refreshTokenExpiry().toISOString()}::timestamptz from rotated
          returning token_hash`,
    )
    if (inserted.length === 1) return tokens
  }
  throw invalidGrant('The refresh token is being rotated by another request; try again.')
}

/**
 * RFC 7009: revokes the grant of a refresh or access token that belongs to the calling client.
 * Unknown, expired or foreign tokens are not an error (§2.2): the answer does not tell them apart.
 */
export async function revokeToken(deps: TokenDeps, input: { token?: string; clientId?: string }): Promise<void> {
  const client = await requireClient(deps.db, input.clientId)
  if (!input.token || input.token.length > 4096) throw new OAuthError(400, 'invalid_request', 'token is required.')
  const [refresh] = await deps.db
    .select({ grantId: grants.id, clientId: grants.clientId })
    .from(refreshTokens)
    .innerJoin(grants, eq(grants.id, refreshTokens.grantId))
    .where(eq(refreshTokens.tokenHash, sha256Hex(input.token)))
  if (refresh) {
    if (refresh.clientId === client.id) await revokeGrant(deps.db, refresh.grantId, 'revoked by the client')
    return
  }
  for (const audience of [deps.baseUrl, `${deps.baseUrl}/mcp`]) {
    try {
      const claims = (await deps.signer.verify(input.token, { typ: 'at+jwt', audience })) as unknown as AccessTokenClaims
      if (claims.client_id === client.id && typeof claims.grant_id === 'string') await revokeGrant(deps.db, claims.grant_id, 'revoked by the client')
      return
    } catch {
      // Not an access token for this audience (or not valid at all): nothing to revoke.
    }
  }
}
