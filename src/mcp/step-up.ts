import type { Caller } from '../auth/authenticator.ts'
import { inScopeOrder, insufficientScope, schemeOf } from '../auth/challenges.ts'
import type { ApiError } from '../lib/http/errors.ts'
import type { Scope } from '../auth/scopes.ts'
import { TOOLS } from './tools.ts'

/** What a message asks for that needs a scope: a tool, or an event subscription. */
interface ScopedOperation {
  name: string
  scope: Scope
}

/**
 * Subscribing to message events, or polling them, hands their content (the message bodies) to the
 * agent: it needs `messages:read` (docs/mcp.md#events). Listing the event types and unsubscribing do not.
 */
const EVENT_READS: ScopedOperation[] = [
  { name: 'events/subscribe', scope: 'messages:read' },
  { name: 'events/poll', scope: 'messages:read' },
]

/**
 * What a POST body calls that needs a scope: each `tools/call` of a known tool, each
 * `events/subscribe` and `events/poll`, in a single message or a batch. Anything else (other methods, unknown
 * tools, malformed messages) is left to the SDK server, which answers it as the protocol says.
 */
function operationsIn(body: unknown): ScopedOperation[] {
  const messages = Array.isArray(body) ? body : [body]
  const called: ScopedOperation[] = []
  for (const message of messages) {
    if (typeof message !== 'object' || message === null) continue
    const method = (message as { method?: unknown }).method
    const eventRead = EVENT_READS.find((operation) => operation.name === method)
    if (eventRead) called.push(eventRead)
    if (method !== 'tools/call') continue
    const name = (message as { params?: { name?: unknown } }).params?.name
    const tool = TOOLS.find((candidate) => candidate.name === name)
    if (tool) called.push(tool)
  }
  return called
}

/**
 * Step-up (docs/mcp.md#step-up, MCP 2025-11-25 "Scope Challenge Handling"): a POST that calls a tool (or subscribes to events) whose
 * scope the token lacks is answered HTTP 403 before the SDK server sees it, so the client can
 * re-authorize and send it again. Returns that refusal, or null when the caller may go on.
 *
 * The challenge's `scope` is every scope the token holds plus every scope the body's calls need.
 * The SDK client (1.32) asks for exactly the challenge's scope when it re-authorizes, and the new
 * token replaces the old one: naming only `hooks:write` would trade `hooks:read` away, the next
 * list_webhooks would need a step-up back, and the agent would ping-pong between the two. This
 * is the specification's "recommended approach" (existing and newly required scopes).
 *
 * A batch is refused whole if any call in it needs a missing scope, naming every scope the batch
 * needs: one HTTP answer cannot be both 403 and 200, and the client sends the same batch again
 * after re-authorizing, so running part of it now would run that part twice.
 */
export function stepUpRefusal(caller: Caller, body: unknown, resourceMetadataUrl: string): ApiError | null {
  const called = operationsIn(body)
  const refused = called.filter((tool) => !caller.scopes.includes(tool.scope))
  if (refused.length === 0) return null
  const missing = inScopeOrder(refused.map((tool) => tool.scope))
  const distinct = [...new Set(refused.map((tool) => tool.name))]
  const names = distinct.join(', ')
  const need = distinct.length === 1 ? 'needs' : 'need'
  return insufficientScope({
    resourceMetadataUrl,
    scopes: [...caller.scopes, ...called.map((tool) => tool.scope)],
    description: `${names} ${need} ${missing.join(' and ')}, which this access token lacks`,
    detail: `This access token lacks ${missing.join(' and ')}, which ${names} ${need}. Authorize again with the scopes WWW-Authenticate names (step-up), then send the request again; nothing of it was done.`,
    scheme: schemeOf(caller),
  })
}
