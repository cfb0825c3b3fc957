import { afterEach, beforeEach, describe, expect, test } from 'bun:test'
import { TOOLS, toJsonSchema } from '../../src/mcp/tools.ts'
import { startTestServer } from '../support/server.ts'
import { flowFixture } from '../oauth/support.ts'
import { connectWithToken, mcpUrlOf, problemOf, tokenFor, type ToolResult } from '../support/mcp.ts'

// tools/list is plain JSON Schema: what standard validators (the SDK client's Ajv among them)
// read without warnings, with integers as integers. The schemas are REST's (src/hooks/schemas.ts)
// through forAgents (src/mcp/tools.ts).

const server = await startTestServer()
const fixture = await flowFixture(server)
const token = await tokenFor(server, fixture, {})

type Node = Record<string, unknown>
/** Every object in a schema, with its JSON pointer. */
function* nodesOf(value: unknown, path = ''): Generator<[string, Node]> {
  if (Array.isArray(value)) {
    for (const [index, item] of value.entries()) yield* nodesOf(item, `${path}/${index}`)
  } else if (typeof value === 'object' && value !== null) {
    yield [path, value as Node]
    for (const [key, item] of Object.entries(value)) yield* nodesOf(item, `${path}/${key}`)
  }
}

/** tools/list as it crosses the wire. */
async function listedTools(): Promise<{ name: string; inputSchema: Node; outputSchema: Node }[]> {
  const response = await fetch(mcpUrlOf(server), {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  })
  expect(response.status).toBe(200)
  return ((await response.json()) as { result: { tools: { name: string; inputSchema: Node; outputSchema: Node }[] } }).result.tools
}

/** The schema of a property at `path` (property names, through object schemas and `anyOf` members that are objects). */
const property = (schema: Node, ...path: string[]): Node => path.reduce((node, name) => (node.properties as Record<string, Node>)[name]!, schema)

describe('tools/list', () => {
  test('no format "integer", no numeric string beside an integer, no $id, no default in an output schema', async () => {
    const tools = await listedTools()
    expect(tools).toHaveLength(TOOLS.length)
    const found: string[] = []
    for (const tool of tools) {
      for (const [use, schema] of [['input', tool.inputSchema], ['output', tool.outputSchema]] as const) {
        for (const [path, node] of nodesOf(schema)) {
          const at = `${tool.name} ${use}${path}`
          if (node.format === 'integer' || node.format === 'numeric') found.push(`${at}: format ${node.format}`)
          if ('$id' in node) found.push(`${at}: $id`)
          if (use === 'output' && 'default' in node) found.push(`${at}: default`)
          const members = Array.isArray(node.anyOf) ? (node.anyOf as Node[]) : []
          if (members.some((member) => member.type === 'string') && members.some((member) => member.type === 'integer' || member.type === 'number')) found.push(`${at}: string or number`)
        }
      }
    }
    expect(found).toEqual([])
  })

  test('every integer field is { type: "integer" } with its bounds, in inputs and outputs', async () => {
    const tools = Object.fromEntries((await listedTools()).map((tool) => [tool.name, tool]))
    const hook = tools.get_webhook!.outputSchema
    expect(property(tools.list_webhooks!.inputSchema, 'limit')).toEqual({ type: 'integer', minimum: 1, maximum: 100, default: 20, description: 'How many to return, 1 to 100 (default 20).' })
    expect(property(tools.list_deliveries!.inputSchema, 'limit')).toMatchObject({ type: 'integer', minimum: 1, maximum: 100 })
    const rate = { type: 'integer', minimum: 1, maximum: 10000, description: 'At most this many delivery attempts start in each second (1–10000).' }
    expect(property(tools.create_webhook!.inputSchema, 'rate_limit_per_s')).toEqual(rate)
    expect(property(tools.update_webhook!.inputSchema, 'rate_limit_per_s').anyOf).toEqual([rate, { type: 'null' }])
    expect(property(hook, 'rate_limit_per_s').anyOf).toEqual([{ type: 'integer' }, { type: 'null' }])
    expect(property(tools.create_webhook!.outputSchema, 'rate_limit_per_s').anyOf).toEqual([{ type: 'integer' }, { type: 'null' }])
    expect(property(tools.test_webhook!.outputSchema, 'duration_ms')).toEqual({ type: 'integer' })
    expect(property(tools.test_webhook!.outputSchema, 'status_code').anyOf).toEqual([{ type: 'integer' }, { type: 'null' }])
    const delivery = tools.get_delivery!.outputSchema
    expect(property(delivery, 'attempts')).toEqual({ type: 'integer', description: 'Attempts made so far.' })
    const attempt = (property(delivery, 'attempt_log').items as Node)
    expect(property(attempt, 'duration_ms')).toEqual({ type: 'integer' })
    const lastAttempt = (property(tools.retry_delivery!.outputSchema, 'last_attempt').anyOf as Node[])[0]!
    expect(property(lastAttempt, 'duration_ms')).toEqual({ type: 'integer' })
    // Enumerations stay enumerations, without the default Elysia gives them.
    expect(property(hook, 'status')).toMatchObject({ type: 'string', enum: ['active', 'paused', 'disabled'] })
    expect(property(hook, 'event')).toEqual({ type: 'string', enum: ['message.delivered', 'message.failed', 'message.inbound'] })
  })

  test('the filter: one schema (HookFilter) in create_webhook and update_webhook, null beside it where it can be removed or absent', async () => {
    const tools = Object.fromEntries((await listedTools()).map((tool) => [tool.name, tool]))
    const contacts = { type: 'array', minItems: 1, maxItems: 10, uniqueItems: true, items: expect.objectContaining({ type: 'string', pattern: '^\\+[1-9][0-9]{6,14}$' }) }
    const filter = property(tools.create_webhook!.inputSchema, 'filter')
    expect(filter).toMatchObject({ type: 'object', additionalProperties: false, minProperties: 1, maxProperties: 1, properties: { to: contacts, from: contacts } })
    expect(filter.required).toBeUndefined()
    expect(property(tools.update_webhook!.inputSchema, 'filter').anyOf).toEqual([filter, { type: 'null' }])
    expect((property(tools.get_webhook!.outputSchema, 'filter').anyOf as Node[])[1]).toEqual({ type: 'null' })
    expect(tools.get_webhook!.outputSchema.required).toContain('filter')
  })

  test('what tools/list sends is what the tools check: TOOLS[…] through toJsonSchema', async () => {
    for (const tool of await listedTools()) {
      const defined = TOOLS.find((candidate) => candidate.name === tool.name)!
      expect(tool.inputSchema).toEqual(toJsonSchema(defined.input))
      expect(tool.outputSchema).toEqual(toJsonSchema(defined.output))
    }
  })
})

