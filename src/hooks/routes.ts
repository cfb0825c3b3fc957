import { Elysia, t } from 'elysia'
import { notFound } from '../lib/errors.ts'
import { PageQuery, pageOf } from '../lib/pagination.ts'
import { runIdempotently } from '../lib/idempotency.ts'
import { authPlugin, type AuthPluginDeps } from '../auth/plugin.ts'
import type { Caller } from '../auth/authenticator.ts'
import { AccountParams, CreateHookBody, CreatedHookSchema, DeliveryAttemptSchema, HookParams, HookSchema } from './schemas.ts'
import { listDeliveryAttempts } from '../delivery/store.ts'
import { createHook, deleteHook, findHook, listHooks, toHookResource, type HookDeps } from './service.ts'

/** A path naming another account than the caller's reads as missing (SPEC §7: 404). */
function ownAccount(caller: Caller, accountId: string): string {
  if (caller.accountId !== accountId) throw notFound('No such account.')
  return accountId
}

export function hookRoutes(deps: HookDeps & AuthPluginDeps) {
  return new Elysia({ tags: ['Webhooks'] })
    .use(authPlugin(deps))
    .post(
      '/account/:account_id/hooks',
      async ({ caller, params, body, request, set }) => {
        const accountId = ownAccount(caller, params.account_id)
        const result = await runIdempotently(
          deps,
          { accountId, key: request.headers.get('idempotency-key'), request: `POST ${accountId} hooks ${JSON.stringify(body)}` },
          async () => {
            const { hook, secret } = await createHook(deps, accountId, body)
            return { status: 201, body: { ...toHookResource(hook), secret } }
          },
        )
        set.status = result.status
        if (result.replayed) set.headers['idempotent-replayed'] = 'true'
        return result.body
      },
      {
        auth: { scope: 'hooks:write' },
        params: AccountParams,
        parse: 'json',
        body: CreateHookBody,
        response: { 201: CreatedHookSchema },
        detail: { summary: 'Subscribe an HTTPS address to an event (accepts Idempotency-Key)', security: [{ apiKey: [] }, { bearer: ['hooks:write'] }] },
      },
    )
    .get(
      '/account/:account_id/hooks',
      ({ caller, params, query }) => listHooks(deps.db, ownAccount(caller, params.account_id), query),
      {
        auth: { scope: 'hooks:read' },
        params: AccountParams,
        query: PageQuery,
        response: { 200: pageOf(HookSchema) },
        detail: { summary: "List the account's subscriptions, newest first", security: [{ apiKey: [] }, { bearer: ['hooks:read'] }] },
      },
    )
    .get(
      '/account/:account_id/hooks/:hook_id',
      async ({ caller, params }) => {
        const hook = await findHook(deps.db, ownAccount(caller, params.account_id), params.hook_id)
        if (!hook) throw notFound('No such subscription.')
        return toHookResource(hook)
      },
      {
        auth: { scope: 'hooks:read' },
        params: HookParams,
        response: { 200: HookSchema },
        detail: { summary: 'Read one subscription', security: [{ apiKey: [] }, { bearer: ['hooks:read'] }] },
      },
    )
    .get(
      '/account/:account_id/hooks/:hook_id/deliveries',
      async ({ caller, params, query }) => {
        const hook = await findHook(deps.db, ownAccount(caller, params.account_id), params.hook_id)
        if (!hook) throw notFound('No such subscription.')
        return listDeliveryAttempts(deps.db, hook.id, query)
      },
      {
        auth: { scope: 'hooks:read' },
        params: HookParams,
        query: PageQuery,
        response: { 200: pageOf(DeliveryAttemptSchema) },
        detail: { summary: "The subscription's delivery attempts, newest first", security: [{ apiKey: [] }, { bearer: ['hooks:read'] }] },
      },
    )
    .delete(
      '/account/:account_id/hooks/:hook_id',
      async ({ caller, params, set }) => {
        if (!(await deleteHook(deps.db, ownAccount(caller, params.account_id), params.hook_id))) throw notFound('No such subscription.')
        set.status = 204
      },
      {
        auth: { scope: 'hooks:write' },
        params: HookParams,
        response: { 204: t.Void() },
        detail: { summary: 'Remove a subscription', security: [{ apiKey: [] }, { bearer: ['hooks:write'] }] },
      },
    )
}
