import { Elysia, t } from 'elysia'
import { notFound } from '../lib/http/errors.ts'
import { IdempotencyKeyHeader, answerIdempotently } from '../lib/http/idempotency.ts'
import { PageQuery, pageOf } from '../lib/http/pagination.ts'
import { AccountParams } from '../lib/http/params.ts'
import type { SecretBox } from '../lib/security/secret-box.ts'
import { authPlugin, ownAccount, type AuthPluginDeps } from '../auth/plugin.ts'
import { auditActor } from '../auth/authenticator.ts'
import { recordRevocation, type RevocationDeps } from '../auth/revocation-audit.ts'
import { CreateIdentityProviderBody, CreateSubjectLinkBody, IdentityProviderParams, IdentityProviderSchema, SubjectLinkParams, SubjectLinkSchema } from './schemas.ts'
import {
  createIdentityProvider,
  deleteIdentityProvider,
  findIdentityProvider,
  linkSubject,
  listIdentityProviders,
  listSubjectLinks,
  toIdentityProviderResource,
  unlinkSubject,
  type IdentityProviderDeps,
} from './service.ts'

export interface IdentityProviderRoutesDeps extends AuthPluginDeps, RevocationDeps, IdentityProviderDeps {
  /** Seals the answers kept for Idempotency-Key (src/lib/http/idempotency.ts). */
  secretBox: SecretBox
}

/**
 * `/account/{account_id}/identity-providers` (docs/api.md#identity-providers): the enterprise
 * identity providers whose ID-JAGs the token endpoint accepts for this account's users. Owner
 * scopes (`identity_providers:read` / `:write`), as for API keys: trusting a provider lets it
 * mint access for the account's users.
 */
