import { randomBytes } from 'node:crypto'
import { Elysia } from 'elysia'
import type { Database } from '../lib/db/client.ts'
import { OAuthError } from '../lib/http/errors.ts'
import { htmlPageHeaders } from '../lib/http/html.ts'
import { checkAuthorizationRequest, readAuthorizationQuery, redirectWith } from './authorization-request.ts'
import { AuthorizeBody, AuthorizeResult, OAuthErrorSchema, authorizeQueryParameters } from './schemas.ts'
import { isOnDeviceRedirect, redirectUriProblem } from './client-model.ts'
import type { TokenDeps } from './tokens.ts'
import { issueAuthorizationCode } from './grants/authorization-code.ts'
import { oauthWireFormat } from './wire-format.ts'
import { renderConsentPage, renderErrorPage } from './consent-page.ts'
import { DASHBOARD_CLIENT_ID } from '../dashboard/client.ts'

export interface AuthorizeDeps extends TokenDeps {
  db: Database
}

const page = (nonce: string, html: string, status: number) =>
  new Response(html, { status, headers: htmlPageHeaders('no-store', [`script-src 'nonce-${nonce}'`, `style-src 'nonce-${nonce}'`, "connect-src 'self'"]) })

/**
 * Where an error may go straight back to the client (RFC 9700 §4.11.2): only to a redirect URI
 * on the user's device (a loopback host or a private-use scheme), which cannot take the browser
 * to a site elsewhere. A web redirect URI could be anyone's (registration is open), so an error
 * for it is a page with a link the user may follow, and this service is no open redirector.
 * The URI must also pass today's registration rules: a client stored under older rules gets
 * the page. (RFC 9700 also allows a client this user approved before; the GET does not know the
 * user, who signs in on the consent page, so that case is not used.)
 */
const mayRedirectErrorTo = (redirectUri: string) => isOnDeviceRedirect(redirectUri) && redirectUriProblem(redirectUri) === null

/** Where a redirect URI leads, for a person: its host, or the whole URI for a private-use one without a host. */
const destinationOf = (redirectUri: string) => new URL(redirectUri).host || redirectUri

/** The client's id is its metadata document's URL (a Client ID Metadata Document client): that document's host. */
function metadataDocumentHost(clientId: string): string | undefined {
  if (!clientId.startsWith('https://')) return undefined
  try {
    return new URL(clientId).host
  } catch {
    return undefined
  }
}

export function authorizeRoutes(deps: AuthorizeDeps) {
  return new Elysia({ tags: ['OAuth'] })
    .use(oauthWireFormat())
    .get(
      '/auth/authorize',
      async ({ request }) => {
        const nonce = randomBytes(16).toString('base64')
        const query = readAuthorizationQuery(new URL(request.url).searchParams)
        if (!query.ok) return page(nonce, renderErrorPage({ nonce, message: query.description }), 400)
        const check = await checkAuthorizationRequest(deps.clients, deps.baseUrl, query.params, { requireResponseType: true })
        if (!check.ok && !check.redirect) return page(nonce, renderErrorPage({ nonce, message: check.description }), 400)
        if (!check.ok) {
          const location = redirectWith(check.redirectUri, { error: check.error, error_description: check.description, state: check.state, iss: deps.baseUrl })
          if (mayRedirectErrorTo(check.redirectUri)) return new Response(null, { status: 302, headers: { location, 'cache-control': 'no-store' } })
          const returnTo = redirectUriProblem(check.redirectUri) === null ? { href: location, destination: destinationOf(check.redirectUri) } : undefined
          return page(nonce, renderErrorPage({ nonce, message: check.description, error: check.error, returnTo }), 400)
        }
        const { request: valid } = check
        const body = {
          client_id: valid.client.id,
          redirect_uri: valid.redirectUri,
          code_challenge: valid.codeChallenge,
          code_challenge_method: 'S256',
          state: valid.state,
          scope: valid.scopes.join(' '),
          resource: valid.audience,
        }
        const denyUrl = redirectWith(valid.redirectUri, { error: 'access_denied', state: valid.state, iss: deps.baseUrl })
        const consent = renderConsentPage({
          nonce,
          clientName: valid.client.clientName ?? valid.client.id,
          metadataDocumentHost: metadataDocumentHost(valid.client.id),
          runsOnDevice: valid.client.redirectUris.length > 0 && valid.client.redirectUris.every(isOnDeviceRedirect),
          redirectHost: destinationOf(valid.redirectUri),
          scopes: valid.scopes,
          authorizeRequest: body,
          denyUrl,
          firstParty: valid.client.id === DASHBOARD_CLIENT_ID,
        })
        return page(nonce, consent, 200)
      },
      {
        detail: {
          operationId: 'showConsentPage', summary: 'The consent page: sign in, then Allow or Deny',
          description:
            'An HTML page. Unknown parameters are ignored; a parameter sent twice (other than `resource`) is an error page. ' +
            'An unknown client or redirect URI is an error page; other errors redirect with `error`, `state` and `iss` to a redirect URI on the device ' +
            '(loopback or private-use scheme), and are an error page with a link back for a web redirect URI.',
          parameters: authorizeQueryParameters,
          responses: {
            200: { description: 'The consent page.', content: { 'text/html': { schema: { type: 'string' } } } },
            302: {
              description: 'An error sent back to a redirect URI on the device: `error`, `error_description`, `state` and `iss` in its query.',
              headers: { Location: { schema: { type: 'string', format: 'uri' } } },
            },
            400: { description: 'An error page: what is wrong, and for a web redirect URI a link back to the client.', content: { 'text/html': { schema: { type: 'string' } } } },
          },
        },
      },
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
      { parse: 'json', body: AuthorizeBody, response: { 200: AuthorizeResult, 400: OAuthErrorSchema, 401: OAuthErrorSchema }, detail: { operationId: 'approveAuthorization', summary: "Exchange the signed-in user's id_token for an authorization code" } },
    )
}
