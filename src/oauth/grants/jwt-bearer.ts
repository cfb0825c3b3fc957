import { and, eq, sql } from 'drizzle-orm'
import { compactVerify, decodeProtectedHeader, errors, type CryptoKey, type JWSHeaderParameters } from 'jose'
import type { Database } from '../../lib/db/client.ts'
import { grants, identityProviderSubjects, identityProviders, users } from '../../lib/db/schema.ts'
import { newId } from '../../lib/db/ids.ts'
import { isForeignKeyViolation } from '../../lib/db/errors.ts'
import { OAuthError } from '../../lib/http/errors.ts'
import type { Logger } from '../../lib/runtime/logger.ts'
import { firstUseOfJti, MAX_JTI_LENGTH } from '../../lib/security/jti-replay.ts'
import { SCOPES, isScope, splitScope, type Scope } from '../../auth/scopes.ts'
import { normalizeEmail } from '../../accounts/service.ts'
import { NoMatchingProviderKey, ProviderKeysUnavailable, type ProviderKeySets } from '../../identity-providers/key-sets.ts'
import { DEFAULT_SCOPE, parseResource } from '../authorization-request.ts'
import type { OAuthClient } from '../client-model.ts'
import { invalidGrant, newAccessToken, type Grant, type TokenDeps, type TokenResponse } from '../tokens.ts'

/**
 * The JWT bearer grant (RFC 7523 §2.1) with Identity Assertion JWT Authorization Grants
 * (draft-ietf-oauth-identity-assertion-authz-grant, "ID-JAG"; the MCP extension
 * io.modelcontextprotocol/enterprise-managed-authorization): an enterprise identity provider an
 * account trusts (src/identity-providers/) vouches for one of the account's users and one of our
 * clients, and the client gets an access token without a consent screen.
 * docs/oauth.md#enterprise-managed-authorization-cross-app-access explains it for integrators.
 */

export const JWT_BEARER_GRANT_TYPE = 'urn:ietf:params:oauth:grant-type:jwt-bearer'
/** Draft §7: the profile a resource authorization server advertises in `authorization_grant_profiles_supported`. */
export const ID_JAG_GRANT_PROFILE = 'urn:ietf:params:oauth:grant-profile:id-jag'
/** Draft §3: the JWT `typ` of an ID-JAG (RFC 8725 §3.11: typed JWTs). */
export const ID_JAG_TYP = 'oauth-id-jag+jwt'

/**
 * The extension (§7.4.2) wants ID-JAGs short-lived without saying how short; the draft's and the
 * extension's examples live 300 s (`expires_in: 300`), as Okta's do. Longer ones are refused.
 */
export const MAX_ID_JAG_LIFETIME_SECONDS = 300
/** How far the provider's clock may be from ours when `exp`, `iat` and `nbf` are checked. */
export const CLOCK_SKEW_SECONDS = 60

/**
 * The extension (§7.2.1) has the authorization server weigh scopes by risk. The scopes that
 * administer the account are never granted by an ID-JAG: an API key made with `keys:write`
 * would outlive the provider's removal, a provider added with `identity_providers:write` would
 * widen the trust itself. An owner grants them with their own consent, on our consent page.
 */
export const SCOPES_NOT_BY_ID_JAG: readonly Scope[] = ['keys:read', 'keys:write', 'grants:read', 'grants:write', 'identity_providers:read', 'identity_providers:write']

/** Asymmetric algorithms only (the extension §7.4.1: an explicit allow-list; never `none`, never a shared secret). */
export const ID_JAG_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'] as const

export interface IdJagDeps {
  db: Database
  /** Our issuer identifier (`{base_url}`): the `aud` an ID-JAG must name. */
  baseUrl: string
  providerKeys: ProviderKeySets
  now?: () => number
}

/** What an accepted ID-JAG grants: who, for which client, what, and for which resources. */
export interface AcceptedIdJag {
  accountId: string
  userId: string
  clientId: string
  identityProviderId: string
  scopes: Scope[]
  /** The access token's audiences: `{base_url}` and/or `{base_url}/mcp`. */
  audience: string[]
  jti: string
  /** RFC 9449 §6.1 via draft §8.6.1: the ID-JAG is bound to this key (a JWK SHA-256 thumbprint); the client must prove it holds it. */
  confirmationJkt?: string
}

