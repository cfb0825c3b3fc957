import { Elysia } from 'elysia'
import { OAuthError } from '../lib/http/errors.ts'
import { cors } from '../lib/http/cors.ts'
import { redeemAuthorizationCode } from './grants/authorization-code.ts'
import { refreshTokenGrant } from './grants/refresh-token.ts'
import { JWT_BEARER_GRANT_TYPE, jwtBearerGrant, type JwtBearerDeps } from './grants/jwt-bearer.ts'
import { requireClient } from './client-directory.ts'
import { OAuthErrorSchema, RefreshRequestBody, TokenRequestBody, TokenResponseSchema } from './schemas.ts'
import { oauthWireFormat } from './wire-format.ts'

// RFC 6749 §5.1: token responses are never cached.
const NO_STORE = { 'cache-control': 'no-store', pragma: 'no-cache' }

/**
 * `POST /auth/token` (RFC 6749 §3.2: dispatches to the grant named by `grant_type`) and
 * `POST /auth/token/refresh` (the refresh grant at its own address), mounted under `/v0`.
 */
export function tokenEndpointRoutes(deps: JwtBearerDeps) {
  return new Elysia({ tags: ['OAuth'] })
    .use(cors({ '/auth/token': ['POST'], '/auth/token/refresh': ['POST'] }))
    .use(oauthWireFormat({ forms: true }))
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
        if (body.grant_type === JWT_BEARER_GRANT_TYPE) {
          const client = await requireClient(deps.clients, body.client_id)
          return jwtBearerGrant(deps, { client, assertion: body.assertion, scope: body.scope, resource: body.resource })
        }
        throw new OAuthError(400, 'unsupported_grant_type', `grant_type must be authorization_code, refresh_token or ${JWT_BEARER_GRANT_TYPE}.`)
      },
      {
        // Named parsers only name the media types in the OpenAPI document: oauthWireFormat's reader answers first.
        parse: ['json', 'urlencoded'],
        body: TokenRequestBody,
        response: { 200: TokenResponseSchema, 400: OAuthErrorSchema, 401: OAuthErrorSchema },
        detail: { operationId: 'requestToken', summary: 'Exchange an authorization code (with its PKCE verifier), a refresh token, or an enterprise identity provider\'s ID-JAG (JWT bearer grant) for tokens' },
      },
    )
    .post(
      '/auth/token/refresh',
      async ({ body, set }) => {
        Object.assign(set.headers, NO_STORE)
        return refreshTokenGrant(deps, { refreshToken: body.refresh_token, clientId: body.client_id, scope: body.scope })
      },
      { parse: ['json', 'urlencoded'], body: RefreshRequestBody, response: { 200: TokenResponseSchema, 400: OAuthErrorSchema, 401: OAuthErrorSchema }, detail: { operationId: 'refreshToken', summary: 'Rotate a refresh token for a new token pair' } },
    )
}
