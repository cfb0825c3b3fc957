import type { Static } from 'elysia'
import type { Database } from '../lib/db/client.ts'
import { oauthClients } from '../lib/db/schema.ts'
import { OAuthError } from '../lib/http/errors.ts'
import { newId } from '../lib/db/ids.ts'
import { isLoopbackHost } from '../lib/http/loopback.ts'
import { newSecret, sha256Hex } from '../lib/security/crypto.ts'
import { SCOPES, isScope, splitScope } from '../auth/scopes.ts'
import { jwksUriProblem, keySetProblem, publicKeySet } from './client-jwks.ts'
import { ApplicationType, ClientRegistrationRequest, ClientRegistrationResponse, GRANT_TYPES, JWT_BEARER_GRANT, MAX_REDIRECT_URI_LENGTH, RESPONSE_TYPES } from './schemas.ts'

/**
 * What an OAuth client is: its stored row, the metadata it is registered with, the rules that
 * metadata must meet (RFC 7591, RFC 8252, OpenID Connect Registration 1.0) and how it is stored.
 * Registration (register.ts) and client ID metadata documents (client-metadata-document.ts) both
 * apply these rules; the directory (client-directory.ts) looks clients up.
 */

/**
 * An OAuth client, as stored: a registration (`cli_…`) or a client ID metadata document's
 * client, whose id is the document's URL (src/oauth/client-metadata-document.ts).
 */
export type OAuthClient = typeof oauthClients.$inferSelect

export type ClientRegistration = Static<typeof ClientRegistrationResponse>

/** The metadata a client is registered with, defaults applied: RFC 7591 §2 names. */
export type ClientMetadata = Omit<ClientRegistration, 'client_id' | 'client_id_issued_at' | 'client_secret' | 'client_secret_expires_at'>

export type ClientAuthenticationMethod = ClientMetadata['token_endpoint_auth_method']

/** The methods that authenticate with a secret we issue (RFC 6749 §2.3.1). */
export const usesClientSecret = (method: string) => method === 'client_secret_basic' || method === 'client_secret_post'

/** Recognisable in a leak report or a secret scanner, like API keys (`sk_live_`). */
export const CLIENT_SECRET_PREFIX = 'cs_'

/**
 * A client that names itself but cannot be used, with why in words a person can act on (a client
 * ID metadata document that could not be fetched or is invalid). Shown on an error page at the
 * authorize endpoint; `invalid_client` at the token endpoints.
 */
export class ClientLookupError extends Error {}

export type ClientRegistrationRequestBody = Static<typeof ClientRegistrationRequest>
type ApplicationTypeValue = Static<typeof ApplicationType>

const invalidMetadata = (description: string) => new OAuthError(400, 'invalid_client_metadata', description)

// RFC 3986 characters only: no spaces, control characters, backslashes or raw non-ASCII, which
// URL parsers repair or reinterpret silently (WHATWG drops tabs and reads `\` as `/`).
const URI_CHARACTERS = /^[A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=%]+$/
const USERINFO = /^[a-z][a-z0-9+.-]*:\/\/[^/?]*@/i
/**
 * Schemes that run code (`javascript`, `vbscript`), read local or in-memory data (`file`, `data`,
 * `blob`, `filesystem`, `jar`, `view-source`), open another app or protocol with the code in hand
 * (`intent`, `mailto`, `tel`, `sms`, `ws(s)`, `ftp`) or name no place at all (`about`, `urn`: no
 * out-of-band flow). Every scheme starting with `chrome` (chrome:, chrome-extension:,
 * chrome-untrusted:, …) belongs to the browser itself and is refused too.
 */
const FORBIDDEN_SCHEMES = new Set([
  'javascript', 'vbscript', 'data', 'blob', 'file', 'filesystem', 'jar', 'view-source', 'about', 'urn',
  'intent', 'ws', 'wss', 'ftp', 'mailto', 'tel', 'sms',
])
const isForbiddenScheme = (scheme: string) => FORBIDDEN_SCHEMES.has(scheme) || scheme.startsWith('chrome')

/**
 * Why a redirect URI cannot be registered, or null if it can: https; http on a loopback host
 * only (RFC 8252 §7.3); or a private-use scheme (RFC 8252 §7.1, `com.example.app:/cb`,
 * `cursor://…`) that is not a forbidden one. Never a fragment (RFC 6749 §3.1.2), never
 * userinfo (`https://trusted@evil.example` reads as trusted to a person).
 */
