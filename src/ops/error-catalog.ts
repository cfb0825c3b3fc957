/**
 * Every error code the service answers, with what happened and what to do: the one source of
 * the page at `{PUBLIC_URL}/docs/errors` (src/ops/error-pages.ts), which every problem body's
 * `type` links to (`{PUBLIC_URL}/docs/errors#<code>`). tests/ops/error-pages.test.ts fails when
 * a code thrown in src/ has no entry here.
 */

export interface ErrorCatalogEntry {
  code: string
  /** The usual HTTP status(es) answered with this code. */
  status: string
  title: string
  happened: string
  todo: string
}

export const PROBLEM_CODES: readonly ErrorCatalogEntry[] = [
  {
    code: 'invalid_json',
    status: '400',
    title: 'The body is not valid JSON',
    happened: 'The request body could not be parsed as JSON, or an endpoint that needs a body received none.',
    todo: 'Send a well-formed JSON body with Content-Type: application/json.',
  },
  {
    code: 'invalid_request',
    status: '400',
    title: 'The request is malformed',
    happened:
      'A parameter is missing, repeated or malformed. At the OAuth endpoints this is also how a body that is too large or of another media type, an unknown client or a non-matching redirect URI at authorization is reported.',
    todo: 'Read error_description (or detail), correct the request and send it again. Do not retry it unchanged.',
  },
  {
    code: 'ambiguous_credentials',
    status: '400',
    title: 'More than one credential',
    happened: 'The request carried ?key= twice, or an API key in the query together with an Authorization header.',
    todo: 'Send exactly one credential: either one ?key= parameter or one Authorization header.',
  },
  {
    code: 'invalid_cursor',
    status: '400',
    title: 'Unknown pagination cursor',
    happened: 'The cursor parameter is not one this list returned.',
    todo: 'Pass the next_cursor value from the previous page unchanged, or drop cursor to start from the first page.',
  },
  {
    code: 'invalid_idempotency_key',
    status: '400',
    title: 'Malformed Idempotency-Key',
    happened: 'The Idempotency-Key header is not 1 to 255 visible ASCII characters.',
    todo: 'Use a key of 1 to 255 visible ASCII characters without spaces; a UUID is a good choice.',
  },
  {
    code: 'unauthorized',
    status: '401',
    title: 'No valid credential',
    happened:
      'The request had no credential, or one that is unknown, revoked, expired, malformed or issued for another audience, or a DPoP-bound token without a valid proof. WWW-Authenticate names the resource metadata and the scope to ask for (with DPoP, its error says what was wrong).',
    todo: 'Send a valid API key or bearer token. With OAuth, refresh the access token or authorize again using the metadata named in WWW-Authenticate.',
  },
  {
    code: 'invalid_credentials',
    status: '401',
    title: 'Wrong email or password',
    happened: 'POST /auth/login was called with an email or a password that does not match (the two are not told apart).',
    todo: 'Check the email and password and sign in again. Repeated failures are rate limited.',
  },
  {
    code: 'forbidden',
    status: '403',
    title: 'This credential may not do this',
    happened: 'The endpoint acts on the account itself and takes an API key only, but a bearer token was sent.',
    todo: 'Call this endpoint with an API key.',
  },
  {
    code: 'insufficient_scope',
    status: '403',
    title: 'The token lacks a scope',
    happened:
      'The bearer token was not granted the scope this endpoint (or MCP tool) needs. WWW-Authenticate names every scope the operation needs.',
    todo: 'Authorize again asking for the scopes named in WWW-Authenticate, then retry with the new token.',
  },
  {
    code: 'origin_not_allowed',
    status: '403',
    title: 'Browser origin not accepted',
    happened: 'The MCP endpoint was called from a browser origin that it does not accept.',
    todo: 'Call from the service\'s own origin or from one the operator listed in MCP_ALLOWED_ORIGINS.',
  },
  {
    code: 'not_found',
    status: '404',
    title: 'No such endpoint or resource',
    happened: 'The path names no endpoint, or the resource does not exist. Another account\'s resources read as missing.',
    todo: 'Check the path and the id. List the resources to find the right id.',
  },
  {
    code: 'method_not_allowed',
    status: '405',
    title: 'Method not allowed',
    happened: 'The endpoint does not take this HTTP method (for example GET or DELETE on the MCP endpoint). Allow lists the methods it takes.',
    todo: 'Use one of the methods listed in the Allow header.',
  },
  {
    code: 'conflict',
    status: '409',
    title: 'Already exists',
    happened: 'The resource would duplicate one that exists: a subscription for the same event and URL, or a user with the same email.',
    todo: 'Use the existing resource, or change the event, URL or email.',
  },
  {
    code: 'hooks_limit_reached',
    status: '409',
    title: 'Subscription limit reached',
    happened: "The account already holds the most subscriptions it may hold (HOOKS_PER_ACCOUNT, 100 by default): its webhooks and its agents' MCP event subscriptions together.",
    todo: "Delete a webhook the account no longer needs, end an agent's event subscriptions under Connected apps, or ask the operator to raise the limit.",
  },
  {
    code: 'subscription_not_active',
    status: '409',
    title: 'Subscription is not active',
    happened: 'A delivery retry or recovery was asked for a subscription that is paused or disabled.',
    todo: 'Resume the subscription first, then retry or recover its deliveries.',
  },
  {
    code: 'idempotency_key_in_use',
    status: '409',
    title: 'Idempotency-Key still in use',
    happened: 'A request with the same Idempotency-Key is still running.',
    todo: 'Wait a moment and send the request again with the same key: you will get the first request\'s answer.',
  },
  {
    code: 'payload_too_large',
    status: '413',
    title: 'Body too large',
    happened: 'The request body is over 1 MB, declared or streamed.',
    todo: 'Send a smaller body.',
  },
  {
    code: 'unsupported_media_type',
    status: '415',
    title: 'Unsupported media type',
    happened: 'The body is not JSON (or, at endpoints that take forms, not a form).',
    todo: 'Send the body as JSON with Content-Type: application/json.',
  },
  {
    code: 'validation_failed',
    status: '422',
    title: 'Invalid body or parameters',
    happened:
      'A body field or a parameter breaks the schema: wrong type, unknown field, too long or not allowed. errors[] names each, with a JSON Pointer path.',
    todo: 'Fix every field listed in errors[] and send the request again.',
  },
  {
    code: 'idempotency_key_reused',
    status: '422',
    title: 'Idempotency-Key reused',
    happened: 'The Idempotency-Key was already used with a different request in the last 24 hours.',
    todo: 'Use a new key for a new request; reuse a key only to repeat exactly the same request.',
  },
  {
    code: 'rate_limited',
    status: '429',
    title: 'Too many requests',
    happened: 'Too many requests in a short time: with one credential (API_RATE_LIMIT a second, bursts of twice that), or too many failed sign-ins or registrations from one address.',
    todo: 'Wait the number of seconds in Retry-After before trying again. With an API key or a token, keep within the RateLimit-Policy header and watch the RateLimit header (requests left, seconds until the full burst is back).',
  },
  {
    code: 'deliveries_behind',
    status: '429',
    title: 'Webhook deliveries behind',
    happened:
      'POST …/messages waited (MESSAGE_HOLD_MS, 2 s by default) because the service was behind with your webhook deliveries to a subscription that answers quickly, and it was still behind: the message was not accepted. See docs/webhooks.md#when-deliveries-fall-behind.',
    todo: 'Send the message again after the seconds in Retry-After: it was not accepted, so sending it again makes no duplicate. Sending fewer messages at once (fewer requests outstanding) keeps requests from being held.',
  },
  {
    code: 'internal_error',
    status: '500',
    title: 'Something went wrong on our side',
    happened: 'The service failed. It logged the cause with the request id; the body never holds a stack trace.',
    todo: 'Retry later. If it persists, report it quoting request_id.',
  },
  {
    code: 'database_unavailable',
    status: '503',
    title: 'Database unavailable',
    happened:
      'The service cannot reach its database right now. Almost always nothing was stored; only a connection lost during the commit itself leaves it unknown.',
    todo: 'Retry after the delay in Retry-After, with the same Idempotency-Key where the endpoint takes one.',
  },
  {
    code: 'not_ready',
    status: '503',
    title: 'Not ready',
    happened: 'GET /readyz: the database is not reachable, so this instance should not receive traffic.',
    todo: 'Wait and probe again; check the database if it lasts.',
  },
  {
    code: 'dashboard_unavailable',
    status: '503',
    title: 'Dashboard unavailable',
    happened: 'The dashboard page is bundled by Bun when first asked for; this instance runs without Bun (the Deno entry), or bundling failed (its log says why).',
    todo: 'Serve the dashboard from the Bun entry (bun run start, or the container); the API itself is unaffected.',
  },
]