const quoted = (value: unknown) => {
  const text = JSON.stringify(value) ?? String(value)
  return text.length > 120 ? `${text.slice(0, 120)}…` : text
}

/** A NumericDate in words: RFC 3339 when it is a date at all (a hostile `exp` may be 1e308). */
const dateOf = (seconds: number) => {
  const date = new Date(seconds * 1000)
  return Number.isNaN(date.getTime()) ? `${seconds} s after the epoch` : date.toISOString()
}

const isTypedIdJag = (typ: unknown) => typeof typ === 'string' && [ID_JAG_TYP, `application/${ID_JAG_TYP}`].includes(typ.toLowerCase())

/** The JWS header of the assertion, read before anything is trusted: only to choose the key and refuse what is not an ID-JAG. */
function readHeader(assertion: string): JWSHeaderParameters {
  if (assertion.split('.').length !== 3) throw invalidGrant('The assertion is not a signed JWT (three base64url parts separated by dots); an encrypted ID-JAG is not accepted.')
  let header: JWSHeaderParameters
  try {
    header = decodeProtectedHeader(assertion) as JWSHeaderParameters
  } catch {
    throw invalidGrant('The assertion is not a JWT: its header is not base64url-encoded JSON.')
  }
  if (!isTypedIdJag(header.typ)) throw invalidGrant(`The assertion's typ is ${quoted(header.typ ?? null)}, not ${ID_JAG_TYP}: only an ID-JAG is accepted by this grant.`)
  const alg = header.alg
  if (typeof alg !== 'string' || !(ID_JAG_ALGORITHMS as readonly string[]).includes(alg)) {
    throw invalidGrant(`The ID-JAG is signed with alg ${quoted(alg ?? null)}; accepted are the asymmetric ${ID_JAG_ALGORITHMS.join(', ')} (never none, never HMAC).`)
  }
  if (header.crit !== undefined) throw invalidGrant('The ID-JAG has a crit header parameter, which this server does not understand (RFC 7515 §4.1.11).')
  return header
}

/** The issuer, read from the unverified payload only to find the providers whose keys may have signed it. */
function readIssuer(assertion: string): string {
  let payload: unknown
  try {
    payload = JSON.parse(Buffer.from(assertion.split('.')[1]!, 'base64url').toString('utf8'))
  } catch {
    throw invalidGrant('The ID-JAG is not a JWT: its payload is not base64url-encoded JSON.')
  }
  const iss = (payload as { iss?: unknown } | null)?.iss
  if (typeof iss !== 'string' || iss.length === 0) throw invalidGrant('The ID-JAG has no iss claim.')
  return iss
}

type Provider = typeof identityProviders.$inferSelect

/** The payload, if `provider`'s keys verify the signature; otherwise why not. */
async function verifiedBy(deps: IdJagDeps, provider: Provider, assertion: string, header: JWSHeaderParameters): Promise<{ payload: Uint8Array } | { error: string }> {
  const algorithms = [...ID_JAG_ALGORITHMS]
  const badSignature = { error: `The ID-JAG's signature does not verify with the identity provider's keys (${provider.jwksUri}).` }
  try {
    const key = await deps.providerKeys.keyFor(provider.jwksUri, header)
    return { payload: (await compactVerify(assertion, key, { algorithms })).payload }
  } catch (error) {
    if (error instanceof errors.JWKSMultipleMatchingKeys) {
      // No kid, several keys of the kind: the signature decides which one it is.
      for await (const key of error as unknown as AsyncIterable<CryptoKey>) {
        try {
          return { payload: (await compactVerify(assertion, key, { algorithms })).payload }
        } catch {
          // Not this key.
        }
      }
      return badSignature
    }
    if (error instanceof ProviderKeysUnavailable || error instanceof NoMatchingProviderKey) return { error: error.message }
    if (error instanceof errors.JWSSignatureVerificationFailed) return badSignature
    if (error instanceof errors.JOSEError) return { error: `The ID-JAG cannot be verified: ${error.message}.` }
    throw error
  }
}

interface IdJagClaims {
  iss: string
  sub: string
  clientId: string
  jti: string
  exp: number
  resource?: string[]
  scope?: string
  email?: unknown
  confirmationJkt?: string
}

