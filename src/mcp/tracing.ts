import { context, SpanKind, SpanStatusCode, trace, type Attributes } from '@opentelemetry/api'
import { PROTOCOL_VERSION_META_KEY, TRACEPARENT_META_KEY, TRACESTATE_META_KEY } from '@modelcontextprotocol/server'
import type { Tracing } from '../lib/runtime/tracing.ts'

interface JsonRpcRequest {
  method?: unknown
  id?: unknown
  params?: { name?: unknown; _meta?: Record<string, unknown> }
}

const text = (value: unknown, max = 128): string | undefined => (typeof value === 'string' && value.length > 0 ? value.slice(0, max) : undefined)

/**
 * One MCP request as a SERVER span named by the MCP semantic conventions (`{mcp.method.name}
 * {target}`, the tool's name for `tools/call`), continuing the trace context the client put in
 * `params._meta` (`traceparent`, `tracestate`: the SDK 2.x client does) or, without one, the HTTP
 * request's span. A message that is not one request (a notification, a batch, a response) gets no
 * span of its own: the HTTP span covers it. No argument or result is recorded: they may carry
 * message bodies and secrets.
 */
export async function traceMcpRequest(tracing: Tracing, request: Request, body: unknown, handle: () => Promise<Response>): Promise<Response> {
  const message = (typeof body === 'object' && body !== null && !Array.isArray(body) ? body : {}) as JsonRpcRequest
  const method = text(message.method)
  if (!method || message.id === undefined) return handle()
  const meta = typeof message.params?._meta === 'object' && message.params._meta !== null ? message.params._meta : {}
  const tool = method === 'tools/call' ? text(message.params?.name) : undefined
  const attributes: Attributes = { 'mcp.method.name': method, 'jsonrpc.request.id': String(message.id).slice(0, 128), 'network.transport': 'tcp', 'network.protocol.name': 'http' }
  if (tool) Object.assign(attributes, { 'gen_ai.tool.name': tool, 'gen_ai.operation.name': 'execute_tool' })
  const version = text(meta[PROTOCOL_VERSION_META_KEY], 32) ?? text(request.headers.get('mcp-protocol-version'), 32)
  if (version) attributes['mcp.protocol.version'] = version
  const parent = tracing.contextFrom({ traceparent: text(meta[TRACEPARENT_META_KEY], 256), tracestate: text(meta[TRACESTATE_META_KEY], 512) }, context.active())
  const span = tracing.tracer.startSpan(tool ? `${method} ${tool}` : method, { kind: SpanKind.SERVER, attributes }, parent)
  try {
    const response = await context.with(trace.setSpan(parent, span), handle)
    if (response.status >= 400) {
      span.setAttribute('error.type', String(response.status))
      span.setStatus({ code: SpanStatusCode.ERROR })
    }
    return response
  } finally {
    span.end()
  }
}

/**
 * Marks the active MCP span failed: a JSON-RPC error (its code), or a tool call answered with
 * `isError` (`tool_error`), which HTTP and JSON-RPC both see as a success.
 */
export function markMcpFailure(errorType: string, rpcCode?: number): void {
  const span = trace.getActiveSpan()
  if (!span) return
  span.setAttribute('error.type', errorType)
  if (rpcCode !== undefined) span.setAttribute('rpc.response.status_code', String(rpcCode))
  span.setStatus({ code: SpanStatusCode.ERROR })
}
