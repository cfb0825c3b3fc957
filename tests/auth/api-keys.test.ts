import { describe, expect, test } from 'bun:test'
import { eq } from 'drizzle-orm'
import { startTestServer } from '../support/server.ts'
import { apiKeys } from '../../src/lib/db/schema.ts'
import { sha256Hex } from '../../src/lib/security/crypto.ts'
import { createApiKey, prepareActiveKeyLookup, revokeApiKey } from '../../src/auth/api-keys.ts'
import { createApiKeyAuthenticator, newApiKeyCache } from '../../src/auth/authenticator.ts'
import { createAccount } from '../../src/accounts/service.ts'

const server = await startTestServer()
const db = server.database.handle.db

describe('API keys at rest', () => {
  test('only a SHA-256 of the secret and a short prefix are stored', async () => {
    const account = await createAccount(db, { name: 'At rest' })
    const { key, secret } = await createApiKey(db, { accountId: account.id, name: 'ci' })
    const [row] = await db.select().from(apiKeys).where(eq(apiKeys.id, key.id))
    expect(row!.secretHash).toBe(sha256Hex(secret))
    expect(row!.secretPrefix).toBe(secret.slice(0, 12))
    expect(JSON.stringify(row)).not.toContain(secret.slice(12))
  })

  test('a key for an account that does not exist is refused', async () => {
    await expect(createApiKey(db, { accountId: 'acc_00000000000000000000000000' })).rejects.toMatchObject({ status: 404 })
  })
})

describe('authenticateApiKey', () => {
  const counting = () => {
    const lookup = prepareActiveKeyLookup(db)
    const counter = { calls: 0, trusted: true }
    const authenticate = createApiKeyAuthenticator({
      findActiveKey: (hash) => {
        counter.calls++
        return lookup(hash)
      },
      isCacheTrusted: () => counter.trusted,
      cache: newApiKeyCache(),
    })
    return { authenticate, counter }
  }

  test('a known key is answered from memory after the first lookup', async () => {
    const { accountId, secret } = await server.createAccountWithKey()
    const { authenticate, counter } = counting()
    for (let i = 0; i < 5; i++) expect((await authenticate(secret))?.accountId).toBe(accountId)
    expect(counter.calls).toBe(1)
  })

  test('an unknown key is remembered as unknown', async () => {
    const { authenticate, counter } = counting()
    const junk = 'sk_live_' + 'x'.repeat(43)
    expect(await authenticate(junk)).toBeNull()
    expect(await authenticate(junk)).toBeNull()
    expect(counter.calls).toBe(1)
  })

  test('secrets without our prefix or absurdly long never reach the database', async () => {
    const { authenticate, counter } = counting()
    expect(await authenticate('pk_live_abc')).toBeNull()
    expect(await authenticate('sk_live_' + 'a'.repeat(500))).toBeNull()
    expect(counter.calls).toBe(0)
  })

  test('while the invalidation feed is stale, every call goes to the database', async () => {
    const { keyId, secret } = await server.createAccountWithKey()
    const { authenticate, counter } = counting()
    expect(await authenticate(secret)).not.toBeNull()
    counter.trusted = false
    await revokeApiKey(db, keyId)
    expect(await authenticate(secret)).toBeNull()
    expect(counter.calls).toBe(2)
  })
})

describe('revocation across instances', () => {
  test('a key revoked elsewhere is refused by every running instance within 5 seconds', async () => {
    const second = await startTestServer({ database: server.database })
    const { keyId, secret } = await server.createAccountWithKey('Shared')
    for (const instance of [server, second]) expect((await instance.fetch(`/v0/account?key=${secret}`)).status).toBe(200)

    const revokedAt = performance.now()
    expect(await revokeApiKey(db, keyId)).toBe(true)
    const refusedAfter = await Promise.all(
      [server, second].map(async (instance) => {
        for (;;) {
          const status = (await instance.fetch(`/v0/account?key=${secret}`)).status
          if (status === 401) return performance.now() - revokedAt
          expect(status).toBe(200)
          if (performance.now() - revokedAt > 6_000) return Number.POSITIVE_INFINITY
          await Bun.sleep(50)
        }
      }),
    )
    for (const ms of refusedAfter) expect(ms).toBeLessThan(5_000)
    await second.stop()
  })
})
