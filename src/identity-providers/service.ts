import { and, desc, eq, inArray, isNull, lt } from 'drizzle-orm'
import type { Static } from 'elysia'
import type { Database, DatabaseTransaction } from '../lib/db/client.ts'
import { grants, identityProviderSubjects, identityProviders, oauthClients, users } from '../lib/db/schema.ts'
import { isId, newId } from '../lib/db/ids.ts'
import { isUniqueViolation } from '../lib/db/errors.ts'
import { ApiError, validationFailed } from '../lib/http/errors.ts'
import { readPage, type Page } from '../lib/http/pagination.ts'
import { isForbiddenHost } from '../lib/security/outbound.ts'
import { normalizeEmail } from '../accounts/service.ts'
import { isMetadataDocumentClientId } from '../oauth/client-metadata-document.ts'
import { JWT_BEARER_GRANT_TYPE } from '../oauth/grants/jwt-bearer.ts'
import { revokeGrant } from '../oauth/revocation.ts'
import type { CreateIdentityProviderBody, CreateSubjectLinkBody, IdentityProviderSchema, SubjectLinkSchema } from './schemas.ts'

/**
 * The enterprise identity providers an account trusts (docs/api.md#identity-providers): who may
 * vouch for its users with ID-JAGs, for which of our clients, and how a provider's subject
 * becomes one of the account's users. src/oauth/grants/jwt-bearer.ts reads them.
 */

export type IdentityProvider = typeof identityProviders.$inferSelect
export type IdentityProviderResource = Static<typeof IdentityProviderSchema>
export type SubjectLinkResource = Static<typeof SubjectLinkSchema>

export interface IdentityProviderDeps {
  db: Database
  /** WEBHOOK_ALLOW_PRIVATE_TARGETS: loopback and private providers (and plain http to them) for local development and tests. */
  allowPrivateTargets: boolean
}

export const toIdentityProviderResource = (provider: IdentityProvider): IdentityProviderResource => ({
  id: provider.id,
  issuer: provider.issuer,
  jwks_uri: provider.jwksUri,
  allowed_client_ids: provider.allowedClientIds,
  subject_mapping: provider.subjectMapping as IdentityProviderResource['subject_mapping'],
  created_at: provider.createdAt.toISOString(),
})

/** http is for a provider on this machine or network, with WEBHOOK_ALLOW_PRIVATE_TARGETS (as webhook targets). */
function schemeProblem(url: URL, allowPrivate: boolean): string | null {
  if (url.protocol === 'https:') return null
  if (url.protocol === 'http:' && isForbiddenHost(url.hostname)) {
    return allowPrivate ? null : 'must use https (plain http to a local address needs WEBHOOK_ALLOW_PRIVATE_TARGETS=true, for local development)'
  }
  return 'must use https'
}

/**
 * RFC 8414 §2: an issuer is an https URL with no query and no fragment. It is kept exactly as
 * written, because an ID-JAG's `iss` is compared with it character for character (a URL parser
 * would add a trailing slash to `https://idp.example`, which the provider's tokens do not carry).
 */
export function checkIssuer(raw: string, allowPrivate: boolean): string {
  const refuse = (message: string) => validationFailed([{ path: '/issuer', message }])
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw refuse('must be an absolute URL')
  }
  if (raw !== raw.trim()) throw refuse('must not start or end with white space')
  const scheme = schemeProblem(url, allowPrivate)
  if (scheme) throw refuse(scheme)
  if (url.username || url.password) throw refuse('must not carry credentials')
  if (raw.includes('?')) throw refuse('must not have a query (RFC 8414 §2)')
  if (raw.includes('#')) throw refuse('must not have a fragment (RFC 8414 §2)')
  return raw
}

/** Where the provider's keys are fetched: the rules of webhook targets (docs/api.md#create-a-subscription). */
export function checkJwksUri(raw: string, allowPrivate: boolean): string {
  const refuse = (message: string) => validationFailed([{ path: '/jwks_uri', message }])
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw refuse('must be an absolute URL')
  }
  const scheme = schemeProblem(url, allowPrivate)
  if (scheme) throw refuse(scheme)
  if (url.username || url.password) throw refuse('must not carry credentials')
  if (url.hash) throw refuse('must not have a fragment')
  if (!allowPrivate && isForbiddenHost(url.hostname)) {
    throw refuse('must not point at a private, loopback or link-local address (WEBHOOK_ALLOW_PRIVATE_TARGETS=true allows it, for local development)')
  }
  return url.href
}