const isNumericDate = (value: unknown): value is number => typeof value === 'number' && Number.isFinite(value)

/** RFC 7523 §3, RFC 7521 §5.2 and draft §3 / §4.4.1: the claims, each checked, in the order of the draft's list. */
function checkClaims(deps: IdJagDeps, payload: Uint8Array, clientId: string): IdJagClaims {
  let claims: Record<string, unknown>
  try {
    const parsed: unknown = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(payload))
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new TypeError('not an object')
    claims = parsed as Record<string, unknown>
  } catch {
    throw invalidGrant('The ID-JAG payload is not a JSON object.')
  }
  const nowSeconds = Math.floor((deps.now ?? Date.now)() / 1000)

  if (typeof claims.sub !== 'string' || claims.sub.length === 0 || claims.sub.length > 1024) throw invalidGrant('The ID-JAG has no sub claim (the user it is for).')
  // Draft §4.4.1: a string, or an array of exactly one element, that is our issuer identifier.
  const aud = Array.isArray(claims.aud) && claims.aud.length === 1 ? claims.aud[0] : claims.aud
  if (aud !== deps.baseUrl) throw invalidGrant(`The ID-JAG's aud is ${quoted(claims.aud ?? null)}; it must be this authorization server's issuer, ${deps.baseUrl}, alone.`)
  if (typeof claims.client_id !== 'string' || claims.client_id.length === 0) throw invalidGrant('The ID-JAG has no client_id claim (the client it lets act).')
  if (claims.client_id !== clientId) throw invalidGrant(`The ID-JAG was issued for the client ${quoted(claims.client_id)}, not for the client making this request (${clientId}).`)
  if (typeof claims.jti !== 'string' || claims.jti.length === 0 || claims.jti.length > MAX_JTI_LENGTH) {
    throw invalidGrant(`The ID-JAG has no jti claim of 1 to ${MAX_JTI_LENGTH} characters (each ID-JAG is accepted once).`)
  }
  if (!isNumericDate(claims.exp)) throw invalidGrant('The ID-JAG has no exp claim (a number of seconds since the epoch).')
  if (!isNumericDate(claims.iat)) throw invalidGrant('The ID-JAG has no iat claim (a number of seconds since the epoch).')
  if (claims.exp <= nowSeconds - CLOCK_SKEW_SECONDS) throw invalidGrant(`The ID-JAG expired at ${dateOf(claims.exp)}: ask the identity provider for a new one.`)
  if (claims.iat > nowSeconds + CLOCK_SKEW_SECONDS) throw invalidGrant(`The ID-JAG's iat (${dateOf(claims.iat)}) is in the future.`)
  if (claims.exp <= claims.iat) throw invalidGrant('The ID-JAG expires before it was issued (exp <= iat).')
  if (claims.exp - claims.iat > MAX_ID_JAG_LIFETIME_SECONDS) {
    throw invalidGrant(`The ID-JAG lives ${claims.exp - claims.iat} s (exp - iat); this server accepts ID-JAGs of at most ${MAX_ID_JAG_LIFETIME_SECONDS} s.`)
  }
  if (claims.nbf !== undefined && (!isNumericDate(claims.nbf) || claims.nbf > nowSeconds + CLOCK_SKEW_SECONDS)) throw invalidGrant('The ID-JAG is not valid yet (nbf).')

  let resource: string[] | undefined
  if (claims.resource !== undefined) {
    const given = Array.isArray(claims.resource) ? claims.resource : [claims.resource]
    if (given.length === 0 || given.some((value) => typeof value !== 'string')) throw invalidGrant('The ID-JAG\'s resource claim must be a URI or an array of URIs.')
    resource = parseResource(given as string[], deps.baseUrl) ?? undefined
    if (!resource) throw invalidGrant(`The ID-JAG's resource ${quoted(claims.resource)} is not one of this server's: ${deps.baseUrl} (the REST API) or ${deps.baseUrl}/mcp (MCP).`)
  }
  if (claims.scope !== undefined && typeof claims.scope !== 'string') throw invalidGrant('The ID-JAG\'s scope claim must be a string of space-separated scopes.')

  let confirmationJkt: string | undefined
  if (claims.cnf !== undefined) {
    const jkt = (claims.cnf as { jkt?: unknown } | null)?.jkt
    if (typeof jkt !== 'string' || jkt.length === 0) throw invalidGrant('The ID-JAG\'s cnf claim has no jkt (RFC 9449 §6.1): no other key binding is supported.')
    confirmationJkt = jkt
  }
  return {
    iss: claims.iss as string,
    sub: claims.sub,
    clientId: claims.client_id,
    jti: claims.jti,
    exp: claims.exp,
    resource,
    scope: claims.scope as string | undefined,
    email: claims.email,
    confirmationJkt,
  }
}

