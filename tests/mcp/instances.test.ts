import { afterAll, expect, test } from 'bun:test'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { startTestServer, type TestServer } from '../support/server.ts'
import { flowFixture } from '../oauth/support.ts'
import { modernRequest, tokenFor, type ToolResult } from '../support/mcp.ts'

// Two instances on one database behind one address, and a proxy that sends each request to the
// next instance in turn (no sticky sessions): what a load balancer in front of the service does.
const freePort = () => {
  const probe = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response() })
  const port = probe.port!
  probe.stop(true)
  return port
}
const PUBLIC_URL = `http://127.0.0.1:${freePort()}`
const first = await startTestServer({ env: { PUBLIC_URL } })
const second = await startTestServer({ database: first.database, env: { PUBLIC_URL } })
const instances: TestServer[] = [first, second]
let turn = 0
const servedBy: number[] = []
const proxy = Bun.serve({
  port: Number(new URL(PUBLIC_URL).port),
  hostname: '127.0.0.1',
  async fetch(request) {
    const index = turn++ % instances.length
    const url = new URL(request.url)
    if (url.pathname === '/v0/mcp') servedBy.push(index)
    const body = request.method === 'GET' || request.method === 'HEAD' ? undefined : await request.arrayBuffer()
    return instances[index]!.fetch(url.pathname + url.search, { method: request.method, headers: request.headers, body })
  },
})
afterAll(async () => {
  proxy.stop(true)
  await second.stop()
  await first.stop()
})

const mcpUrl = `${PUBLIC_URL}/v0/mcp`

test('a 2025 client (initialize first) is served request by request by either instance', async () => {
  const token = await tokenFor(first, await flowFixture(first), {})
  const client = new Client({ name: 'agent', version: '1.0.0' })
  const before = servedBy.length
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { requestInit: { headers: { authorization: `Bearer ${token}` } } }))
  const created = (await client.callTool({ name: 'create_webhook', arguments: { event: 'message.inbound', target_url: 'https://example.com/either-instance' } })) as ToolResult
  const listed = (await client.callTool({ name: 'list_webhooks', arguments: {} })) as ToolResult
  expect(listed.structuredContent.data.map((hook: { id: string }) => hook.id)).toContain(created.structuredContent.id)
  await client.close()
  // initialize, its notification, and two calls: both instances took part.
  expect(new Set(servedBy.slice(before))).toEqual(new Set([0, 1]))
})

test('2026-07-28: discover on one instance, a tool call on the other, nothing carried between them', async () => {
  const token = await tokenFor(first, await flowFixture(first), {})
  const modern = (method: string, params: Record<string, unknown> = {}, name?: string) =>
    modernRequest(mcpUrl, token, method, params, name).then(async (response) => ({ status: response.status, body: (await response.json()) as { result: any } }))

  const before = servedBy.length
  const discovered = await modern('server/discover')
  expect(discovered.status).toBe(200)
  expect(discovered.body.result.supportedVersions).toEqual(['2026-07-28'])
  const created = await modern('tools/call', { name: 'create_webhook', arguments: { event: 'message.delivered', target_url: 'https://example.com/modern' } }, 'create_webhook')
  expect(created.status).toBe(200)
  const listed = await modern('tools/call', { name: 'list_webhooks', arguments: {} }, 'list_webhooks')
  expect(listed.body.result.structuredContent.data.map((hook: { id: string }) => hook.id)).toContain(created.body.result.structuredContent.id)
  expect(new Set(servedBy.slice(before))).toEqual(new Set([0, 1]))
})

test('2026-07-28 events/poll: a cursor from one instance is read by the other, which returns what happened since', async () => {
  const fixture = await flowFixture(first)
  const token = await tokenFor(first, fixture, { scope: 'messages:read' })
  const poll = (cursor: string | null) =>
    modernRequest(mcpUrl, token, 'events/poll', { name: 'message.inbound', arguments: {}, cursor }).then(async (response) => ((await response.json()) as { result: any }).result)

  const before = servedBy.length
  const start = await poll(null)
  const reply = await first.fetch(`/v0/account/${fixture.accountId}/sandbox/inbound?key=${fixture.apiKey}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ from: '+14155550123', body: 'seen by either' }),
  })
  expect(reply.status).toBe(201)
  const next = await poll(start.cursor)
  expect(next.events.map((event: { data: { message: { body: string } } }) => event.data.message.body)).toEqual(['seen by either'])
  expect((await poll(next.cursor)).events).toEqual([])
  expect(new Set(servedBy.slice(before))).toEqual(new Set([0, 1]))
})
