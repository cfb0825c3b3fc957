import { Elysia, t } from 'elysia'
import { PageQuery, pageOf } from '../lib/http/pagination.ts'
import { EventTypeSchema, eventCatalog } from './event-catalog.ts'
import { IdempotencyKeyHeader, answerIdempotently } from '../lib/http/idempotency.ts'
import { ProblemSchema } from '../lib/http/errors.ts'
import { authPlugin, ownAccount, type AuthPluginDeps } from '../auth/plugin.ts'
import { AccountParams, HookParams } from '../lib/http/params.ts'
import {
  CreateHookBody,
  CreatedHookSchema,
  DeliveryDetailSchema,
  DeliveryListQuery,
  DeliveryParams,
  DeliverySchema,
  HookDeliveryParams,
  HookSchema,
  RecoverBody,
  RecoveredSchema,
  RotatedHookSchema,
  TestResultSchema,
  UpdateHookBody,
} from './schemas.ts'
import { getDelivery, listDeliveries, recoverDeliveries, retryDelivery, sendTestEvent, type DeliveryOperationDeps } from './deliveries.ts'
import { createHook, deleteHook, enableHook, getHook, listHooks, rotateHookSecret, toHookResource, updateHook, type HookDeps } from './service.ts'

export function hookRoutes(deps: HookDeps & DeliveryOperationDeps & AuthPluginDeps) {
  const catalog = { data: eventCatalog() }
  return new Elysia({ tags: ['Webhooks'] })
    .use(authPlugin(deps))
    .get('/event-types', () => catalog, {
      auth: { scope: null },
      response: { 200: t.Object({ data: t.Array(EventTypeSchema) }, { title: 'EventTypeList' }) },
      detail: { operationId: 'listEventTypes', summary: 'The event types, each with its description, the JSON Schema of its body and an example' },
    })
    .post(
      '/account/:account_id/hooks',
      async ({ caller, params, body, request, set }) => {
        const accountId = ownAccount(caller, params.account_id)
        return answerIdempotently(deps, { request, set }, { accountId, request: `hooks ${JSON.stringify(body)}` }, async () => {
          const { hook, secret } = await createHook(deps, accountId, body)
          return { status: 201, body: { ...toHookResource(hook), ...(secret === null ? {} : { secret }) } }
        })
      },
      {
        auth: { scope: 'hooks:write' },
        params: AccountParams,
        body: CreateHookBody,
        headers: IdempotencyKeyHeader,
        response: { 201: CreatedHookSchema, 409: ProblemSchema },
        detail: { operationId: 'createHook', summary: 'Subscribe an HTTPS address to an event, signed with HMAC or Ed25519 (accepts Idempotency-Key)' },
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
        detail: { operationId: 'listHooks', summary: "List the account's subscriptions, newest first" },
      },
    )
    .get(
      '/account/:account_id/hooks/:hook_id',
      async ({ caller, params }) => {
        return toHookResource(await getHook(deps.db, ownAccount(caller, params.account_id), params.hook_id))
      },
      {
        auth: { scope: 'hooks:read' },
        params: HookParams,
        response: { 200: HookSchema },
        detail: { operationId: 'getHook', summary: 'Read one subscription' },
      },
    )
    .patch(
      '/account/:account_id/hooks/:hook_id',
      async ({ caller, params, body }) => toHookResource(await updateHook(deps, ownAccount(caller, params.account_id), params.hook_id, body)),
      {
        auth: { scope: 'hooks:write' },
        params: HookParams,
        body: UpdateHookBody,
        response: { 200: HookSchema },
        detail: { operationId: 'updateHook', summary: 'Change the target URL, pause or resume, or set the rate limit (the secret is kept)' },
      },
    )
    .get(
      '/account/:account_id/hooks/:hook_id/deliveries',
      async ({ caller, params, query }) => {
        const hook = await getHook(deps.db, ownAccount(caller, params.account_id), params.hook_id)
        return listDeliveries(deps.db, hook.id, query)
      },
      {
        auth: { scope: 'hooks:read' },
        params: HookParams,
        query: DeliveryListQuery,
        response: { 200: pageOf(DeliverySchema) },
        detail: { operationId: 'listDeliveries', summary: "The subscription's deliveries, one per event, newest first, each with its state and last attempt (filter by state)" },
      },
    )
    .get(
      '/account/:account_id/hooks/:hook_id/deliveries/:delivery_id',
      ({ caller, params }) => getDelivery(deps.db, ownAccount(caller, params.account_id), params.delivery_id, params.hook_id),
      {
        auth: { scope: 'hooks:read' },
        params: HookDeliveryParams,
        response: { 200: DeliveryDetailSchema },
        detail: { operationId: 'getHookDelivery', summary: 'One delivery with every attempt (status, duration, error, the first 4 KB of the answer)' },
      },
    )
    .get(
      '/account/:account_id/deliveries/:delivery_id',
      ({ caller, params }) => getDelivery(deps.db, ownAccount(caller, params.account_id), params.delivery_id),
      {
        auth: { scope: 'hooks:read' },
        params: DeliveryParams,
        response: { 200: DeliveryDetailSchema },
        detail: { operationId: 'getDelivery', summary: 'One delivery by its id alone (as a test answers it), with every attempt' },
      },
    )
    // The POSTs below take no body, except recover. Like DELETE, they ignore a JSON one and refuse
    // only what every route refuses (malformed JSON 400, another content type 415): see docs/webhooks.md.
    .post(
      '/account/:account_id/hooks/:hook_id/deliveries/:delivery_id/retry',
      async ({ caller, params, set }) => {
        set.status = 202
        return retryDelivery(deps, ownAccount(caller, params.account_id), params.delivery_id, params.hook_id)
      },
      {
        auth: { scope: 'hooks:write' },
        params: HookDeliveryParams,
        response: { 202: DeliverySchema, 409: ProblemSchema },
        detail: { operationId: 'retryHookDelivery', summary: 'Send a delivery again now, whatever its state' },
      },
    )
    .post(
      '/account/:account_id/deliveries/:delivery_id/retry',
      async ({ caller, params, set }) => {
        set.status = 202
        return retryDelivery(deps, ownAccount(caller, params.account_id), params.delivery_id)
      },
      {
        auth: { scope: 'hooks:write' },
        params: DeliveryParams,
        response: { 202: DeliverySchema, 409: ProblemSchema },
        detail: { operationId: 'retryDelivery', summary: 'Send a delivery again now, whatever its state (by its id alone)' },
      },
    )
    .post(
      '/account/:account_id/hooks/:hook_id/recover',
      async ({ caller, params, body, set }) => {
        set.status = 202
        return { requeued: await recoverDeliveries(deps, ownAccount(caller, params.account_id), params.hook_id, new Date(body.since)) }
      },
      {
        auth: { scope: 'hooks:write' },
        params: HookParams,
        body: RecoverBody,
        response: { 202: RecoveredSchema, 409: ProblemSchema },
        detail: { operationId: 'recoverDeliveries', summary: 'Send again every failed or canceled delivery created since a time' },
      },
    )
    .post(
      '/account/:account_id/hooks/:hook_id/test',
      ({ caller, params }) => sendTestEvent(deps, ownAccount(caller, params.account_id), params.hook_id),
      {
        auth: { scope: 'hooks:write' },
        params: HookParams,
        response: { 200: TestResultSchema },
        detail: { operationId: 'testHook', summary: "Send one signed example event of the subscription's type now and answer with the receiver's response" },
      },
    )
    .post(
      '/account/:account_id/hooks/:hook_id/secret/rotate',
      async ({ caller, params, request, set }) => {
        const accountId = ownAccount(caller, params.account_id)
        // A retried rotation must not lose the secret the first one showed: replay it.
        return answerIdempotently(deps, { request, set }, { accountId, request: `hooks/${params.hook_id}/secret/rotate` }, async () => {
          const { hook, secret } = await rotateHookSecret(deps, accountId, params.hook_id)
          const shown = secret === null ? {} : { secret, previous_secret_expires_at: hook.previousSecretExpiresAt!.toISOString() }
          return { status: 200, body: { ...toHookResource(hook), ...shown } }
        })
      },
      {
        auth: { scope: 'hooks:write' },
        params: HookParams,
        headers: IdempotencyKeyHeader,
        response: { 200: RotatedHookSchema, 409: ProblemSchema },
        detail: {
          operationId: 'rotateHookSecret', summary: 'Replace the signing secret (or ed25519 key pair); the old one also signs for 24 h (accepts Idempotency-Key)',
        },
      },
    )
    .post(
      '/account/:account_id/hooks/:hook_id/enable',
      async ({ caller, params }) => {
        const hook = await enableHook(deps.db, ownAccount(caller, params.account_id), params.hook_id)
        return toHookResource(hook)
      },
      {
        auth: { scope: 'hooks:write' },
        params: HookParams,
        response: { 200: HookSchema },
        detail: { operationId: 'enableHook', summary: 'Re-enable a disabled subscription (a no-op on an active one)' },
      },
    )
    .delete(
      '/account/:account_id/hooks/:hook_id',
      async ({ caller, params, set }) => {
        await deleteHook(deps.db, ownAccount(caller, params.account_id), params.hook_id)
        set.status = 204
      },
      {
        auth: { scope: 'hooks:write' },
        params: HookParams,
        response: { 204: t.Void() },
        detail: { operationId: 'deleteHook', summary: 'Remove a subscription' },
      },
    )
}
