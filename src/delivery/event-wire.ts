import { newId } from '../lib/db/ids.ts'

/**
 * The MCP Events extension's webhook wire format (docs/mcp.md#events; the extension's
 * "Webhook-Based Delivery"): what is POSTed to an agent's callback, besides the Standard Webhooks
 * headers every delivery carries.
 */

/** The one MCP-specific header of a delivery: the subscription id, so a receiver picks the secret before parsing. */
export const SUBSCRIPTION_ID_HEADER = 'X-MCP-Subscription-Id'

/**
 * An event occurrence, `{eventId, name, timestamp, data, cursor}`, from the body REST webhooks get
 * (`{id, type, timestamp, account_id, data}`, stored once per event): the same event, the same
 * data, and the same bytes on every retry. `cursor` is null: these event types offer no replay
 * (docs/mcp.md#events).
 */
export function occurrenceBody(storedPayload: string): string {
  const event = JSON.parse(storedPayload) as { id: string; type: string; timestamp: string; data: Record<string, unknown> }
  return JSON.stringify({ eventId: event.id, name: event.type, timestamp: event.timestamp, data: event.data, cursor: null })
}

/** A control envelope (verification, terminated) is one attempt of at most this long, or WEBHOOK_TIMEOUT_MS when shorter. */
export const CONTROL_MESSAGE_TIMEOUT_MS = 5_000

/** A control envelope's `webhook-id`: `msg_<type>_<random>`, as the extension names them. */
export const controlMessageId = (type: 'verification' | 'terminated') => `msg_${type}_${newId('req').slice(4)}`

export const verificationBody = (challenge: string) => JSON.stringify({ type: 'verification', challenge })

export const terminatedBody = (reason: string) => JSON.stringify({ type: 'terminated', error: { code: EVENT_ERRORS.Forbidden, message: 'Forbidden', data: { reason } } })

/** The extension's error codes (its "Error Handling" table). */
export const EVENT_ERRORS = {
  InvalidParams: -32602,
  NotFound: -32023,
  Forbidden: -32024,
  ResourceExhausted: -32025,
  Unsupported: -32026,
  CallbackEndpointError: -32027,
} as const
