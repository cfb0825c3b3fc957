import type { DeliveryDecision } from './policy.ts'

// Shared by the delivery worker thread and the metrics (src/ops/metrics.ts); kept apart so that the
// thread does not load prom-client.

export const OUTCOMES = ['delivered', 'retry', 'exhausted', 'disable_hook', 'refused'] as const satisfies readonly DeliveryDecision['kind'][]
export type Outcome = (typeof OUTCOMES)[number]
/** Attempts by outcome since the last report, in OUTCOMES order. */
export type OutcomeCounts = [number, number, number, number, number]
export const OUTCOME_INDEX: Record<Outcome, number> = { delivered: 0, retry: 1, exhausted: 2, disable_hook: 3, refused: 4 }

/** What the delivery supervisor reports (src/delivery/supervisor.ts) to the metrics (src/ops/metrics.ts). */
export interface DeliveryMetrics {
  /** From the worker thread, in batches: attempts ended since the last report, its sends in flight now, and how long each claim since took. */
  attempts(outcomes: OutcomeCounts, inFlight: number, claimSeconds?: readonly number[]): void
  /** The worker thread ended without being asked to and is started again. */
  workerRestarted(): void
  /** How many accounts are behind now (src/delivery/backlog.ts). */
  accountsBehind(count: number): void
  /** A POST …/messages was held this long while its account was behind, then accepted or refused (src/messages/admission.ts). */
  messageHeld(seconds: number, accepted: boolean): void
}
