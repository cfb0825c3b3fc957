import { Elysia, t } from 'elysia'
import { OAuthError } from '../lib/errors.ts'
import { cors } from '../lib/cors.ts'
import { redeemAuthorizationCode, refreshTokenGrant, revokeToken, type TokenDeps } from './tokens.ts'

const parameter = (maxLength: number) => t.Optional(t.String({ maxLength }))

// Standard clients send extra parameters (RFC 8707 `resource`, an empty `client_secret`, …):
// they are accepted and ignored, as RFC 6749 §3.2 asks.
export const TokenRequestBody = t.Object(
  {
    grant_type: t.String({ maxLength: 64 }),
    client_id: parameter(256),
    code: parameter(256),
    redirect_uri: parameter(2048),
    code_verifier: parameter(256),
    refresh_token: parameter(256),
    scope: parameter(512),
  },
  { additionalProperties: true },
)

export const RefreshRequestBody = t.Object(
  {
    grant_type: t.Optional(t.Literal('refresh_token')),
    refresh_token: t.String({ maxLength: 256 }),
    client_id: t.String({ maxLength: 256 }),
    scope: parameter(512),
  },
  { additionalProperties: true },
)

export const RevokeRequestBody = t.Object(
  {
    token: t.String({ maxLength: 4096 }),
    token_type_hint: parameter(64),
    client_id: t.String({ maxLength: 256 }),
  },
  { additionalProperties: true },
)

export const TokenResponseSchema = t.Object({
  access_token: t.String({ description: 'An RFC 9068 JWT, valid for 15 minutes.' }),
  token_type: t.Literal('Bearer'),
  expires_in: t.Integer(),
  refresh_token: t.String({ description: 'Opaque, 30 days, rotated on every use.' }),
  scope: t.String(),
})

const NO_STORE = { 'cache-control': 'no-store', pragma: 'no-cache' }

export function tokenRoutes(deps: TokenDeps) {
  return new Elysia({ tags: ['OAuth'] })
    .use(cors({ '/auth/token': ['POST'], '/auth/token/refresh': ['POST'], '/auth/revoke': ['POST'] }))
    .post(
      '/auth/token',
      async ({ body, set }) => {
        Object.assign(set.headers, NO_STORE)
        if (body.grant_type === 'authorization_code') {
          return redeemAuthorizationCode(deps, {
            code: body.code,
            clientId: body.client_id,
            redirectUri: body.redirect_uri,
            codeVerifier: body.code_verifier,
          })
        }
        if (body.grant_type === 'refresh_token') {
          return refreshTokenGrant(deps, { refreshToken: body.refresh_token, clientId: body.client_id, scope: body.scope })
        }
        throw new OAuthError(400, 'unsupported_grant_type', 'grant_type must be authorization_code or refresh_token.')
      },
      {
        body: TokenRequestBody,
        response: { 200: TokenResponseSchema },
        detail: { summary: 'Exchange an authorization code (with its PKCE verifier) or a refresh token for tokens' },
      },
    )
    .post(
      '/auth/token/refresh',
      async ({ body, set }) => {
        Object.assign(set.headers, NO_STORE)
        return refreshTokenGrant(deps, { refreshToken: body.refresh_token, clientId: body.client_id, scope: body.scope })
      },
      { body: RefreshRequestBody, response: { 200: TokenResponseSchema }, detail: { summary: 'Rotate a refresh token for a new token pair' } },
    )
    .post(
      '/auth/revoke',
      async ({ body, set }) => {
        Object.assign(set.headers, NO_STORE)
        await revokeToken(deps, { token: body.token, clientId: body.client_id })
        await deps.syncCaches()
        return {}
      },
      { body: RevokeRequestBody, detail: { summary: "Revoke a refresh or access token's grant (RFC 7009)" } },
    )
}
