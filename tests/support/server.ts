import { afterAll } from 'bun:test'
import { loadConfig, type Config } from '../../src/lib/config.ts'
import { createLogger } from '../../src/lib/runtime/logger.ts'
import { RUNTIME_BODY_LIMIT, type FetchHandler } from '../../src/lib/http/foundation.ts'
import { createInstance, type Instance } from '../../src/instance.ts'
import { createAccount } from '../../src/accounts/service.ts'
import { createApiKey } from '../../src/auth/api-keys.ts'
import { createTestDatabase, type TestDatabase } from './database.ts'

export interface TestServer {
  /** Origin of the running server, e.g. http://127.0.0.1:41234 */
  origin: string
  config: Config
  database: TestDatabase
  instance: Instance
  /** Every log line the service wrote, parsed. */
  logs: Record<string, unknown>[]
  rawLogs: string[]
  fetch(path: string, init?: RequestInit): Promise<Response>
  createAccountWithKey(name?: string): Promise<{ accountId: string; keyId: string; secret: string }>
  stop(): Promise<void>
}

/** One per test process: tests never fall back to writing ./data/encryption.key. */
const TEST_ENCRYPTION_KEY = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url')

/**
 * The real app on a real port over an isolated real database, served exactly as src/main.ts
 * serves it. Stopped after the file's tests unless the test stops it first.
 */
export async function startTestServer(
  options: { env?: Record<string, string>; database?: TestDatabase; deliverWebhooks?: boolean } = {},
): Promise<TestServer> {
  const database = options.database ?? (await createTestDatabase())
  const rawLogs: string[] = []
  const logs: Record<string, unknown>[] = []
  const logger = createLogger('debug', (line) => {
    rawLogs.push(line)
    logs.push(JSON.parse(line))
  })
  // Listen first: PUBLIC_URL must name the real port, as it would in production.
  let handle: FetchHandler = () => new Response(null, { status: 503 })
  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    fetch: (request, server) => handle(request, server.requestIP(request)?.address),
    maxRequestBodySize: RUNTIME_BODY_LIMIT,
  })
  const origin = `http://127.0.0.1:${server.port}`
  const config = loadConfig({ PORT: String(server.port), PUBLIC_URL: origin, LOG_LEVEL: 'debug', ENCRYPTION_KEY: TEST_ENCRYPTION_KEY, ...options.env })
  const instance = await createInstance({ config, logger, handle: database.handle, deliverWebhooks: options.deliverWebhooks ?? true })
  handle = instance.fetch

  let stopped = false
  const stop = async () => {
    if (stopped) return
    stopped = true
    await server.stop(true)
    await instance.stop()
    if (!options.database) await database.drop()
  }
  afterAll(stop)

  return {
    origin,
    config,
    database,
    instance,
    logs,
    rawLogs,
    fetch: (path, init) => fetch(`${origin}${path}`, init),
    async createAccountWithKey(name = 'Test account') {
      const account = await createAccount(database.handle.db, { name })
      const { key, secret } = await createApiKey(database.handle.db, { accountId: account.id })
      return { accountId: account.id, keyId: key.id, secret }
    },
    stop,
  }
}

export async function json(response: Response): Promise<any> {
  return response.json()
}
