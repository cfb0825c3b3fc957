import { t, type TSchema } from 'elysia'
import { Kind, TransformKind, type Static } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import type { Tool } from '@modelcontextprotocol/server'
import type { Caller } from '../auth/authenticator.ts'
import type { Scope } from '../auth/scopes.ts'
import { ApiError, schemaViolations, validationFailed } from '../lib/http/errors.ts'
import { PageParams, pageOf } from '../lib/http/pagination.ts'
import { EVENT_DESCRIPTIONS, EVENT_TYPES } from '../messages/event-types.ts'
import { CreateHookBody, CreatedHookSchema, DeliveryDetailSchema, DeliveryIdParam, DeliveryListQuery, DeliverySchema, HookSchema, TestResultSchema, UpdateHookBody } from '../hooks/schemas.ts'
import { createHook, deleteHook, getHook, listHooks, toHookResource, updateHook, type HookDeps } from '../hooks/service.ts'
import { getDelivery, listDeliveries, retryDelivery, sendTestEvent, type DeliveryOperationDeps } from '../hooks/deliveries.ts'
import { HookStatsSchema, StatsRangeParams } from '../stats/schemas.ts'
import { readHookStats, statsRange, type StatsCache } from '../stats/service.ts'
import { describeHookHealth } from '../stats/summary.ts'

/** What the tools run on: the same dependencies as the REST routes for subscriptions and deliveries, and the health answers' cache (src/stats/cache.ts) that GET …/stats shares. */
export type ToolDeps = HookDeps & DeliveryOperationDeps & { statsCache: StatsCache }

const HookId = t.String({ minLength: 1, maxLength: 64, description: 'A subscription id, hook_… (from list_webhooks or create_webhook).' })
const ListWebhooksInput = t.Object(PageParams, { additionalProperties: false })
const HookIdInput = t.Object({ hook_id: HookId }, { additionalProperties: false })
const ListDeliveriesInput = t.Object({ hook_id: HookId, ...PageParams, state: DeliveryListQuery.properties.state }, { additionalProperties: false })
const UpdateWebhookInput = t.Object({ hook_id: HookId, ...UpdateHookBody.properties }, { additionalProperties: false })
const DeliveryIdInput = t.Object({ delivery_id: DeliveryIdParam }, { additionalProperties: false })
const WebhookHealthInput = t.Object({ hook_id: HookId, ...StatsRangeParams }, { additionalProperties: false })
const WebhookHealthOutput = t.Object(
  {
    summary: t.String({ description: 'The figures below in a few sentences, for a person.' }),
    status: HookSchema.properties.status,
    circuit: HookSchema.properties.circuit,
    ...HookStatsSchema.properties,
  },
  { title: 'WebhookHealth' },
)
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
  run(deps: ToolDeps, caller: Caller, input: Static<Input>): Promise<object>
}

/** Elysia's coercing `t.Integer` / `t.Numeric`: a transform over `anyOf: [numeric string, number]`. */
function coercedNumber(node: Record<PropertyKey, unknown>): Record<PropertyKey, unknown> | undefined {
  if (!(TransformKind in node) || !Array.isArray(node.anyOf) || node.anyOf.length !== 2) return undefined
  const [text, number] = node.anyOf as Record<string, unknown>[]
  const coercing = text?.type === 'string' && (text.format === 'integer' || text.format === 'numeric')
  return coercing && (number?.type === 'integer' || number?.type === 'number') ? number : undefined
}

/**
 * A REST schema as the tools take and describe it: the same TypeBox schema (one per shape, in
 * src/hooks/schemas.ts), with what only suits Elysia's HTTP layer taken out, so tools/list is plain
 * JSON Schema that standard validators read without warnings, and the tools check what they advertise.
 * - Elysia's `t.Integer` (a string with the non-standard `format: "integer"`, or an integer, decoded
 *   by a transform: query strings arrive as text) becomes its plain `{ type: "integer", minimum, … }`
 *   branch. A tool's arguments are JSON, so a number arrives as a number and "5" is refused.
 * - `default` goes from output schemas (Elysia's `t.UnionEnum` puts its first value there to word its
 *   errors; it fills nothing in an answer) and from `t.UnionEnum` inputs; a real input default
 *   (`limit`: 20) stays, it says what the tool does without one.
 * - `$id` goes: it names OpenAPI components, and would clash between tools in one validator.
 * TypeBox's symbols are kept, so `Value.Check` runs on the result.
 */