export function redirectUriProblem(uri: string): string | null {
  if (uri.length > MAX_REDIRECT_URI_LENGTH) return `is longer than ${MAX_REDIRECT_URI_LENGTH} characters`
  if (!URI_CHARACTERS.test(uri)) return 'contains characters a URI cannot hold (white space, control characters, backslashes or unencoded non-ASCII)'
  if (uri.includes('#')) return 'must not contain a fragment (#)'
  let url: URL
  try {
    url = new URL(uri)
  } catch {
    return 'is not an absolute URI'
  }
  if (USERINFO.test(uri) || url.username || url.password) return 'must not contain userinfo (user@host)'
  const scheme = url.protocol.slice(0, -1)
  if (scheme === 'https' || scheme === 'http') {
    // The parser would read `https:example.com` as `https://example.com/`: only the written form is matched later.
    if (!uri.slice(scheme.length + 1).startsWith('//')) return `must start with ${scheme}://`
    if (scheme === 'https') return null
    // The host as written: the parser turns `127.1` or `0x7f.1` into 127.0.0.1.
    const writtenHost = uri.slice('http://'.length).split(/[/?]/, 1)[0]!.replace(/:\d*$/, '').toLowerCase()
    if (isLoopbackHost(writtenHost) && isLoopbackHost(url.hostname)) return null
    return 'may use http only with a loopback host (127.0.0.1, [::1] or localhost); use https'
  }
  if (isForbiddenScheme(scheme)) return `must not use the ${scheme}: scheme`
  if (uri.length === url.protocol.length) return 'has a scheme and nothing after it'
  return null
}

/**
 * True when a redirect URI leads back to the user's own device: a loopback host (http or https,
 * RFC 8252 §7.3) or a private-use scheme (RFC 8252 §7.1) that is not a forbidden one. Such a
 * redirect cannot carry the user to a site elsewhere, so it is where an error may be sent
 * without a page in between (RFC 9700 §4.11.2), what makes a client `native`, and what the
 * consent page calls "runs on your device". False for web URLs and for anything unparseable.
 */
export function isOnDeviceRedirect(uri: string): boolean {
  let url: URL
  try {
    url = new URL(uri)
  } catch {
    return false
  }
  const scheme = url.protocol.slice(0, -1)
  if (scheme === 'http' || scheme === 'https') return isLoopbackHost(url.hostname)
  return !isForbiddenScheme(scheme)
}

/**
 * The `application_type` of a registration (OpenID Connect Registration 1.0 §2; the MCP
 * authorization spec has clients send it): `web` may hold only web redirects (https on a
 * non-loopback host), never one on the device; `native` may hold any redirect URI the rules
 * allow, claimed https URLs included (RFC 8252 §7.2: VS Code registers `https://vscode.dev/redirect`
 * next to its loopback ones, as `native`). Absent, it is derived: `native` when any redirect
 * URI is on the device, else `web`, the one value that fits the URIs given.
 */
function applicationTypeFor(requested: ApplicationTypeValue | undefined, redirectUris: readonly string[]): ApplicationTypeValue {
  const onDevice = redirectUris.findIndex(isOnDeviceRedirect)
  if (requested === undefined) return onDevice === -1 ? 'web' : 'native'
  if (requested === 'web' && onDevice !== -1) {
    throw invalidMetadata(
      `application_type: web clients may use only https redirect URIs on a web host, and redirect_uris/${onDevice} (${redirectUris[onDevice]}) ` +
        'leads to a loopback host or a private-use scheme on the user\'s device, which only native clients may use (OpenID Connect Registration 1.0 §2). ' +
        'Register with application_type native, or leave application_type out.',
    )
  }
  return requested
}

// Characters a name shown to a person must not hold: C0 and C1 controls and DEL (terminals and
// log viewers act on them), line and paragraph separators (the name is one line), and the
// bidirectional formatting characters (U+202A–U+202E embeddings and overrides, U+2066–U+2069
// isolates, U+200E/U+200F marks, U+061C the Arabic letter mark), which can make the name read,
// on the consent page, as something other than the characters it holds ("Trojan Source").
const CLIENT_NAME_CONTROLS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/
const CLIENT_NAME_BIDI = /[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]/

