import { createHash } from 'node:crypto'
import { eq, sql } from 'drizzle-orm'
import { authorizationCodes, grants, refreshTokens, users } from '../../lib/db/schema.ts'
import { OAuthError } from '../../lib/http/errors.ts'
import { constantTimeEqual, newSecret, sha256Hex } from '../../lib/security/crypto.ts'
import { newId } from '../../lib/db/ids.ts'
import type { OAuthClient } from '../client-model.ts'
import type { ValidAuthorizationRequest } from '../authorization-request.ts'
import { idTokenAudience } from '../sign-in.ts'
import { revokeGrant } from '../revocation.ts'
import { invalidGrant, newTokenPair, refreshTokenExpiry, type TokenDeps, type TokenResponse } from '../tokens.ts'
import { refreshTokenBinding } from '../dpop-binding.ts'

/** The authorization code grant (RFC 6749 §4.1) with PKCE (RFC 7636): issuing a code, redeeming it. */

export const AUTHORIZATION_CODE_LIFETIME_SECONDS = 60

// RFC 7636 §4.1: 43 to 128 unreserved characters.
const CODE_VERIFIER = /^[A-Za-z0-9._~-]{43,128}$/

/**
 * RFC 6749 §4.1.2: verifies the signed-in user's id_token and stores a single-use code bound to
 * the request (client, redirect URI, PKCE challenge, user, scope, resource). Only its hash is kept.
 */
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
  // A metadata document's client gets its row now, once a signed-in user approves it: the code references it.
  await deps.clients.record(request.client)
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

/** What the redemption transaction decided; the error is thrown after it commits, so a revocation sticks. */
type Redemption = { tokens: TokenResponse } | { error: string }

/**
 * RFC 6749 §4.1.3, in the order of its checklist, for a client the token endpoint authenticated
 * (src/oauth/client-authentication.ts):
 * 1. the code exists and was never presented before: a code is consumed by its first
 *    presentation, valid or not, and presented again it revokes everything issued from it (§4.1.2);
 * 2. it was issued to this client, has not expired (60 s), and `redirect_uri` is the one it was issued for;
 * 3. PKCE: the SHA-256 of `code_verifier` is its `code_challenge` (RFC 7636 §4.6);
 * then a grant is created and its first token pair issued, bound to `dpopJkt` when the request
 * carried a DPoP proof (src/oauth/dpop-binding.ts).
 */
export async function redeemAuthorizationCode(
  deps: TokenDeps,
  client: OAuthClient,
  input: { code?: string; redirectUri?: string; codeVerifier?: string; dpopJkt: string | undefined },
): Promise<TokenResponse> {
  if (!input.code || input.code.length > 256) throw invalidGrant('The authorization code is missing or malformed.')
  const redemption = await deps.db.transaction(async (tx): Promise<Redemption> => {
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
    const tokens = await newTokenPair(deps, grant!, code.scope, input.dpopJkt)
    await tx.insert(refreshTokens).values({
      tokenHash: sha256Hex(tokens.refresh_token),
      grantId: grant!.id,
      expiresAt: refreshTokenExpiry(),
      dpopJkt: refreshTokenBinding(client, input.dpopJkt),
    })
    return { tokens }
  })
  if ('error' in redemption) throw invalidGrant(redemption.error)
  return redemption.tokens
}
