import { TtlCache } from '../lib/cache/ttl-cache.ts'
import { constantTimeEqual, sha256Hex } from '../lib/security/crypto.ts'
import { API_KEY_PREFIX, type ActiveApiKey } from './api-keys.ts'
import { SCOPES, type Scope } from './scopes.ts'

/** Who is calling, for which account, with which scopes: what every protected route sees. */
export interface Caller {
  accountId: string
  credential:
    | { kind: 'api_key'; id: string }
    | {
        kind: 'access_token'
        grantId: string
        clientId: string
        userId: string
        audience: string[]
        exp: number
        /** The thumbprint of the DPoP key the token is bound to (its `cnf.jkt`, RFC 9449 §6); absent for a Bearer token. */
        dpopJkt?: string
      }
  scopes: readonly Scope[]
}

export interface ApiKeyAuthenticatorDeps {
  findActiveKey(secretHash: string): Promise<ActiveApiKey | null>
  /** False while the invalidation feed is behind: cached answers are then not trusted. */
  isCacheTrusted(): boolean
  cache: TtlCache<ActiveApiKey | null>
}

/** Who did it, for an audit line: the credential's kind and ids, never a secret. */
export const auditActor = (caller: Caller): Record<string, string> =>
  caller.credential.kind === 'api_key' ? { by_api_key_id: caller.credential.id } : { by_client_id: caller.credential.clientId, by_user_id: caller.credential.userId }

// Longer than a secret we issue, short enough that hashing junk costs nothing.
const MAX_SECRET_LENGTH = 256

export function newApiKeyCache(now?: () => number): TtlCache<ActiveApiKey | null> {
  return new TtlCache<ActiveApiKey | null>({
    maxEntries: 50_000,
    ttlMs: 5 * 60_000,
    now,
    secondaryKey: (value) => value?.keyId,
  })
}

/**
 * Resolves `?key=` to a caller. Known hashes, valid or not, are answered from memory; the
 * cache is keyed by the SHA-256 of the secret, so a lookup leaks nothing about the secret.
 */
export function createApiKeyAuthenticator(deps: ApiKeyAuthenticatorDeps) {
  return async function authenticateApiKey(secret: string): Promise<Caller | null> {
    if (!secret.startsWith(API_KEY_PREFIX) || secret.length > MAX_SECRET_LENGTH) return null
    const secretHash = sha256Hex(secret)
    let key = deps.isCacheTrusted() ? deps.cache.get(secretHash) : undefined
    if (key === undefined) {
      const found = await deps.findActiveKey(secretHash)
      key = found && constantTimeEqual(found.secretHash, secretHash) ? found : null
      deps.cache.set(secretHash, key)
    }
    if (!key) return null
    return { accountId: key.accountId, credential: { kind: 'api_key', id: key.keyId }, scopes: SCOPES }
  }
}

export type AuthenticateApiKey = ReturnType<typeof createApiKeyAuthenticator>
