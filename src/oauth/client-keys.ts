import { Value } from '@sinclair/typebox/value'
import { describeSchemaViolation } from '../lib/http/errors.ts'
import type { OutboundPolicy } from '../lib/security/outbound.ts'
import { keySetProblem, publicKeySet, unusableKeyProblem, type PublicJwkSet } from './client-jwks.ts'
import { documentCacheSeconds, fetchJsonDocument } from './client-metadata-document.ts'
import { ClientLookupError, type OAuthClient } from './client-model.ts'
import { ClientJwks } from './schemas.ts'

/**
 * The keys a `private_key_jwt` client's assertions are verified with (docs/oauth.md#confidential-clients):
 * the `jwks` it registered, or the set at its `jwks_uri`, fetched through the outbound guard
 * (src/lib/security/outbound.ts: public addresses only, pinned, no redirects) within the bounds of
 * a client metadata document, held to the registration rules (client-jwks.ts) and cached.
 */

export const CLIENT_JWKS_TIMEOUT_MS = 5_000
/** Larger than a metadata document's 10 KB: published sets often carry x5c certificate chains. */
export const CLIENT_JWKS_MAX_BYTES = 16 * 1024
/** A fetched set is kept as its Cache-Control says, within these bounds: a client's new key is seen within the hour at most. */
export const JWKS_CACHE_MIN_SECONDS = 60
export const JWKS_CACHE_MAX_SECONDS = 3600
/** A set that could not be fetched or used is not fetched again for this long: a client retrying costs one fetch per 10 s. */
export const FAILED_JWKS_CACHE_SECONDS = 10
/**
 * An assertion naming a key the cached set lacks (the client rotated its keys) fetches the set
 * again, once the cached one is this old: a stream of assertions with unknown kids costs at most
 * one fetch per 30 s.
 */
export const JWKS_REFETCH_COOLDOWN_SECONDS = 30
const MAX_CACHED_SETS = 10_000

export interface ClientKeySets {
  /**
   * The client's public keys; ClientLookupError, saying why, when there are none to use.
   * `refetch` asks for the published set again if the cached one is past its cooldown.
   */
  keysOf(client: OAuthClient, options?: { refetch?: boolean }): Promise<PublicJwkSet>
}

export interface ClientKeySetsOptions {
  /** WEBHOOK_ALLOW_PRIVATE_TARGETS and WEBHOOK_CA_FILE: the same rules as webhook deliveries and metadata documents. */
  policy: OutboundPolicy
  timeoutMs?: number
  maxBytes?: number
  now?: () => number
}

type Fetched = { keys: PublicJwkSet; fetchedAt: number; expiresAt: number } | { error: string; fetchedAt: number; expiresAt: number }

/**
 * Fetches the JWK set at `url` and holds it to the registration rules; its keys and how long
 * to keep them, or ClientLookupError.
 */
export async function fetchClientKeySet(url: string, options: ClientKeySetsOptions): Promise<{ keys: PublicJwkSet; maxAgeSeconds: number }> {
  const at = `The JWK set at ${url} (this client's jwks_uri)`
  const { document, cacheControl } = await fetchJsonDocument(url, {
    at,
    policy: options.policy,
    timeoutMs: options.timeoutMs ?? CLIENT_JWKS_TIMEOUT_MS,
    maxBytes: options.maxBytes ?? CLIENT_JWKS_MAX_BYTES,
    redirectAdvice: 'publish the keys at the jwks_uri itself',
  })
  const violation = Value.Errors(ClientJwks, document).First()
  if (violation) throw new ClientLookupError(`${at} is not a JWK set of public signing keys: ${violation.path.replace(/^\//, '') || 'document'}: ${describeSchemaViolation(violation)}.`)
  const set = document as Parameters<typeof keySetProblem>[0]
  const problem = keySetProblem(set)
  if (problem) throw new ClientLookupError(`${at} cannot be used: ${problem}.`)
  const keys = publicKeySet(set)
  const unusable = await unusableKeyProblem(keys)
  if (unusable) throw new ClientLookupError(`${at} cannot be used: ${unusable}.`)
  return { keys, maxAgeSeconds: documentCacheSeconds(cacheControl, { min: JWKS_CACHE_MIN_SECONDS, max: JWKS_CACHE_MAX_SECONDS }) }
}

/**
 * The key sets of one process: each published set fetched at most once per cache lifetime
 * (concurrent lookups share one fetch), its verdict, good or bad, kept in memory. Other
 * instances fetch for themselves.
 */
export function createClientKeySets(options: ClientKeySetsOptions): ClientKeySets {
  const now = options.now ?? Date.now
  const sets = new Map<string, Fetched>()
  const loading = new Map<string, Promise<Fetched>>()

  async function load(url: string): Promise<Fetched> {
    const fetchedAt = now()
    let fetched: Fetched
    try {
      const { keys, maxAgeSeconds } = await fetchClientKeySet(url, options)
      fetched = { keys, fetchedAt, expiresAt: fetchedAt + maxAgeSeconds * 1000 }
    } catch (error) {
      if (!(error instanceof ClientLookupError)) throw error
      fetched = { error: error.message, fetchedAt, expiresAt: fetchedAt + FAILED_JWKS_CACHE_SECONDS * 1000 }
    }
    sets.delete(url)
    if (sets.size >= MAX_CACHED_SETS) sets.delete(sets.keys().next().value!)
    sets.set(url, fetched)
    return fetched
  }

  return {
    async keysOf(client, { refetch = false } = {}) {
      if (client.jwks) return client.jwks as PublicJwkSet
      const url = client.jwksUri
      if (!url) throw new ClientLookupError('This client registered no keys (jwks or jwks_uri).')
      let fetched = sets.get(url)
      const due = !fetched || fetched.expiresAt <= now() || (refetch && fetched.fetchedAt <= now() - JWKS_REFETCH_COOLDOWN_SECONDS * 1000)
      if (due) {
        let pending = loading.get(url)
        if (!pending) {
          pending = load(url).finally(() => loading.delete(url))
          loading.set(url, pending)
        }
        fetched = await pending
      }
      if ('error' in fetched!) throw new ClientLookupError(fetched.error)
      return fetched!.keys
    },
  }
}
