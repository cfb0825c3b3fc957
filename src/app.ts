import { Elysia } from 'elysia'
import type { Config } from './lib/config.ts'
import type { Database } from './lib/db/client.ts'
import { isDatabaseReachable } from './lib/db/client.ts'
import type { Tracing } from './lib/runtime/tracing.ts'
import type { Logger } from './lib/runtime/logger.ts'
import { httpFoundation } from './lib/http/foundation.ts'
import { opsRoutes } from './ops/routes.ts'
import { errorPageRoutes } from './ops/error-pages.ts'
import { apiReference } from './ops/openapi.ts'
import { buildApiDocument } from './ops/openapi-document.ts'
import { accountRoutes } from './accounts/routes.ts'
import { registrationRoutes } from './oauth/register.ts'
import { discoveryRoutes } from './oauth/discovery.ts'
import type { AccountReader } from './accounts/account-cache.ts'
import type { AuthenticateApiKey } from './auth/authenticator.ts'
import { jwksRoutes } from './oauth/jwks-route.ts'
import type { TokenSigner } from './oauth/signing-keys.ts'
import type { SecretBox } from './lib/security/secret-box.ts'
import type { BearerAuthenticator } from './auth/bearer.ts'
import type { DpopVerifier } from './lib/security/dpop.ts'
import { signInRoutes } from './oauth/sign-in.ts'
import { authorizeRoutes } from './oauth/authorize.ts'
import { tokenEndpointRoutes } from './oauth/token-endpoint.ts'
import { revocationRoutes } from './oauth/revocation.ts'
import { sessionRoutes } from './oauth/session.ts'
import { hookRoutes } from './hooks/routes.ts'
import { statsRoutes } from './stats/routes.ts'
import { createStatsCache } from './stats/service.ts'
import { messageRoutes } from './messages/routes.ts'
import type { MessageDeps } from './messages/service.ts'
import { isForbiddenHost } from './lib/security/outbound.ts'
import { mcpRoutes } from './mcp/routes.ts'
import { createClientDirectory } from './oauth/client-directory.ts'
import { createRequestRateLimiter } from './auth/request-rate-limit.ts'
import { dashboardRoutes } from './dashboard/routes.ts'
import { createUsageRecorder } from './auth/usage.ts'
import { apiKeyRoutes } from './auth/api-key-routes.ts'
import { connectedAppRoutes } from './oauth/connected-app-routes.ts'
import { identityProviderRoutes } from './identity-providers/routes.ts'
import { createProviderKeySets } from './identity-providers/key-sets.ts'

export interface AppDeps {
  config: Config
  db: Database
  logger: Logger
  authenticateApiKey: AuthenticateApiKey
  accounts: AccountReader
  isCacheTrusted(): boolean
  signer: TokenSigner
  bearer: BearerAuthenticator
  /** Checks DPoP proofs at the token endpoint and the resource servers. */
  dpop: DpopVerifier
  secretBox: SecretBox
  /** The carrier, how outcomes are written and who hears of new deliveries. */
  messaging: MessageDeps
  /** Applies recent cache invalidations now (after a revocation made by this instance). */
  syncCaches(): Promise<void>
  /** Set when traces are on (docs/operations.md#traces). */
  tracing?: Tracing
}

/** The whole HTTP surface as one Elysia app; runtimes serve it through `requestHandler` (src/lib/http/foundation.ts). */
export function createApp(deps: AppDeps) {
  const resourceMetadataUrl = `${deps.config.publicUrl}/.well-known/oauth-protected-resource/v0`
  // One limiter for every route of this instance: a credential's requests are counted together.
  const rateLimiter = deps.config.apiRateLimit > 0 ? createRequestRateLimiter({ ratePerSecond: deps.config.apiRateLimit }) : undefined
  const noteUse = createUsageRecorder({ db: deps.db, logger: deps.logger })
  const auth = { ...deps, resourceMetadataUrl, baseUrl: deps.config.baseUrl, rateLimiter, noteUse }
  // Client ID metadata documents and identity providers' keys are fetched under the webhook rules
  // (docs/oauth.md#client-id-metadata-documents): the same private-target switch and CAs.
  const outbound = { allowPrivate: deps.config.webhookAllowPrivateTargets, ca: deps.config.webhookCaPem }
  const tokens = {
    db: deps.db,
    clients: createClientDirectory(deps.db, { outbound }),
    providerKeys: createProviderKeySets({ policy: outbound }),
    logger: deps.logger,
    signer: deps.signer,
    secretBox: deps.secretBox,
    baseUrl: deps.config.baseUrl,
    refreshGraceSeconds: deps.config.oauthRefreshGraceSeconds,
    syncCaches: deps.syncCaches,
  }
  // REST and MCP manage subscriptions through the same services, with the same rules.
  const hooks = {
    ...auth,
    db: deps.db,
    secretBox: deps.secretBox,
    isForbiddenHost,
    allowPrivateTargets: deps.config.webhookAllowPrivateTargets,
    hooksPerAccount: deps.config.hooksPerAccount,
    logger: deps.logger,
    send: { timeoutMs: deps.config.webhookTimeoutMs, allowPrivate: deps.config.webhookAllowPrivateTargets, ca: deps.config.webhookCaPem },
    deliveriesQueued: deps.messaging.deliveriesQueued,
    tracing: deps.tracing,
    statsCache: createStatsCache(),
  }
  const app = new Elysia({ normalize: false })
    .use(httpFoundation(deps.logger, { publicUrl: deps.config.publicUrl }))
    .use(opsRoutes({ isDatabaseReachable: () => isDatabaseReachable(deps.db) }))
    .use(errorPageRoutes())
    .use(dashboardRoutes({ publicUrl: deps.config.publicUrl, baseUrl: deps.config.baseUrl, logger: deps.logger }))
    .use(discoveryRoutes({ config: deps.config }))
    .group('/v0', (v0) => v0
        .use(accountRoutes({ ...deps, ...auth }))
        .use(apiKeyRoutes({ ...deps, ...auth }))
        .use(connectedAppRoutes({ ...deps, ...auth }))
        .use(identityProviderRoutes({ ...deps, ...auth, allowPrivateTargets: deps.config.webhookAllowPrivateTargets }))
        .use(registrationRoutes({ db: deps.db, allowPrivateTargets: deps.config.webhookAllowPrivateTargets }))
        .use(jwksRoutes(deps))
        .use(signInRoutes({ db: deps.db, signer: deps.signer, baseUrl: deps.config.baseUrl }))
        .use(authorizeRoutes(tokens))
        .use(tokenEndpointRoutes({ ...tokens, dpop: deps.dpop }))
        .use(revocationRoutes(tokens))
        .use(sessionRoutes(auth))
        .use(hookRoutes(hooks))
        .use(statsRoutes({ ...auth, db: deps.db, statsCache: hooks.statsCache }))
        .use(mcpRoutes({ ...hooks, publicUrl: deps.config.publicUrl, allowedOrigins: deps.config.mcpAllowedOrigins, retentionDays: deps.config.eventRetentionDays }))
        .use(messageRoutes({ ...auth, ...deps.messaging })))
  // Built once every route exists and before any request: Elysia amends a route's schemas the
  // first time it fails, and the document must describe them as declared.
  const document = buildApiDocument(app, { publicUrl: deps.config.publicUrl, baseUrl: deps.config.baseUrl, exclude: [/^\/v0\/docs/, '/v0/openapi.json'] })
  return app.use(apiReference({ document }))
}

export type App = ReturnType<typeof createApp>
