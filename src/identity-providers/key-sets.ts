import { createLocalJWKSet, errors, type CryptoKey, type JSONWebKeySet, type JWSHeaderParameters, type LocalJWKSet } from 'jose'
import { BodyTooLarge, TargetRefused, describeNetworkError, fetchPinned, isTimeout, readLimited, type OutboundPolicy } from '../lib/security/outbound.ts'

/**
 * The signing keys of the identity providers accounts trust, fetched from their `jwks_uri`
 * through the outbound guard (src/lib/security/outbound.ts: every address checked, the
 * connection pinned to it) and kept in this process's memory. jose's createRemoteJWKSet would
 * fetch with the runtime's own fetch, past the guard; so the set is fetched here and handed to
 * jose as a local set.
 *
 * A set is kept for JWKS_CACHE_MS. An assertion signed by a key the cached set lacks (a provider
 * that rotated its keys) fetches the set again, at most once per JWKS_REFETCH_COOLDOWN_MS per
 * address: assertions with made-up key ids cannot make us hammer a provider. A set that could
 * not be fetched is not asked for again for FAILED_FETCH_CACHE_MS.
 */

export const JWKS_CACHE_MS = 10 * 60_000
export const JWKS_REFETCH_COOLDOWN_MS = 30_000
export const FAILED_FETCH_CACHE_MS = 10_000
export const JWKS_TIMEOUT_MS = 5_000
export const JWKS_MAX_BYTES = 64 * 1024
const MAX_CACHED_SETS = 1_000
const USER_AGENT = 'messaging-service-oauth/0.1'

/** The provider's keys could not be had: what is wrong, in words an administrator can act on. */
export class ProviderKeysUnavailable extends Error {
  override readonly name = 'ProviderKeysUnavailable'
}

/** The provider's key set, fetched again if it had to be, holds no key for this header (`kid`, `alg`). */
export class NoMatchingProviderKey extends Error {
  override readonly name = 'NoMatchingProviderKey'
}

type Cached = { keys: LocalJWKSet; fetchedAt: number; expiresAt: number } | { error: string; fetchedAt: number; expiresAt: number }

export interface ProviderKeySetsOptions {
  /** WEBHOOK_ALLOW_PRIVATE_TARGETS and WEBHOOK_CA_FILE: the same rules as webhook deliveries and client metadata documents. */
  policy: OutboundPolicy
  timeoutMs?: number
  maxBytes?: number
  now?: () => number
}

export interface ProviderKeySets {
  /**
   * The public key of the set at `jwksUri` for a JWS with this protected header. Throws
   * ProviderKeysUnavailable or NoMatchingProviderKey; jose's JWKSMultipleMatchingKeys (no `kid`
   * and several keys fit) passes through, iterable over the candidates.
   */
  keyFor(jwksUri: string, header: JWSHeaderParameters): Promise<CryptoKey>
}

const describeUri = (uri: string) => (uri.length > 200 ? `${uri.slice(0, 200)}…` : uri)

