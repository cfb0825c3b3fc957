import { count } from 'drizzle-orm'
import { ConfigError, loadConfig, type Config } from './lib/config.ts'
import type { DatabaseHandle } from './lib/db/client.ts'
import { POOL_SIZES, TurnTakingPGlite, pgliteDatabase, postgresDatabase } from './lib/db/client.ts'
import { migratePgliteDatabase, migratePostgresDatabase } from './lib/db/migrate.ts'
import { DataDirLockedError, acquireDataDirLock } from './lib/db/data-dir-lock.ts'
import { closeToOthers } from './lib/security/file-modes.ts'
import { accounts } from './lib/db/schema.ts'
import { startInvalidationFeed } from './lib/cache/invalidation-feed.ts'
import { createLogger, type Logger } from './lib/runtime/logger.ts'
import { startTracing, tracedLogger } from './lib/runtime/tracing.ts'
import { startPeriodicSweep } from './lib/runtime/sweep.ts'
import { deleteStaleHits } from './lib/db/rate-limits.ts'
import { deleteExpiredJtis } from './lib/security/jti-replay.ts'
import { traceRequests } from './lib/http/request-tracing.ts'
import { requestHandler, type FetchHandler } from './lib/http/foundation.ts'
import { createApp, type App } from './app.ts'
import { createAccountReader } from './accounts/account-cache.ts'
import { createApiKeyAuthenticator, newApiKeyCache } from './auth/authenticator.ts'
import { createBearerAuthenticator } from './auth/bearer.ts'
import { sandboxCarrier } from './messages/carrier.ts'
import { createAdmission } from './messages/admission.ts'
import { MESSAGE_WRITES, createMessageSettler, createMessageStorer, startQueuedCatchUp, type MessageDeps } from './messages/service.ts'
import { prepareActiveKeyLookup } from './auth/api-keys.ts'
import { createSecretBox, resolveEncryptionKey, type SecretBox } from './lib/security/secret-box.ts'
import { createDpopVerifier } from './lib/security/dpop.ts'
import { createDpopNonces } from './lib/security/dpop-nonce.ts'
import { SigningKeyError, createTokenSigner, type TokenSigner } from './oauth/signing-keys.ts'
import { startSuccessorErasure } from './oauth/grants/refresh-token.ts'
import { startEventRetention } from './delivery/retention.ts'
import { startEventSubscriptionSweep } from './mcp/event-subscriptions.ts'
import { startDeliveryWorker } from './delivery/supervisor.ts'
import { createCommitNotifier } from './delivery/commit-notifier.ts'
import { createMetrics, type Metrics } from './ops/metrics.ts'
import { ensureDashboardClient } from './dashboard/client.ts'
import { startClosingSweep } from './stats/closing.ts'

// The composition root: how one running instance is assembled from configuration, a database
// and the features. The runtime entries (src/main.ts, src/main.deno.ts) and the tests start it.

export interface OpenedDatabase {
  handle: DatabaseHandle
  close(): Promise<void>
}

/**
 * The configured database, migrated. PostgreSQL when DATABASE_URL is set; otherwise PGlite in
 * DATA_DIR, which this process locks for as long as it has it open.
 */
export async function openConfiguredDatabase(config: Config): Promise<OpenedDatabase> {
  if (config.databaseUrl) {
    await migratePostgresDatabase(config.databaseUrl)
    const handle = postgresDatabase(config.databaseUrl)
    return { handle, close: () => handle.close() }
  }
  const lock = acquireDataDirLock(config.dataDir)
  try {
    const handle = pgliteDatabase(await TurnTakingPGlite.create({ dataDir: config.dataDir }))
    await migratePgliteDatabase(handle)
    // PGlite chooses the modes of its files itself (0666 for the database it creates, whatever
    // the umask): close everything to other users once it is open and migrated, and again once
    // it has written its last files on close.
    closeToOthers(config.dataDir, { recursive: true })
    return {
      handle,
      async close() {
        await handle.close()
        closeToOthers(config.dataDir, { recursive: true })
        lock.release()
      },
    }
  } catch (error) {
    lock.release()
    throw error
  }
}

export interface Instance {
  app: App
  /** What a runtime serves: the app wrapped with request ids, the size check and request logs. */
  fetch: FetchHandler
  /** Applies recent cache invalidations now instead of at the next poll. */
  syncCaches(): Promise<void>
  /** Signs and verifies the service's JWTs; `reload()` after rotating its key through another path. */
  signer: TokenSigner
  /** Seals secrets the service reads back (ENCRYPTION_KEY); the CLI socket hands it to `keys rotate`. */
  secretBox: SecretBox
  /** Set when METRICS_PORT is: the series `fetch` and the delivery worker feed; the runtime entry serves them. */
  metrics: Metrics | undefined
  /** Stops background work (the delivery worker finishes its attempts in flight); the database stays open (its owner closes it). */
  stop(): Promise<void>
}