/** RFC 6749 §5.2 / RFC 7591 §3.2.2 codes: the `error` of the OAuth endpoints' error object (and `code` of a problem body). */
export const OAUTH_CODES: readonly ErrorCatalogEntry[] = [
  {
    code: 'invalid_client',
    status: '401',
    title: 'Client authentication failed',
    happened:
      'At the token or revocation endpoint: the client_id is unknown, its client ID metadata document could not be used, or the client did not authenticate ' +
      'the way it registered (a wrong secret, another method, an assertion that is expired, replayed, badly signed or for another audience).',
    todo:
      'Read error_description. An unknown client registers again (POST /auth/register) and starts a new authorization; a confidential client sends the credential of its ' +
      'token_endpoint_auth_method (docs/oauth.md#confidential-clients).',
  },
  {
    code: 'invalid_grant',
    status: '400',
    title: 'Invalid grant',
    happened:
      'The authorization code or refresh token is unknown, expired, already used, revoked or another client\'s, or the redirect_uri or code_verifier does not match; ' +
      'or an ID-JAG (JWT bearer grant) was refused: error_description says which check it failed (its issuer, signature, aud, client_id, lifetime, jti, subject or scope).',
    todo: 'Start a new authorization to obtain a new code and tokens; for an ID-JAG, fix what error_description names and ask the identity provider for a new one.',
  },
  {
    code: 'invalid_dpop_proof',
    status: '400 (token endpoint), 401 (API and MCP, in WWW-Authenticate)',
    title: 'Invalid DPoP proof',
    happened:
      'The DPoP header is not a valid proof for this request: its typ, alg (asymmetric only), jwk (a public key), signature, htm, htu, iat (within 60 s) or ath is wrong, or the proof was already used. error_description names the check that failed.',
    todo: 'Sign a new proof for every request, with a new jti, the request\'s method and URL (PUBLIC_URL and the path, no query), and at the API and MCP the ath of the access token.',
  },
  {
    code: 'use_dpop_nonce',
    status: '400 (token endpoint), 401 (API and MCP, in WWW-Authenticate)',
    title: 'DPoP nonce required',
    happened: 'The DPoP proof carries no nonce, or one that has expired (nonces last 5 to 10 minutes). The response\'s DPoP-Nonce header holds the current one.',
    todo: 'Sign the proof again with the DPoP-Nonce value as its nonce claim and send the request again; keep using the newest nonce the server sent.',
  },
  {
    code: 'unauthorized_client',
    status: '400',
    title: 'Client not allowed this grant',
    happened: 'The client is not allowed to use this grant type.',
    todo: 'Use a grant type the client registered for, or register it again with the grant types it needs.',
  },
  {
    code: 'unsupported_grant_type',
    status: '400',
    title: 'Unsupported grant type',
    happened: 'grant_type is none of authorization_code, refresh_token and urn:ietf:params:oauth:grant-type:jwt-bearer.',
    todo: 'Use grant_type=authorization_code, grant_type=refresh_token, or grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer with an ID-JAG as assertion.',
  },
  {
    code: 'unsupported_response_type',
    status: '400',
    title: 'Unsupported response type',
    happened: 'The authorization request\'s response_type is not code.',
    todo: 'Send response_type=code with PKCE (S256).',
  },
  {
    code: 'invalid_scope',
    status: '400',
    title: 'Invalid scope',
    happened: 'A requested scope does not exist, or is outside what the client registered or the grant holds.',
    todo: 'Ask only for scopes the service defines and the client registered; a refresh may only narrow the scopes.',
  },
  {
    code: 'invalid_target',
    status: '400',
    title: 'Invalid resource',
    happened: 'The resource parameter names neither the API base URL nor its /mcp endpoint.',
    todo: 'Send resource={base_url} or resource={base_url}/mcp, exactly as the protected resource metadata names it.',
  },
  {
    code: 'access_denied',
    status: '401 (or a redirect)',
    title: 'Access denied',
    happened: 'The user denied the authorization, or the sign-in behind it is invalid, expired or for a user who no longer exists.',
    todo: 'Ask the user to sign in and approve again; do not retry automatically.',
  },
  {
    code: 'invalid_redirect_uri',
    status: '400',
    title: 'Invalid redirect URI',
    happened: 'At registration, a redirect URI breaks the rules (https, loopback http or a private-use scheme; no fragment).',
    todo: 'Register redirect URIs that follow the rules in the API documentation.',
  },
  {
    code: 'invalid_client_metadata',
    status: '400',
    title: 'Invalid client metadata',
    happened: 'At registration, a field other than the redirect URIs breaks the rules.',
    todo: 'Read error_description, fix the field and register again.',
  },
  {
    code: 'slow_down',
    status: '429',
    title: 'Slow down',
    happened: 'Too many registrations came from one address.',
    todo: 'Wait the number of seconds in Retry-After; register a client once and reuse its client_id.',
  },
  {
    code: 'temporarily_unavailable',
    status: '5xx',
    title: 'Temporarily unavailable',
    happened: 'The OAuth endpoint failed on our side, or its database is unavailable.',
    todo: 'Retry later, after Retry-After when it is sent.',
  },
]

/** Every code, REST and OAuth, in page order. */
export const ERROR_CATALOG: readonly ErrorCatalogEntry[] = [...PROBLEM_CODES, ...OAUTH_CODES]
