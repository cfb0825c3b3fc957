import { afterAll, expect, test } from 'bun:test'
import { eq } from 'drizzle-orm'
import { createTestDatabase } from '../support/database.ts'
import { createLogger } from '../../src/lib/runtime/logger.ts'
import { createAccount } from '../../src/accounts/service.ts'
import { createApiKey } from '../../src/auth/api-keys.ts'
import { apiKeys } from '../../src/lib/db/schema.ts'
import { createUsageRecorder } from '../../src/auth/usage.ts'

const database = await createTestDatabase()
afterAll(() => database.drop())
const { db } = database.handle
const logger = createLogger('error', () => undefined)

const lastUsed = async (keyId: string) => (await db.select({ at: apiKeys.lastUsedAt }).from(apiKeys).where(eq(apiKeys.id, keyId)))[0]!.at

test('a credential is written at most once per interval, however often it is used', async () => {
  const account = await createAccount(db, { name: 'Usage' })
  const { key } = await createApiKey(db, { accountId: account.id })
  let clock = 1_000_000
  const writes: unknown[] = []
  const counted = { ...db, update: (table: typeof apiKeys) => (writes.push(table), db.update(table)) } as unknown as typeof db
  const noteUse = createUsageRecorder({ db: counted, logger, intervalMs: 60_000, now: () => clock })
  for (let i = 0; i < 100; i++) noteUse({ kind: 'api_key', id: key.id })
  expect(writes).toHaveLength(1)
  clock += 59_999
  noteUse({ kind: 'api_key', id: key.id })
  expect(writes).toHaveLength(1)
  clock += 1
  noteUse({ kind: 'api_key', id: key.id })
  expect(writes).toHaveLength(2)
  for (let tries = 0; tries < 40 && !(await lastUsed(key.id)); tries++) await Bun.sleep(25)
  expect(await lastUsed(key.id)).toBeInstanceOf(Date)
})

test('a failed write is logged, never thrown at the request', async () => {
  const lines: string[] = []
  const failing = { update: () => ({ set: () => ({ where: () => Promise.reject(new Error('database away')) }) }) } as unknown as typeof db
  const noteUse = createUsageRecorder({ db: failing, logger: createLogger('warn', (line) => lines.push(line)) })
  expect(() => noteUse({ kind: 'access_token', grantId: 'grt_x', clientId: 'cli_x', userId: 'usr_x', audience: [], exp: 0 })).not.toThrow()
  await Bun.sleep(10)
  expect(lines.map((line) => JSON.parse(line))).toContainEqual(expect.objectContaining({ msg: 'recording last use failed', subject: 'grt_x' }))
})


