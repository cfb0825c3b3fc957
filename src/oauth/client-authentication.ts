import type { Static } from 'elysia'
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, errors, jwtVerify, type JSONWebKeySet, type JWTPayload, type ProtectedHeaderParameters } from 'jose'
import type { Database } from '../lib/db/client.ts'
import { OAuthError } from '../lib/http/errors.ts'
import { constantTimeEqual, sha256Hex } from '../lib/security/crypto.ts'
import { MAX_JTI_LENGTH, firstUseOfJti } from '../lib/security/jti-replay.ts'
import type { ClientDirectory } from './client-directory.ts'
import type { PublicJwkSet } from './client-jwks.ts'
import { ClientLookupError, type ClientAuthenticationMethod, type OAuthClient } from './client-model.ts'
import { CLIENT_ASSERTION_ALGORITHMS, type ClientAuthentication } from './schemas.ts'

/**
 * Client authentication at the token and revocation endpoints (RFC 6749 §2.3, RFC 7523 §2.2 and
 * §3; docs/oauth.md#confidential-clients): who the client is, proven the way it registered. One
 * function for every endpoint that needs it: `authenticateClient`. Every failure is 401
 * `invalid_client` (with `WWW-Authenticate: Basic` when HTTP Basic was tried, RFC 6749 §5.2),
 * except a request that uses two ways at once, which is malformed (400 `invalid_request`).
 */

export const CLIENT_ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'
/** "Short" (RFC 7523 §3): an assertion whose `exp` is further ahead than this is refused. */
export const MAX_ASSERTION_LIFETIME_SECONDS = 300
/** How far the client's clock may be from ours, either way, for `exp`, `nbf` and `iat`. */
export const ASSERTION_CLOCK_TOLERANCE_SECONDS = 60
/** Types an assertion may declare (or none): a JWT of another kind (`at+jwt`, `dpop+jwt`, `oauth-id-jag+jwt`) is not a client assertion. */
const ASSERTION_TYPES = new Set(['jwt', 'client-authentication+jwt'])
const BASIC_CHALLENGE = { 'www-authenticate': 'Basic realm="OAuth clients", charset="UTF-8"' }

export type ClientAuthenticationParameters = Static<typeof ClientAuthentication>

export interface ClientAuthenticationDeps {
  db: Database
  clients: ClientDirectory
  /** The issuer: an assertion's `aud` is it or its token endpoint. */
  baseUrl: string
}

/** What a request presents: the method it uses and the credential, not yet checked. */
export type ClientCredentials =
  | { method: 'none'; clientId: string | undefined }
  | { method: 'client_secret_basic' | 'client_secret_post'; clientId: string; secret: string }
  | { method: 'private_key_jwt'; clientId: string | undefined; assertion: string }

const present = (value: string | undefined): value is string => value !== undefined && value !== ''

function invalidClient(description: string, method?: ClientCredentials['method']): OAuthError {
  return new OAuthError(401, 'invalid_client', description, method === 'client_secret_basic' ? BASIC_CHALLENGE : {})
}

/** RFC 6749 §2.3.1 and Appendix B: `Basic base64(urlencode(id) ":" urlencode(secret))`. */
function readBasic(header: string): { clientId: string; secret: string } {
  const refuse = (why: string) => invalidClient(`The Authorization header ${why}: send Basic base64(client_id ":" client_secret), each form-urlencoded (RFC 6749 §2.3.1).`, 'client_secret_basic')
  const encoded = /^basic[ \t]+([A-Za-z0-9+/]+={0,2})[ \t]*$/i.exec(header)?.[1]
  if (!encoded) throw refuse('is not Basic credentials')
  let decoded: string
  try {
    decoded = new TextDecoder('utf-8', { fatal: true }).decode(Uint8Array.from(atob(encoded), (char) => char.charCodeAt(0)))
  } catch {
    throw refuse('is not base64 of UTF-8 text')
  }
  const colon = decoded.indexOf(':')
  if (colon === -1) throw refuse('has no colon between the client_id and the client_secret')
  try {
    const formDecode = (text: string) => decodeURIComponent(text.replaceAll('+', ' '))
    const clientId = formDecode(decoded.slice(0, colon))
    const secret = formDecode(decoded.slice(colon + 1))
    if (clientId === '' || secret === '') throw refuse('has an empty client_id or client_secret')
    return { clientId, secret }
  } catch (error) {
    if (error instanceof OAuthError) throw error
    throw refuse('holds a malformed percent-encoding')
  }
}

/**
 * The credentials a request presents (RFC 6749 §2.3.1, RFC 7521 §4.2), without checking them.
 * An `Authorization` header of another scheme is not client authentication and is ignored;
 * empty parameters count as absent. Two ways at once is 400 `invalid_request` (RFC 6749 §2.3,
 * §5.2); a client_id in the body that is not the one of the Authorization header, 401.
 */
