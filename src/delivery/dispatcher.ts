import { createFlowControl, type FlowSettings } from './flow-control.ts'
import { decideAfterAttempt } from './policy.ts'
import type { AttemptResult } from './send.ts'
import type { ClaimOptions, ClaimResult, ClaimedDelivery, RecordedAttempt } from './store.ts'

/**
 * The two database operations a sender needs. Coarse on purpose: on PGlite each call crosses
 * from the worker thread to the thread that owns the database (src/delivery/worker.ts), and
 * a call per batch costs one message, not one per row.
 */
export interface DeliveryStore {
  claim(options: ClaimOptions): Promise<ClaimResult>
  record(attempts: RecordedAttempt[]): Promise<void>
}

// Claims in a row that found nothing though subscriptions were left unvisited (each visits up to HOOKS_PER_CLAIM).
const MAX_EMPTY_WALKS = 16

export interface DispatcherOptions {
  store: DeliveryStore
  /** One attempt; never throws (src/delivery/send.ts). */
  send(delivery: ClaimedDelivery): Promise<AttemptResult>
  schedule: readonly number[]
  /** Sends in flight at once (WEBHOOK_CONCURRENCY). */
  concurrency: number
  /** Each subscription's adaptive window (src/delivery/flow-control.ts). */
  flow: FlowSettings
  /** Deliveries of one subscription in flight at once across every process (WEBHOOK_MAX_IN_FLIGHT_PER_SUBSCRIPTION). */
  maxPerHook: number
  leaseMs: number
  /** The safety net: claim this often even when nothing woke the dispatcher (retries fall due this way). */
  pollMs: number
  onError(message: string, error: unknown): void
  /** Each attempt as it ends, before it is recorded (the attempt's log line). */
  onAttempt?(delivery: ClaimedDelivery, attempt: RecordedAttempt): void
  /** The number of sends in flight changed (metrics). */
  onInFlight?(inFlight: number): void
}

export interface Dispatcher {
  /** Something was committed: claim now. Calls made while a claim runs fold into one more claim. */
  wake(): void
  /** Stops claiming, lets the sends in flight finish and be recorded. */
  stop(): Promise<void>
  /** For tests and logs: sends in flight and attempts waiting to be recorded. */
  stats(): { inFlight: number; unrecorded: number }
  /** For tests and logs: a subscription's window and its attempts in flight in this process. */
  flowOf(hookId: string): { window: number; inFlight: number } | undefined
}

/**
 * Keeps up to `concurrency` deliveries in flight: claims as many as there are free slots until a
 * claim comes back empty, sends each outside any transaction, and records finished attempts in
 * batches (whatever finished while the previous batch was being written). Recording frees the
 * subscription's slot in the database, so every flush is followed by another claim.
 *
 * Each subscription may have no more in flight than its adaptive window, and no more than its
 * fair share of the slots (src/delivery/flow-control.ts): the claim is told both.
 */
export function createDispatcher(options: DispatcherOptions): Dispatcher {
  const { store, concurrency } = options
  const flow = createFlowControl(options.flow)
  let inFlight = 0
  // Where the next claim's round-robin walk over subscriptions starts.
  let walkedTo = ''
  let claiming = false
  let wokenWhileClaiming = false
  let stopped = false
  const finished: RecordedAttempt[] = []
  let flushing: Promise<void> | null = null
  let idle: (() => void) | null = null

  const claimWhileSlotsFree = async () => {
    if (claiming) {
      wokenWhileClaiming = true
      return
    }
    claiming = true
    try {
      do {
        wokenWhileClaiming = false
        let emptyWalks = 0
        while (!stopped && inFlight < concurrency) {
          const free = concurrency - inFlight
          const claimed = await store.claim({
            limit: free,
            leaseMs: options.leaseMs,
            allowances: flow.allowances(concurrency),
            defaultAllowance: flow.newcomerAllowance(concurrency),
            maxPerHook: options.maxPerHook,
            after: walkedTo,
          })
          walkedTo = claimed.walkedTo
          for (const delivery of claimed.deliveries) void sendOne(delivery)
          // Claim again while it got something (the walk goes on from where it ended, to the
          // subscriptions it did not reach) or stopped short of visiting every subscription; a
          // long run of subscriptions with no room ends the round, and the next wake or poll
          // walks on from there.
          emptyWalks = claimed.deliveries.length > 0 ? 0 : emptyWalks + 1
          if (claimed.deliveries.length === 0 && (!claimed.more || emptyWalks >= MAX_EMPTY_WALKS)) break
        }
      } while (wokenWhileClaiming && !stopped && inFlight < concurrency)
    } catch (error) {
      options.onError('claiming deliveries failed', error)
    } finally {
      claiming = false
      settleIfIdle()
    }
  }

  const sendOne = async (delivery: ClaimedDelivery) => {
    inFlight++
    options.onInFlight?.(inFlight)
    flow.started(delivery.hookId)
    const startedAt = performance.now()
    const result = await options.send(delivery)
    flow.answered(delivery.hookId, startedAt, result)
    const attempt = { deliveryId: delivery.id, result, decision: decideAfterAttempt(result, delivery.attempts + 1, options.schedule) }
    options.onAttempt?.(delivery, attempt)
    finished.push(attempt)
    inFlight--
    options.onInFlight?.(inFlight)
    flush()
  }

  const flush = () => {
    if (flushing) return
    flushing = (async () => {
      while (finished.length > 0) {
        const batch = finished.splice(0)
        try {
          await store.record(batch)
        } catch (error) {
          // The leases run out and these deliveries are sent again: at-least-once holds, the log misses these attempts.
          options.onError(`recording ${batch.length} delivery attempts failed`, error)
        }
      }
      flushing = null
      if (!stopped) void claimWhileSlotsFree()
      settleIfIdle()
    })()
  }

  const settleIfIdle = () => {
    if (idle && inFlight === 0 && !flushing && !claiming && finished.length === 0) idle()
  }

  const timer = setInterval(() => void claimWhileSlotsFree(), options.pollMs)
  void claimWhileSlotsFree()

  return {
    wake: () => {
      if (!stopped) void claimWhileSlotsFree()
    },
    stop() {
      stopped = true
      clearInterval(timer)
      return new Promise<void>((resolve) => {
        idle = resolve
        settleIfIdle()
      })
    },
    stats: () => ({ inFlight, unrecorded: finished.length }),
    flowOf: (hookId) => flow.state(hookId),
  }
}