/** Why a client_name cannot be registered, or null if it can. */
export function clientNameProblem(name: string): string | null {
  const control = CLIENT_NAME_CONTROLS.exec(name)
  if (control) return `must not contain control characters (U+${codePoint(control[0])} at position ${control.index})`
  const bidi = CLIENT_NAME_BIDI.exec(name)
  if (bidi) {
    return `must not contain bidirectional formatting characters (U+${codePoint(bidi[0])} at position ${bidi.index}), which can make the name read differently from what it is`
  }
  if (name.trim() === '') return 'must contain a visible character'
  return null
}

const codePoint = (char: string) => char.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')

/** `scope` as a set of known scopes, in the order given, one space apart. */
function normalizeScope(scope: string): string {
  const requested = splitScope(scope)
  if (requested.length === 0) throw invalidMetadata('scope: name at least one scope.')
  if (requested.some((name) => !isScope(name))) {
    throw invalidMetadata(`scope: unknown scope; the scopes are ${SCOPES.join(', ')}.`)
  }
  return requested.join(' ')
}

/**
 * The grants a client may register: authorization_code (with refresh_token if it likes), and,
 * for a confidential client only, the JWT bearer grant of enterprise-managed authorization,
 * which needs no redirect and may then be its only grant (the MCP SDK's CrossAppAccessProvider
 * registers `grant_types: [jwt-bearer]`, `redirect_uris: []`).
 */
function grantTypesFor(request: ClientRegistrationRequestBody, method: ClientAuthenticationMethod): ClientMetadata['grant_types'] {
  const grantTypes = [...new Set(request.grant_types ?? GRANT_TYPES)]
  const jwtBearer = grantTypes.includes(JWT_BEARER_GRANT)
  if (jwtBearer && method === 'none') {
    throw invalidMetadata(
      `grant_types: ${JWT_BEARER_GRANT} is for confidential clients; register with token_endpoint_auth_method client_secret_basic, client_secret_post or private_key_jwt.`,
    )
  }
  // RFC 7591 §2.1: the `code` response type (the only one) goes with the authorization_code grant.
  if (!grantTypes.includes('authorization_code') && !jwtBearer) {
    throw invalidMetadata('grant_types: must include authorization_code, the grant that goes with the code response type.')
  }
  return grantTypes
}

/** RFC 7591 §2.1: `code` if and only if the authorization_code grant; the default follows the grants. */
function responseTypesFor(request: ClientRegistrationRequestBody, grantTypes: readonly string[]): ClientMetadata['response_types'] {
  const redirectBased = grantTypes.includes('authorization_code')
  const responseTypes = [...new Set(request.response_types ?? (redirectBased ? RESPONSE_TYPES : []))]
  if (redirectBased && responseTypes.length === 0) throw invalidMetadata('response_types: must include code, which goes with the authorization_code grant.')
  if (!redirectBased && responseTypes.length > 0) throw invalidMetadata('response_types: code goes with the authorization_code grant, which grant_types does not include; leave response_types out.')
  return responseTypes
}

/**
 * How a confidential client proves itself (docs/oauth.md#confidential-clients): a secret we issue
 * (client_secret_basic, client_secret_post: nothing more to register), or its public keys
 * (private_key_jwt: exactly one of `jwks` and `jwks_uri`, RFC 7591 §2). `null` is read as absent.
 */
function keysFor(request: ClientRegistrationRequestBody, method: ClientAuthenticationMethod, allowPrivateTargets: boolean): Pick<ClientMetadata, 'jwks' | 'jwks_uri'> {
  const jwks = request.jwks ?? undefined
  const jwksUri = request.jwks_uri ?? undefined
  if (method !== 'private_key_jwt') {
    if (jwks !== undefined || jwksUri !== undefined) throw invalidMetadata(`jwks and jwks_uri go with token_endpoint_auth_method private_key_jwt, not ${method}.`)
    return {}
  }
  if ((jwks === undefined) === (jwksUri === undefined)) {
    throw invalidMetadata('private_key_jwt: give exactly one of jwks (your public keys) and jwks_uri (the https URL where you publish them).')
  }
  if (jwksUri !== undefined) {
    const problem = jwksUriProblem(jwksUri, { allowPrivateTargets })
    if (problem) throw invalidMetadata(`jwks_uri ${problem}.`)
    return { jwks_uri: jwksUri }
  }
  const problem = keySetProblem(jwks!)
  if (problem) throw invalidMetadata(`jwks/${problem}.`)
  return { jwks: publicKeySet(jwks!) }
}

