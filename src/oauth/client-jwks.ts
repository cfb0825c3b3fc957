import type { Static } from 'elysia'
import { importJWK } from 'jose'
import { isForbiddenHost } from '../lib/security/outbound.ts'
import type { ClientJwk, ClientJwks } from './schemas.ts'

/**
 * The public keys of a `private_key_jwt` client (RFC 7517, RFC 7518 §6, RFC 8037;
 * docs/oauth.md#confidential-clients): what a key set must be to be registered (`jwks`) or used
 * (fetched from `jwks_uri`, src/oauth/client-keys.ts), what is kept of it, and what a `jwks_uri`
 * may be. The shapes are the TypeBox schemas ClientJwk and ClientJwks; these are the rules a
 * schema cannot say.
 */

export type PublicJwk = Pick<Static<typeof ClientJwk>, 'kty' | 'kid' | 'use' | 'alg' | 'crv' | 'x' | 'y' | 'n' | 'e'>
export interface PublicJwkSet {
  keys: PublicJwk[]
}

/** Members only a private or symmetric key has (RFC 7518 §6.2.2, §6.3.2, §6.4.1; RFC 8037 §2). */
const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'] as const
const RSA_ALGORITHMS: readonly string[] = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512']
const CURVE_ALGORITHMS: Record<string, readonly string[]> = { 'P-256': ['ES256'], 'P-384': ['ES384'], 'P-521': ['ES512'], Ed25519: ['EdDSA', 'Ed25519'] }
export const MIN_RSA_BITS = 2048
export const MAX_RSA_BITS = 8192

function rsaModulusBits(n: string): number {
  const bytes = Buffer.from(n, 'base64url')
  const first = bytes.findIndex((byte) => byte !== 0)
  if (first === -1) return 0
  return (bytes.length - first - 1) * 8 + (32 - Math.clz32(bytes[first]!))
}

function keyProblem(key: Static<typeof ClientJwk>): string | null {
  const secret = PRIVATE_MEMBERS.find((member) => Object.hasOwn(key, member))
  if (secret) return `holds the private key member "${secret}": register public keys only (and make a new key pair: this private key has left your hands)`
  if (key.key_ops !== undefined && !key.key_ops.includes('verify')) return 'key_ops must include verify'
  const present = (...members: ('crv' | 'x' | 'y' | 'n' | 'e')[]) => members.filter((member) => key[member] !== undefined)
  if (key.kty === 'RSA') {
    if (key.n === undefined || key.e === undefined) return 'is an RSA key without n and e'
    if (present('crv', 'x', 'y').length > 0) return `is an RSA key with ${present('crv', 'x', 'y').join(', ')}, which RSA keys do not have`
    const bits = rsaModulusBits(key.n)
    if (bits < MIN_RSA_BITS || bits > MAX_RSA_BITS) return `is a ${bits}-bit RSA key; RSA keys must have ${MIN_RSA_BITS} to ${MAX_RSA_BITS} bits`
    if (key.alg !== undefined && !RSA_ALGORITHMS.includes(key.alg)) return `has alg ${key.alg}, which is not an RSA algorithm (${RSA_ALGORITHMS.join(', ')})`
    return null
  }
  const curves = key.kty === 'EC' ? ['P-256', 'P-384', 'P-521'] : ['Ed25519']
  if (key.crv === undefined || !curves.includes(key.crv)) return `is an ${key.kty} key whose crv must be one of ${curves.join(', ')}`
  const needed = key.kty === 'EC' ? (['x', 'y'] as const) : (['x'] as const)
  if (needed.some((member) => key[member] === undefined)) return `is an ${key.kty} key without ${needed.join(' and ')}`
  const foreign = present('n', 'e', ...(key.kty === 'OKP' ? (['y'] as const) : []))
  if (foreign.length > 0) return `is an ${key.kty} key with ${foreign.join(', ')}, which ${key.kty} keys do not have`
  const algorithms = CURVE_ALGORITHMS[key.crv]!
  if (key.alg !== undefined && !algorithms.includes(key.alg)) return `has alg ${key.alg}, which does not go with crv ${key.crv} (${algorithms.join(' or ')})`
  return null
}

/**
 * Why a key set (one ClientJwks accepted) cannot be used, or null: each key is a public
 * signing key of an asymmetric kind we verify with, whole and consistent, and no two share a kid.
 * The description names the key (`keys/1`).
 */
export function keySetProblem(set: Static<typeof ClientJwks>): string | null {
  const kids = new Set<string>()
  for (const [index, key] of set.keys.entries()) {
    const problem = keyProblem(key)
    if (problem) return `keys/${index} ${problem}`
    if (key.kid !== undefined) {
      if (kids.has(key.kid)) return `keys/${index} has the kid "${key.kid}" of another key of the set; each kid names one key`
      kids.add(key.kid)
    }
  }
  return null
}

/** The members kept of a key set keySetProblem accepted: what verifying needs, nothing a client added (x5c, …). */
export function publicKeySet(set: Static<typeof ClientJwks>): PublicJwkSet {
  const members = ['kty', 'kid', 'use', 'alg', 'crv', 'x', 'y', 'n', 'e'] as const
  return { keys: set.keys.map((key) => Object.fromEntries(members.filter((member) => key[member] !== undefined).map((member) => [member, key[member]])) as PublicJwk) }
}

const importAlgorithm = (key: PublicJwk) => key.alg ?? (key.kty === 'RSA' ? 'RS256' : CURVE_ALGORITHMS[key.crv!]![0]!)

/** Why a key of an accepted set does not import as a public key (an EC point off its curve, …), or null. */
export async function unusableKeyProblem(set: PublicJwkSet): Promise<string | null> {
  for (const [index, key] of set.keys.entries()) {
    try {
      await importJWK(key, importAlgorithm(key))
    } catch {
      return `keys/${index} is not a valid ${key.kty} public key`
    }
  }
  return null
}

/**
 * Why a `jwks_uri` cannot be registered, or null: an absolute https URL without userinfo or
 * fragment. Unless private targets are allowed (WEBHOOK_ALLOW_PRIVATE_TARGETS), a literal private
 * address or `localhost` is refused here; names are resolved and checked at every fetch
 * (src/lib/security/outbound.ts).
 */
export function jwksUriProblem(uri: string, options: { allowPrivateTargets: boolean }): string | null {
  let url: URL
  try {
    url = new URL(uri)
  } catch {
    return 'is not an absolute URL'
  }
  if (url.protocol !== 'https:') return 'must use https'
  if (url.username || url.password) return 'must not contain userinfo (user@host)'
  if (uri.includes('#')) return 'must not contain a fragment (#)'
  if (!options.allowPrivateTargets && isForbiddenHost(url.hostname)) return `names ${url.hostname}, which is not a public address`
  return null
}