export function identityProviderRoutes(deps: IdentityProviderRoutesDeps) {
  const audit = (caller: Parameters<typeof auditActor>[0], entry: Record<string, string | number>) =>
    deps.logger.info('audit', { audit: true, ...entry, ...auditActor(caller) })
  return new Elysia({ tags: ['Identity providers'] })
    .use(authPlugin(deps))
    .get('/account/:account_id/identity-providers', ({ caller, params, query }) => listIdentityProviders(deps.db, ownAccount(caller, params.account_id), query), {
      auth: { scope: 'identity_providers:read' },
      params: AccountParams,
      query: PageQuery,
      response: { 200: pageOf(IdentityProviderSchema) },
      detail: { operationId: 'listIdentityProviders', summary: 'List the enterprise identity providers the account trusts, newest first' },
    })
    .post('/account/:account_id/identity-providers', async ({ caller, params, body, request, set }) => {
      const accountId = ownAccount(caller, params.account_id)
      return answerIdempotently(deps, { request, set }, { accountId, request: `identity-providers ${JSON.stringify(body)}` }, async () => {
        const provider = await createIdentityProvider(deps, accountId, body)
        audit(caller, {
          action: 'identity_provider.created',
          identity_provider_id: provider.id,
          issuer: provider.issuer,
          subject_mapping: provider.subjectMapping,
          allowed_client_ids: provider.allowedClientIds.join(' '),
          account_id: accountId,
        })
        return { status: 201, body: toIdentityProviderResource(provider) }
      })
    }, {
      auth: { scope: 'identity_providers:write' },
      params: AccountParams,
      body: CreateIdentityProviderBody,
      headers: IdempotencyKeyHeader,
      response: { 201: IdentityProviderSchema },
      detail: {
        operationId: 'createIdentityProvider',
        summary: 'Trust an enterprise identity provider: its ID-JAGs get the allowed clients access for the users they name (accepts Idempotency-Key)',
      },
    })
    .get('/account/:account_id/identity-providers/:identity_provider_id', async ({ caller, params }) => {
      const provider = await findIdentityProvider(deps.db, ownAccount(caller, params.account_id), params.identity_provider_id)
      if (!provider) throw notFound(`No identity provider ${params.identity_provider_id} on this account.`)
      return toIdentityProviderResource(provider)
    }, {
      auth: { scope: 'identity_providers:read' },
      params: IdentityProviderParams,
      response: { 200: IdentityProviderSchema },
      detail: { operationId: 'getIdentityProvider', summary: 'Read one identity provider' },
    })
    .delete('/account/:account_id/identity-providers/:identity_provider_id', async ({ caller, params, set }) => {
      const accountId = ownAccount(caller, params.account_id)
      const deleted = await deleteIdentityProvider(deps.db, accountId, params.identity_provider_id)
      if (!deleted) throw notFound(`No identity provider ${params.identity_provider_id} on this account.`)
      await recordRevocation(deps, caller, {
        action: 'identity_provider.deleted',
        identity_provider_id: deleted.provider.id,
        issuer: deleted.provider.issuer,
        revoked_grant_ids: deleted.revokedGrantIds.join(' '),
        account_id: accountId,
      })
      set.status = 204
    }, {
      auth: { scope: 'identity_providers:write' },
      params: IdentityProviderParams,
      response: { 204: t.Void() },
      detail: {
        operationId: 'deleteIdentityProvider',
        summary: 'Stop trusting an identity provider: its ID-JAGs are refused at once, and the grants they made are revoked (their tokens stop within 5 s)',
      },
    })
    .get('/account/:account_id/identity-providers/:identity_provider_id/subjects', ({ caller, params, query }) =>
      listSubjectLinks(deps.db, ownAccount(caller, params.account_id), params.identity_provider_id, query), {
      auth: { scope: 'identity_providers:read' },
      params: IdentityProviderParams,
      query: PageQuery,
      response: { 200: pageOf(SubjectLinkSchema) },
      detail: { operationId: 'listSubjectLinks', summary: "List an identity provider's subjects linked to the account's users, newest first" },
    })
    .post('/account/:account_id/identity-providers/:identity_provider_id/subjects', async ({ caller, params, body, request, set }) => {
      const accountId = ownAccount(caller, params.account_id)
      const fingerprint = `identity-provider-subjects ${params.identity_provider_id} ${JSON.stringify(body)}`
      return answerIdempotently(deps, { request, set }, { accountId, request: fingerprint }, async () => {
        const link = await linkSubject(deps.db, accountId, params.identity_provider_id, body)
        audit(caller, { action: 'identity_provider.subject_linked', identity_provider_id: params.identity_provider_id, link_id: link.id, user_id: link.user_id, account_id: accountId })
        return { status: 201, body: link }
      })
    }, {
      auth: { scope: 'identity_providers:write' },
      params: IdentityProviderParams,
      body: CreateSubjectLinkBody,
      headers: IdempotencyKeyHeader,
      response: { 201: SubjectLinkSchema },
      detail: {
        operationId: 'linkSubject',
        summary: "Link an identity provider's subject to one of the account's users, for a provider that maps users by subject (accepts Idempotency-Key)",
      },
    })
    .delete('/account/:account_id/identity-providers/:identity_provider_id/subjects/:link_id', async ({ caller, params, set }) => {
      const accountId = ownAccount(caller, params.account_id)
      const unlinked = await unlinkSubject(deps.db, accountId, params.identity_provider_id, params.link_id)
      if (!unlinked) throw notFound(`No subject link ${params.link_id} of identity provider ${params.identity_provider_id} on this account.`)
      await recordRevocation(deps, caller, {
        action: 'identity_provider.subject_unlinked',
        identity_provider_id: params.identity_provider_id,
        link_id: unlinked.link.id,
        user_id: unlinked.link.user_id,
        revoked_grant_ids: unlinked.revokedGrantIds.join(' '),
        account_id: accountId,
      })
      set.status = 204
    }, {
      auth: { scope: 'identity_providers:write' },
      params: SubjectLinkParams,
      response: { 204: t.Void() },
      detail: {
        operationId: 'unlinkSubject',
        summary: "Unlink a subject: the provider's ID-JAGs for it are refused, and the grants they made for that user are revoked",
      },
    })
}