/** The user a provider's ID-JAG names, by the provider's rule; otherwise why none. */
async function userNamedBy(db: Database, provider: Provider, claims: IdJagClaims): Promise<{ userId: string } | { error: string }> {
  if (provider.subjectMapping === 'email') {
    if (typeof claims.email !== 'string' || claims.email.length === 0 || claims.email.length > 320) {
      return { error: `The ID-JAG has no email claim, and the identity provider ${claims.iss} maps users by email.` }
    }
    const [user] = await db.select({ id: users.id }).from(users).where(and(eq(users.email, normalizeEmail(claims.email)), eq(users.accountId, provider.accountId)))
    return user ? { userId: user.id } : { error: `The ID-JAG's email is not the sign-in email of any user of the account that trusts ${claims.iss}.` }
  }
  const [link] = await db
    .select({ userId: identityProviderSubjects.userId })
    .from(identityProviderSubjects)
    .where(and(eq(identityProviderSubjects.identityProviderId, provider.id), eq(identityProviderSubjects.subject, claims.sub)))
  return link ? { userId: link.userId } : { error: `The ID-JAG's subject ${quoted(claims.sub)} is linked to no user of the account that trusts ${claims.iss}.` }
}

/**
 * The scopes of the token (the extension §7.2.1, draft §4.4.1): those the ID-JAG grants (all the
 * client's default scope when it names none), each one the client may ask for and none of
 * SCOPES_NOT_BY_ID_JAG; narrowed to the request's `scope` when it has one.
 */
function grantedScopes(client: OAuthClient, idJagScope: string | undefined, requested: string | undefined): Scope[] {
  const registered = client.scope ? splitScope(client.scope) : null
  const granted = idJagScope !== undefined ? splitScope(idJagScope) : (registered ?? [...DEFAULT_SCOPE])
  if (granted.length === 0) throw invalidGrant('The ID-JAG grants no scope.')
  const unknown = granted.filter((name) => !isScope(name))
  if (unknown.length > 0) throw invalidGrant(`The ID-JAG grants ${unknown.map(quoted).join(', ')}, not scopes of this server (${SCOPES.join(' ')}).`)
  const allowed: readonly string[] = registered ?? SCOPES
  const beyond = granted.filter((name) => !allowed.includes(name))
  if (beyond.length > 0) throw invalidGrant(`The ID-JAG grants ${beyond.join(' ')}, beyond what the client ${client.id} may ask for (${allowed.join(' ')}).`)
  const withheld = granted.filter((name) => (SCOPES_NOT_BY_ID_JAG as readonly string[]).includes(name))
  if (withheld.length > 0) throw invalidGrant(`The ID-JAG grants ${withheld.join(' ')}: account administration scopes are never granted by an ID-JAG, only with the account owner's consent.`)
  if (requested === undefined || requested.trim() === '') return granted as Scope[]
  const narrowed = splitScope(requested).filter((name) => granted.includes(name))
  if (narrowed.length === 0) throw invalidGrant(`None of the scopes asked for (${requested.trim()}) is granted by the ID-JAG (${granted.join(' ')}).`)
  return narrowed as Scope[]
}

/** RFC 8707: the request's `resource` narrows the ID-JAG's (by default both of ours), never widens them. */
function grantedAudience(baseUrl: string, idJagResource: string[] | undefined, requested: string | string[] | undefined): string[] {
  const granted = idJagResource ?? [baseUrl, `${baseUrl}/mcp`]
  const asked = (requested === undefined ? [] : Array.isArray(requested) ? requested : [requested]).filter((value) => value !== '')
  if (asked.length === 0) return granted
  if (asked.some((value) => !granted.includes(value))) throw new OAuthError(400, 'invalid_target', `resource must be one the ID-JAG grants: ${granted.join(' or ')}.`)
  return [...new Set(asked)]
}

