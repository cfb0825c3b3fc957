import { eq, sql } from 'drizzle-orm'
import { queryRows } from '../../lib/db/client.ts'
import { grants, refreshTokens } from '../../lib/db/schema.ts'
import { OAuthError } from '../../lib/errors.ts'
import { sha256Hex } from '../../lib/crypto.ts'
import { splitScope } from '../../auth/scopes.ts'
import { requireClient } from '../clients.ts'
import { revokeGrant } from '../revocation.ts'
import { invalidGrant, newTokenPair, refreshTokenExpiry, type TokenDeps, type TokenResponse } from '../tokens.ts'

/** The refresh token grant (RFC 6749 §6) with rotation (OAuth 2.1 §4.3.1). */

/** RFC 6749 §6: a refresh may ask for less than the grant holds, never more; none asked is all of it. */
function narrowedScope(granted: string, requested: string | undefined): string {
  if (requested === undefined || requested.trim() === '') return granted
  const names = splitScope(requested)
  const held = splitScope(granted)
  if (names.some((name) => !held.includes(name))) throw new OAuthError(400, 'invalid_scope', `scope must be within: ${granted}.`)
  return names.join(' ')
}

interface SealedSuccessor {
  response: TokenResponse
  issuedAt: number
}

/**
 * RFC 6749 §6 with rotation (OAuth 2.1 §4.3.1), in the order of its checklist:
 * 1. the client is known (else 401 `invalid_client`);
 * 2. the token exists, belongs to this client's grant, the grant is not revoked and the token
 *    has not expired (30 days);
 * 3. the token was not rotated before. A rotated token presented within the grace window
 *    (`OAUTH_REFRESH_GRACE_S`: agents refresh concurrently) gets the same successor pair; after
 *    it, the presentation is taken as theft and the whole grant is revoked;
 * 4. the scope asked for is within the grant's;
 * then the token is rotated: a successor pair replaces it.
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

    const scope = narrowedScope(row.grant.scope, input.scope)
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
