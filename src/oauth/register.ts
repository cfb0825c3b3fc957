import { Elysia } from 'elysia'
import { clientAddressOf } from '../lib/http/foundation.ts'
import type { Database } from '../lib/db/client.ts'
import { OAuthError } from '../lib/http/errors.ts'
import { countHit, type RateLimitWindow } from '../lib/db/rate-limits.ts'
import { cors } from '../lib/http/cors.ts'
import { storeClient, validateClientMetadata, type ClientMetadata } from './client-model.ts'
import { unusableKeyProblem } from './client-jwks.ts'
import { ClientRegistrationRequest, ClientRegistrationResponse, OAuthErrorSchema } from './schemas.ts'
import { oauthWireFormat } from './wire-format.ts'

/** Registration is open, so it is the cheapest way to fill the database: 20 per client address per hour. */
export const REGISTRATION_RATE_LIMIT: RateLimitWindow = { limit: 20, windowSeconds: 3600 }
export const registrationRateLimitKey = (clientAddress: string) => `register:ip:${clientAddress}`

/** Counts a registration from this address; 429 `slow_down` with Retry-After past the limit. */
export async function enforceRegistrationRateLimit(db: Database, clientAddress: string): Promise<void> {
  const state = await countHit(db, registrationRateLimitKey(clientAddress), REGISTRATION_RATE_LIMIT)
  if (state.limited) {
    throw new OAuthError(429, 'slow_down', `Too many registrations from this address; retry in ${state.retryAfterSeconds} seconds.`, {
      'retry-after': String(state.retryAfterSeconds),
    })
  }
}

/** Inline keys are imported once here, so a key that no assertion could ever verify with is refused at registration. */
async function checkKeysImport(metadata: ClientMetadata): Promise<void> {
  const problem = metadata.jwks ? await unusableKeyProblem(metadata.jwks) : null
  if (problem) throw new OAuthError(400, 'invalid_client_metadata', `jwks/${problem}.`)
}

/**
 * `POST /auth/register`, mounted under `/v0`; failures are OAuth error bodies (RFC 7591 §3.2.2).
 * `allowPrivateTargets` (WEBHOOK_ALLOW_PRIVATE_TARGETS) lets a `jwks_uri` name a private address.
 */
export function registrationRoutes(deps: { db: Database; allowPrivateTargets: boolean }) {
  return new Elysia({ tags: ['OAuth'] })
    .use(cors({ '/auth/register': ['POST'] }))
    .use(oauthWireFormat({ invalidBody: 'invalid_client_metadata' }))
    .post(
      '/auth/register',
      async ({ body, request, server, set, status }) => {
        const metadata = validateClientMetadata(body, { allowPrivateTargets: deps.allowPrivateTargets })
        await checkKeysImport(metadata)
        // Counted after validation: only registrations that would be stored use up the allowance.
        await enforceRegistrationRateLimit(deps.db, clientAddressOf(request))
        set.headers['cache-control'] = 'no-store'
        return status(201, await storeClient(deps.db, metadata))
      },
      {
        parse: 'json',
        body: ClientRegistrationRequest,
        response: { 201: ClientRegistrationResponse, 400: OAuthErrorSchema, 429: OAuthErrorSchema },
        detail: {
          operationId: 'registerClient', summary: 'Register an OAuth client (RFC 7591)',
          description:
            'Open dynamic client registration: public clients (`token_endpoint_auth_method: none`, the default) and confidential ones ' +
            '(`client_secret_basic` and `client_secret_post`, whose `client_secret` is in this response only; `private_key_jwt` with `jwks` or `jwks_uri`). Unknown metadata is ignored. ' +
            'Failures are `{ error, error_description }`: `invalid_redirect_uri`, `invalid_client_metadata`, `invalid_request` ' +
            '(malformed JSON, wrong content type) and 429 `slow_down` with `Retry-After`.',
        },
      },
    )
}