/** Wires the features over an open, migrated database. */
export async function createInstance(options: {
  config: Config
  logger: Logger
  handle: DatabaseHandle
  /** The Bun entry sends webhooks from this process; the Deno entry serves the API only (docs/architecture.md). */
  deliverWebhooks: boolean
}): Promise<Instance> {
  const { config, handle } = options
  // docs/operations.md#traces: off unless an OTLP endpoint is set; then log lines written inside a span name it.
  const tracing = config.tracing ? startTracing(config.tracing, { warn: (message) => options.logger.warn('OpenTelemetry', { error: message }) }) : undefined
  const logger = tracing ? tracedLogger(options.logger) : options.logger
  await ensureDashboardClient(handle.db, config.publicUrl)
  const keyCache = newApiKeyCache()
  const accounts = createAccountReader(handle.db)
  const encryptionKey = resolveEncryptionKey({ configured: config.encryptionKey, dataDir: config.dataDir, logger, multiInstance: handle.kind === 'postgres' })
  const secretBox = await createSecretBox(encryptionKey)
  const signer = await createTokenSigner({ db: handle.db, secretBox, issuer: config.baseUrl, logger })
  const bearer = createBearerAuthenticator({ db: handle.db, signer, isCacheTrusted: () => feed.isFresh() })
  // Nonces derive from ENCRYPTION_KEY, which every instance of a deployment shares: each accepts the others' (docs/oauth.md#dpop).
  const dpop = createDpopVerifier({ db: handle.db, nonces: await createDpopNonces(encryptionKey), publicUrl: config.publicUrl })
  const reloadSigner = () => signer.reload().catch((error) => logger.error('reloading signing keys failed', { error: String(error) }))
  const feed = await startInvalidationFeed({
    db: handle.db,
    logger,
    onInvalidated(kind, subjectId) {
      if (kind === 'api_key') keyCache.deleteBySecondaryKey(subjectId)
      else if (kind === 'account') accounts.cache.delete(subjectId)
      else if (kind === 'grant') bearer.grantRevoked(subjectId)
      // Rows stay in the feed's window for 30 s: reload once, not at every poll.
      else if (kind === 'signing_key' && !signer.hasKey(subjectId)) void reloadSigner()
    },
    onResync() {
      keyCache.clear()
      accounts.cache.clear()
      bearer.clear()
      // A rotation may have left the feed's window while polls failed.
      void reloadSigner()
    },
  })
  const authenticateApiKey = createApiKeyAuthenticator({
    findActiveKey: prepareActiveKeyLookup(handle.db),
    isCacheTrusted: feed.isFresh,
    cache: keyCache,
  })
  // After a commit that queued deliveries: this process's worker at once, other processes' through NOTIFY.
  const notifyOrigin = crypto.randomUUID()
  const notifier =
    handle.kind === 'postgres'
      ? createCommitNotifier(handle.db, { intervalMs: 5, origin: notifyOrigin, onError: (error) => logger.warn('NOTIFY of new deliveries failed', { error: String(error) }) })
      : undefined
  const deliveriesQueued = (hookIds?: readonly string[]) => {
    worker?.wake(hookIds)
    notifier?.committed()
  }
  // Fed by this process's delivery worker: a process that delivers no webhooks never holds messages.
  const admission = createAdmission({ holdMs: config.messageHoldMs, onHeld: (waitedMs, accepted) => metrics?.delivery.messageHeld(waitedMs / 1000, accepted) })
  const settler = createMessageSettler(handle.keyedDb, MESSAGE_WRITES[handle.kind], () => deliveriesQueued())
  const messaging: MessageDeps = { db: handle.db, carrier: sandboxCarrier, logger, storeMessage: createMessageStorer(handle.db, MESSAGE_WRITES[handle.kind]), settleMessage: settler.settle, fanOuts: settler.fanOuts, deliveriesQueued, admission, dispatching: new Set(), tracing }
  const app = createApp({
    config,
    db: handle.db,
    logger,
    authenticateApiKey,
    bearer,
    dpop,
    accounts,
    isCacheTrusted: feed.isFresh,
    signer,
    secretBox,
    messaging,
    syncCaches: feed.pollNow,
    tracing,
  })
  const metrics =
    config.metricsPort === undefined
      ? undefined
      : createMetrics({ handle, routes: app.routes, pools: handle.kind === 'postgres' ? { api: POOL_SIZES.api, keyed: POOL_SIZES.keyed, ...(options.deliverWebhooks ? { worker: POOL_SIZES.worker } : {}) } : undefined })
  const worker = options.deliverWebhooks
    ? startDeliveryWorker({
        config, handle, encryptionKey, logger, metrics: metrics?.delivery, notifyOrigin,
        onBehind(accounts) {
          admission.setBehind(accounts)
          metrics?.delivery.accountsBehind(accounts.length)
        },
      })
    : undefined
  const successorErasure = startSuccessorErasure({ db: handle.db, graceSeconds: config.oauthRefreshGraceSeconds, logger })
  const eventRetention = startEventRetention({ db: handle.db, retentionDays: config.eventRetentionDays, logger })
  const closingSweep = startClosingSweep({ db: handle.db, logger })
  const eventSubscriptionSweep = startEventSubscriptionSweep({ db: handle.db, secretBox, send: { timeoutMs: config.webhookTimeoutMs, allowPrivate: config.webhookAllowPrivateTargets, ca: config.webhookCaPem }, logger })
  const queuedCatchUp = startQueuedCatchUp(messaging)
  const staleHits = startPeriodicSweep({ sweep: () => deleteStaleHits(handle.db), intervalMs: 3_600_000, logger, failure: 'deleting stale rate-limit counters failed' })
  const expiredJtis = startPeriodicSweep({ sweep: () => deleteExpiredJtis(handle.db), intervalMs: 600_000, logger, failure: 'deleting expired token identifiers failed' })
  const logged = requestHandler(app, logger, { publicUrl: config.publicUrl, trustedProxies: config.trustedProxies })
  const handler = tracing ? traceRequests(logged, { tracing, routes: app.routes }) : logged
  return {
    app,
    fetch: metrics ? metrics.http.measure(handler) : handler,
    metrics,
    syncCaches: feed.pollNow,
    signer,
    secretBox,
    async stop() {
      feed.stop()
      notifier?.stop()
      await successorErasure.stop()
      await eventRetention.stop()
      await closingSweep.stop()
      await eventSubscriptionSweep.stop()
      await queuedCatchUp.stop()
      await staleHits.stop()
      await expiredJtis.stop()
      await worker?.stop()
      await tracing?.shutdown()
    },
  }
}

