import { and, eq, gt, isNull, or, sql } from 'drizzle-orm'
import type { Static } from 'elysia'
import { SignJWT, errors, exportJWK, generateKeyPair, importJWK, jwtVerify, type JWK, type JWTPayload, type JWTVerifyGetKey } from 'jose'
import type { Database, DatabaseTransaction } from '../lib/db/client.ts'
import { isUniqueViolation } from '../lib/db/errors.ts'
import { signingKeys } from '../lib/db/schema.ts'
import { recordInvalidation } from '../lib/cache/invalidation-feed.ts'
import type { Logger } from '../lib/runtime/logger.ts'
import { SecretBoxError, type SecretBox } from '../lib/security/secret-box.ts'
import type { PublicJwk } from './schemas.ts'

const ALG = 'ES256'

/** Access tokens live 15 minutes, id_tokens 10 (docs/api.md#token-lifetimes): `sign` refuses longer, `verify` refuses older. */
export const MAX_TOKEN_LIFETIME_SECONDS = 15 * 60

/**
 * Retired keys stay published and accepted this long. Far more than the longest token needs; the
 * rest is for JWKS consumers that cache the document and must not see a key vanish and reappear.
 */
export const RETIRED_KEY_RETENTION_MS = 24 * 60 * 60 * 1000

const CLOCK_TOLERANCE_SECONDS = 5

/** An unknown kid may mean another instance rotated; more often it is junk, so it costs the database at most this often. */
const UNKNOWN_KID_RELOAD_INTERVAL_MS = 1000

/** Far above any token we sign; refuses megabyte-sized junk before it is base64-decoded. */
const MAX_TOKEN_LENGTH = 8192

export type TokenType = 'at+jwt' | 'JWT'

export interface SignOptions {
  /** `at+jwt` for access tokens (RFC 9068), `JWT` for id_tokens: each is refused where the other is expected. */
  typ: TokenType
  subject: string
  audience: string | string[]
  expiresInSeconds: number
  jti?: string
}

export interface VerifyOptions {
  typ: TokenType
  audience: string
}

/** What the JWKS publishes for each key. */
export type PublicSigningJwk = Static<typeof PublicJwk>

/** A payload whose signature, issuer, audience, type and times were checked. */
export interface VerifiedToken extends JWTPayload {
  iss: string
  sub: string
  aud: string | string[]
  exp: number
  iat: number
  jti: string
  account_id?: string
  client_id?: string
  scope?: string
}

export interface TokenSigner {
  /** Signs with the active key; `iss`, `sub`, `aud`, `iat`, `exp` and `jti` come from here and win over `claims`. */
  sign(claims: Record<string, unknown>, options: SignOptions): Promise<string>
  /** Throws InvalidTokenError, whatever went wrong. */
  verify(token: string, options: VerifyOptions): Promise<VerifiedToken>
  /** The public halves of the active key and of keys retired less than 24 h ago. */
  jwks(): Promise<{ keys: PublicSigningJwk[] }>
  /** Re-reads the keys from the database: after a rotation here or on another instance. */
  reload(): Promise<void>
  /** Whether this kid is loaded (active or retired): lets the invalidation feed skip a reload already done. */
  hasKey(kid: string): boolean
}

export type InvalidTokenReason =
  | 'malformed'
  | 'algorithm'
  | 'unknown_key'
  | 'signature'
  | 'expired'
  | 'not_yet_valid'
  | 'issuer'
  | 'audience'
  | 'type'
  | 'claims'

/** The one error `verify` throws; `reason` is for logs and tests, not for clients. */
export class InvalidTokenError extends Error {
  constructor(
    readonly reason: InvalidTokenReason,
    options?: { cause?: unknown },
  ) {
    super(`invalid token: ${reason}`, options)
  }
}

/** A key that cannot be used: start-up must stop rather than sign with a key nobody else can read. */
export class SigningKeyError extends Error {}

type SigningKeyRow = typeof signingKeys.$inferSelect

/** Only the members a public EC key has: whatever is stored, nothing private is ever published. */
function publicMembers(jwk: JWK, kid: string): PublicSigningJwk {
  if (jwk.kty !== 'EC' || jwk.crv !== 'P-256' || typeof jwk.x !== 'string' || typeof jwk.y !== 'string') {
    throw new SigningKeyError(`signing key ${kid}: the stored public key is not a P-256 key`)
  }
  return { kty: 'EC', crv: 'P-256', x: jwk.x, y: jwk.y, kid, alg: ALG, use: 'sig' }
}

const randomUrlSafeId = () => Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString('base64url')

async function generateSigningKey(secretBox: SecretBox): Promise<typeof signingKeys.$inferInsert> {
  // Extractable only here, to be sealed; once loaded back, the private key is imported non-extractable.
  const { publicKey, privateKey } = await generateKeyPair(ALG, { extractable: true })
  const kid = randomUrlSafeId()
  return {
    kid,
    alg: ALG,
    publicJwk: publicMembers(await exportJWK(publicKey), kid),
    privateJwkCiphertext: await secretBox.seal(JSON.stringify(await exportJWK(privateKey))),
  }
}

