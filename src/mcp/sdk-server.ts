import {
  createMcpHandler, isLegacyRequest, ProtocolError, ProtocolErrorCode, Server, WebStandardStreamableHTTPServerTransport, type AuthInfo, type CallToolResult, type StandardSchemaV1,
} from '@modelcontextprotocol/server'
import type { Caller } from '../auth/authenticator.ts'
import { problemBody } from '../lib/http/errors.ts'
import { describeError } from '../lib/runtime/logger.ts'
import { TOOL_LIST, callTool, type ToolDeps } from './tools.ts'
import { listEvents, subscribe, unsubscribe } from './events.ts'
import { pollEvents, type PollDeps } from './event-poll.ts'
import { markMcpFailure } from './tracing.ts'

const EVENTS_EXTENSION = 'io.modelcontextprotocol/events'

const SERVER_INFO = { name: 'messaging-service', title: 'Messaging service webhooks', version: '0.1.0' }
const INSTRUCTIONS =
  "Manages this messaging account's webhook subscriptions: which HTTPS URLs receive which message events (delivered, failed, inbound), and their deliveries (test, see, retry). Start with list_event_types and list_webhooks."

/** What one request's server is bound to, handed through the SDK's pass-through `authInfo`. */
interface RequestBinding {
  caller: Caller
  requestId: string
}

/** What the MCP server runs on: the tools' dependencies, the public URL for problem bodies, what polls need (retention, the rate limiter). */
export type McpServerDeps = ToolDeps & PollDeps & { publicUrl: string }

export type McpPostHandler = (caller: Caller, request: Request, parsedBody: unknown, requestId: string) => Promise<Response>

/**
 * Answers MCP POSTs with the SDK 2.x: 2026-07-28 requests (no `initialize`; version, client
 * info and capabilities in each request's `_meta`; `server/discover`) through its serving entry
 * (`createMcpHandler`), and 2025 clients that still send `initialize` through a stateless
 * Streamable HTTP transport that answers with one JSON body, as this server always has
 * (`isLegacyRequest` decides, as the entry itself would). Stateless either way: each request
 * gets a fresh server bound to its authenticated caller, so any instance behind a load balancer
 * can answer any request and nothing lives between requests (docs/mcp.md). The caller was
 * authenticated by our own plugin; the SDK only passes `authInfo` through.
 */
export function createMcpPostHandler(deps: McpServerDeps): McpPostHandler {
  const modern = createMcpHandler(({ authInfo }) => serverFor(deps, bindingOf(authInfo), { events: true }), { legacy: 'reject' })
  const legacy = async (binding: RequestBinding, request: Request, parsedBody: unknown) => {
    const server = serverFor(deps, binding, { events: false })
    const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
    await server.connect(transport)
    try {
      return await transport.handleRequest(request, { parsedBody })
    } finally {
      // enableJsonResponse: the response is complete once handleRequest resolves.
      await server.close()
    }
  }
  return async (caller, request, parsedBody, requestId) => {
    const binding: RequestBinding = { caller, requestId }
    if (await isLegacyRequest(request, parsedBody)) return legacy(binding, request, parsedBody)
    // No token here: the tools need the caller, never the credential.
    const clientId = caller.credential.kind === 'access_token' ? caller.credential.clientId : ''
    const authInfo: AuthInfo = { token: '', clientId, scopes: [...caller.scopes], extra: { binding } }
    return modern.fetch(request, { parsedBody, authInfo })
  }
}

function bindingOf(authInfo: AuthInfo | undefined): RequestBinding {
  const binding = authInfo?.extra?.binding as RequestBinding | undefined
  if (!binding) throw new Error('an MCP request reached the SDK without its caller')
  return binding
}

/** Custom methods' params reach their handler as sent: src/mcp/events.ts checks them against its TypeBox schemas. */
const UNCHECKED = { params: { '~standard': { version: 1, vendor: 'messaging-service', validate: (value: unknown) => ({ value }) } } as StandardSchemaV1<unknown, unknown> }

/**
 * One request's server. The Events extension (docs/mcp.md#events) is served to 2026-07-28 requests
 * only, the revision it is defined for; it is advertised both as the extension the specification
 * names (`extensions["io.modelcontextprotocol/events"]`) and as the `events` capability the AI SDK's
 * client looks for.
 */
function serverFor(deps: McpServerDeps, { caller, requestId }: RequestBinding, options: { events: boolean }): Server {
  const capabilities = options.events ? { tools: {}, events: {}, extensions: { [EVENTS_EXTENSION]: {} } } : { tools: {} }
  const server = new Server(SERVER_INFO, { capabilities, instructions: INSTRUCTIONS })
  // The SDK answers a handler's exception with its message: anything but a protocol error (a database error, a
  // bug) is logged here and answered as an internal error naming the request, never in its own words.
  const guarded =
    <P, R>(handler: (params: P) => Promise<R> | R) =>
    async (params: P): Promise<R> => {
      try {
        return await handler(params)
      } catch (error) {
        if (error instanceof ProtocolError) {
          markMcpFailure(String(error.code), error.code)
          throw error
        }
        deps.logger.error('MCP request failed', { request_id: requestId, ...describeError(error) })
        markMcpFailure('internal_error', ProtocolErrorCode.InternalError)
        throw new ProtocolError(ProtocolErrorCode.InternalError, `Internal error; the request id is ${requestId}.`)
      }
    }
  if (options.events) {
    server.setRequestHandler('events/list', UNCHECKED, guarded(() => listEvents()))
    server.setRequestHandler('events/subscribe', UNCHECKED, guarded((params) => subscribe(deps, caller, params)))
    server.setRequestHandler('events/unsubscribe', UNCHECKED, guarded((params) => unsubscribe(deps, caller, params)))
    server.setRequestHandler('events/poll', UNCHECKED, guarded((params) => pollEvents(deps, caller, params)))
  }
  server.setRequestHandler('tools/list', () => ({ tools: TOOL_LIST }))
  server.setRequestHandler('tools/call', guarded(async ({ params }): Promise<CallToolResult> => {
    const outcome = await callTool(deps, caller, params.name, params.arguments)
    if (!outcome) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Unknown tool: ${params.name}. tools/list names the tools.`)
    if (outcome.ok) return { content: [{ type: 'text', text: JSON.stringify(outcome.result) }], structuredContent: outcome.result }
    // The same problem body REST would answer, so a model reads the same field errors.
    const problem = problemBody(outcome.error, requestId, deps.publicUrl)
    markMcpFailure('tool_error')
    return { isError: true, content: [{ type: 'text', text: JSON.stringify(problem) }] }
  }))
  return server
}