export interface Booted {
  config: Config
  logger: Logger
  database: OpenedDatabase
  instance: Instance
}

/** Stops the process with one line naming the problem; no stack trace for a bad setting. */
export function exitWith(message: string): never {
  console.error(message)
  process.exit(1)
}

export function loadConfigOrExit(env: Record<string, string | undefined>): Config {
  try {
    return loadConfig(env)
  } catch (error) {
    if (error instanceof ConfigError) exitWith(`Invalid configuration: ${error.message}`)
    throw error
  }
}

export async function openDatabaseOrExit(config: Config): Promise<OpenedDatabase> {
  try {
    return await openConfiguredDatabase(config)
  } catch (error) {
    if (error instanceof DataDirLockedError) {
      exitWith(`${error.message}: PGlite allows one process per data directory. Stop it, or set DATA_DIR or DATABASE_URL.`)
    }
    if (config.databaseUrl) exitWith(`DATABASE_URL: cannot open the database (${(error as Error).message})`)
    throw error
  }
}

/** Everything a runtime entry point needs before it starts listening. */
export async function bootInstance(env: Record<string, string | undefined>, options: { deliverWebhooks: boolean }): Promise<Booted> {
  const config = loadConfigOrExit(env)
  const logger = createLogger(config.logLevel)
  const database = await openDatabaseOrExit(config)
  try {
    const instance = await createInstance({ config, logger, handle: database.handle, deliverWebhooks: options.deliverWebhooks })
    return { config, logger, database, instance }
  } catch (error) {
    // A signing key this ENCRYPTION_KEY cannot open is the operator's to fix: one line saying how, not a stack trace.
    if (!(error instanceof SigningKeyError)) throw error
    await database.close()
    exitWith(`ENCRYPTION_KEY: ${error.message}`)
  }
}

export async function logFirstRunHint({ database, logger }: Booted): Promise<void> {
  const [row] = await database.handle.db.select({ n: count() }).from(accounts)
  if (row && row.n === 0) {
    logger.info('no accounts yet: create a demo account, user and API key with `bun run cli demo`')
  }
}
