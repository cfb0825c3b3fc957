import { Elysia } from 'elysia'
import { PROBLEM_CONTENT_TYPE, oauthErrorFor, type OAuthErrorCode, type Problem } from '../lib/http/errors.ts'
import { isFormContentType, parseFormBody, readJsonBody } from '../lib/http/foundation.ts'

export interface OAuthWireFormatOptions {
  /** The error code of a body that breaks the schema: `invalid_client_metadata` at registration (RFC 7591 §3.2.2). */
  invalidBody?: OAuthErrorCode
  /** Also take `application/x-www-form-urlencoded` bodies, as standard OAuth clients send them (RFC 6749 §4.1.3). */
  forms?: boolean
}

/**
 * The wire format of OAuth endpoints, for a feature plugin to `.use()` the way it uses `cors()`:
 * its routes answer failures with the OAuth error object (RFC 6749 §5.2) instead of
 * problem+json, never cached; their JSON (and optionally form) bodies are read here. The shared HTTP layer shapes
 * every failure as problem+json; this rewrites that body on the way out, so adding an OAuth
 * endpoint is a matter of using this plugin in its feature, never of editing src/lib/http/foundation.ts.
 */
export function oauthWireFormat(options: OAuthWireFormatOptions = {}) {
  const invalidBody = options.invalidBody ?? 'invalid_request'
  const forms = options.forms ?? false
  return new Elysia()
    .onParse({ as: 'scoped' }, ({ request }) => (forms && isFormContentType(request.headers.get('content-type')) ? parseFormBody(request) : readJsonBody(request)))
    .mapResponse({ as: 'scoped' }, ({ responseValue, set }) => {
    if (set.headers['content-type'] !== PROBLEM_CONTENT_TYPE) return undefined
    const { status, body } = oauthErrorFor(responseValue as Problem, invalidBody)
    set.headers['content-type'] = 'application/json'
    set.headers['cache-control'] = 'no-store'
    return Response.json(body, { status, headers: set.headers as Record<string, string> })
  })
}
