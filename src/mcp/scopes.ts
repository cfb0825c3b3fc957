import type { Scope } from '../auth/scopes.ts'

/**
 * The scopes of the MCP tools, which manage webhook subscriptions: what a 401 of the MCP endpoint
 * suggests. Subscribing to message events also needs `messages:read` (it hands the agent message
 * content, docs/mcp.md#events), asked for by step-up when an agent subscribes, so a client
 * registered for the tools' scopes alone still signs in.
 */
export const MCP_TOOL_SCOPES: readonly Scope[] = ['hooks:read', 'hooks:write']
/** Every scope the MCP endpoint uses, as its protected-resource metadata lists them: a client that asks for these gets no more. */
export const MCP_SCOPES: readonly Scope[] = [...MCP_TOOL_SCOPES, 'messages:read']
