// The one place a delivery is signed (docs/webhooks.md#signatures), whatever carries it: the
// HTTPS sender puts the answer in `webhook-signature`, and so can any other transport.
import { Webhook } from 'standardwebhooks'

export const SIGNATURE_SCHEMES = ['hmac', 'ed25519'] as const
export type SignatureScheme = (typeof SIGNATURE_SCHEMES)[number]

/** What a delivery is signed with: its subscription's current key and, during a rotation's 24 h, the one it replaced. */
export interface SigningKeys {
  scheme: SignatureScheme
  /** A whsec_ secret (hmac) or a whsk_ private key (ed25519). */
  current: string
  previous?: string | null
}

const PRIVATE_KEY_PREFIX = 'whsk_'
const PUBLIC_KEY_PREFIX = 'whpk_'
const SEED_BYTES = 32

/**
 * The `webhook-signature` value for one attempt: one signature per key, space-separated, over
 * `id.timestamp.body`. HMAC-SHA256 signatures read `v1,…`, Ed25519 ones `v1a,…`.
 */
export async function signatureHeader(keys: SigningKeys, id: string, timestampSeconds: number, body: string): Promise<string> {
  const sign = keys.scheme === 'ed25519' ? ed25519Signature : hmacSignature
  const all = keys.previous ? [keys.current, keys.previous] : [keys.current]
  return (await Promise.all(all.map((key) => sign(key, id, timestampSeconds, body)))).join(' ')
}

async function hmacSignature(secret: string, id: string, timestampSeconds: number, body: string): Promise<string> {
  return new Webhook(secret).sign(id, new Date(timestampSeconds * 1000), body)
}

async function ed25519Signature(privateKey: string, id: string, timestampSeconds: number, body: string): Promise<string> {
  const signature = await crypto.subtle.sign('Ed25519', await importedPrivateKey(privateKey), new TextEncoder().encode(`${id}.${timestampSeconds}.${body}`))
  return `v1a,${Buffer.from(signature).toString('base64')}`
}

/**
 * A new Ed25519 key pair in the Standard Webhooks forms (docs/webhooks.md#signatures):
 * `whpk_` and the base64 of the 32-byte public key (RFC 8032 §5.1.5), which is what receivers'
 * libraries take; `whsk_` and the base64 of the 32-byte private key followed by the public key,
 * as libsodium writes a secret key.
 */
export async function newEd25519KeyPair(): Promise<{ privateKey: string; publicKey: string }> {
  const pair = (await crypto.subtle.generateKey('Ed25519', true, ['sign', 'verify'])) as CryptoKeyPair
  const jwk = await crypto.subtle.exportKey('jwk', pair.privateKey)
  const seed = Buffer.from(jwk.d!, 'base64url')
  const publicKey = Buffer.from(jwk.x!, 'base64url')
  return {
    privateKey: `${PRIVATE_KEY_PREFIX}${Buffer.concat([seed, publicKey]).toString('base64')}`,
    publicKey: `${PUBLIC_KEY_PREFIX}${publicKey.toString('base64')}`,
  }
}

// Imported once per key: a busy subscription would otherwise import its private key for every
// attempt. Bounded like the worker's opened secrets (src/delivery/worker.ts).
const MAX_IMPORTED_KEYS = 10_000
const importedKeys = new Map<string, Promise<CryptoKey>>()

function importedPrivateKey(privateKey: string): Promise<CryptoKey> {
  let key = importedKeys.get(privateKey)
  if (key === undefined) {
    key = importPrivateKey(privateKey)
    // A key that does not import is not kept: the next attempt tries again and fails the same way, visibly.
    key.catch(() => importedKeys.delete(privateKey))
    if (importedKeys.size >= MAX_IMPORTED_KEYS) importedKeys.clear()
    importedKeys.set(privateKey, key)
  }
  return key
}

/** A whsk_ key as an OKP JWK (RFC 8037 §2): `d` the private key, `x` the public key. */
async function importPrivateKey(privateKey: string): Promise<CryptoKey> {
  const bytes = privateKey.startsWith(PRIVATE_KEY_PREFIX) ? Buffer.from(privateKey.slice(PRIVATE_KEY_PREFIX.length), 'base64') : undefined
  if (bytes?.length !== 2 * SEED_BYTES) throw new Error(`an ed25519 signing key must be ${PRIVATE_KEY_PREFIX} and the base64 of ${2 * SEED_BYTES} bytes`)
  const jwk = { kty: 'OKP', crv: 'Ed25519', d: bytes.subarray(0, SEED_BYTES).toString('base64url'), x: bytes.subarray(SEED_BYTES).toString('base64url') }
  return crypto.subtle.importKey('jwk', jwk, 'Ed25519', false, ['sign'])
}