export function readClientCredentials(headers: Headers, body: ClientAuthenticationParameters): ClientCredentials {
  const authorization = headers.get('authorization')
  const basic = authorization !== null && /^basic(?:[ \t]|$)/i.test(authorization)
  const assertionSent = present(body.client_assertion) || present(body.client_assertion_type)
  if ([basic, present(body.client_secret), assertionSent].filter(Boolean).length > 1) {
    throw new OAuthError(400, 'invalid_request', 'The request authenticates the client in more than one way (HTTP Basic, client_secret, client_assertion): use the one the client registered, alone (RFC 6749 §2.3).')
  }
  const bodyClientId = present(body.client_id) ? body.client_id : undefined
  if (basic) {
    const credentials = readBasic(authorization!)
    if (bodyClientId !== undefined && bodyClientId !== credentials.clientId) {
      throw invalidClient('The client_id in the body is not the one in the Authorization header.', 'client_secret_basic')
    }
    return { method: 'client_secret_basic', ...credentials }
  }
  if (present(body.client_secret)) {
    if (bodyClientId === undefined) throw invalidClient('client_secret was sent without client_id.')
    return { method: 'client_secret_post', clientId: bodyClientId, secret: body.client_secret }
  }
  if (assertionSent) {
    if (body.client_assertion_type !== CLIENT_ASSERTION_TYPE) throw invalidClient(`client_assertion_type must be ${CLIENT_ASSERTION_TYPE} (RFC 7523 §2.2).`)
    if (!present(body.client_assertion)) throw invalidClient('client_assertion_type was sent without client_assertion.')
    return { method: 'private_key_jwt', clientId: bodyClientId, assertion: body.client_assertion }
  }
  return { method: 'none', clientId: bodyClientId }
}

const HOW_TO: Record<ClientAuthenticationMethod, string> = {
  none: 'send its client_id alone (no secret, assertion or HTTP Basic)',
  client_secret_basic: 'send its client_id and client_secret in an HTTP Basic Authorization header',
  client_secret_post: 'send client_id and client_secret in the request body',
  private_key_jwt: `send client_assertion, a JWT signed with one of its registered keys, and client_assertion_type ${CLIENT_ASSERTION_TYPE}`,
}

/** The unverified header and claims of an assertion; null when it is not a JWT. */
function decodeAssertion(assertion: string): { header: ProtectedHeaderParameters; claims: JWTPayload } | null {
  try {
    return { header: decodeProtectedHeader(assertion), claims: decodeJwt(assertion) }
  } catch {
    return null
  }
}

/**
 * RFC 7523 §3, checked on the assertion's claims before any key is fetched (so that only a
 * well-formed assertion for this client can make us fetch its `jwks_uri`); the signature is
 * verified afterwards over these same bytes.
 */
