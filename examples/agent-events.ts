#!/usr/bin/env bun
/**
 * An AI agent that hears a contact's reply: docs/mcp.md#walkthrough-an-agent-hears-a-contacts-reply.
 *
 *   bun examples/agent-events.ts --email <user> --password <password> [--server http://localhost:3000] [--port 4000]
 *
 * It signs in as the account's user (the headless flow of docs/api.md: sign in, an authorization
 * code with PKCE, a token for the MCP endpoint with messages:read), connects with the AI SDK's MCP
 * client (@ai-sdk/mcp, MCP 2026-07-28), serves its webhook callback on http://127.0.0.1:<port>/events
 * with the AI SDK's own handler, subscribes to message.inbound, and prints every event it is sent.
 * Ctrl-C unsubscribes and stops. Local development only: the service must run with
 * WEBHOOK_ALLOW_PRIVATE_TARGETS=true to call back a loopback http address.
 */
import { parseArgs } from 'node:util'
import {
  createMCPClient,
  experimental_createMCPEventWebhook as createMCPEventWebhook,
  type Experimental_MCPEventStore as MCPEventStore,
  type Experimental_MCPEventSubscription as MCPEventSubscription,
} from '@ai-sdk/mcp'

const { values } = parseArgs({
  options: {
    server: { type: 'string', default: 'http://localhost:3000' },
    email: { type: 'string' },
    password: { type: 'string' },
    port: { type: 'string', default: '4000' },
  },
})
if (!values.email || !values.password) {
  console.error('usage: bun examples/agent-events.ts --email <user> --password <password> [--server http://localhost:3000] [--port 4000]')
  process.exit(2)
}
const server = values.server!.replace(/\/$/, '')

async function post(path: string, body: unknown): Promise<any> {
  const response = await fetch(`${server}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  const answer = await response.json()
  if (!response.ok) throw new Error(`POST ${path}: HTTP ${response.status} ${JSON.stringify(answer)}`)
  return answer
}

// 1. A token for the MCP endpoint, as any OAuth client gets one (docs/oauth.md), without a browser.
const { resource } = (await (await fetch(`${server}/.well-known/oauth-protected-resource/v0/mcp`)).json()) as { resource: string }
const redirectUri = 'http://127.0.0.1:8765/callback'
const client = await post('/v0/auth/register', { client_name: 'Example agent', redirect_uris: [redirectUri], token_endpoint_auth_method: 'none', grant_types: ['authorization_code'], response_types: ['code'] })
const { id_token } = await post('/v0/auth/login', { email: values.email, password: values.password })
const verifier = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url')
const challenge = Buffer.from(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))).toString('base64url')
const { code } = await post('/v0/auth/authorize', {
  client_id: client.client_id, redirect_uri: redirectUri, id_token, code_challenge: challenge, code_challenge_method: 'S256', scope: 'messages:read', resource,
})
const { access_token } = await post('/v0/auth/token', { grant_type: 'authorization_code', code, client_id: client.client_id, redirect_uri: redirectUri, code_verifier: verifier })
console.log(`signed in: a token for ${resource} with messages:read`)

// 2. Where the agent keeps its subscriptions and their secrets (memory, for this example).
const subscriptions = new Map<string, MCPEventSubscription>()
const store: MCPEventStore = {
  get: async (key) => subscriptions.get(key),
  getById: async (id) => [...subscriptions.values()].find((subscription) => subscription.id === id),
  set: async (subscription) => void subscriptions.set(subscription.key, subscription),
  update: async (key, patch) => void subscriptions.set(key, { ...subscriptions.get(key)!, ...patch }),
  delete: async (key) => void subscriptions.delete(key),
}

// 3. The callback: the AI SDK's handler answers the verification challenge, checks every signature, and hands over events.
const handle = createMCPEventWebhook({
  store,
  onEvent: async ({ event }) => {
    const message = (event.data as { message: { from?: string; to?: string; body: string } }).message
    console.log(`event ${event.eventId}: ${event.name} ${message.from ?? message.to}: ${JSON.stringify(message.body)}`)
  },
})
const callback = Bun.serve({ port: Number(values.port), hostname: '127.0.0.1', fetch: (request) => (new URL(request.url).pathname === '/events' ? handle(request) : new Response(null, { status: 404 })) })

// 4. Connect (server/discover, no initialize), list, subscribe.
const mcp = await createMCPClient({ transport: { type: 'http', url: `${server}/v0/mcp`, headers: { authorization: `Bearer ${access_token}` } }, experimental_events: { store } })
const { events } = await mcp.experimental_events.list()
console.log(`events: ${events.map((event) => event.name).join(', ')}`)
const subscription = await mcp.experimental_events.subscribe({
  name: 'message.inbound',
  delivery: { mode: 'webhook', url: `http://127.0.0.1:${callback.port}/events`, allowInsecureLocalhost: true },
})
console.log(`subscribed: ${subscription.id} until ${subscription.refreshBefore}; waiting for replies (Ctrl-C to stop)`)

process.on('SIGINT', async () => {
  await mcp.experimental_events.unsubscribe({ id: subscription.id })
  await mcp.close()
  callback.stop(true)
  console.log('unsubscribed')
  process.exit(0)
})