async function openPrivateKey(row: SigningKeyRow, secretBox: SecretBox): Promise<CryptoKey> {
  let sealedJwk: string
  try {
    sealedJwk = await secretBox.open(row.privateJwkCiphertext)
  } catch (error) {
    if (!(error instanceof SecretBoxError)) throw error
    throw new SigningKeyError(
      `cannot decrypt signing key ${row.kid}: ENCRYPTION_KEY is not the key it was sealed with. ` +
        'Every instance (and the CLI) sharing this database must use the same ENCRYPTION_KEY.',
      { cause: error },
    )
  }
  return (await importJWK(JSON.parse(sealedJwk) as JWK, ALG, { extractable: false })) as CryptoKey
}

const isRetained = (retiredAt: Date | null, now: number) => retiredAt === null || now - retiredAt.getTime() < RETIRED_KEY_RETENTION_MS

async function retainedKeyRows(db: Database, now: number): Promise<SigningKeyRow[]> {
  return db
    .select()
    .from(signingKeys)
    .where(or(isNull(signingKeys.retiredAt), gt(signingKeys.retiredAt, new Date(now - RETIRED_KEY_RETENTION_MS))))
}

interface VerificationKey {
  publicJwk: PublicSigningJwk
  publicKey: CryptoKey
  retiredAt: Date | null
}

interface KeyRing {
  verificationKeys: Map<string, VerificationKey>
  active: { kid: string; privateKey: CryptoKey }
}

/** The retained keys, reusing what `previous` already imported; null when no key is active. */
async function readKeyRing(db: Database, secretBox: SecretBox, now: number, previous: KeyRing | undefined): Promise<KeyRing | null> {
  const verificationKeys = new Map<string, VerificationKey>()
  let activeRow: SigningKeyRow | undefined
  for (const row of await retainedKeyRows(db, now)) {
    const publicJwk = publicMembers(row.publicJwk as JWK, row.kid)
    const publicKey = previous?.verificationKeys.get(row.kid)?.publicKey ?? ((await importJWK(publicJwk, ALG)) as CryptoKey)
    verificationKeys.set(row.kid, { publicJwk, publicKey, retiredAt: row.retiredAt })
    if (row.retiredAt === null) activeRow = row
  }
  if (!activeRow) return null
  const privateKey = previous?.active.kid === activeRow.kid ? previous.active.privateKey : await openPrivateKey(activeRow, secretBox)
  return { verificationKeys, active: { kid: activeRow.kid, privateKey } }
}

/**
 * Loads the keys, creating the first one when none is active. Instances starting together race
 * to insert it; the partial unique index lets one win and the others read the winner's key.
 */
async function loadOrCreateKeyRing(options: {
  db: Database
  secretBox: SecretBox
  logger: Logger
  now: number
  previous?: KeyRing
}): Promise<KeyRing> {
  const { db, secretBox, logger, now, previous } = options
  for (let attempt = 1; ; attempt++) {
    const ring = await readKeyRing(db, secretBox, now, previous)
    if (ring) return ring
    const key = await generateSigningKey(secretBox)
    try {
      await db.insert(signingKeys).values(key)
      logger.info('created a signing key', { kid: key.kid })
    } catch (error) {
      if (!isUniqueViolation(error) || attempt > 1) throw error
    }
  }
}

function invalidTokenReason(error: unknown): InvalidTokenReason {
  if (error instanceof InvalidTokenError) return error.reason
  if (error instanceof errors.JWTExpired) return 'expired'
  if (error instanceof errors.JWTClaimValidationFailed) {
    if (error.reason !== 'check_failed') return 'claims'
    if (error.claim === 'aud') return 'audience'
    if (error.claim === 'iss') return 'issuer'
    if (error.claim === 'typ') return 'type'
    if (error.claim === 'nbf' || error.claim === 'iat') return 'not_yet_valid'
    return 'claims'
  }
  if (error instanceof errors.JOSEAlgNotAllowed) return 'algorithm'
  if (error instanceof errors.JWSSignatureVerificationFailed) return 'signature'
  return 'malformed'
}

export interface TokenSignerOptions {
  db: Database
  secretBox: SecretBox
  /** `iss` of every token: config.baseUrl. */
  issuer: string
  logger: Logger
  /** Milliseconds since the epoch; tests move it. */
  now?: () => number
}

/**
 * Signs and verifies the service's JWTs with the ES256 keys in `signing_keys`. Throws
 * SigningKeyError when the active key cannot be decrypted (wrong ENCRYPTION_KEY).
 */
