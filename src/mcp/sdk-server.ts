import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import type { Caller } from '../auth/authenticator.ts'
import { problemBody } from '../lib/errors.ts'
import { TOOL_LIST, callTool, type ToolDeps } from './tools.ts'

const SERVER_INFO = { name: 'messaging-service', title: 'Messaging service webhooks', version: '0.1.0' }
const INSTRUCTIONS =
  "Manages this messaging account's webhook subscriptions: which HTTPS URLs receive which message events (delivered, failed, inbound), and their deliveries (test, see, retry). Start with list_event_types and list_webhooks."

/**
 * Answers one MCP POST. Stateless (SDK transport without session ids): each request gets a
 * fresh server bound to its authenticated caller, so any instance behind a load balancer can
 * answer any request and nothing lives between requests.
 */
export async function handleMcpPost(deps: ToolDeps & { publicUrl: string }, caller: Caller, request: Request, parsedBody: unknown, requestId: string): Promise<Response> {
  const server = new Server(SERVER_INFO, { capabilities: { tools: {} }, instructions: INSTRUCTIONS })
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: TOOL_LIST }))
  server.setRequestHandler(CallToolRequestSchema, async ({ params }): Promise<CallToolResult> => {
    const outcome = await callTool(deps, caller, params.name, params.arguments)
    if (!outcome) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${params.name}. tools/list names the tools.`)
    if (outcome.ok) return { content: [{ type: 'text', text: JSON.stringify(outcome.result) }], structuredContent: outcome.result }
    // The same problem body REST would answer, so a model reads the same field errors.
    const problem = problemBody(outcome.error, requestId, deps.publicUrl)
    return { isError: true, content: [{ type: 'text', text: JSON.stringify(problem) }] }
  })
  const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
  await server.connect(transport)
  try {
    return await transport.handleRequest(request, { parsedBody })
  } finally {
    // enableJsonResponse: the response is complete once handleRequest resolves.
    await server.close()
  }
}
