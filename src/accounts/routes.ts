import { Elysia } from 'elysia'
import type { Database } from '../lib/db/client.ts'
import { notFound } from '../lib/http/errors.ts'
import { authPlugin, type AuthPluginDeps } from '../auth/plugin.ts'
import { AccountSchema, UpdateAccountBody } from './schemas.ts'
import { renameAccount, toAccountResource } from './service.ts'
import type { AccountReader } from './account-cache.ts'

export interface AccountRoutesDeps extends AuthPluginDeps {
  db: Database
  accounts: AccountReader
  isCacheTrusted(): boolean
}

export function accountRoutes(deps: AccountRoutesDeps) {
  return new Elysia({ tags: ['Account'] })
    .use(authPlugin(deps))
    .get(
      '/account',
      async ({ caller }) => {
        const account = await deps.accounts.read(caller.accountId, deps.isCacheTrusted())
        if (!account) throw notFound('The account no longer exists.')
        return account
      },
      {
        auth: { scope: 'account:read' },
        response: { 200: AccountSchema },
        detail: { operationId: 'getAccount', summary: "Get the caller's account" },
      },
    )
    .patch(
      '/account',
      async ({ caller, body }) => {
        const account = await renameAccount(deps.db, caller.accountId, body.name.trim())
        if (!account) throw notFound('The account no longer exists.')
        deps.accounts.cache.delete(account.id)
        return toAccountResource(account)
      },
      {
        auth: { scope: null, accepts: 'api_key' },
        body: UpdateAccountBody,
        response: { 200: AccountSchema },
        detail: { operationId: 'updateAccount', summary: "Rename the caller's account" },
      },
    )
}
