import { Elysia } from 'elysia'

/**
 * CORS for the endpoints browser-based OAuth and MCP clients call (docs/api.md#cors): discovery
 * documents, registration, token, revocation and MCP. None of them reads cookies, so any origin
 * may call them and credentials are never allowed (`*` and no Allow-Credentials). The
 * authorization endpoint must not use this: it has no CORS.
 */
export const CORS_RESPONSE_HEADERS: Readonly<Record<string, string>> = {
  'access-control-allow-origin': '*',
  // Without these a browser client cannot read the 401 challenge, the MCP session or the DPoP nonce (RFC 9449 §8).
  'access-control-expose-headers': 'WWW-Authenticate, Mcp-Session-Id, DPoP-Nonce',
}

export const CORS_ALLOWED_HEADERS = 'Authorization, Content-Type, MCP-Protocol-Version, Mcp-Session-Id, Last-Event-ID, DPoP'
/** How long a browser may reuse a preflight answer (Chromium caps it at 2 hours, Firefox at 24). */
export const CORS_MAX_AGE_SECONDS = 86_400

export function preflightHeaders(methods: readonly string[]): Record<string, string> {
  return {
    ...CORS_RESPONSE_HEADERS,
    'access-control-allow-methods': [...new Set([...methods, 'OPTIONS'])].join(', '),
    'access-control-allow-headers': CORS_ALLOWED_HEADERS,
    'access-control-max-age': String(CORS_MAX_AGE_SECONDS),
  }
}

/**
 * `.use(cors({ '/auth/token': ['POST'], ... }))` inside a feature plugin: answers the preflight
 * `OPTIONS` of each listed path with 204 (before any authentication, so never 401) and adds the
 * CORS headers to every response of the routes that plugin registers after it, failures
 * included. Paths are relative to where the feature plugin is mounted.
 *
 * The headers are added in a `mapResponse` hook scoped to the feature plugin: Elysia runs it for
 * error responses too (parse and validation errors, thrown OAuthErrors), and it costs nothing on
 * routes outside the plugin, unlike an `onRequest` hook, which runs for every request.
 */
export function cors(methodsByPath: Readonly<Record<string, readonly string[]>>) {
  const plugin = new Elysia().mapResponse({ as: 'scoped' }, ({ set }) => {
    Object.assign(set.headers, CORS_RESPONSE_HEADERS)
  })
  for (const [path, methods] of Object.entries(methodsByPath)) {
    const headers = preflightHeaders(methods)
    plugin.options(
      path,
      ({ set }) => {
        set.status = 204
        Object.assign(set.headers, headers)
        return null
      },
      { detail: { hide: true } },
    )
  }
  return plugin
}