/**
 * The rules a schema cannot express, applied to a body the schema has accepted; throws the
 * OAuthError a client sees. Duplicates are dropped rather than refused: RFC 7591 §3.2.1 lets the
 * server adjust values, and the response tells the client what was registered.
 * `allowPrivateTargets` (WEBHOOK_ALLOW_PRIVATE_TARGETS) lets a `jwks_uri` name a private address.
 */
export function validateClientMetadata(request: ClientRegistrationRequestBody, options: { allowPrivateTargets?: boolean } = {}): ClientMetadata {
  const requestedUris = request.redirect_uris ?? []
  for (const [index, uri] of requestedUris.entries()) {
    const problem = redirectUriProblem(uri)
    if (problem) throw new OAuthError(400, 'invalid_redirect_uri', `redirect_uris/${index} ${problem}.`)
  }
  const method = request.token_endpoint_auth_method ?? 'none'
  const grantTypes = grantTypesFor(request, method)
  if (grantTypes.includes('authorization_code') && requestedUris.length === 0) {
    throw invalidMetadata('redirect_uris: the authorization_code grant needs at least one redirect URI.')
  }
  if (request.client_name !== undefined) {
    const problem = clientNameProblem(request.client_name)
    if (problem) throw invalidMetadata(`client_name ${problem}.`)
  }
  const redirectUris = [...new Set(requestedUris)]
  const metadata: ClientMetadata = {
    redirect_uris: redirectUris,
    grant_types: grantTypes,
    response_types: responseTypesFor(request, grantTypes),
    token_endpoint_auth_method: method,
    application_type: applicationTypeFor(request.application_type, redirectUris),
    ...keysFor(request, method, options.allowPrivateTargets ?? false),
  }
  if (request.client_name !== undefined) metadata.client_name = request.client_name
  if (request.scope !== undefined) metadata.scope = normalizeScope(request.scope)
  return metadata
}

/**
 * Stores a client; the RFC 7591 §3.2.1 body: its id, issue time and the metadata as registered,
 * and for a client_secret_* client its new secret, which is in this body only: the row holds its
 * SHA-256 (a 32-byte random secret needs no slow hash, as API keys).
 */
export async function storeClient(db: Database, metadata: ClientMetadata): Promise<ClientRegistration> {
  const secret = usesClientSecret(metadata.token_endpoint_auth_method) ? newSecret(CLIENT_SECRET_PREFIX) : undefined
  const [client] = await db
    .insert(oauthClients)
    .values({
      id: newId('cli'),
      clientName: metadata.client_name,
      redirectUris: metadata.redirect_uris,
      grantTypes: metadata.grant_types,
      responseTypes: metadata.response_types,
      tokenEndpointAuthMethod: metadata.token_endpoint_auth_method,
      applicationType: metadata.application_type,
      scope: metadata.scope,
      clientSecretHash: secret === undefined ? null : sha256Hex(secret),
      jwks: metadata.jwks ?? null,
      jwksUri: metadata.jwks_uri ?? null,
    })
    .returning({ id: oauthClients.id, createdAt: oauthClients.createdAt })
  const registration: ClientRegistration = { client_id: client!.id, client_id_issued_at: Math.floor(client!.createdAt.getTime() / 1000), ...metadata }
  // RFC 7591 §3.2.1: 0 says the secret does not expire.
  if (secret !== undefined) Object.assign(registration, { client_secret: secret, client_secret_expires_at: 0 })
  return registration
}

/** What the OAuth endpoints see of a document client: its id is the URL. */
export function asClient(url: string, metadata: ClientMetadata, createdAt: Date): OAuthClient {
  return {
    id: url,
    clientName: metadata.client_name ?? null,
    redirectUris: metadata.redirect_uris,
    grantTypes: metadata.grant_types,
    responseTypes: metadata.response_types,
    tokenEndpointAuthMethod: metadata.token_endpoint_auth_method,
    applicationType: metadata.application_type,
    scope: metadata.scope ?? null,
    clientSecretHash: null,
    jwks: null,
    jwksUri: null,
    createdAt,
  }
}

/** The columns of a client's row besides its id, as written for a document client (createMetadataDocumentClients). */
export const storedColumns = (client: OAuthClient) => ({
  clientName: client.clientName,
  redirectUris: client.redirectUris,
  grantTypes: client.grantTypes,
  responseTypes: client.responseTypes,
  tokenEndpointAuthMethod: client.tokenEndpointAuthMethod,
  applicationType: client.applicationType,
  scope: client.scope,
})
