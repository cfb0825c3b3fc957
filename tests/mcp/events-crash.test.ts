import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { createTestDatabase } from '../support/database.ts'
import { modernRequest } from '../support/mcp.ts'
import { freePort, freshDataDir, runCli, startServerProcess, type RunningProcess } from '../support/process.ts'
import { startReceiver } from '../support/receiver.ts'
import type { TestServer } from '../support/server.ts'
import { authorizeAndRedeem, postJson, REDIRECT_URI } from '../oauth/support.ts'

// The server as it runs in production (bun src/main.ts), killed with SIGKILL while an agent's events wait.
setDefaultTimeout(120_000)

let accepting = false
const receiver = startReceiver((request) => {
  const body = JSON.parse(request.body) as { type?: string; challenge?: string }
  if (body.type === 'verification') return Response.json({ challenge: body.challenge })
  return accepting ? new Response(null, { status: 204 }) : new Response('not yet', { status: 503 })
})

const database = await createTestDatabase()
afterAll(() => database.drop())
const port = freePort()
const env: Record<string, string> = {
  // One address across the restart: the token's audience is {PUBLIC_URL}/v0/mcp.
  PORT: String(port),
  PUBLIC_URL: `http://127.0.0.1:${port}`,
  ...(database.url ? { DATABASE_URL: database.url } : {}),
  DATA_DIR: freshDataDir(),
  ENCRYPTION_KEY: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url'),
  WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
  WEBHOOK_CA_FILE: receiver.caFile,
  WEBHOOK_TIMEOUT_MS: '1000',
  WEBHOOK_RETRY_SCHEDULE: ['0', ...Array(60).fill('200ms')].join(','),
}
if (database.url) await database.handle.close()

const EVENTS = 20

test('an event committed before a kill -9 reaches the agent’s callback after the restart', async () => {
  const demo = JSON.parse((await runCli(['demo', '--json'], env)).stdout) as { account: { id: string }; user: { id: string; email: string; password: string }; api_key: { secret: string } }
  let server: RunningProcess = await startServerProcess(['bun', 'src/main.ts'], env)
  const remote = { fetch: (path: string, init?: RequestInit) => fetch(`${server.origin}${path}`, init) } as TestServer
  const mcpUrl = `${server.origin}/v0/mcp`

  // An agent signs in as any OAuth client would: registration, consent, code, token.
  const registered = await postJson(remote, '/v0/auth/register', { client_name: 'Crash agent', redirect_uris: [REDIRECT_URI], grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], token_endpoint_auth_method: 'none' })
  const { client_id: clientId } = (await registered.json()) as { client_id: string }
  const fixture = { accountId: demo.account.id, apiKey: demo.api_key.secret, email: demo.user.email, password: demo.user.password, userId: demo.user.id, clientId }
  const { tokens } = await authorizeAndRedeem(remote, fixture, { scope: 'messages:read', resource: mcpUrl })
  const secret = `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`
  const subscribed = await modernRequest(mcpUrl, tokens.access_token, 'events/subscribe', {
    name: 'message.inbound',
    arguments: {},
    delivery: { mode: 'webhook', url: `${receiver.origin}/agent`, secret },
  })
  const subscriptionId = ((await subscribed.json()) as { result: { id: string } }).result.id
  expect(subscriptionId).toMatch(/^evs_/)

  const committed: string[] = []
  for (let i = 0; i < EVENTS; i++) {
    const response = await fetch(`${server.origin}/v0/account/${fixture.accountId}/sandbox/inbound?key=${fixture.apiKey}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ from: '+447700900500', body: `reply ${i}` }),
    })
    expect(response.status).toBe(201)
    committed.push(((await response.json()) as { id: string }).id)
  }
  // The agent's callback was tried (and refused) before the kill: the events are waiting for retries.
  await receiver.waitFor((received) => received.some((request) => request.path === '/agent' && !request.body.includes('"verification"')))
  server.process.kill('SIGKILL')
  await server.process.exited

  server = await startServerProcess(['bun', 'src/main.ts'], env)
  try {
    accepting = true
    const arrived = () => {
      const messages = new Set<string>()
      for (const request of receiver.received) {
        if (request.path !== '/agent' || request.headers['x-mcp-subscription-id'] !== subscriptionId) continue
        const body = JSON.parse(request.body) as { eventId?: string; data?: { message: { id: string } } }
        if (body.eventId && body.eventId === request.headers['webhook-id']) messages.add(body.data!.message.id)
      }
      return messages
    }
    await receiver.waitFor(() => committed.every((id) => arrived().has(id)), 60_000)
  } finally {
    await server.stop()
  }
})
