import { eq } from 'drizzle-orm'
import type { Database } from '../lib/db/client.ts'
import { grants } from '../lib/db/schema.ts'
import { TtlCache } from '../lib/cache/ttl-cache.ts'
import type { TokenSigner } from '../oauth/signing-keys.ts'
import type { Caller } from './authenticator.ts'
import { isScope, splitScope } from './scopes.ts'

/** An access token whose signature, claims and grant were checked once on this instance. */
interface VerifiedAccess {
  caller: Caller
  grantId: string
  /** Seconds since the epoch, from the token. */
  exp: number
}

export type BearerResult = { caller: Caller } | { error: string }

export interface BearerAuthenticatorDeps {
  db: Database
  signer: TokenSigner
  /** False while the invalidation feed is behind: cached answers are then not trusted. */
  isCacheTrusted(): boolean
  now?: () => number
}

// Tokens live 15 minutes: a grant revoked longer ago than that has no live token left.
const REVOKED_GRANT_MEMORY_MS = 16 * 60_000

/**
 * Verifies access tokens. The signature check (100–150 µs) and the grant lookup run once per
 * token per instance; after that the token is answered from memory until it expires, unless
 * its grant is revoked (seen through the invalidation feed within a second, or at once on the
 * instance that revoked it). What is cached is the token's own verdict: a DPoP-bound token's
 * proof belongs to each request and is checked on every one (src/auth/plugin.ts).
 */
export function createBearerAuthenticator(deps: BearerAuthenticatorDeps) {
  const now = deps.now ?? Date.now
  const verified = new TtlCache<VerifiedAccess>({ maxEntries: 50_000, ttlMs: 15 * 60_000, now })
  const revokedGrants = new Map<string, number>()

  const forgetOldRevocations = () => {
    const cutoff = now()
    for (const [grantId, until] of revokedGrants) if (until <= cutoff) revokedGrants.delete(grantId)
  }

  async function verifyAndCheckGrant(token: string, audience: string): Promise<VerifiedAccess | { error: string }> {
    let claims
    try {
      claims = await deps.signer.verify(token, { typ: 'at+jwt', audience })
    } catch {
      return { error: 'The access token is invalid, expired or not meant for this resource.' }
    }
    const grantId = (claims as { grant_id?: unknown }).grant_id
    if (typeof grantId !== 'string' || typeof claims.account_id !== 'string' || typeof claims.client_id !== 'string') {
      return { error: 'The access token is invalid.' }
    }
    const cnf = (claims as { cnf?: unknown }).cnf
    const dpopJkt = typeof cnf === 'object' && cnf !== null ? (cnf as { jkt?: unknown }).jkt : undefined
    if (cnf !== undefined && typeof dpopJkt !== 'string') return { error: 'The access token is invalid.' }
    const [grant] = await deps.db.select({ revokedAt: grants.revokedAt }).from(grants).where(eq(grants.id, grantId))
    if (!grant || grant.revokedAt) return { error: 'The access token has been revoked.' }
    const scopes = splitScope(claims.scope ?? '').filter(isScope)
    return {
      grantId,
      exp: claims.exp,
      caller: {
        accountId: claims.account_id,
        credential: {
          kind: 'access_token',
          grantId,
          clientId: claims.client_id,
          userId: claims.sub,
          audience: ([] as string[]).concat(claims.aud),
          exp: claims.exp,
          ...(typeof dpopJkt === 'string' ? { dpopJkt } : {}),
        },
        scopes,
      },
    }
  }

  return {
    async authenticate(token: string, audience: string): Promise<BearerResult> {
      if (token.length === 0 || token.length > 4096) return { error: 'The access token is invalid.' }
      const cacheKey = `${audience} ${token}`
      let entry = deps.isCacheTrusted() ? verified.get(cacheKey) : undefined
      if (!entry) {
        const checked = await verifyAndCheckGrant(token, audience)
        if ('error' in checked) return checked
        entry = checked
        verified.set(cacheKey, entry)
      }
      if (entry.exp * 1000 <= now()) {
        verified.delete(cacheKey)
        return { error: 'The access token has expired.' }
      }
      if (revokedGrants.has(entry.grantId)) return { error: 'The access token has been revoked.' }
      return { caller: entry.caller }
    },

    /** Called by the invalidation feed (and at once by the revoking instance). */
    grantRevoked(grantId: string) {
      forgetOldRevocations()
      revokedGrants.set(grantId, now() + REVOKED_GRANT_MEMORY_MS)
    },

    clear() {
      verified.clear()
    },
  }
}

export type BearerAuthenticator = ReturnType<typeof createBearerAuthenticator>