export function forAgents<T extends TSchema>(schema: T, use: 'input' | 'output'): T {
  const rewrite = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(rewrite)
    if (typeof node !== 'object' || node === null) return node
    const record = node as Record<PropertyKey, unknown>
    const source = coercedNumber(record) ?? record
    const dropDefault = use === 'output' || source[Kind] === 'UnionEnum'
    const copy: Record<PropertyKey, unknown> = {}
    for (const key of Object.keys(source)) {
      if (key === '$id' || (key === 'default' && dropDefault)) continue
      copy[key] = rewrite(source[key])
    }
    for (const symbol of Object.getOwnPropertySymbols(source)) if (symbol !== TransformKind) copy[symbol] = source[symbol]
    return copy
  }
  return rewrite(schema) as T
}

// Each tool is a thin call into the same service functions the REST routes use.
const define = <Input extends TSchema>(tool: ToolDefinition<Input>) =>
  ({ ...tool, input: forAgents(tool.input, 'input'), output: forAgents(tool.output, 'output') }) as unknown as ToolDefinition<TSchema>

export const TOOLS = [
  define({
    name: 'list_webhooks',
    title: 'List webhook subscriptions',
    description:
      "Lists the account's webhook subscriptions, newest first: each one's id, event type, HTTPS target URL and status (active, paused by the owner, or disabled by the service with a reason). Pages of up to 100; pass next_cursor back as cursor for the next page.",
    scope: 'hooks:read',
    input: ListWebhooksInput,
    output: pageOf(HookSchema),
    annotations: { readOnlyHint: true, openWorldHint: false },
    run: (deps, caller, input) => listHooks(deps.db, caller.accountId, input),
  }),
  define({
    name: 'get_webhook',
    title: 'Read one webhook subscription',
    description: 'Reads one webhook subscription by id: event type, target URL, status and, when disabled, why; its signature scheme and, for ed25519, the public key (whpk_…) that verifies deliveries. The hmac signing secret is never shown again after creation.',
    scope: 'hooks:read',
    input: HookIdInput,
    output: HookSchema,
    annotations: { readOnlyHint: true, openWorldHint: false },
    run: async (deps, caller, input) => toHookResource(await getHook(deps.db, caller.accountId, input.hook_id)),
  }),
  define({
    name: 'create_webhook',
    title: 'Subscribe a URL to an event',
    description: `Subscribes an HTTPS URL, a RabbitMQ exchange (amqps://user:password@host/vhost?exchange=NAME&routing_key=KEY) or a NATS JetStream subject (tls://user:password@host?subject=SUBJECT) to one event type (${EVENT_TYPES.join(', ')}; see list_event_types). Every such event is then POSTed to the URL, or published to the broker (confirmed by it), signed (Standard Webhooks). A broker's password is stored sealed and shown as ***. An optional filter narrows it to some contacts: {"to": [numbers]} for message.delivered and message.failed (the recipient), {"from": [numbers]} for message.inbound (the sender); 1-10 distinct E.164 numbers such as +14155550123. By default deliveries are signed with a shared secret: the answer includes it (whsec_…), shown only this once; give it to the user to verify deliveries. With signature "ed25519" the service keeps a private key instead and the answer has no secret but public_key (whpk_…), readable later with get_webhook: give that to the user. Fails if the URL is not https (or amqps/tls), points at a private address, or the same event and URL are already subscribed.`,
    scope: 'hooks:write',
    input: CreateHookBody,
    output: CreatedHookSchema,
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    run: async (deps, caller, input) => {
      const { hook, secret } = await createHook(deps, caller.accountId, input as Static<typeof CreateHookBody>)
      return { ...toHookResource(hook), ...(secret === null ? {} : { secret }) }
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
    name: 'update_webhook',
    title: 'Change, pause or resume a webhook subscription',
    description:
      'Changes a subscription: a new target_url (same rules as at creation), status "paused" (deliveries are still recorded and wait) or "active" (resumes a paused one, re-enables a disabled one), rate_limit_per_s (deliveries per second, 1-10000; null removes the limit), or filter (as in create_webhook, with the key its event type takes; null removes it, leaving it out keeps it). The signing secret is kept. Give hook_id and at least one change.',
    scope: 'hooks:write',
    input: UpdateWebhookInput,
    output: HookSchema,
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    run: async (deps, caller, input) => {
      const { hook_id, ...changes } = input as Static<typeof UpdateWebhookInput>
      // Checked here, not with minProperties: the schema's message would count hook_id among the changes.
      if (Object.keys(changes).length === 0) throw validationFailed([{ path: '/', message: 'give at least one change: target_url, status, rate_limit_per_s or filter' }])
      return toHookResource(await updateHook(deps, caller.accountId, hook_id, changes))
    },
  }),
  define({
    name: 'test_webhook',
    title: 'Send a test event to a webhook subscription',
    description:
      "Sends one signed example event of the subscription's type to its URL now, whatever its status, and answers with the receiver's response: delivery_id, status_code (null if none arrived), duration_ms and error (null on success). Use it to check that a receiver works. The test appears in list_deliveries marked test and never changes the subscription.",
    scope: 'hooks:write',
    input: HookIdInput,
    output: TestResultSchema,
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    run: (deps, caller, input) => sendTestEvent(deps, caller.accountId, input.hook_id),
  }),
  define({
    name: 'list_deliveries',
    title: "List a subscription's deliveries",
    description:
      "Lists a subscription's deliveries, one per event, newest first: each one's state (pending, succeeded, failed, canceled), attempts made, when the next attempt is due, and the last attempt's HTTP status (null if no answer), duration and error. Filter with state. Use it to find out why a receiver is not getting events; get_delivery shows every attempt.",
    scope: 'hooks:read',
    input: ListDeliveriesInput,
    output: pageOf(DeliverySchema),
    annotations: { readOnlyHint: true, openWorldHint: false },
    run: async (deps, caller, input) => {
      const hook = await getHook(deps.db, caller.accountId, input.hook_id)
      return listDeliveries(deps.db, hook.id, input)
    },
  }),
  define({
    name: 'get_delivery',
    title: 'Read one delivery with every attempt',
    description: "Reads one delivery by id (dlv_…): its state and every attempt, oldest first, with the HTTP status, duration, error and the first 4 KB of the receiver's answer.",
    scope: 'hooks:read',
    input: DeliveryIdInput,
    output: DeliveryDetailSchema,
    annotations: { readOnlyHint: true, openWorldHint: false },
    run: (deps, caller, input) => getDelivery(deps.db, caller.accountId, input.delivery_id),
  }),
  define({
    name: 'get_webhook_health',
    title: "A webhook subscription's health over time",
    description:
      "Answers \"is my webhook healthy?\": a summary in words first, then the subscription's status and circuit breaker, and per bucket (minute, hour or day; by default the last 24 hours by the hour, at most 1,440 buckets) its delivery attempts, successes, failures by reason (timeout, connection, refused, redirect, http_4xx, http_5xx, other; for message brokers unroutable, nacked, denied) and attempt duration p50/p95/p99 in ms, with totals and the deliveries pending now. The same figures as GET …/hooks/{hook_id}/stats. Use list_deliveries or get_delivery to see individual failures.",
    scope: 'hooks:read',
    input: WebhookHealthInput,
    output: WebhookHealthOutput,
    annotations: { readOnlyHint: true, openWorldHint: false },
    run: async (deps, caller, input) => {
      const { hook_id: hookId, ...query } = input
      const hook = toHookResource(await getHook(deps.db, caller.accountId, hookId))
      const stats = await readHookStats(deps.db, deps.statsCache, caller.accountId, hook.id, statsRange(query, new Date()))
      return { summary: describeHookHealth(hook, stats), status: hook.status, circuit: hook.circuit, ...stats }
    },
  }),
  define({
    name: 'retry_delivery',
    title: 'Send a delivery again',
    description:
      'Sends a delivery (dlv_…) again now, whatever its state: a succeeded one is sent again with the same webhook-id, so receivers that deduplicate ignore it. The subscription must be active (resume a paused one with update_webhook first). Answers with the delivery, now pending; check it again with get_delivery.',
    scope: 'hooks:write',
    input: DeliveryIdInput,
    output: DeliverySchema,
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    run: (deps, caller, input) => retryDelivery(deps, caller.accountId, input.delivery_id),
  }),
]

/** A tool's TypeBox schema (already through forAgents) as the JSON that tools/list sends: TypeBox's symbols do not survive JSON. */
export function toJsonSchema(schema: TSchema): Record<string, unknown> {
  return JSON.parse(JSON.stringify(schema))
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
 * Runs a tool for a caller: the scope check, the input check against the schema tools/list
 * advertises (REST's, through forAgents), then the service call. Failures are ApiErrors, reported
 * to the model as tool errors.
 */
export async function callTool(deps: ToolDeps, caller: Caller, name: string, args: unknown): Promise<ToolOutcome | null> {
  const tool = TOOLS.find((candidate) => candidate.name === name)
  if (!tool) return null
  try {
    // Not reached over HTTP: src/mcp/routes.ts answers such a call 403 (step-up) before the SDK
    // server sees it. Kept so that no path runs a tool for a caller without its scope.
    if (!caller.scopes.includes(tool.scope)) {
      throw new ApiError(403, 'insufficient_scope', `This access token lacks the ${tool.scope} scope, which ${tool.name} needs. Ask the user to authorize it.`)
    }
    const input = args ?? {}
    if (!Value.Check(tool.input, input)) {
      throw validationFailed([...Value.Errors(tool.input, input)].flatMap((issue) => [...schemaViolations(issue)]).slice(0, 20))
    }
    return { ok: true, result: (await tool.run(deps, caller, input)) as Record<string, unknown> }
  } catch (error) {
    if (error instanceof ApiError) return { ok: false, error }
    throw error
  }
}