export async function createTokenSigner(options: TokenSignerOptions): Promise<TokenSigner> {
  const { db, secretBox, issuer, logger, now = Date.now } = options
  let ring = await loadOrCreateKeyRing({ db, secretBox, logger, now: now() })
  let lastLoadStartedAt = now()
  let loading: Promise<void> | undefined

  // Reloads run one after another, so a slow, older read never overwrites a newer one.
  const reload = (): Promise<void> => {
    const run = async () => {
      lastLoadStartedAt = now()
      ring = await loadOrCreateKeyRing({ db, secretBox, logger, now: lastLoadStartedAt, previous: ring })
    }
    const next = (loading ?? Promise.resolve()).catch(() => {}).then(run)
    loading = next
    const settle = () => {
      if (loading === next) loading = undefined
    }
    next.then(settle, settle)
    return next
  }

  const retainedKey = (kid: string) => {
    const key = ring.verificationKeys.get(kid)
    return key && isRetained(key.retiredAt, now()) ? key : undefined
  }

  const resolveKey: JWTVerifyGetKey = async (header) => {
    if (typeof header.kid !== 'string') throw new InvalidTokenError('unknown_key')
    const known = retainedKey(header.kid)
    if (known) return known.publicKey
    if (loading || now() - lastLoadStartedAt >= UNKNOWN_KID_RELOAD_INTERVAL_MS) {
      try {
        await (loading ?? reload())
      } catch (error) {
        logger.warn('reloading signing keys failed', { error: String(error) })
      }
    }
    const reloaded = retainedKey(header.kid)
    if (!reloaded) throw new InvalidTokenError('unknown_key')
    return reloaded.publicKey
  }

  return {
    async sign(claims, signOptions) {
      const { expiresInSeconds } = signOptions
      if (!Number.isInteger(expiresInSeconds) || expiresInSeconds <= 0 || expiresInSeconds > MAX_TOKEN_LIFETIME_SECONDS) {
        throw new RangeError(`expiresInSeconds must be an integer from 1 to ${MAX_TOKEN_LIFETIME_SECONDS}`)
      }
      const issuedAt = Math.floor(now() / 1000)
      const { kid, privateKey } = ring.active
      return new SignJWT({ ...claims })
        .setProtectedHeader({ alg: ALG, typ: signOptions.typ, kid })
        .setIssuer(issuer)
        .setSubject(signOptions.subject)
        .setAudience(signOptions.audience)
        .setIssuedAt(issuedAt)
        .setExpirationTime(issuedAt + expiresInSeconds)
        .setJti(signOptions.jti ?? randomUrlSafeId())
        .sign(privateKey)
    },

    async verify(token, verifyOptions) {
      if (typeof token !== 'string' || token.length > MAX_TOKEN_LENGTH) throw new InvalidTokenError('malformed')
      try {
        const { payload } = await jwtVerify(token, resolveKey, {
          algorithms: [ALG],
          issuer,
          audience: verifyOptions.audience,
          typ: verifyOptions.typ,
          clockTolerance: CLOCK_TOLERANCE_SECONDS,
          // Also makes jose refuse an `iat` in the future, which it checks only with a maximum age.
          maxTokenAge: MAX_TOKEN_LIFETIME_SECONDS,
          currentDate: new Date(now()),
          requiredClaims: ['sub', 'exp', 'iat', 'jti'],
        })
        return payload as VerifiedToken
      } catch (error) {
        throw new InvalidTokenError(invalidTokenReason(error), { cause: error })
      }
    },

    async jwks() {
      const at = now()
      const keys = [...ring.verificationKeys.values()].filter((key) => isRetained(key.retiredAt, at)).map((key) => ({ ...key.publicJwk }))
      return { keys }
    },

    reload,
    hasKey: (kid) => ring.verificationKeys.has(kid),
  }
}

/**
 * Retires the active key and makes a new one active, in one transaction that also tells every
 * instance (through the invalidation feed) to reload. Tokens signed with the retired key stay
 * valid until they expire: the key stays published and accepted for RETIRED_KEY_RETENTION_MS.
 */
export async function rotateSigningKey(db: Database, secretBox: SecretBox): Promise<{ kid: string; retiredKid: string | null }> {
  const replacement = await generateSigningKey(secretBox)
  try {
    return await db.transaction(async (tx: DatabaseTransaction) => {
      const [current] = await tx.select().from(signingKeys).where(isNull(signingKeys.retiredAt)).for('update')
      // A key sealed under another ENCRYPTION_KEY would stop every instance at its next reload:
      // proving we can open the current key proves the instances can open the new one.
      if (current) {
        await openPrivateKey(current, secretBox)
        await tx
          .update(signingKeys)
          .set({ retiredAt: sql`now()` })
          .where(and(eq(signingKeys.kid, current.kid), isNull(signingKeys.retiredAt)))
      }
      await tx.insert(signingKeys).values(replacement)
      await recordInvalidation(tx, 'signing_key', replacement.kid)
      return { kid: replacement.kid, retiredKid: current?.kid ?? null }
    })
  } catch (error) {
    if (isUniqueViolation(error)) {
      throw new SigningKeyError('another signing key became active at the same moment (a concurrent rotation?); run the rotation again', { cause: error })
    }
    throw error
  }
}