/**
 * Checks an ID-JAG presented by `client` (already authenticated) and accepts it once: every
 * check of draft §4.4.1 and of the extension, each refusal an `invalid_grant` saying which.
 *
 * 1. a signed JWT with `typ` `oauth-id-jag+jwt` and an asymmetric `alg`;
 * 2. its `iss` is the issuer of an identity provider some account trusts;
 * 3. its signature verifies with a key of that provider's JWKS (fetched through the outbound
 *    guard, fetched again for an unknown `kid`);
 * 4. its claims: `sub`; `aud` = our issuer; `client_id` = the authenticated client; `jti`; `exp`
 *    not past and at most MAX_ID_JAG_LIFETIME_SECONDS after `iat`; `iat` not in the future;
 *    `nbf`; `resource` one of ours; `scope`; `cnf`;
 * 5. the provider allows this client (`allowed_client_ids`);
 * 6. its subject names a user of the provider's account, by the provider's rule;
 * 7. the scopes and resources granted (grantedScopes, grantedAudience);
 * 8. its `jti` was never accepted before, by any instance (namespace `id_jag:<iss>`).
 *
 * Several accounts may trust one issuer (each with its own keys, clients and users): the
 * candidates are narrowed by signature, client and subject, and exactly one must remain. Two
 * accounts that both link the same subject of the same issuer are ambiguous, and refused.
 */
export async function verifyIdJag(
  deps: IdJagDeps,
  assertion: string | undefined,
  request: { client: OAuthClient; scope?: string; resource?: string | string[]; dpopJkt?: string },
): Promise<AcceptedIdJag> {
  if (!assertion) throw new OAuthError(400, 'invalid_request', 'assertion is required: the ID-JAG from your identity provider.')
  const header = readHeader(assertion)
  const issuer = readIssuer(assertion)
  const candidates = await deps.db.select().from(identityProviders).where(eq(identityProviders.issuer, issuer))
  if (candidates.length === 0) {
    throw invalidGrant(`The ID-JAG's issuer ${quoted(issuer)} is not an identity provider this server trusts: an account owner registers it under /account/{account_id}/identity-providers.`)
  }

  const signedBy: Provider[] = []
  let signatureProblem = ''
  let payload: Uint8Array | undefined
  for (const candidate of candidates) {
    const verified = await verifiedBy(deps, candidate, assertion, header)
    if ('error' in verified) {
      signatureProblem ||= verified.error
      continue
    }
    signedBy.push(candidate)
    payload = verified.payload
  }
  if (!payload) throw invalidGrant(signatureProblem)
  const claims = checkClaims(deps, payload, request.client.id)

  const allowing = signedBy.filter((provider) => provider.allowedClientIds.includes(request.client.id))
  if (allowing.length === 0) {
    throw invalidGrant(`The identity provider ${issuer} does not allow the client ${request.client.id} to act for its users (its allowed_client_ids).`)
  }
  const named: { provider: Provider; userId: string }[] = []
  let subjectProblem = ''
  for (const provider of allowing) {
    const user = await userNamedBy(deps.db, provider, claims)
    if ('error' in user) subjectProblem ||= user.error
    else named.push({ provider, userId: user.userId })
  }
  if (named.length === 0) throw invalidGrant(subjectProblem)
  if (named.length > 1) {
    throw invalidGrant(`The ID-JAG names a user in ${named.length} accounts that trust ${issuer}; it cannot say which one it is for.`)
  }
  const { provider, userId } = named[0]!

  const scopes = grantedScopes(request.client, claims.scope, request.scope)
  const audience = grantedAudience(deps.baseUrl, claims.resource, request.resource)
  // An ID-JAG bound to a key (cnf.jkt) comes with a DPoP proof of that key (draft §8.6.1.2.2).
  if (claims.confirmationJkt && claims.confirmationJkt !== request.dpopJkt) {
    throw invalidGrant(
      request.dpopJkt === undefined
        ? 'The ID-JAG is bound to a key (cnf.jkt): present it with a DPoP proof of that key (draft-ietf-oauth-identity-assertion-authz-grant §8.6.1.2.2).'
        : 'The ID-JAG is bound to another key (cnf.jkt) than the one that signed the DPoP proof.',
    )
  }
  // Last, so that an ID-JAG refused for another reason is not used up; the skew keeps it remembered
  // as long as it could pass. Per provider, not per issuer string: another account that registers the
  // same issuer cannot use up this provider's identifiers.
  const first = await firstUseOfJti(deps.db, { namespace: `id_jag:${provider.id}`, jti: claims.jti, expiresAt: new Date((claims.exp + CLOCK_SKEW_SECONDS) * 1000) })
  if (!first) throw invalidGrant(`The ID-JAG was already used (jti ${quoted(claims.jti)}): ask the identity provider for a new one.`)
  return {
    accountId: provider.accountId,
    userId,
    clientId: request.client.id,
    identityProviderId: provider.id,
    scopes,
    audience,
    jti: claims.jti,
    confirmationJkt: claims.confirmationJkt,
  }
}

