import { chmodSync, rmSync } from 'node:fs'
import { bootInstance, exitWith, logFirstRunHint } from './instance.ts'
import { RUNTIME_BODY_LIMIT } from './lib/http/foundation.ts'
import { runCommand } from './cli/commands.ts'
import { cliSocketPath, parseForwardedCommand } from './cli/socket.ts'
import { serveMetrics } from './ops/metrics-server.ts'

// The Bun adapter: everything Bun-specific (Bun.serve, the CLI socket) stays in this file.

// Nothing this process creates is meant for other users (DATA_DIR holds the database, the
// encryption key and the CLI socket), so nothing is created open to them, as PostgreSQL's own
// server does (umask 077). Process-wide, and set before anything is created.
process.umask(0o077)
const booted = await bootInstance(process.env, { deliverWebhooks: true })
const { config, logger, database, instance } = booted

/** Opens a listener; an address already in use stops the start with one line naming the setting, not a stack trace. */
async function listenOrExit<T>(setting: string, port: number, listen: () => T): Promise<T> {
  try {
    return listen()
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'EADDRINUSE') throw error
    await instance.stop()
    await database.close()
    await logger.flush()
    exitWith(`Cannot listen on ${config.host}:${port}: the address is in use. Stop what holds it, or set ${setting} (or HOST).`)
  }
}

const server = await listenOrExit('PORT', config.port, () =>
  Bun.serve({
    port: config.port,
    hostname: config.host,
    fetch: (request, server) => instance.fetch(request, server.requestIP(request)?.address),
    maxRequestBodySize: RUNTIME_BODY_LIMIT,
  }),
)

// Prometheus on its own port (METRICS_PORT), never on the API's: it has no authentication.
const metricsPort = config.metricsPort
const metricsServer =
  instance.metrics && metricsPort !== undefined
    ? await listenOrExit('METRICS_PORT', metricsPort, () =>
        serveMetrics(instance.metrics!, { port: metricsPort, hostname: config.host, onError: (error) => logger.error('rendering the metrics failed', { error: String(error) }) }),
      )
    : undefined

let cliSocket: ReturnType<typeof Bun.serve> | undefined
if (database.handle.kind === 'pglite') {
  const path = cliSocketPath(config.dataDir)
  rmSync(path, { force: true })
  cliSocket = Bun.serve({
    unix: path,
    async fetch(request) {
      const argv = parseForwardedCommand(await request.json().catch(() => null))
      if (!argv) return Response.json({ exitCode: 2, output: 'error: expected {"argv": [string, …]}' }, { status: 400 })
      const result = await runCommand(argv, { db: database.handle.db, baseUrl: config.baseUrl, openSecretBox: async () => instance.secretBox, logger })
      await instance.syncCaches()
      // After `keys rotate`: sign with the new key from the next request, not the next poll.
      await instance.signer.reload()
      return Response.json(result)
    },
  })
  chmodSync(path, 0o600)
}

// Signals are handled from the moment the port is open, before anything else is awaited.
let stopping = false
async function shutdown(signal: string) {
  if (stopping) return
  stopping = true
  logger.info('shutting down', { signal })
  const force = setTimeout(() => {
    logger.warn('in-flight requests did not finish in 10 s; closing them')
    void server.stop(true)
  }, 10_000)
  await server.stop()
  clearTimeout(force)
  await instance.stop()
  await metricsServer?.stop(true)
  if (cliSocket) {
    await cliSocket.stop(true)
    rmSync(cliSocketPath(config.dataDir), { force: true })
  }
  await database.close()
  await logger.flush()
  process.exit(0)
}
process.on('SIGTERM', () => void shutdown('SIGTERM'))
process.on('SIGINT', () => void shutdown('SIGINT'))

logger.info('listening', {
  url: `http://${config.host}:${server.port}`,
  public_url: config.publicUrl,
  database: database.handle.kind === 'postgres' ? 'postgresql' : `pglite:${config.dataDir}`,
  ...(metricsServer ? { metrics_url: `http://${config.host}:${metricsServer.port}/metrics` } : {}),
})
await logFirstRunHint(booted)
await logger.flush()
