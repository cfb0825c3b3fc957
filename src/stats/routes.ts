import { Elysia } from 'elysia'
import { authPlugin, ownAccount, type AuthPluginDeps } from '../auth/plugin.ts'
import type { Database } from '../lib/db/client.ts'
import { AccountParams, HookParams } from '../lib/http/params.ts'
import { AccountStatsSchema, HookStatsSchema, StatsQuery } from './schemas.ts'
import { readAccountStats, readHookStats, statsRange, type StatsCache } from './service.ts'

export function statsRoutes(deps: AuthPluginDeps & { db: Database; statsCache: StatsCache }) {
  return new Elysia({ tags: ['Health'] })
    .use(authPlugin(deps))
    .get(
      '/account/:account_id/hooks/:hook_id/stats',
      ({ caller, params, query }) => readHookStats(deps.db, deps.statsCache, ownAccount(caller, params.account_id), params.hook_id, statsRange(query, new Date())),
      {
        auth: { scope: 'hooks:read' },
        params: HookParams,
        query: StatsQuery,
        response: { 200: HookStatsSchema },
        detail: {
          operationId: 'getHookStats',
          summary: "A subscription's health over time: attempts, successes, failures by reason and latency per minute, hour or day",
        },
      },
    )
    .get(
      '/account/:account_id/stats',
      ({ caller, params, query }) => readAccountStats(deps.db, deps.statsCache, ownAccount(caller, params.account_id), statsRange(query, new Date())),
      {
        auth: { scope: 'messages:read' },
        params: AccountParams,
        query: StatsQuery,
        response: { 200: AccountStatsSchema },
        detail: {
          operationId: 'getAccountStats',
          summary: "The account's health over time: every subscription's deliveries together, messages sent, delivered and failed, events by type",
        },
      },
    )
}