/**
 * Each a client that can use the JWT bearer grant: a registered confidential client that
 * registered it (src/oauth/grants/jwt-bearer.ts refuses any other). A client ID metadata
 * document describes a public client, which never can, so its URL is refused here rather than
 * accepted to fail at every exchange.
 */
async function checkAllowedClientIds(db: Database, given: string[]): Promise<string[]> {
  const ids = [...new Set(given)]
  for (const [index, id] of given.entries()) {
    const path = `/allowed_client_ids/${index}`
    if (isMetadataDocumentClientId(id)) {
      throw validationFailed([{ path, message: 'a client ID metadata document describes a public client, which cannot use the JWT bearer grant: register the agent as a confidential client (docs/oauth.md#enterprise-managed-authorization-cross-app-access)' }])
    }
    if (!isId('cli', id)) throw validationFailed([{ path, message: 'must be a registered client id (cli_…)' }])
  }
  const found = new Map(
    (await db.select({ id: oauthClients.id, method: oauthClients.tokenEndpointAuthMethod, grantTypes: oauthClients.grantTypes }).from(oauthClients).where(inArray(oauthClients.id, ids))).map((row) => [row.id, row]),
  )
  for (const [index, id] of given.entries()) {
    const client = found.get(id)
    if (!client) throw validationFailed([{ path: `/allowed_client_ids/${index}`, message: `no client ${id} is registered` }])
    if (client.method === 'none' || !client.grantTypes.includes(JWT_BEARER_GRANT_TYPE)) {
      throw validationFailed([{ path: `/allowed_client_ids/${index}`, message: `the client ${id} is not a confidential client of the ${JWT_BEARER_GRANT_TYPE} grant: it could never use this provider's ID-JAGs` }])
    }
  }
  return ids
}

export async function createIdentityProvider(
  deps: IdentityProviderDeps,
  accountId: string,
  input: Static<typeof CreateIdentityProviderBody>,
): Promise<IdentityProvider> {
  const issuer = checkIssuer(input.issuer, deps.allowPrivateTargets)
  const jwksUri = checkJwksUri(input.jwks_uri, deps.allowPrivateTargets)
  const allowedClientIds = await checkAllowedClientIds(deps.db, input.allowed_client_ids)
  try {
    const [provider] = await deps.db
      .insert(identityProviders)
      .values({ id: newId('idp'), accountId, issuer, jwksUri, allowedClientIds, subjectMapping: input.subject_mapping })
      .returning()
    return provider!
  } catch (error) {
    if (isUniqueViolation(error)) throw new ApiError(409, 'conflict', `This account already trusts the issuer ${issuer}: delete that identity provider first to register it again.`)
    throw error
  }
}

export async function listIdentityProviders(db: Database, accountId: string, page: { limit?: number; cursor?: string }): Promise<Page<IdentityProviderResource>> {
  return readPage(
    page,
    'idp',
    (before, take) =>
      db
        .select()
        .from(identityProviders)
        .where(and(eq(identityProviders.accountId, accountId), before ? lt(identityProviders.id, before) : undefined))
        .orderBy(desc(identityProviders.id))
        .limit(take),
    toIdentityProviderResource,
  )
}

/** The account's provider `id`, or null: another account's reads as missing. */
export async function findIdentityProvider(db: Database | DatabaseTransaction, accountId: string, id: string, options: { lock?: boolean } = {}): Promise<IdentityProvider | null> {
  if (!isId('idp', id)) return null
  const query = db.select().from(identityProviders).where(and(eq(identityProviders.id, id), eq(identityProviders.accountId, accountId)))
  // Locking the row makes a concurrent exchange's new grant (whose foreign key takes a share lock on it) wait, or be seen.
  const [provider] = options.lock ? await query.for('update') : await query
  return provider ?? null
}

/** Revokes the working grants this provider's ID-JAGs made (of one user, when given); returns their ids. */
async function revokeProviderGrants(tx: DatabaseTransaction, providerId: string, reason: string, userId?: string): Promise<string[]> {
  const working = await tx
    .select({ id: grants.id })
    .from(grants)
    .where(and(eq(grants.identityProviderId, providerId), isNull(grants.revokedAt), userId === undefined ? undefined : eq(grants.userId, userId)))
  for (const grant of working) await revokeGrant(tx, grant.id, reason)
  return working.map((grant) => grant.id)
}

/**
 * Stops trusting a provider: no ID-JAG of its issuer is accepted for this account from the
 * commit on, and the grants its ID-JAGs made are revoked (their tokens stop within 5 s on every
 * instance). Null when the account has no such provider.
 */
