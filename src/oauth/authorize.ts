import { randomBytes } from 'node:crypto'
import { Elysia } from 'elysia'
import type { Database } from '../lib/db/client.ts'
import { OAuthError } from '../lib/errors.ts'
import { checkAuthorizationRequest, redirectWith } from './authorization-request.ts'
import { AuthorizeBody, AuthorizeQuery, AuthorizeResult } from './schemas.ts'
import type { TokenDeps } from './tokens.ts'
import { issueAuthorizationCode } from './grants/authorization-code.ts'
import { oauthWireFormat } from './wire-format.ts'
import { renderConsentPage, renderErrorPage } from './consent-page.ts'

export interface AuthorizeDeps extends TokenDeps {
  db: Database
}

function pageHeaders(nonce: string): Record<string, string> {
  return {
    'content-type': 'text/html; charset=utf-8',
    'cache-control': 'no-store',
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
    'x-content-type-options': 'nosniff',
    'content-security-policy': [
      "default-src 'none'",
      `script-src 'nonce-${nonce}'`,
      `style-src 'nonce-${nonce}'`,
      "connect-src 'self'",
      "form-action 'none'",
      "base-uri 'none'",
      "frame-ancestors 'none'",
    ].join('; '),
  }
}

export function authorizeRoutes(deps: AuthorizeDeps) {
  return new Elysia({ tags: ['OAuth'] })
    .use(oauthWireFormat())
    .get(
      '/auth/authorize',
      async ({ query }) => {
        const nonce = randomBytes(16).toString('base64')
        const check = await checkAuthorizationRequest(deps.clients, deps.baseUrl, query, { requireResponseType: true })
        if (!check.ok && !check.redirect) {
          return new Response(renderErrorPage(nonce, check.description), { status: 400, headers: pageHeaders(nonce) })
        }
        if (!check.ok) {
          const location = redirectWith(check.redirectUri, { error: check.error, error_description: check.description, state: check.state, iss: deps.baseUrl })
          return new Response(null, { status: 302, headers: { location, 'cache-control': 'no-store' } })
        }
        const { request } = check
        const body = {
          client_id: request.client.id,
          redirect_uri: request.redirectUri,
          code_challenge: request.codeChallenge,
          code_challenge_method: 'S256',
          state: request.state,
          scope: request.scopes.join(' '),
          resource: request.audience,
        }
        const denyUrl = redirectWith(request.redirectUri, { error: 'access_denied', state: request.state, iss: deps.baseUrl })
        const page = renderConsentPage({
          nonce,
          clientName: request.client.clientName ?? request.client.id,
          redirectHost: new URL(request.redirectUri).host || request.redirectUri,
          scopes: request.scopes,
          authorizeRequest: body,
          denyUrl,
        })
        return new Response(page, { status: 200, headers: pageHeaders(nonce) })
      },
      { query: AuthorizeQuery, detail: { summary: 'The consent page: sign in, then Allow or Deny' } },
    )
    .post(
      '/auth/authorize',
      async ({ body, set }) => {
        set.headers['cache-control'] = 'no-store'
        const check = await checkAuthorizationRequest(deps.clients, deps.baseUrl, body, { requireResponseType: false })
        if (!check.ok) {
          if (!check.redirect) throw new OAuthError(400, 'invalid_request', check.description)
          throw new OAuthError(400, check.error, check.description)
        }
        const code = await issueAuthorizationCode(deps, check.request, body.id_token)
        const { state, redirectUri } = check.request
        return { code, state, iss: deps.baseUrl, redirect_to: redirectWith(redirectUri, { code, state, iss: deps.baseUrl }) }
      },
      { parse: 'json', body: AuthorizeBody, response: { 200: AuthorizeResult }, detail: { summary: "Exchange the signed-in user's id_token for an authorization code" } },
    )
}
