import { Elysia, t } from 'elysia'
import { cors } from '../lib/http/cors.ts'
import { ApiError, ProblemSchema } from '../lib/http/errors.ts'
import { newId } from '../lib/db/ids.ts'
import { incomingRequestIdOf } from '../lib/http/foundation.ts'
import { authPlugin, type AuthPluginDeps } from '../auth/plugin.ts'
import type { ToolDeps } from './tools.ts'
import { isAllowedOrigin } from './origin.ts'
import { createMcpPostHandler } from './sdk-server.ts'
import { MCP_TOOL_SCOPES } from './scopes.ts'
import { stepUpRefusal } from './step-up.ts'
import { traceMcpRequest } from './tracing.ts'

export interface McpRouteDeps extends ToolDeps, Omit<AuthPluginDeps, 'resourceMetadataUrl'> {
  publicUrl: string
  /** MCP_ALLOWED_ORIGINS: browser origins allowed besides PUBLIC_URL's and loopback ones. */
  allowedOrigins: readonly string[]
  /** EVENT_RETENTION_DAYS: an events/poll cursor older than this starts again from now, truncated. */
  retentionDays: number
}

/** RFC 9728 metadata of `{base_url}/mcp`, named in every 401 and 403 challenge of this endpoint. */
export const mcpResourceMetadataUrl = (publicUrl: string) => `${publicUrl}/.well-known/oauth-protected-resource/v0/mcp`

/**
 * `{base_url}/mcp`, Streamable HTTP (docs/api.md#mcp). Bearer tokens whose audience is the MCP endpoint
 * only. The Origin check runs first: a page on another origin (DNS rebinding) gets 403 whatever
 * it sends. POST carries JSON-RPC; GET and DELETE are 405 because the server is stateless: it
 * sends nothing unprompted and has no session to end (docs/mcp.md).
 */
export function mcpRoutes(deps: McpRouteDeps) {
  const checkOrigin = (request: Request) => {
    const origin = request.headers.get('origin')
    if (origin !== null && !isAllowedOrigin(origin, { publicUrl: deps.publicUrl, allowed: deps.allowedOrigins })) {
      throw new ApiError(403, 'origin_not_allowed', `Requests from the origin ${origin.slice(0, 200)} are not accepted here (DNS rebinding protection).`)
    }
  }
  // The Origin check comes before authentication: a page on another origin learns nothing.
  // Any MCP-audience token may talk to the server (initialize, tools/list); each tool call needs its
  // tool's scope, checked below. A 401 suggests the scopes of every tool; the MCP protected-resource
  // metadata lists those and messages:read, which events/subscribe steps up to (src/oauth/discovery.ts).
  const auth = { scope: null, accepts: 'bearer' as const, audiences: [`${deps.baseUrl}/mcp`], before: checkOrigin, scopeHint: MCP_TOOL_SCOPES }
  const resourceMetadataUrl = mcpResourceMetadataUrl(deps.publicUrl)
  const handleMcpPost = createMcpPostHandler(deps)
  const notAllowed = (method: string) => () => {
    throw new ApiError(405, 'method_not_allowed', `${method} is not used: this MCP server is stateless (no server-initiated stream, no session). Send JSON-RPC with POST.`, {
      headers: { allow: 'POST, OPTIONS' },
    })
  }
  return new Elysia({ tags: ['MCP'] })
    .use(cors({ '/mcp': ['POST', 'GET', 'DELETE'] }))
    .use(authPlugin({ ...deps, resourceMetadataUrl }))
    .post(
      '/mcp',
      async ({ caller, request, body }) => {
        // A tool call the token has no scope for: HTTP 403 with a step-up challenge, before the SDK server runs anything.
        const refusal = stepUpRefusal(caller, body, resourceMetadataUrl)
        if (refusal) throw refusal
        // The caller's own X-Request-Id when it sent a valid one, as on every other route.
        const requestId = incomingRequestIdOf(request) ?? newId('req')
        const answer = () => handleMcpPost(caller, request, body, requestId)
        const response = deps.tracing ? await traceMcpRequest(deps.tracing, request, body, answer) : await answer()
        response.headers.set('x-request-id', requestId)
        return response
      },
      {
        auth,
        body: t.Unknown({ description: 'A JSON-RPC message or batch (MCP Streamable HTTP).' }),
        detail: {
          responses: {
            200: {
              description: 'The JSON-RPC response(s): `application/json`, or `text/event-stream` when the client accepts it and the server streams.',
              content: { 'application/json': { schema: {} }, 'text/event-stream': { schema: { type: 'string' } } },
            },
            202: { description: 'Accepted: the message held only notifications or responses.' },
          },
          operationId: 'postMcp', summary: 'MCP Streamable HTTP endpoint (JSON-RPC over POST; tools for webhook subscriptions)',
        },
      },
    )
    .get('/mcp', notAllowed('GET'), { auth, response: { 405: ProblemSchema }, detail: { operationId: 'getMcp', summary: 'Not used: 405 (stateless server)' } })
    .delete('/mcp', notAllowed('DELETE'), { auth, response: { 405: ProblemSchema }, detail: { operationId: 'deleteMcp', summary: 'Not used: 405 (no sessions)' } })
}
