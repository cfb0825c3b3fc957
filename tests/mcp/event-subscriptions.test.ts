import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { createAccount } from '../../src/accounts/service.ts'
import { newId } from '../../src/lib/db/ids.ts'
import { grants, hooks, oauthClients, users } from '../../src/lib/db/schema.ts'
import { createLogger } from '../../src/lib/runtime/logger.ts'
import { createSecretBox } from '../../src/lib/security/secret-box.ts'
import { startEventSubscriptionSweep, TERMINATED_ENVELOPES_IN_FLIGHT } from '../../src/mcp/event-subscriptions.ts'
import { createTestDatabase } from '../support/database.ts'
import { startReceiver } from '../support/receiver.ts'

// The sweep of ended MCP event subscriptions (src/mcp/event-subscriptions.ts), on its own over a real database.
setDefaultTimeout(60_000)

// Every terminated envelope is held until the test lets go: a receiver that is slow to answer.
let letGo!: () => void
const held = new Promise<void>((resolve) => (letGo = resolve))
const receiver = startReceiver(async () => {
  await held
  return new Response(null, { status: 204 })
})
const database = await createTestDatabase()
afterAll(async () => {
  letGo()
  await database.drop()
})

test(`stopping does not wait for the envelopes still queued behind the ${TERMINATED_ENVELOPES_IN_FLIGHT} in flight: they are not sent, the shutdown is not held`, async () => {
  const db = database.handle.db
  const secretBox = await createSecretBox(randomBytes(32))
  const account = await createAccount(db, { name: 'Revoking' })
  const userId = newId('usr')
  await db.insert(users).values({ id: userId, accountId: account.id, email: `${userId}@example.com`, passwordHash: 'unused' })
  const clientId = newId('cli')
  await db.insert(oauthClients).values({ id: clientId, redirectUris: ['http://127.0.0.1/cb'], grantTypes: ['authorization_code'], responseTypes: ['code'], tokenEndpointAuthMethod: 'none', applicationType: 'native' })
  const grantId = newId('grt')
  await db.insert(grants).values({ id: grantId, clientId, userId, accountId: account.id, scope: 'messages:read', audience: [] })
  const ended = 40
  const secretCiphertext = await secretBox.seal(`whsec_${randomBytes(32).toString('base64')}`)
  await db.insert(hooks).values(
    Array.from({ length: ended }, (_, i) => ({
      id: newId('evs'),
      accountId: account.id,
      event: 'message.inbound',
      targetUrl: `${receiver.origin}/ended-${i}`,
      secretCiphertext,
      grantId,
      eventArguments: '{}',
      expiresAt: new Date(Date.now() + 3_600_000),
      status: 'terminated',
      disabledReason: 'Access revoked',
    })),
  )

  const sweep = startEventSubscriptionSweep({ db, secretBox, send: { timeoutMs: 30_000, allowPrivate: true, ca: receiver.caPem }, logger: createLogger('silent') })
  await receiver.waitFor((received) => received.length === TERMINATED_ENVELOPES_IN_FLIGHT, 10_000)
  const stopping = sweep.stop()
  // The ones in flight finish; the rest never start.
  await Bun.sleep(300)
  letGo()
  await stopping
  await Bun.sleep(300)
  expect(receiver.received).toHaveLength(TERMINATED_ENVELOPES_IN_FLIGHT)
})
