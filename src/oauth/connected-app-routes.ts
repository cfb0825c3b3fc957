import { Elysia, t } from 'elysia'
import type { Database } from '../lib/db/client.ts'
import { notFound } from '../lib/http/errors.ts'
import { PageQuery, pageOf } from '../lib/http/pagination.ts'
import { AccountParams } from '../lib/http/params.ts'
import { authPlugin, ownAccount, type AuthPluginDeps } from '../auth/plugin.ts'
import { auditActor } from '../auth/authenticator.ts'
import { recordRevocation, type RevocationDeps } from '../auth/revocation-audit.ts'
import { disconnectApp, isActiveGrant, listConnectedApps } from './connected-apps.ts'
import { ConnectedAppSchema, EventSubscriptionParams, GrantParams } from './schemas.ts'
import { endEventSubscription, EventSubscriptionListSchema, listEventSubscriptions } from '../mcp/event-subscriptions.ts'

export interface ConnectedAppRoutesDeps extends AuthPluginDeps, RevocationDeps {
  db: Database
}

/** `/account/{account_id}/grants` (docs/api.md#connected-apps): the apps and agents that hold access, and cutting one off. */
export function connectedAppRoutes(deps: ConnectedAppRoutesDeps) {
  return new Elysia({ tags: ['Connected apps'] })
    .use(authPlugin(deps))
    .get('/account/:account_id/grants', ({ caller, params, query }) => listConnectedApps(deps.db, ownAccount(caller, params.account_id), query), {
      auth: { scope: 'grants:read' },
      params: AccountParams,
      query: PageQuery,
      response: { 200: pageOf(ConnectedAppSchema) },
      detail: { operationId: 'listGrants', summary: 'List the apps and agents that hold access to the account, newest first' },
    })
    .delete('/account/:account_id/grants/:grant_id', async ({ caller, params, set }) => {
      const accountId = ownAccount(caller, params.account_id)
      if (!(await disconnectApp(deps.db, accountId, params.grant_id))) throw notFound(`No active grant ${params.grant_id} on this account.`)
      await recordRevocation(deps, caller, { action: 'grant.revoked', grant_id: params.grant_id, account_id: accountId })
      set.status = 204
    }, {
      auth: { scope: 'grants:write' },
      params: GrantParams,
      response: { 204: t.Void() },
      detail: { operationId: 'revokeGrant', summary: "Revoke an app's access: its tokens stop working here at once, on every instance within 5 s" },
    })
    .get('/account/:account_id/grants/:grant_id/event-subscriptions', async ({ caller, params }) => {
      const accountId = ownAccount(caller, params.account_id)
      if (!(await isActiveGrant(deps.db, accountId, params.grant_id))) throw notFound(`No active grant ${params.grant_id} on this account.`)
      return { data: await listEventSubscriptions(deps.db, accountId, params.grant_id) }
    }, {
      auth: { scope: 'grants:read' },
      params: GrantParams,
      response: { 200: EventSubscriptionListSchema },
      detail: { operationId: 'listEventSubscriptions', summary: "List an agent's MCP event subscriptions (docs/mcp.md#events), oldest first" },
    })
    .delete('/account/:account_id/grants/:grant_id/event-subscriptions/:subscription_id', async ({ caller, params, set }) => {
      const accountId = ownAccount(caller, params.account_id)
      if (!(await endEventSubscription(deps.db, accountId, params.grant_id, params.subscription_id))) {
        throw notFound(`No event subscription ${params.subscription_id} of grant ${params.grant_id} on this account.`)
      }
      deps.logger.info('audit', { audit: true, action: 'event_subscription.ended', subscription_id: params.subscription_id, grant_id: params.grant_id, account_id: accountId, ...auditActor(caller) })
      set.status = 204
    }, {
      auth: { scope: 'grants:write' },
      params: EventSubscriptionParams,
      response: { 204: t.Void() },
      detail: {
        operationId: 'endEventSubscription',
        summary: "End one of an agent's MCP event subscriptions: nothing more is sent to it, and its callback is told (a signed terminated envelope)",
      },
    })
}
