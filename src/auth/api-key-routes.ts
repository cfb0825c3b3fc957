import { Elysia, t } from 'elysia'
import type { Database } from '../lib/db/client.ts'
import { notFound } from '../lib/http/errors.ts'
import { isId } from '../lib/db/ids.ts'
import { IdempotencyKeyHeader, answerIdempotently } from '../lib/http/idempotency.ts'
import { PageQuery, pageOf } from '../lib/http/pagination.ts'
import type { SecretBox } from '../lib/security/secret-box.ts'
import { AccountParams } from '../lib/http/params.ts'
import { createApiKey, listActiveApiKeys, revokeApiKey, type ApiKey } from './api-keys.ts'
import { ApiKeyParams, ApiKeySchema, CreateApiKeyBody, CreatedApiKeySchema } from './api-key-schemas.ts'
import { auditActor } from './authenticator.ts'
import { recordRevocation, type RevocationDeps } from './revocation-audit.ts'
import { authPlugin, ownAccount, type AuthPluginDeps } from './plugin.ts'

export interface ApiKeyRoutesDeps extends AuthPluginDeps, RevocationDeps {
  db: Database
  secretBox: SecretBox
}

export const toApiKeyResource = (key: ApiKey) => ({
  id: key.id,
  name: key.name,
  secret_prefix: key.secretPrefix,
  created_at: key.createdAt.toISOString(),
  last_used_at: key.lastUsedAt?.toISOString() ?? null,
})

/** `/account/{account_id}/keys` (docs/api.md#api-keys): the account's API keys, for its owner's tools and the dashboard. */
export function apiKeyRoutes(deps: ApiKeyRoutesDeps) {
  return new Elysia({ tags: ['API keys'] })
    .use(authPlugin(deps))
    .get('/account/:account_id/keys', async ({ caller, params, query }) => {
      const page = await listActiveApiKeys(deps.db, ownAccount(caller, params.account_id), query)
      return { data: page.data.map(toApiKeyResource), next_cursor: page.next_cursor }
    }, {
      auth: { scope: 'keys:read' },
      params: AccountParams,
      query: PageQuery,
      response: { 200: pageOf(ApiKeySchema) },
      detail: { operationId: 'listApiKeys', summary: "List the account's active API keys, newest first (never their secrets)" },
    })
    .post('/account/:account_id/keys', async ({ caller, params, body, request, set }) => {
      const accountId = ownAccount(caller, params.account_id)
      const name = body.name.trim()
      return answerIdempotently(deps, { request, set }, { accountId, request: `keys ${JSON.stringify({ name })}` }, async () => {
        const { key, secret } = await createApiKey(deps.db, { accountId, name })
        deps.logger.info('audit', { audit: true, action: 'api_key.created', api_key_id: key.id, account_id: accountId, ...auditActor(caller) })
        return { status: 201, body: { ...toApiKeyResource(key), secret } }
      })
    }, {
      auth: { scope: 'keys:write' },
      params: AccountParams,
      body: CreateApiKeyBody,
      headers: IdempotencyKeyHeader,
      response: { 201: CreatedApiKeySchema },
      detail: { operationId: 'createApiKey', summary: 'Create an API key; its secret is in this answer only (accepts Idempotency-Key)' },
    })
    .delete('/account/:account_id/keys/:key_id', async ({ caller, params, set }) => {
      const accountId = ownAccount(caller, params.account_id)
      const revoked = isId('key', params.key_id) && (await revokeApiKey(deps.db, params.key_id, accountId))
      if (!revoked) throw notFound(`No active API key ${params.key_id} on this account.`)
      await recordRevocation(deps, caller, { action: 'api_key.revoked', api_key_id: params.key_id, account_id: accountId })
      set.status = 204
    }, {
      auth: { scope: 'keys:write' },
      params: ApiKeyParams,
      response: { 204: t.Void() },
      detail: { operationId: 'revokeApiKey', summary: 'Revoke an API key: refused at once here, on every instance within 5 s' },
    })
}
