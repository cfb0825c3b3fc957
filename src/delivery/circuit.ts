import { sql, type SQL } from 'drizzle-orm'
import type { AttemptResult } from './send.ts'

/**
 * The circuit breaker of one subscription (docs/webhooks.md#when-an-endpoint-keeps-failing).
 *
 * A receiver that keeps failing is not sent every delivery that falls due: after
 * CIRCUIT_OPENS_AFTER failed attempts in a row the circuit opens, its deliveries wait (pending,
 * their retry schedule unchanged, so the five-day disable rule still counts from the first
 * failure), and one delivery at a time goes out as a probe, no more often than the probe
 * interval. Any answer that is not a failure closes the circuit and the backlog drains at the
 * pace flow control allows (src/delivery/flow-control.ts).
 *
 * A failure is what says the receiver cannot take deliveries now: no answer (refused, reset,
 * timed out), a 5xx, or a 429. A 4xx other than 429 is an answer from a receiver that is up:
 * it counts as the receiver being reachable, whatever the retry policy does with the delivery.
 *
 * The state lives on the subscription's row (hooks.consecutive_failures, circuit_opened_at,
 * circuit_probe_at), so every process sees it and it survives restarts: the claim
 * (src/delivery/store.ts) gives an open circuit at most one delivery in flight, and only once
 * its probe time has come; recording the attempts (same file) counts, opens and closes.
 */

/** Failed attempts in a row that open the circuit. */
export const CIRCUIT_OPENS_AFTER = 3
/** The probe interval grows with the outage (a quarter of how long the circuit has been open) within these bounds. */
export const PROBE_INTERVAL_MIN_S = 5
export const PROBE_INTERVAL_MAX_S = 60

/**
 * Whether an attempt's outcome counts against the receiver. A broker's confirmation has no
 * status code (docs/webhooks.md#destinations): it is an answer, as a 2xx is; and a broker that
 * says the message has nowhere to go (`unroutable`) or that the credentials or permissions are
 * wrong (`denied`) is up and answering, as a receiver's 4xx is. Its negative acknowledgement
 * (`nacked`) is the broker unable to take messages now, as a 503.
 */
export function isBreakerFailure(result: Pick<AttemptResult, 'ok' | 'status'> & Partial<Pick<AttemptResult, 'failure'>>): boolean {
  if (result.ok || result.failure === 'unroutable' || result.failure === 'denied') return false
  return result.status === null || result.status === 429 || result.status >= 500
}

/** SQL: when the next probe of a circuit opened at `openedAt` may start. */
export const nextProbeAt = (openedAt: SQL): SQL =>
  sql`now() + make_interval(secs => least(greatest(extract(epoch from now() - ${openedAt}) / 4, ${PROBE_INTERVAL_MIN_S}), ${PROBE_INTERVAL_MAX_S}))`

export type CircuitState = 'closed' | 'open' | 'half_open'

/**
 * The state shown on the subscription resource: `open` while its deliveries wait for the next
 * probe (a probe in flight has already moved that time on), `half_open` once the probe is due.
 */
export function circuitState(hook: { circuitOpenedAt: Date | null; circuitProbeAt: Date | null }, now = new Date()): CircuitState {
  if (hook.circuitOpenedAt === null) return 'closed'
  return hook.circuitProbeAt !== null && hook.circuitProbeAt <= now ? 'half_open' : 'open'
}
