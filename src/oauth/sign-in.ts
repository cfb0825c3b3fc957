import { eq } from 'drizzle-orm'
import { Type } from '@sinclair/typebox'
import { Elysia, t } from 'elysia'
import type { Database } from '../lib/db/client.ts'
import { users } from '../lib/db/schema.ts'
import { ApiError, ProblemSchema } from '../lib/http/errors.ts'
import { clientAddressOf, jsonBodies } from '../lib/http/foundation.ts'
import { hashPassword, verifyPassword } from '../lib/security/crypto.ts'
import { clearHits, countHits, releaseHits, type CountedHit } from '../lib/db/rate-limits.ts'
import { addressForLimits } from '../lib/http/client-address.ts'
import { normalizeEmail } from '../accounts/service.ts'
import { EmailSchema } from '../accounts/schemas.ts'
import type { TokenSigner } from './signing-keys.ts'

export const ID_TOKEN_LIFETIME_SECONDS = 600

// Failed sign-ins allowed per 15 minutes. Per (email, client address) the limit is low; the
// per-email ceiling is higher so that guesses from one address cannot lock the real user out
// from another, and the per-address limit stops one client spreading guesses across emails.
const WINDOW_SECONDS = 15 * 60
const FAILURES_PER_EMAIL_AND_ADDRESS = 5
const FAILURES_PER_EMAIL = 50
const FAILURES_PER_ADDRESS = 30

export const idTokenAudience = (baseUrl: string) => `${baseUrl}/auth`

export interface SignInDeps {
  db: Database
  signer: TokenSigner
  baseUrl: string
}

// Verifying against a real hash when the email is unknown keeps both answers equally slow,
// so response times do not tell which emails have accounts.
let decoyHash: Promise<string> | undefined

function throttled(retryAfterSeconds: number): ApiError {
  return new ApiError(429, 'rate_limited', 'Too many failed sign-ins. Try again later.', {
    headers: { 'retry-after': String(retryAfterSeconds) },
  })
}

/**
 * Exchanges an email and password for the short-lived id_token that POST /auth/authorize takes.
 *
 * Every attempt is counted before its password is checked, in one statement for its three
 * limits, so simultaneous guesses cannot check more passwords than the limits allow. Past a
 * limit the attempt is refused (429, even with the right password) and its count given back:
 * refused attempts check nothing, so they do not use up the real user's allowance. A failure
 * keeps its count. A success clears its own (email, address) count and gives back its count
 * toward the email and the address, which still hold everyone else's failures.
 */
export async function signIn(deps: SignInDeps, input: { email: string; password: string; clientAddress: string }) {
  const email = normalizeEmail(input.email)
  const address = addressForLimits(input.clientAddress)
  // An address holds no `|`, so the pair's key is unambiguous whatever the email holds.
  const pairKey = `sign-in:pair:${address}|${email}`
  const emailKey = `sign-in:email:${email}`
  const addressKey = `sign-in:ip:${address}`
  const hits = await countHits(deps.db, [pairKey, emailKey, addressKey], WINDOW_SECONDS)
  const counted: [CountedHit, number][] = [
    [hits.get(pairKey)!, FAILURES_PER_EMAIL_AND_ADDRESS],
    [hits.get(emailKey)!, FAILURES_PER_EMAIL],
    [hits.get(addressKey)!, FAILURES_PER_ADDRESS],
  ]
  const over = counted.filter(([hit, limit]) => hit.count > limit)
  if (over.length > 0) {
    await releaseHits(deps.db, [...hits.values()])
    throw throttled(Math.max(...over.map(([hit]) => hit.retryAfterSeconds)))
  }

  const [user] = await deps.db.select().from(users).where(eq(users.email, email))
  decoyHash ??= hashPassword('decoy password, never valid')
  const valid = await verifyPassword(input.password, user?.passwordHash ?? (await decoyHash))
  if (!user || !valid) throw new ApiError(401, 'invalid_credentials', 'The email or password is wrong.')
  await releaseHits(deps.db, [hits.get(emailKey)!, hits.get(addressKey)!])
  await clearHits(deps.db, pairKey)
  const idToken = await deps.signer.sign(
    { account_id: user.accountId },
    { typ: 'JWT', subject: user.id, audience: idTokenAudience(deps.baseUrl), expiresInSeconds: ID_TOKEN_LIFETIME_SECONDS },
  )
  return { id_token: idToken, expires_in: ID_TOKEN_LIFETIME_SECONDS }
}

export const SignInBody = t.Object(
  {
    email: EmailSchema,
    password: t.String({ minLength: 1, maxLength: 1024 }),
  },
  { additionalProperties: false, title: 'SignInRequest' },
)

export const SignInResult = t.Object({
  id_token: t.String({ description: 'A JWT of the signed-in user (10 minutes, audience `{base_url}/auth`), accepted only by POST /auth/authorize.' }),
  expires_in: Type.Integer(),
}, { title: 'SignInResult' })

export function signInRoutes(deps: SignInDeps) {
  return new Elysia({ tags: ['OAuth'] })
    .use(jsonBodies())
    .post(
    '/auth/login',
    async ({ body, request, set }) => {
      set.headers['cache-control'] = 'no-store'
      return signIn(deps, { ...body, clientAddress: clientAddressOf(request) })
    },
    {
      parse: 'json',
      body: SignInBody,
      response: { 200: SignInResult, 401: ProblemSchema, 429: ProblemSchema },
      detail: { operationId: 'signIn', summary: 'Sign a user in (for the consent step of the authorization flow)' },
    },
  )
}
