import { createHash } from 'node:crypto'
import { calculateJwkThumbprint, decodeProtectedHeader, errors, importJWK, jwtVerify, type CryptoKey, type JWK, type JWTPayload } from 'jose'
import { TtlCache } from '../cache/ttl-cache.ts'
import type { Database } from '../db/client.ts'
import type { DpopNonces } from './dpop-nonce.ts'
import { MAX_JTI_LENGTH, firstUseOfJti } from './jti-replay.ts'

/**
 * DPoP proofs (RFC 9449 §4.3), checked the same way at the token endpoint (src/oauth/dpop-binding.ts)
 * and at the resource servers, REST and MCP (src/auth/plugin.ts). docs/oauth.md#dpop tells a
 * client what it must send.
 */

/** Asymmetric JWS algorithms only (RFC 9449 §11.6): never `none`, never a MAC. The MCP SDK signs with any of these. */
export const DPOP_SIGNING_ALGS = ['ES256', 'ES384', 'ES512', 'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'EdDSA'] as const

/** How far a proof's `iat` may be from our clock, either way (RFC 9449 §11.1). */
export const DPOP_IAT_WINDOW_SECONDS = 60

// An RSA-4096 key in the header makes a proof of about 1.5 KB.
const MAX_PROOF_LENGTH = 8192
// The signature may be empty here so that an unsigned (`alg: none`) proof is refused for its alg.
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/
// RFC 7518 §6.2.2, §6.3.2, §6.4 and RFC 8037 §2: the members only a private or symmetric key has.
const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'] as const
// A proof is remembered while some instance (clocks a little apart) could still take its iat.
const CLOCK_SKEW_SECONDS = 60

/**
 * Why a proof was refused, as the error code the client sees: `invalid_dpop_proof` (RFC 9449
 * §5, §7.1), `use_dpop_nonce` (send it again with the nonce in `DPoP-Nonce`, §8, §9), or
 * `invalid_token` when the proof is sound but the token is bound to another key (§7.1).
 */
export class DpopProofError extends Error {
  constructor(
    readonly error: 'invalid_dpop_proof' | 'use_dpop_nonce' | 'invalid_token',
    message: string,
  ) {
    super(message)
  }
}

const invalid = (message: string) => new DpopProofError('invalid_dpop_proof', message)

const UNRESERVED = /^[A-Za-z0-9._~-]$/

/**
 * An `htu` for comparison (RFC 9449 §4.3 step 9): the http(s) URI without query and fragment,
 * normalized as RFC 3986 §6.2.2 and §6.2.3 say (scheme and host lower case, no default port,
 * dot segments removed, an empty path as `/`, percent-escapes of unreserved characters decoded
 * and the others upper case). Null for anything else.
 */
export function normalizedHtu(value: string): string | null {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    return null
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return null
  const path = url.pathname.replace(/%[0-9A-Fa-f]{2}/g, (escape) => {
    const character = String.fromCharCode(Number.parseInt(escape.slice(1), 16))
    return UNRESERVED.test(character) ? character : escape.toUpperCase()
  })
  return `${url.protocol}//${url.host}${path}`
}

/** RFC 9449 §4.1 `ath`: base64url of the SHA-256 of the access token's ASCII. */
export const accessTokenHash = (accessToken: string) => createHash('sha256').update(accessToken).digest('base64url')

export interface DpopCheckOptions {
  /** At a resource server: the access token sent with the proof, whose hash `ath` must be. */
  accessToken?: string
  /** At a resource server: the thumbprint of the key the token is bound to (its `cnf.jkt`). */
  boundTo?: string
}

export interface DpopVerifierDeps {
  db: Database
  nonces: DpopNonces
  /** PUBLIC_URL: the origin clients address. Behind a proxy the request this process sees has another. */
  publicUrl: string
  now?: () => number
}

/**
 * Checks the `DPoP` header of requests. A proof is valid when (RFC 9449 §4.3, in its order)
 * it is one compact JWS; `typ` is `dpop+jwt`; `alg` is one of DPOP_SIGNING_ALGS; `jwk` is a
 * public key that verifies the signature; `htm` is the request's method and `htu` its URL as
 * clients address it (PUBLIC_URL and the request's path); `iat` is within a minute of now; the
 * server's current or previous nonce is in `nonce`; `ath` is the access token's hash and the
 * key the one the token is bound to (at a resource server); and its `jti` was never seen with
 * this key, by any instance (the database's `used_jtis`).
 */
export function createDpopVerifier(deps: DpopVerifierDeps) {
  const now = deps.now ?? Date.now
  // A client signs every proof with one key: importing it and computing its thumbprint once per
  // key rather than per request takes about 60 µs off each request (docs/performance.md, DPoP).
  // Keyed by the header's exact jwk and alg, so a key is never taken for another.
  const keys = new TtlCache<{ key: CryptoKey; jkt: string }>({ maxEntries: 10_000, ttlMs: 3_600_000, now })

  /** The header's key, imported (from the cache when a proof it signed verified before), and whether it came from the cache. */
  async function publicKeyOf(cacheKey: string, jwk: JWK, alg: string): Promise<{ key: CryptoKey; jkt: string; cached: boolean }> {
    const known = keys.get(cacheKey)
    if (known) return { ...known, cached: true }
    return { key: (await importJWK(jwk, alg)) as CryptoKey, jkt: await calculateJwkThumbprint(jwk, 'sha256'), cached: false }
  }

  async function verifySignature(proof: string): Promise<{ payload: JWTPayload; jkt: string }> {
    let header
    try {
      header = decodeProtectedHeader(proof)
    } catch {
      throw invalid('The DPoP proof header is not a JSON object.')
    }
    if (header.typ !== 'dpop+jwt') throw invalid('The DPoP proof must have typ "dpop+jwt".')
    if (typeof header.alg !== 'string' || !(DPOP_SIGNING_ALGS as readonly string[]).includes(header.alg)) {
      throw invalid(`The DPoP proof must be signed with an asymmetric algorithm, one of ${DPOP_SIGNING_ALGS.join(', ')}.`)
    }
    const jwk = header.jwk
    if (typeof jwk !== 'object' || jwk === null || Array.isArray(jwk)) throw invalid('The DPoP proof must carry its public key in the jwk header.')
    if (PRIVATE_MEMBERS.some((member) => member in jwk)) throw invalid('The jwk of the DPoP proof must be a public key: it carries private key material.')
    try {
      // Cached only once a proof it signed verifies: keys that never signed anything cannot push real clients' out.
      const cacheKey = `${header.alg} ${JSON.stringify(jwk)}`
      const { key, jkt, cached } = await publicKeyOf(cacheKey, jwk as JWK, header.alg)
      const { payload } = await jwtVerify(proof, key, { typ: 'dpop+jwt', algorithms: [header.alg] })
      if (!cached) keys.set(cacheKey, { key, jkt })
      return { payload, jkt }
    } catch (error) {
      if (error instanceof errors.JWSSignatureVerificationFailed) throw invalid('The DPoP proof signature does not verify with its jwk.')
      throw invalid('The DPoP proof is malformed, or its jwk is not a public key of its alg.')
    }
  }

  return {
    nonces: deps.nonces,

    /**
     * The thumbprint (RFC 7638) of the key that signed the request's DPoP proof, or undefined
     * when the request carries none. Throws a DpopProofError naming what is wrong.
     */
    async check(request: Request, options: DpopCheckOptions = {}): Promise<string | undefined> {
      const proof = request.headers.get('dpop')
      if (proof === null) return undefined
      // Repeated headers are joined with ", ", which no compact JWS contains (RFC 9449 §4.3 step 1).
      if (proof.length > MAX_PROOF_LENGTH || !COMPACT_JWS.test(proof)) throw invalid('The DPoP header must be exactly one JWT.')
      const { payload, jkt } = await verifySignature(proof)

      const { jti, htm, htu, iat } = payload as { jti?: unknown; htm?: unknown; htu?: unknown; iat?: unknown }
      if (typeof jti !== 'string' || jti.length === 0 || jti.length > MAX_JTI_LENGTH) throw invalid(`The DPoP proof needs a jti of 1 to ${MAX_JTI_LENGTH} characters.`)
      if (htm !== request.method) throw invalid(`The DPoP proof's htm must be this request's method, ${request.method}.`)
      const expected = normalizedHtu(`${deps.publicUrl}${new URL(request.url).pathname}`)
      if (typeof htu !== 'string' || normalizedHtu(htu) !== expected) throw invalid(`The DPoP proof's htu must be this request's URL without query and fragment: ${expected}.`)
      const nowSeconds = Math.floor(now() / 1000)
      if (typeof iat !== 'number' || !Number.isFinite(iat) || Math.abs(nowSeconds - iat) > DPOP_IAT_WINDOW_SECONDS) {
        throw invalid(`The DPoP proof's iat must be within ${DPOP_IAT_WINDOW_SECONDS} seconds of the server's clock: sign a new proof for each request.`)
      }
      const nonce = (payload as { nonce?: unknown }).nonce
      if (typeof nonce !== 'string' || !(await deps.nonces.accepts(nonce))) {
        throw new DpopProofError('use_dpop_nonce', 'Sign the proof again with the nonce in the DPoP-Nonce header of this response.')
      }
      if (options.accessToken !== undefined && (payload as { ath?: unknown }).ath !== accessTokenHash(options.accessToken)) {
        throw invalid("The DPoP proof's ath must be the base64url SHA-256 of the access token sent with it.")
      }
      if (options.boundTo !== undefined && options.boundTo !== jkt) throw new DpopProofError('invalid_token', 'The access token is bound to another DPoP key than the one that signed this proof.')
      const first = await firstUseOfJti(deps.db, { namespace: `dpop:${jkt}`, jti, expiresAt: new Date((iat + DPOP_IAT_WINDOW_SECONDS + CLOCK_SKEW_SECONDS) * 1000) })
      if (!first) throw invalid('This DPoP proof was already used: sign a new one (with a new jti) for each request.')
      return jkt
    },
  }
}

export type DpopVerifier = ReturnType<typeof createDpopVerifier>