/** Fetches and parses the key set at `uri`; throws ProviderKeysUnavailable saying what is wrong. */
export async function fetchKeySet(uri: string, options: { policy: OutboundPolicy; timeoutMs?: number; maxBytes?: number }): Promise<LocalJWKSet> {
  const timeoutMs = options.timeoutMs ?? JWKS_TIMEOUT_MS
  const at = `The identity provider's key set at ${describeUri(uri)}`
  const signal = AbortSignal.timeout(timeoutMs)
  const failure = (error: unknown) => {
    if (error instanceof TargetRefused) return new ProviderKeysUnavailable(`${at} cannot be fetched: ${error.message}.`)
    if (isTimeout(error)) return new ProviderKeysUnavailable(`${at} did not answer within ${timeoutMs} ms.`)
    if (error instanceof BodyTooLarge) return new ProviderKeysUnavailable(`${at} is larger than ${error.maxBytes} bytes.`)
    return new ProviderKeysUnavailable(`${at} could not be fetched (${describeNetworkError(error, timeoutMs)}).`)
  }
  let response: Response
  let bytes: Uint8Array
  try {
    response = await fetchPinned(new URL(uri), { method: 'GET', headers: { accept: 'application/jwk-set+json, application/json', 'user-agent': USER_AGENT } }, options.policy, signal)
    if (response.status !== 200) {
      await response.body?.cancel().catch(() => {})
      throw new ProviderKeysUnavailable(`${at} answered HTTP ${response.status}, not 200${response.status >= 300 && response.status < 400 ? ' (redirects are not followed)' : ''}.`)
    }
    bytes = await readLimited(response, options.maxBytes ?? JWKS_MAX_BYTES)
  } catch (error) {
    if (error instanceof ProviderKeysUnavailable) throw error
    throw failure(error)
  }
  let document: unknown
  try {
    document = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes))
  } catch {
    throw new ProviderKeysUnavailable(`${at} is not JSON.`)
  }
  try {
    return createLocalJWKSet(document as JSONWebKeySet)
  } catch {
    throw new ProviderKeysUnavailable(`${at} is not a JWK set (RFC 7517 §5: an object with a "keys" array of keys).`)
  }
}

/** The key sets of one process: concurrent lookups of one address share one fetch. */
export function createProviderKeySets(options: ProviderKeySetsOptions): ProviderKeySets {
  const now = options.now ?? Date.now
  const sets = new Map<string, Cached>()
  const loading = new Map<string, Promise<Cached>>()

  function load(uri: string): Promise<Cached> {
    let pending = loading.get(uri)
    if (!pending) {
      pending = fetchKeySet(uri, options)
        .then((keys): Cached => ({ keys, fetchedAt: now(), expiresAt: now() + JWKS_CACHE_MS }))
        .catch((error): Cached => {
          if (!(error instanceof ProviderKeysUnavailable)) throw error
          return { error: error.message, fetchedAt: now(), expiresAt: now() + FAILED_FETCH_CACHE_MS }
        })
        .then((cached) => {
          sets.delete(uri)
          if (sets.size >= MAX_CACHED_SETS) sets.delete(sets.keys().next().value!)
          sets.set(uri, cached)
          return cached
        })
        .finally(() => loading.delete(uri))
      loading.set(uri, pending)
    }
    return pending
  }

  async function current(uri: string): Promise<Cached> {
    const cached = sets.get(uri)
    return cached && cached.expiresAt > now() ? cached : load(uri)
  }

  async function keyIn(uri: string, cached: Cached, header: JWSHeaderParameters): Promise<CryptoKey | null> {
    if ('error' in cached) throw new ProviderKeysUnavailable(cached.error)
    try {
      return await cached.keys(header)
    } catch (error) {
      if (error instanceof errors.JWKSNoMatchingKey) return null
      if (error instanceof errors.JWKSMultipleMatchingKeys) throw error
      // A member that is not a usable public key (a private or malformed one) is the provider's to fix.
      throw new ProviderKeysUnavailable(`The identity provider's key set at ${describeUri(uri)} holds a key that cannot be used (${error instanceof Error ? error.message.slice(0, 200) : 'unreadable'}).`)
    }
  }

  return {
    async keyFor(jwksUri, header) {
      let cached = await current(jwksUri)
      const key = await keyIn(jwksUri, cached, header)
      if (key) return key
      if (now() - cached.fetchedAt >= JWKS_REFETCH_COOLDOWN_MS) {
        cached = await load(jwksUri)
        const fresh = await keyIn(jwksUri, cached, header)
        if (fresh) return fresh
      }
      const kid = typeof header.kid === 'string' ? `kid ${JSON.stringify(header.kid.slice(0, 100))} and ` : ''
      throw new NoMatchingProviderKey(`The identity provider's key set at ${describeUri(jwksUri)} has no key for ${kid}alg ${JSON.stringify(header.alg)}.`)
    },
  }
}
