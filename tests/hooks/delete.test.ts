import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import postgres from 'postgres'
import { newId } from '../../src/lib/db/ids.ts'
import { startTestServer } from '../support/server.ts'

// Deleting a subscription while the worker records an attempt of one of its deliveries
// (src/hooks/service.ts, deleteSubscriptionRows). PostgreSQL only: PGlite runs one transaction at a time.
setDefaultTimeout(30_000)

const server = await startTestServer({ deliverWebhooks: false })
const postgresOnly = server.database.handle.kind !== 'postgres'

test.skipIf(postgresOnly)('a subscription deleted while an attempt of its is being recorded: both finish, neither is failed as a deadlock', async () => {
  const { accountId, secret } = await server.createAccountWithKey('Deleting')
  const created = await server.fetch(`/v0/account/${accountId}/hooks?key=${secret}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event: 'message.inbound', target_url: 'https://hooks.example.com/deleted' }),
  })
  const hookId = ((await created.json()) as { id: string }).id
  const inbound = await server.fetch(`/v0/account/${accountId}/sandbox/inbound?key=${secret}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ from: '+15550001234', body: 'in flight' }) })
  expect(inbound.status).toBe(201)
  const recorder = postgres(server.database.url!, { max: 1, onnotice: () => {} })
  afterAll(() => recorder.end({ timeout: 5 }))
  // The delivery is in flight, as a worker's claim leaves it.
  const [delivery] = await recorder`update deliveries set leased_until = now() + interval '1 minute' where hook_id = ${hookId} returning id, event_id`
  expect(delivery).toBeDefined()

  // What recording an attempt does, in its order: the delivery's row first, then the attempt, whose foreign key reads the subscription's row.
  let recorded = false
  let deleted: Response | undefined
  await recorder.begin(async (tx) => {
    await tx`update deliveries set attempts = attempts + 1, leased_until = null where id = ${delivery!.id}`
    const deleting = server.fetch(`/v0/account/${accountId}/hooks/${hookId}?key=${secret}`, { method: 'DELETE' }).then((response) => (deleted = response))
    await Bun.sleep(300)
    await tx`insert into delivery_attempts (id, delivery_id, hook_id, event_id, duration_ms, response_snippet, status_code)
             values (${newId('att')}, ${delivery!.id}, ${hookId}, ${delivery!.event_id}, 12, '', 200)`
    recorded = true
    void deleting
  })
  for (const until = Date.now() + 10_000; !deleted && Date.now() < until; ) await Bun.sleep(20)
  expect(recorded).toBe(true)
  expect(deleted?.status).toBe(204)
  expect((await server.fetch(`/v0/account/${accountId}/hooks/${hookId}?key=${secret}`)).status).toBe(404)
})