function assertionProblem(header: ProtectedHeaderParameters, claims: JWTPayload, clientId: string, baseUrl: string, nowSeconds: number): string | null {
  const accepted: readonly string[] = CLIENT_ASSERTION_ALGORITHMS
  if (typeof header.alg !== 'string' || !accepted.includes(header.alg)) {
    return `client_assertion is signed with alg ${JSON.stringify(header.alg ?? null)}; accepted: ${accepted.join(', ')} (asymmetric only)`
  }
  if (header.typ !== undefined && !ASSERTION_TYPES.has(String(header.typ).toLowerCase().replace(/^application\//, ''))) {
    return `client_assertion has typ ${JSON.stringify(header.typ)}; a client assertion is typ JWT, client-authentication+jwt or none`
  }
  if (claims.iss !== clientId || claims.sub !== clientId) return 'client_assertion must have iss and sub both equal to the client_id (RFC 7523 §3)'
  const audiences = [baseUrl, `${baseUrl}/auth/token`]
  const aud = Array.isArray(claims.aud) ? claims.aud : [claims.aud]
  if (!aud.some((value) => typeof value === 'string' && audiences.includes(value))) {
    return `client_assertion aud must be this authorization server's issuer (${audiences[0]}) or its token endpoint (${audiences[1]})`
  }
  if (typeof claims.exp !== 'number') return 'client_assertion has no exp'
  if (claims.exp + ASSERTION_CLOCK_TOLERANCE_SECONDS <= nowSeconds) return 'client_assertion has expired'
  if (claims.exp > nowSeconds + MAX_ASSERTION_LIFETIME_SECONDS + ASSERTION_CLOCK_TOLERANCE_SECONDS) {
    return `client_assertion exp is more than ${MAX_ASSERTION_LIFETIME_SECONDS} seconds ahead; sign a short-lived assertion for each request`
  }
  if (claims.nbf !== undefined && (typeof claims.nbf !== 'number' || claims.nbf > nowSeconds + ASSERTION_CLOCK_TOLERANCE_SECONDS)) return 'client_assertion is not valid yet (nbf)'
  if (claims.iat !== undefined && (typeof claims.iat !== 'number' || claims.iat > nowSeconds + ASSERTION_CLOCK_TOLERANCE_SECONDS)) return 'client_assertion iat is in the future'
  if (typeof claims.jti !== 'string' || claims.jti === '' || claims.jti.length > MAX_JTI_LENGTH) {
    return `client_assertion needs a jti (1 to ${MAX_JTI_LENGTH} characters), unique to this assertion`
  }
  return null
}

/** Whether a key of `keys` verifies the signature; `no key` when none could (no kid or alg of the set matches). */
async function signatureCheck(assertion: string, keys: PublicJwkSet): Promise<'verified' | 'no key' | 'bad signature'> {
  // The claims were checked already (assertionProblem); jwtVerify also refuses unencoded payloads (RFC 7797).
  const options = { algorithms: [...CLIENT_ASSERTION_ALGORITHMS], clockTolerance: ASSERTION_CLOCK_TOLERANCE_SECONDS }
  try {
    await jwtVerify(assertion, createLocalJWKSet(keys as JSONWebKeySet), options)
    return 'verified'
  } catch (error) {
    if (error instanceof errors.JWKSNoMatchingKey) return 'no key'
    // Keys without a kid: jose hands back every candidate, to be tried in turn.
    if (error instanceof errors.JWKSMultipleMatchingKeys) {
      for await (const key of error) {
        if (await jwtVerify(assertion, key, options).then(() => true, () => false)) return 'verified'
      }
    }
    return 'bad signature'
  }
}

/** RFC 7523 §3: the claims, then the signature with the client's keys, then the jti, which is accepted once across every instance. */
async function verifyClientAssertion(deps: ClientAuthenticationDeps, client: OAuthClient, assertion: string): Promise<void> {
  const decoded = decodeAssertion(assertion)
  if (!decoded) throw invalidClient('client_assertion is not a signed JWT.')
  const problem = assertionProblem(decoded.header, decoded.claims, client.id, deps.baseUrl, Math.floor(Date.now() / 1000))
  if (problem) throw invalidClient(`${problem}.`)
  const keysOf = async (refetch: boolean) => {
    try {
      return await deps.clients.keysOf(client, { refetch })
    } catch (error) {
      if (error instanceof ClientLookupError) throw invalidClient(error.message)
      throw error
    }
  }
  let verdict = await signatureCheck(assertion, await keysOf(false))
  // The client may have rotated its published keys since they were fetched.
  if (verdict === 'no key' && client.jwksUri) verdict = await signatureCheck(assertion, await keysOf(true))
  if (verdict === 'no key') throw invalidClient(`No key of this client's JWK set goes with the client_assertion's kid ${JSON.stringify(decoded.header.kid ?? null)} and alg ${decoded.header.alg}.`)
  if (verdict === 'bad signature') throw invalidClient("client_assertion's signature does not verify with this client's keys.")
  const expiresAt = new Date((decoded.claims.exp! + ASSERTION_CLOCK_TOLERANCE_SECONDS) * 1000)
  if (!(await firstUseOfJti(deps.db, { namespace: `client_assertion:${client.id}`, jti: decoded.claims.jti!, expiresAt }))) {
    throw invalidClient('client_assertion was used before (its jti was seen): sign a new assertion for each request (RFC 7523 §3).')
  }
}

/**
 * Checks presented credentials: the client exists and is usable, it authenticates with the
 * method it registered, and the credential is right. A metadata document's client is public.
 */
export async function verifyClientCredentials(deps: ClientAuthenticationDeps, credentials: ClientCredentials): Promise<OAuthClient> {
  // RFC 7521 §4.2: without client_id, the assertion names its client (as sub; iss must agree).
  // Read before the signature is checked: only a string is taken (a number there was a 500).
  const named = credentials.method === 'private_key_jwt' ? decodeAssertion(credentials.assertion)?.claims.sub : undefined
  const clientId = credentials.clientId ?? (typeof named === 'string' ? named : undefined)
  let client: OAuthClient | null
  try {
    client = await deps.clients.find(clientId)
  } catch (error) {
    if (error instanceof ClientLookupError) throw invalidClient(error.message, credentials.method)
    throw error
  }
  // Clients then register again (docs/oauth.md: 401 invalid_client for an unknown client_id).
  if (!client) throw invalidClient('Unknown client_id: register the client again (POST /auth/register).', credentials.method)
  const registered = client.tokenEndpointAuthMethod as ClientAuthenticationMethod
  if (credentials.method !== registered) {
    throw invalidClient(`This client is registered with token_endpoint_auth_method ${registered}: ${HOW_TO[registered]}; the request used ${credentials.method}.`, credentials.method)
  }
  if (credentials.method === 'client_secret_basic' || credentials.method === 'client_secret_post') {
    if (!client.clientSecretHash || !constantTimeEqual(sha256Hex(credentials.secret), client.clientSecretHash)) {
      throw invalidClient('The client secret is wrong.', credentials.method)
    }
  } else if (credentials.method === 'private_key_jwt') {
    await verifyClientAssertion(deps, client, credentials.assertion)
  }
  return client
}

/**
 * Who the client of a token or revocation request is, proven the way it registered: HTTP Basic
 * or `client_secret` in the body (`client_secret_basic`, `client_secret_post`), a signed JWT
 * (`private_key_jwt`), or nothing but its client_id (`none`). The grants run with the client
 * this returns.
 */
export async function authenticateClient(deps: ClientAuthenticationDeps, headers: Headers, body: ClientAuthenticationParameters): Promise<OAuthClient> {
  return verifyClientCredentials(deps, readClientCredentials(headers, body))
}
