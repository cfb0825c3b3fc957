import { Elysia } from 'elysia'
import { OAuthError } from '../lib/http/errors.ts'
import { cors } from '../lib/http/cors.ts'
import { authenticateClient } from './client-authentication.ts'
import { redeemAuthorizationCode } from './grants/authorization-code.ts'
import { refreshTokenGrant } from './grants/refresh-token.ts'
import { JWT_BEARER_GRANT_TYPE, jwtBearerGrant, type JwtBearerDeps } from './grants/jwt-bearer.ts'
import { OAuthErrorSchema, RefreshRequestBody, TokenRequestBody, TokenResponseSchema } from './schemas.ts'
import { tokenRequestDpopKey } from './dpop-binding.ts'
import type { DpopVerifier } from '../lib/security/dpop.ts'
import { oauthWireFormat } from './wire-format.ts'

// RFC 6749 §5.1: token responses are never cached.
const NO_STORE = { 'cache-control': 'no-store', pragma: 'no-cache' }

/**
 * `POST /auth/token` (RFC 6749 §3.2: authenticates the client, then dispatches to the grant
 * named by `grant_type`) and `POST /auth/token/refresh` (the refresh grant at its own address),
 * mounted under `/v0`. A `DPoP` proof is checked first and its key handed to the grant (RFC 9449
 * §5, src/oauth/dpop-binding.ts); the answer then carries the current nonce (§8.2).
 */
export interface TokenEndpointDeps extends JwtBearerDeps {
  /** Checks the DPoP proof of a token request (src/oauth/dpop-binding.ts). */
  dpop: DpopVerifier
}

export function tokenEndpointRoutes(deps: TokenEndpointDeps) {
  const proofOf = async (request: Request, headers: Record<string, unknown>) => {
    const dpopJkt = await tokenRequestDpopKey(deps.dpop, request)
    if (dpopJkt) headers['dpop-nonce'] = await deps.dpop.nonces.current()
    return dpopJkt
  }
  return new Elysia({ tags: ['OAuth'] })
    .use(cors({ '/auth/token': ['POST'], '/auth/token/refresh': ['POST'] }))
    .use(oauthWireFormat({ forms: true }))
    .post(
      '/auth/token',
      async ({ body, request, set }) => {
        Object.assign(set.headers, NO_STORE)
        const dpopJkt = await proofOf(request, set.headers)
        const client = await authenticateClient(deps, request.headers, body)
        if (body.grant_type === 'authorization_code') {
          return redeemAuthorizationCode(deps, client, { code: body.code, redirectUri: body.redirect_uri, codeVerifier: body.code_verifier, dpopJkt })
        }
        if (body.grant_type === 'refresh_token') {
          return refreshTokenGrant(deps, client, { refreshToken: body.refresh_token, scope: body.scope, dpopJkt })
        }
        if (body.grant_type === JWT_BEARER_GRANT_TYPE) {
          return jwtBearerGrant(deps, { client, assertion: body.assertion, scope: body.scope, resource: body.resource, dpopJkt })
        }
        throw new OAuthError(400, 'unsupported_grant_type', `grant_type must be authorization_code, refresh_token or ${JWT_BEARER_GRANT_TYPE}.`)
      },
      {
        // Named parsers only name the media types in the OpenAPI document: oauthWireFormat's reader answers first.
        parse: ['json', 'urlencoded'],
        body: TokenRequestBody,
        response: { 200: TokenResponseSchema, 400: OAuthErrorSchema, 401: OAuthErrorSchema },
        detail: {
          operationId: 'requestToken',
          summary: "Exchange an authorization code (with its PKCE verifier), a refresh token, or an enterprise identity provider's ID-JAG (JWT bearer grant) for tokens",
          description:
            'The client authenticates as it registered: `client_id` alone (public clients), HTTP Basic (`client_secret_basic`), `client_secret` in the body ' +
            '(`client_secret_post`) or `client_assertion` (`private_key_jwt`). A failed authentication is 401 `invalid_client`.',
        },
      },
    )
    .post(
      '/auth/token/refresh',
      async ({ body, request, set }) => {
        Object.assign(set.headers, NO_STORE)
        const dpopJkt = await proofOf(request, set.headers)
        const client = await authenticateClient(deps, request.headers, body)
        return refreshTokenGrant(deps, client, { refreshToken: body.refresh_token, scope: body.scope, dpopJkt })
      },
      { parse: ['json', 'urlencoded'], body: RefreshRequestBody, response: { 200: TokenResponseSchema, 400: OAuthErrorSchema, 401: OAuthErrorSchema }, detail: { operationId: 'refreshToken', summary: 'Rotate a refresh token for a new token pair' } },
    )
}
