import { t, type TSchema } from 'elysia'
import type { Static } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import type { Tool } from '@modelcontextprotocol/sdk/types.js'
import type { Caller } from '../auth/authenticator.ts'
import type { Scope } from '../auth/scopes.ts'
import { ApiError, validationFailed } from '../lib/errors.ts'
import { PageParams, pageOf } from '../lib/pagination.ts'
import { EVENT_DESCRIPTIONS, EVENT_TYPES } from '../hooks/event-types.ts'
import { CreateHookBody, CreatedHookSchema, DeliveryAttemptSchema, HookSchema } from '../hooks/schemas.ts'
import { createHook, deleteHook, getHook, listHooks, toHookResource, type HookDeps } from '../hooks/service.ts'
import { listDeliveryAttempts } from '../hooks/deliveries.ts'

const HookId = t.String({ minLength: 1, maxLength: 64, description: 'A subscription id, hook_… (from list_webhooks or create_webhook).' })
const ListWebhooksInput = t.Object(PageParams, { additionalProperties: false })
const HookIdInput = t.Object({ hook_id: HookId }, { additionalProperties: false })
const ListDeliveriesInput = t.Object({ hook_id: HookId, ...PageParams }, { additionalProperties: false })
const NoInput = t.Object({}, { additionalProperties: false })

const EventTypesOutput = t.Object({
  data: t.Array(t.Object({ type: t.UnionEnum(EVENT_TYPES), description: t.String() })),
})
const DeletedOutput = t.Object({ id: t.String(), deleted: t.Literal(true) })

interface ToolDefinition<Input extends TSchema> {
  name: string
  title: string
  description: string
  scope: Scope
  input: Input
  output: TSchema
  annotations: NonNullable<Tool['annotations']>
  run(deps: HookDeps, caller: Caller, input: Static<Input>): Promise<object>
}

// Each tool is a thin call into the same service functions the REST routes use.
const define = <Input extends TSchema>(tool: ToolDefinition<Input>) => tool as unknown as ToolDefinition<TSchema>

export const TOOLS = [
  define({
    name: 'list_webhooks',
    title: 'List webhook subscriptions',
    description:
      "Lists the account's webhook subscriptions, newest first: each one's id, event type, HTTPS target URL and status (active, or disabled with a reason). Pages of up to 100; pass next_cursor back as cursor for the next page.",
    scope: 'hooks:read',
    input: ListWebhooksInput,
    output: pageOf(HookSchema),
    annotations: { readOnlyHint: true, openWorldHint: false },
    run: (deps, caller, input) => listHooks(deps.db, caller.accountId, input),
  }),
  define({
    name: 'get_webhook',
    title: 'Read one webhook subscription',
    description: 'Reads one webhook subscription by id: event type, target URL, status and, when disabled, why. The signing secret is never shown again after creation.',
    scope: 'hooks:read',
    input: HookIdInput,
    output: HookSchema,
    annotations: { readOnlyHint: true, openWorldHint: false },
    run: async (deps, caller, input) => toHookResource(await getHook(deps.db, caller.accountId, input.hook_id)),
  }),
  define({
    name: 'create_webhook',
    title: 'Subscribe a URL to an event',
    description: `Subscribes an HTTPS URL to one event type (${EVENT_TYPES.join(', ')}; see list_event_types). Every such event is then POSTed to the URL, signed (Standard Webhooks). The answer includes the signing secret (whsec_…), shown only this once: give it to the user to verify deliveries. Fails if the URL is not https, points at a private address, or the same event and URL are already subscribed.`,
    scope: 'hooks:write',
    input: CreateHookBody,
    output: CreatedHookSchema,
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    run: async (deps, caller, input) => {
      const { hook, secret } = await createHook(deps, caller.accountId, input as Static<typeof CreateHookBody>)
      return { ...toHookResource(hook), secret }
    },
  }),
  define({
    name: 'delete_webhook',
    title: 'Delete a webhook subscription',
    description: 'Deletes a webhook subscription by id. Its pending deliveries are cancelled and nothing more is sent to its URL. Cannot be undone: a new subscription gets a new secret.',
    scope: 'hooks:write',
    input: HookIdInput,
    output: DeletedOutput,
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    run: async (deps, caller, input) => {
      await deleteHook(deps.db, caller.accountId, input.hook_id)
      return { id: input.hook_id, deleted: true }
    },
  }),
  define({
    name: 'list_event_types',
    title: 'List event types',
    description: 'Lists the event types a webhook subscription can receive, with what each one means.',
    scope: 'hooks:read',
    input: NoInput,
    output: EventTypesOutput,
    annotations: { readOnlyHint: true, openWorldHint: false },
    run: async () => ({ data: EVENT_TYPES.map((type) => ({ type, description: EVENT_DESCRIPTIONS[type] })) }),
  }),
  define({
    name: 'list_deliveries',
    title: "List a subscription's delivery attempts",
    description:
      "Lists a subscription's delivery attempts, newest first: when, the HTTP status the receiver answered (null if none), how long it took, the error, and the start of the response. Use it to find out why a receiver is not getting events.",
    scope: 'hooks:read',
    input: ListDeliveriesInput,
    output: pageOf(DeliveryAttemptSchema),
    annotations: { readOnlyHint: true, openWorldHint: false },
    run: async (deps, caller, input) => {
      const hook = await getHook(deps.db, caller.accountId, input.hook_id)
      return listDeliveryAttempts(deps.db, hook.id, input)
    },
  }),
]

/** A TypeBox schema as plain JSON Schema for MCP clients: no TypeBox symbols, no OpenAPI `$id`s. */
export function toJsonSchema(schema: TSchema): Record<string, unknown> {
  return JSON.parse(JSON.stringify(schema), (key, value) => (key === '$id' ? undefined : value))
}

/** The tools as tools/list describes them. */
export const TOOL_LIST: Tool[] = TOOLS.map((tool) => ({
  name: tool.name,
  title: tool.title,
  description: `${tool.description} Needs the ${tool.scope} scope.`,
  inputSchema: toJsonSchema(tool.input) as Tool['inputSchema'],
  outputSchema: toJsonSchema(tool.output) as Tool['outputSchema'],
  annotations: { title: tool.title, ...tool.annotations },
}))

export type ToolOutcome = { ok: true; result: Record<string, unknown> } | { ok: false; error: ApiError }

/**
 * Runs a tool for a caller: the scope check, the input check against the same schema REST uses,
 * then the service call. Failures are ApiErrors, reported to the model as tool errors.
 */
export async function callTool(deps: HookDeps, caller: Caller, name: string, args: unknown): Promise<ToolOutcome | null> {
  const tool = TOOLS.find((candidate) => candidate.name === name)
  if (!tool) return null
  try {
    if (!caller.scopes.includes(tool.scope)) {
      throw new ApiError(403, 'insufficient_scope', `This access token lacks the ${tool.scope} scope, which ${tool.name} needs. Ask the user to authorize it.`)
    }
    const input = args ?? {}
    if (!Value.Check(tool.input, input)) {
      throw validationFailed([...Value.Errors(tool.input, input)].slice(0, 20).map((error) => ({ path: error.path || '/', message: error.message })))
    }
    return { ok: true, result: (await tool.run(deps, caller, input)) as Record<string, unknown> }
  } catch (error) {
    if (error instanceof ApiError) return { ok: false, error }
    throw error
  }
}