export interface JwtBearerDeps extends TokenDeps, IdJagDeps {
  logger: Logger
}

/**
 * The grant an accepted ID-JAG makes, and its access token. One working grant per provider,
 * user and client (a unique index): an agent's later exchanges land on it, with the scope and
 * audience of the latest ID-JAG, so Connected apps lists the agent once and revoking it there
 * cuts it off like any other grant. No refresh token (draft §4.4.3: the client presents a new
 * ID-JAG when the access token expires). The access token is made by tokens.ts like every other.
 */
export async function issueIdJagGrant(deps: JwtBearerDeps, accepted: AcceptedIdJag, dpopJkt: string | undefined): Promise<TokenResponse> {
  const scope = accepted.scopes.join(' ')
  let grant: Grant
  try {
    const [row] = await deps.db
      .insert(grants)
      .values({
        id: newId('grt'),
        clientId: accepted.clientId,
        userId: accepted.userId,
        accountId: accepted.accountId,
        scope,
        audience: accepted.audience,
        identityProviderId: accepted.identityProviderId,
      })
      .onConflictDoUpdate({
        target: [grants.identityProviderId, grants.userId, grants.clientId],
        targetWhere: sql`${grants.identityProviderId} is not null and ${grants.revokedAt} is null`,
        set: { scope, audience: accepted.audience },
      })
      .returning()
    grant = row!
  } catch (error) {
    // Removed between the checks and now (the provider, the user, or a client metadata document's row).
    if (isForeignKeyViolation(error)) throw invalidGrant('The identity provider or the user was removed while the ID-JAG was being accepted.')
    throw error
  }
  deps.logger.info('audit', {
    audit: true,
    action: 'grant.id_jag_accepted',
    grant_id: grant.id,
    identity_provider_id: accepted.identityProviderId,
    client_id: accepted.clientId,
    user_id: accepted.userId,
    account_id: accepted.accountId,
    scope,
    jti: accepted.jti,
  })
  return newAccessToken(deps, grant, scope, dpopJkt)
}

/**
 * `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer` at the token endpoint (draft §4.4),
 * for a client the endpoint authenticated: a confidential client that registered this grant
 * (RFC 6749 §5.2 `unauthorized_client` otherwise; a public client cannot register it,
 * docs/oauth.md#confidential-clients). An ID-JAG bound to a key (`cnf.jkt`) must come with a DPoP
 * proof of that key (draft §8.6.1.2.2); the access token is bound to the request's proof when it
 * has one (src/oauth/dpop-binding.ts).
 */
export async function jwtBearerGrant(
  deps: JwtBearerDeps,
  input: { client: OAuthClient; assertion?: string; scope?: string; resource?: string | string[]; dpopJkt: string | undefined },
): Promise<TokenResponse> {
  if (input.client.tokenEndpointAuthMethod === 'none' || !input.client.grantTypes.includes(JWT_BEARER_GRANT_TYPE)) {
    throw new OAuthError(400, 'unauthorized_client', `This client did not register the ${JWT_BEARER_GRANT_TYPE} grant; only a confidential client may (docs/oauth.md#enterprise-managed-authorization-cross-app-access).`)
  }
  const accepted = await verifyIdJag(deps, input.assertion, input)
  // A client metadata document's client gets its row now, as when a user approves it: the grant references it.
  await deps.clients.record(input.client)
  return issueIdJagGrant(deps, accepted, input.dpopJkt)
}
