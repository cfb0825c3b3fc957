import { expect } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../src/lib/db/client.ts'
import { startTestServer, json } from '../support/server.ts'
import { startReceiver } from '../support/receiver.ts'

/**
 * A server whose receiver answers each delivery after a different delay, so that the percentiles
 * differ; Alice's account with one subscription to message.inbound; `inbound(n)` sends n inbound
 * messages and returns once their attempts are recorded.
 */
export async function startStatsFixture() {
  const receiver = startReceiver(async (_request, nth) => {
    await Bun.sleep((nth * 37) % 120)
    return new Response('ok')
  })
  const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile } })
  const db = server.database.handle.db
  const alice = await server.createAccountWithKey('Alice')
  const call = (method: string, path: string, body?: unknown) =>
    server.fetch(`/v0/account/${alice.accountId}${path}${path.includes('?') ? '&' : '?'}key=${alice.secret}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
  const hookId = (await json(await call('POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/hook` }))).id as string
  const attemptCount = async () => Number((await queryRows<{ n: number }>(db, sql`select count(*)::int as n from delivery_attempts where hook_id = ${hookId}`))[0]!.n)
  async function inbound(count: number) {
    const before = await attemptCount()
    for (let i = 0; i < count; i++) expect((await call('POST', '/sandbox/inbound', { from: '+447700900800', body: `hello ${i}` })).status).toBe(201)
    for (let tries = 0; (await attemptCount()) < before + count; tries++) {
      expect(tries).toBeLessThan(400)
      await Bun.sleep(25)
    }
  }
  return { receiver, server, db, alice, call, hookId, inbound }
}
