import { count } from 'drizzle-orm'
import { ConfigError, loadConfig, type Config } from './lib/config.ts'
import { DataDirLockedError } from './lib/db/data-dir-lock.ts'
import { accounts } from './lib/db/schema.ts'
import { createLogger, type Logger } from './lib/logger.ts'
import { createService, openConfiguredDatabase, type OpenedDatabase, type Service } from './service.ts'

export interface Booted {
  config: Config
  logger: Logger
  database: OpenedDatabase
  service: Service
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
export async function boot(env: Record<string, string | undefined>, options: { deliverWebhooks: boolean }): Promise<Booted> {
  const config = loadConfigOrExit(env)
  const logger = createLogger(config.logLevel)
  const database = await openDatabaseOrExit(config)
  const service = await createService({ config, logger, handle: database.handle, deliverWebhooks: options.deliverWebhooks })
  return { config, logger, database, service }
}

export async function logFirstRunHint({ database, logger }: Booted): Promise<void> {
  const [row] = await database.handle.db.select({ n: count() }).from(accounts)
  if (row && row.n === 0) {
    logger.info('no accounts yet: create a demo account, user and API key with `bun run cli demo`')
  }
}