export async function deleteIdentityProvider(db: Database, accountId: string, id: string): Promise<{ provider: IdentityProvider; revokedGrantIds: string[] } | null> {
  return db.transaction(async (tx) => {
    const provider = await findIdentityProvider(tx, accountId, id, { lock: true })
    if (!provider) return null
    const revokedGrantIds = await revokeProviderGrants(tx, provider.id, 'identity provider removed by the account owner')
    await tx.delete(identityProviders).where(eq(identityProviders.id, provider.id))
    return { provider, revokedGrantIds }
  })
}

const subjectLinkColumns = {
  id: identityProviderSubjects.id,
  subject: identityProviderSubjects.subject,
  userId: identityProviderSubjects.userId,
  email: users.email,
  createdAt: identityProviderSubjects.createdAt,
}

type SubjectLinkRow = { id: string; subject: string; userId: string; email: string; createdAt: Date }

const toSubjectLinkResource = (row: SubjectLinkRow): SubjectLinkResource => ({
  id: row.id,
  subject: row.subject,
  user_id: row.userId,
  email: row.email,
  created_at: row.createdAt.toISOString(),
})

const noProvider = (id: string) => new ApiError(404, 'not_found', `No identity provider ${id} on this account.`)

/** Links a provider's subject to a user of the account, found by sign-in email. */
export async function linkSubject(db: Database, accountId: string, providerId: string, input: Static<typeof CreateSubjectLinkBody>): Promise<SubjectLinkResource> {
  const provider = await findIdentityProvider(db, accountId, providerId)
  if (!provider) throw noProvider(providerId)
  if (provider.subjectMapping !== 'subject') {
    throw new ApiError(409, 'conflict', 'This identity provider maps users by the email of its ID-JAGs; subject links apply to providers registered with subject_mapping "subject".')
  }
  const email = normalizeEmail(input.email)
  const [user] = await db.select({ id: users.id, email: users.email }).from(users).where(and(eq(users.email, email), eq(users.accountId, accountId)))
  if (!user) throw validationFailed([{ path: '/email', message: 'no user of this account signs in with this email' }])
  try {
    const [link] = await db
      .insert(identityProviderSubjects)
      .values({ id: newId('sbj'), identityProviderId: provider.id, subject: input.subject, userId: user.id })
      .returning()
    return toSubjectLinkResource({ ...link!, email: user.email })
  } catch (error) {
    if (isUniqueViolation(error)) throw new ApiError(409, 'conflict', 'This subject is already linked to a user: unlink it first to link it to another.')
    throw error
  }
}

export async function listSubjectLinks(db: Database, accountId: string, providerId: string, page: { limit?: number; cursor?: string }): Promise<Page<SubjectLinkResource>> {
  const provider = await findIdentityProvider(db, accountId, providerId)
  if (!provider) throw noProvider(providerId)
  return readPage(
    page,
    'sbj',
    (before, take) =>
      db
        .select(subjectLinkColumns)
        .from(identityProviderSubjects)
        .innerJoin(users, eq(users.id, identityProviderSubjects.userId))
        .where(and(eq(identityProviderSubjects.identityProviderId, provider.id), before ? lt(identityProviderSubjects.id, before) : undefined))
        .orderBy(desc(identityProviderSubjects.id))
        .limit(take),
    toSubjectLinkResource,
  )
}

/**
 * Unlinks a subject: its ID-JAGs no longer name anyone, and the grants the provider's ID-JAGs
 * made for that user are revoked. Null when there is no such link.
 */
export async function unlinkSubject(
  db: Database,
  accountId: string,
  providerId: string,
  linkId: string,
): Promise<{ link: SubjectLinkResource; revokedGrantIds: string[] } | null> {
  if (!isId('sbj', linkId)) return null
  return db.transaction(async (tx) => {
    const provider = await findIdentityProvider(tx, accountId, providerId, { lock: true })
    if (!provider) return null
    const [link] = await tx
      .select(subjectLinkColumns)
      .from(identityProviderSubjects)
      .innerJoin(users, eq(users.id, identityProviderSubjects.userId))
      .where(and(eq(identityProviderSubjects.id, linkId), eq(identityProviderSubjects.identityProviderId, provider.id)))
    if (!link) return null
    await tx.delete(identityProviderSubjects).where(eq(identityProviderSubjects.id, linkId))
    const revokedGrantIds = await revokeProviderGrants(tx, provider.id, 'identity provider subject unlinked by the account owner', link.userId)
    return { link: toSubjectLinkResource(link), revokedGrantIds }
  })
}
