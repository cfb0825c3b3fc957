import { afterAll, describe, expect, test } from 'bun:test'
import postgres from 'postgres'
import { startTestServer } from '../support/server.ts'
import { createTestDatabase } from '../support/database.ts'
import { DELIVERIES_CHANNEL } from '../../src/delivery/store.ts'

// PostgreSQL only: PGlite has one process, whose worker is woken directly and never notified.
const database = await createTestDatabase()
const url = database.url
// With DATABASE_URL the worker has a pool of its own and LISTENs, as in production.
const server = await startTestServer({ database, env: { METRICS_PORT: '9', ...(url ? { DATABASE_URL: url } : {}) } })
afterAll(async () => {
  await server.stop()
  await database.drop()
})

const claimsSoFar = async () => {
  // The worker posts its counts at most every 50 ms.
  await Bun.sleep(120)
  const series = await server.instance.metrics!.render()
  return Number(/^messaging_webhook_claim_duration_seconds_count (\d+)$/m.exec(series)![1])
}

describe('NOTIFY after a commit that queued deliveries (src/delivery/commit-notifier.ts)', () => {
  test.if(!!url)("carries its process's origin; that process's worker ignores it, and claims at once on another process's", async () => {
    const listener = postgres(url!, { max: 1, onnotice: () => {} })
    const sender = postgres(url!, { max: 1, onnotice: () => {} })
    try {
      const payloads: string[] = []
      await listener.listen(DELIVERIES_CHANNEL, (payload) => payloads.push(payload))
      const owner = await server.createAccountWithKey()
      const created = await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ event: 'message.inbound', target_url: 'https://hooks.example.com/notified' }),
      })
      expect(created.status).toBe(201)
      // Paused: its delivery is queued (and notified) but not sent, so no attempt makes claims of its own meanwhile.
      const hook = (await created.json()) as { id: string }
      const paused = await server.fetch(`/v0/account/${owner.accountId}/hooks/${hook.id}?key=${owner.secret}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: '{"status":"paused"}' })
      expect(paused.status).toBe(200)
      const inbound = await server.fetch(`/v0/account/${owner.accountId}/sandbox/inbound?key=${owner.secret}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ from: '+447700900300', body: 'notify' }),
      })
      expect(inbound.status).toBe(201)
      for (let i = 0; i < 100 && payloads.length === 0; i++) await Bun.sleep(10)
      const origin = payloads[0]!
      expect(origin).toMatch(/^[0-9a-f-]{36}$/)

      // Forty of its own, 5 ms apart: only the poll (once a second) claims meanwhile.
      const startedAt = performance.now()
      const before = await claimsSoFar()
      for (let i = 0; i < 40; i++) {
        await sender`select pg_notify(${DELIVERIES_CHANNEL}, ${origin})`
        await Bun.sleep(5)
      }
      const afterOwn = await claimsSoFar()
      expect(afterOwn - before).toBeLessThanOrEqual(Math.ceil((performance.now() - startedAt) / 1000) + 1)

      // Forty of another process's: each that finds the worker idle is a claim.
      for (let i = 0; i < 40; i++) {
        await sender`select pg_notify(${DELIVERIES_CHANNEL}, 'another-process')`
        await Bun.sleep(5)
      }
      // Counts a busy machine posts late are waited for up to a second, in which the poll claims once or twice.
      let claimed = (await claimsSoFar()) - afterOwn
      for (const deadline = performance.now() + 1_000; claimed < 10 && performance.now() < deadline; ) claimed = (await claimsSoFar()) - afterOwn
      expect(claimed).toBeGreaterThanOrEqual(10)
    } finally {
      await listener.end({ timeout: 5 })
      await sender.end({ timeout: 5 })
    }
  })
})
