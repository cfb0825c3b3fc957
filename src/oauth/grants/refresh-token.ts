import { and, eq, inArray, isNotNull, sql } from 'drizzle-orm'
import { queryRows, type Database } from '../../lib/db/client.ts'
import { grants, refreshTokens } from '../../lib/db/schema.ts'
import { OAuthError } from '../../lib/http/errors.ts'
import { sha256Hex } from '../../lib/security/crypto.ts'
import { splitScope } from '../../auth/scopes.ts'
import type { OAuthClient } from '../client-model.ts'
import type { Logger } from '../../lib/runtime/logger.ts'
import { startPeriodicSweep } from '../../lib/runtime/sweep.ts'
import { revokeGrant } from '../revocation.ts'
import { invalidGrant, newTokenPair, refreshTokenExpiry, type TokenDeps, type TokenResponse } from '../tokens.ts'
import { refreshTokenBinding, requireRefreshKey } from '../dpop-binding.ts'

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
 * RFC 6749 §6 with rotation (OAuth 2.1 §4.3.1), in the order of its checklist, for a client the
 * token endpoint authenticated (src/oauth/client-authentication.ts):
 * 1. the token exists, belongs to this client's grant, the grant is not revoked and the token
 *    has not expired (30 days);
 * 2. a token bound to a DPoP key comes with a proof by that key (RFC 9449 §5). Checked before
 *    the rotation, so that someone holding a copy of a rotated token but not the key cannot
 *    get the grant revoked;
 * 3. the token was not rotated before. A rotated token presented within the grace window
 *    (`OAUTH_REFRESH_GRACE_S`: agents refresh concurrently) gets the same successor pair; after
 *    it, the presentation is taken as theft and the whole grant is revoked. The sealed successor
 *    does not outlive the window (`startSuccessorErasure` below);
 * 4. the scope asked for is within the grant's;
 * then the token is rotated: a successor pair replaces it, its access token bound to the
 * proof's key when there is one, its refresh token bound as this one was (or, unbound, to the
 * proof's key when the client is public: src/oauth/dpop-binding.ts).
 *
 * The rotation is one statement (refreshes are hot: docs/performance.md, the refresh grant): it marks the token rotated
 * only if it still is not, and inserts the successor only if that happened. Of two concurrent
 * refreshes one wins; the other finds the winner's committed successor on its second read and
 * answers from the grace window.
 */
export async function refreshTokenGrant(
  deps: TokenDeps,
  client: OAuthClient,
  input: { refreshToken?: string; scope?: string; dpopJkt: string | undefined },
): Promise<TokenResponse> {
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
    requireRefreshKey(row.token.dpopJkt, input.dpopJkt)

    if (row.token.rotatedAt) {
      if (row.graceOpen && row.token.successorCiphertext) {
        const successor = JSON.parse(await deps.secretBox.open(row.token.successorCiphertext)) as SealedSuccessor
        const elapsed = Math.floor((Date.now() - successor.issuedAt) / 1000)
        return { ...successor.response, expires_in: Math.max(0, successor.response.expires_in - elapsed) }
      }
      await deps.db.transaction(async (tx) => {
        // Past its window the sealed successor is of no use; the sweep may not have reached it yet.
        await tx.update(refreshTokens).set({ successorCiphertext: null }).where(eq(refreshTokens.tokenHash, tokenHash))
        await revokeGrant(tx, row.grant.id, 'rotated refresh token presented again')
      })
      await deps.syncCaches()
      throw invalidGrant('The refresh token was already used; the grant is revoked.')
    }

    const scope = narrowedScope(row.grant.scope, input.scope)
    const tokens = await newTokenPair(deps, row.grant, scope, input.dpopJkt)
    // Without a window nothing would ever read it: keep nothing.
    const sealed =
      deps.refreshGraceSeconds > 0 ? await deps.secretBox.seal(JSON.stringify({ response: tokens, issuedAt: Date.now() } satisfies SealedSuccessor)) : null
    const inserted = await queryRows<{ token_hash: string }>(
      deps.db,
      sql`with rotated as (
            update ${refreshTokens} set rotated_at = now(), successor_ciphertext = ${sealed}
            where token_hash = ${tokenHash} and rotated_at is null
            returning grant_id
          )
          insert into ${refreshTokens} (token_hash, grant_id, expires_at, dpop_jkt)
          select ${sha256Hex(tokens.refresh_token)}, grant_id, ${refreshTokenExpiry().toISOString()}::timestamptz, ${row.token.dpopJkt ?? refreshTokenBinding(client, input.dpopJkt)}::text from rotated
          returning token_hash`,
    )
    if (inserted.length === 1) return tokens
  }
  throw invalidGrant('The refresh token is being rotated by another request; try again.')
}

/** How often each instance erases the successors whose window has ended, and how many at a time. */
export const SUCCESSOR_ERASURE_INTERVAL_MS = 1000
const SUCCESSOR_ERASURE_BATCH = 500

/**
 * Erases the sealed successors whose grace window has ended (by the database's clock, the same
 * one that decides whether a replay is inside the window). A successor holds a live refresh
 * token, so it must not stay at rest after the window: a copy of the data and the key (which
 * sit side by side on PGlite) would otherwise open every rotated grant's current token.
 * Batches lock their rows with SKIP LOCKED, so instances sweeping together never wait on each
 * other. Returns how many were erased.
 */
export async function eraseEndedSuccessors(db: Database, graceSeconds: number): Promise<number> {
  let erased = 0
  for (;;) {
    const due = db
      .select({ tokenHash: refreshTokens.tokenHash })
      .from(refreshTokens)
      .where(and(isNotNull(refreshTokens.successorCiphertext), sql`${refreshTokens.rotatedAt} <= now() - make_interval(secs => ${graceSeconds})`))
      .limit(SUCCESSOR_ERASURE_BATCH)
      .for('update', { skipLocked: true })
    const batch = await db
      .update(refreshTokens)
      .set({ successorCiphertext: null })
      .where(inArray(refreshTokens.tokenHash, due))
      .returning({ tokenHash: refreshTokens.tokenHash })
    erased += batch.length
    if (batch.length < SUCCESSOR_ERASURE_BATCH) return erased
  }
}

/**
 * Runs `eraseEndedSuccessors` at once and then every second on this instance, so a successor
 * outlives its window by about a second at most while any instance runs (and whatever a stopped
 * service left is erased at the next start). A failed sweep is logged and tried again.
 */
export function startSuccessorErasure(options: { db: Database; graceSeconds: number; logger: Logger; intervalMs?: number }): { stop(): Promise<void> } {
  return startPeriodicSweep({
    sweep: () => eraseEndedSuccessors(options.db, options.graceSeconds),
    intervalMs: options.intervalMs ?? SUCCESSOR_ERASURE_INTERVAL_MS,
    logger: options.logger,
    failure: 'erasing ended refresh successors failed',
  })
}
