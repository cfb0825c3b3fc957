import { Elysia } from 'elysia'
import type { Config } from './lib/config.ts'
import type { Database } from './lib/db/client.ts'
import { isDatabaseReachable } from './lib/db/client.ts'
import type { Logger } from './lib/logger.ts'
import { httpFoundation } from './lib/http.ts'
import { opsRoutes } from './ops/routes.ts'
import { apiReference } from './ops/openapi.ts'
import { accountRoutes } from './accounts/routes.ts'
import type { AccountReader } from './accounts/account-cache.ts'
import type { AuthenticateApiKey } from './auth/authenticator.ts'

export interface AppDeps {
  config: Config
  db: Database
  logger: Logger
  authenticateApiKey: AuthenticateApiKey
  accounts: AccountReader
  isCacheTrusted(): boolean
}

/** The whole HTTP surface as one Elysia app; runtimes serve it through `requestHandler` (src/lib/http.ts). */
export function createApp(deps: AppDeps) {
  const resourceMetadataUrl = `${deps.config.publicUrl}/.well-known/oauth-protected-resource/v0`
  return new Elysia({ normalize: false })
    .use(httpFoundation(deps.logger))
    .use(opsRoutes({ isDatabaseReachable: () => isDatabaseReachable(deps.db) }))
    .use(apiReference({ publicUrl: deps.config.publicUrl }))
    .group('/v0', (v0) => v0.use(accountRoutes({ ...deps, resourceMetadataUrl })))
}

export type App = ReturnType<typeof createApp>