describe('the SDK client reads the schemas without a warning', () => {
  const warnings: unknown[][] = []
  const original = { warn: console.warn, error: console.error }
  beforeEach(() => {
    warnings.length = 0
    console.warn = (...args: unknown[]) => void warnings.push(args)
    console.error = (...args: unknown[]) => void warnings.push(args)
  })
  afterEach(() => {
    console.warn = original.warn
    console.error = original.error
  })

  test('listTools, then calls whose structuredContent it checks against each output schema (integers, nulls, enumerations)', async () => {
    const client = await connectWithToken(server, token)
    await client.listTools()
    const call = async (name: string, args: Record<string, unknown>) => {
      const result = (await client.callTool({ name, arguments: args })) as ToolResult
      if (result.isError) throw new Error(`${name}: ${result.content[0]!.text}`)
      return result.structuredContent
    }
    const hook = await call('create_webhook', { event: 'message.inbound', target_url: 'https://hooks.example.com/schemas', rate_limit_per_s: 7 })
    expect(hook.rate_limit_per_s).toBe(7)
    expect((await call('update_webhook', { hook_id: hook.id, rate_limit_per_s: null })).rate_limit_per_s).toBeNull()
    expect((await call('list_webhooks', { limit: 5 })).data).toHaveLength(1)
    await call('get_webhook', { hook_id: hook.id })
    await call('list_deliveries', { hook_id: hook.id, limit: 1 })
    await call('list_event_types', {})
    await call('delete_webhook', { hook_id: hook.id })
    await client.close()
    expect(warnings).toEqual([])
  })
})

describe('integer arguments are JSON numbers', () => {
  test('a numeric string is refused by the tools and in REST bodies, as their schemas say; REST query strings, which are text, still take one', async () => {
    const client = await connectWithToken(server, token)
    const refused = (await client.callTool({ name: 'create_webhook', arguments: { event: 'message.inbound', target_url: 'https://hooks.example.com/text', rate_limit_per_s: '5' } })) as ToolResult
    expect(problemOf(refused)).toMatchObject({ status: 422, code: 'validation_failed', errors: [{ path: '/rate_limit_per_s', message: 'Expected integer' }] })
    const limit = (await client.callTool({ name: 'list_webhooks', arguments: { limit: '5' } })) as ToolResult
    expect(problemOf(limit).errors).toEqual([{ path: '/limit', message: 'Expected integer' }])
    const fraction = (await client.callTool({ name: 'list_webhooks', arguments: { limit: 2.5 } })) as ToolResult
    expect(problemOf(fraction).errors).toEqual([{ path: '/limit', message: 'Expected integer' }])
    await client.close()

    const rest = await server.fetch(`/v0/account/${fixture.accountId}/hooks?limit=5&key=${fixture.apiKey}`)
    expect(rest.status).toBe(200)
    const created = await server.fetch(`/v0/account/${fixture.accountId}/hooks?key=${fixture.apiKey}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ event: 'message.inbound', target_url: 'https://hooks.example.com/text', rate_limit_per_s: '5' }),
    })
    expect(created.status).toBe(422)
    expect(await created.json()).toMatchObject({ code: 'validation_failed', errors: [{ path: '/rate_limit_per_s', message: 'Expected integer' }] })
  })
})
