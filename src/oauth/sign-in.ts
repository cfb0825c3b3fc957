import { eq } from 'drizzle-orm'
import { Elysia, t } from 'elysia'
import type { Database } from '../lib/db/client.ts'
import { users } from '../lib/db/schema.ts'
import { ApiError } from '../lib/errors.ts'
import { clientAddressOf, jsonBodies } from '../lib/http.ts'
import { hashPassword, verifyPassword } from '../lib/crypto.ts'
import { clearHits, countHit, peekHits, type RateLimitWindow } from '../lib/rate-limit.ts'
import { normalizeEmail } from '../accounts/service.ts'
import { EmailSchema } from '../accounts/schemas.ts'
import type { TokenSigner } from './signing-keys.ts'

export const ID_TOKEN_LIFETIME_SECONDS = 600

// Failures only are counted; a success clears the account's count.
const FAILURES_PER_ACCOUNT: RateLimitWindow = { limit: 5, windowSeconds: 15 * 60 }
const FAILURES_PER_IP: RateLimitWindow = { limit: 30, windowSeconds: 15 * 60 }

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

/** Exchanges an email and password for the short-lived id_token that POST /auth/authorize takes. */
export async function signIn(deps: SignInDeps, input: { email: string; password: string; clientIp: string }) {
  const email = normalizeEmail(input.email)
  const accountKey = `sign-in:email:${email}`
  const ipKey = `sign-in:ip:${input.clientIp}`
  for (const [key, window] of [[accountKey, FAILURES_PER_ACCOUNT], [ipKey, FAILURES_PER_IP]] as const) {
    const state = await peekHits(deps.db, key, window)
    if (state.limited) throw throttled(state.retryAfterSeconds)
  }

  const [user] = await deps.db.select().from(users).where(eq(users.email, email))
  decoyHash ??= hashPassword('decoy password, never valid')
  const valid = await verifyPassword(input.password, user?.passwordHash ?? (await decoyHash))
  if (!user || !valid) {
    await countHit(deps.db, accountKey, FAILURES_PER_ACCOUNT)
    await countHit(deps.db, ipKey, FAILURES_PER_IP)
    throw new ApiError(401, 'invalid_credentials', 'The email or password is wrong.')
  }
  await clearHits(deps.db, accountKey)
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
  { additionalProperties: false },
)

export const SignInResult = t.Object({
  id_token: t.String({ description: 'A JWT of the signed-in user (10 minutes, audience `{base_url}/auth`), accepted only by POST /auth/authorize.' }),
  expires_in: t.Integer(),
})

export function signInRoutes(deps: SignInDeps) {
  return new Elysia({ tags: ['OAuth'] })
    .use(jsonBodies())
    .post(
    '/auth/login',
    async ({ body, request, set }) => {
      set.headers['cache-control'] = 'no-store'
      return signIn(deps, { ...body, clientIp: clientAddressOf(request) })
    },
    {
      parse: 'json',
      body: SignInBody,
      response: { 200: SignInResult },
      detail: { summary: 'Sign a user in (for the consent step of the authorization flow)' },
    },
  )
}
