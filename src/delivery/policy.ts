import type { AttemptResult } from './send.ts'

/** What a delivery attempt's result means for the delivery and its subscription. */
export type DeliveryDecision =
  | { kind: 'delivered' }
  | { kind: 'retry'; delayMs: number }
  /** Every attempt of the schedule failed. */
  | { kind: 'exhausted' }
  /** The receiver said the endpoint is gone (410): stop sending to it at once. */
  | { kind: 'disable_hook'; reason: string }
  /** An MCP event subscription's receiver refused this one delivery (410 or 413): it fails, the subscription goes on. */
  | { kind: 'refused' }

/** What the policy reads of a send (src/delivery/send.ts). */
export type AttemptOutcome = Pick<AttemptResult, 'ok' | 'status' | 'retryAfterSeconds'>

// Retry-After is honoured up to this much; a receiver cannot park deliveries for days.
export const MAX_RETRY_AFTER_MS = 60 * 60_000
const JITTER = 0.2

/**
 * `schedule[n]` is the delay before attempt n+1 (schedule[0] before the first), with ±20 %
 * jitter so that deliveries failed together do not retry together. `attemptsMade` counts the
 * attempt just made.
 */
export function decideAfterAttempt(
  result: AttemptOutcome,
  attemptsMade: number,
  schedule: readonly number[],
  random: () => number = Math.random,
  target: { eventSubscription: boolean } = { eventSubscription: false },
): DeliveryDecision {
  if (result.ok) return { kind: 'delivered' }
  // The Events extension's receivers answer 410 to an event they will not take (stale, already handled, past
  // their refreshBefore) and 413 to one too large: neither is retried, and neither ends the subscription.
  if (target.eventSubscription && (result.status === 410 || result.status === 413)) return { kind: 'refused' }
  if (result.status === 410) return { kind: 'disable_hook', reason: 'The receiver answered 410 Gone.' }
  if (attemptsMade >= schedule.length) return { kind: 'exhausted' }
  const scheduled = schedule[attemptsMade]! * (1 - JITTER + 2 * JITTER * random())
  const asked = (result.status === 429 || result.status === 503) && result.retryAfterSeconds !== null ? Math.min(result.retryAfterSeconds * 1000, MAX_RETRY_AFTER_MS) : 0
  return { kind: 'retry', delayMs: Math.round(Math.max(scheduled, asked)) }
}
