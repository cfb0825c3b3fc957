import { expect } from 'bun:test'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { authorizeAndRedeem, type Fixture } from '../oauth/support.ts'
import type { TestServer } from './server.ts'

/** The MCP endpoint of a test server. */
export const mcpUrlOf = (server: TestServer) => `${server.config.baseUrl}/mcp`

/** A token as a client that asked for `scope` on `resource` would hold it. */
export async function tokenFor(server: TestServer, fixture: Fixture, options: { scope?: string; resource?: string }) {
  const { tokens } = await authorizeAndRedeem(server, fixture, { ...(options.scope ? { scope: options.scope } : {}), ...(options.resource ? { resource: options.resource } : {}) })
  return tokens.access_token
}

/** The official SDK client over Streamable HTTP, sending `token` as its bearer token. */
export async function connectWithToken(server: TestServer, token: string) {
  const client = new Client({ name: 'test', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrlOf(server)), { requestInit: { headers: { authorization: `Bearer ${token}` } } }))
  return client
}

export type ToolResult = { isError?: boolean; structuredContent?: any; content: { type: string; text: string }[] }
export type ToolProblem = { status: number; code: string; detail: string; errors?: { path: string; message: string }[]; type?: string; title?: string; request_id?: string }

/** A tool error's text: the problem body REST would answer. */
export const problemOf = (result: ToolResult) => JSON.parse(result.content[0]!.text) as ToolProblem

/**
 * How a tool call that needs `scope` is refused to a token without it. Today: a tool error whose
 * problem is 403 insufficient_scope naming the scope (docs/mcp.md). SPEC §9 asks for an HTTP 403
 * with a step-up challenge instead: when that lands, this is the one place to change.
 * `call` makes the refused call; whatever it answers, nothing may have been done.
 */
export async function expectScopeRefused(call: () => Promise<unknown>, scope = 'hooks:write') {
  const result = (await call()) as ToolResult
  expect(result.isError).toBe(true)
  expect(result.structuredContent).toBeUndefined()
  const problem = problemOf(result)
  expect(problem).toMatchObject({ status: 403, code: 'insufficient_scope' })
  expect(problem.detail).toContain(scope)
}
