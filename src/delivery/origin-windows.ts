import type { AttemptResult } from './send.ts'

/**
 * Attempts in flight per origin (a target's scheme, host and port: src/delivery/queue.ts,
 * `targetOrigin`) in this process, and whether each origin has answered lately.
 *
 * An origin with no answer in the last ANSWERED_LATELY_MS (one never tried yet, or one whose
 * attempts since have all timed out or found no connection) gets a window of attempts in flight,
 * all its subscriptions together: UNANSWERED_ORIGIN_WINDOW at first, halved by each round of
 * attempts that gets no answer (once a round, as flow control's: src/delivery/flow-control.ts),
 * down to one; and it starts no more than that window of attempts per UNANSWERED_ORIGIN_PACE_MS.
 * A host that never answers then holds a few of the worker's slots until its timeouts, not its
 * account's whole share: a thousand new subscriptions to it used to start 128 attempts at once,
 * which held as many connections for the whole timeout and doubled another account's p99
 * (docs/performance.md, issue 37, twenty-first and twenty-second passes). A port that refuses
 * connections ends each attempt at once, so one attempt in flight was still a loop of about fifty
 * a second, each a claim and a record: paced, it is tried once a second
 * (docs/performance.md, issue 37, twenty-third pass). Any answer lifts the
 * bound: a status code, even a 4xx or 5xx (the host is up; what the answer means for the
 * subscription is its circuit breaker's business: src/delivery/circuit.ts), or a broker's word
 * (src/delivery/destinations/). The bound is the slow start of an origin: a new receiver's first
 * attempts answer within milliseconds, and its subscriptions then have their own windows and
 * shares (src/delivery/flow-control.ts).
 *
 * The price (docs/webhooks.md#when-an-endpoint-keeps-failing): the deliveries of many
 * subscriptions to one host that does not answer go out a few at a time, each attempt holding its
 * place until the timeout, so their retries come later than their schedule says.
 */
export const UNANSWERED_ORIGIN_WINDOW = 8
export const UNANSWERED_ORIGIN_PACE_MS = 1_000
const ANSWERED_LATELY_MS = 30_000
// As flow control's TOLD_FOR_MS (src/delivery/flow-control.ts): the claim is told the origins busy
// now or within this long, so what it carries follows the busy origins, not every one seen. Any
// other origin gets UNANSWERED_ORIGIN_WINDOW for one claim, and its own bound again once it has
// attempts in flight.
const TOLD_FOR_MS = 5_000

interface Origin {
  inFlight: number
  /** The bound while it has not answered lately. */
  window: number
  answeredAt: number
  activeAt: number
  lastDecreaseAt: number
  /** When its latest attempts started, at most UNANSWERED_ORIGIN_WINDOW of them, oldest first. */
  startedAt: number[]
}

/** Whether the attempt reached something that answered: a status code, or a broker's confirmation or refusal. */
export function reachedReceiver(result: Pick<AttemptResult, 'ok' | 'status' | 'failure'>): boolean {
  return result.ok || result.status !== null || result.failure === 'unroutable' || result.failure === 'nacked' || result.failure === 'denied'
}

export function createOriginWindows(now: () => number = () => performance.now()) {
  const origins = new Map<string, Origin>()

  const answeredLately = (origin: Origin, at: number) => at - origin.answeredAt <= ANSWERED_LATELY_MS

  return {
    /** An attempt to this origin started; returns when (a `now()` reading), for `ended`. */
    started(key: string): number {
      const at = now()
      const origin = origins.get(key) ?? { inFlight: 0, window: UNANSWERED_ORIGIN_WINDOW, answeredAt: -Infinity, activeAt: at, lastDecreaseAt: -Infinity, startedAt: [] }
      origin.inFlight++
      origin.activeAt = at
      origin.startedAt.push(at)
      if (origin.startedAt.length > UNANSWERED_ORIGIN_WINDOW) origin.startedAt.shift()
      origins.set(key, origin)
      return at
    },

    /** The attempt to this origin started at `startedAt` ended with this result. */
    ended(key: string, startedAt: number, result: Pick<AttemptResult, 'ok' | 'status' | 'failure'>) {
      const origin = origins.get(key)
      if (!origin) return
      const at = now()
      origin.inFlight = Math.max(0, origin.inFlight - 1)
      origin.activeAt = at
      if (reachedReceiver(result)) {
        origin.answeredAt = at
        origin.window = UNANSWERED_ORIGIN_WINDOW
      } else if (startedAt >= origin.lastDecreaseAt) {
        origin.window = Math.max(1, Math.floor(origin.window / 2))
        origin.lastDecreaseAt = at
      }
    },

    /**
     * The claim's input: `origins`, the attempts each origin busy now or lately may start (an origin
     * that answered lately is bounded only by `concurrency`, the most a claim takes; one that has
     * not, by its window less the more of its attempts in flight and those started within
     * UNANSWERED_ORIGIN_PACE_MS); `newcomer`, what
     * any other origin may start. Forgets the origins idle for longer than ANSWERED_LATELY_MS: they
     * are bounded as a new one is.
     */
    claimAllowances(concurrency: number): { origins: Record<string, number>; newcomer: number } {
      const at = now()
      const told: Record<string, number> = {}
      for (const [key, origin] of origins) {
        if (origin.inFlight === 0 && at - origin.activeAt > ANSWERED_LATELY_MS) {
          origins.delete(key)
          continue
        }
        if (origin.inFlight === 0 && at - origin.activeAt > TOLD_FOR_MS) continue
        if (answeredLately(origin, at)) told[key] = concurrency
        else {
          const startedLately = origin.startedAt.filter((startedAt) => at - startedAt < UNANSWERED_ORIGIN_PACE_MS).length
          told[key] = Math.max(0, origin.window - Math.max(origin.inFlight, startedLately))
        }
      }
      return { origins: told, newcomer: UNANSWERED_ORIGIN_WINDOW }
    },

    /** For tests: attempts in flight to this origin, its window, and whether it answered lately. */
    state(key: string): { inFlight: number; window: number; answeredLately: boolean } | undefined {
      const origin = origins.get(key)
      return origin && { inFlight: origin.inFlight, window: origin.window, answeredLately: answeredLately(origin, now()) }
    },
  }
}

export type OriginWindows = ReturnType<typeof createOriginWindows>
