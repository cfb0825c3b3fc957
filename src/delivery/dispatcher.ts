import { createFlowControl, type FlowSettings } from './flow-control.ts'
import { createOriginWindows } from './origin-windows.ts'
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

// Subscriptions named by wakes between two claims; the rest wait for the walk. Half of what a walk may read
// (SCAN_MAX in src/delivery/store.ts), so that a burst of narrow settlements does not make one claim long.
const MAX_WOKEN = 64

// Claims in a row that leased nothing though they found as many due subscriptions as they may look at: those had no room, and went to the back of the line.
const MAX_EMPTY_CLAIMS = 4

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
  /** A claim took this long, in milliseconds (metrics). */
  onClaim?(durationMs: number): void
}

export interface Dispatcher {
  /**
   * Something was committed: claim now. Calls made while a claim runs fold into one more claim.
   * `hookIds`: the subscriptions it made due, which a claim of their own looks up by key: the next
   * claim, or the one after it when the last was such a claim and a walk is owed.
   */
  wake(hookIds?: readonly string[]): void
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
 * subscription's slot in the database, so every flush is followed by another claim. A wake that
 * names subscriptions (a narrow settlement's) gets a claim of only those first, looked up by key.
 *
 * Isolation (docs/webhooks.md#how-fast-we-send-concurrency-and-fairness). The claim is told three
 * bounds, so that no one can take every slot and leave a healthy subscription waiting for them:
 * - each subscription no more in flight than its adaptive window and its fair share of the
 *   slots (src/delivery/flow-control.ts);
 * - each account no more than its fair share of the slots, by the same rule among the accounts
 *   with attempts in flight: one account's thousand subscriptions share what one other
 *   account's single subscription may also use;
 * - suspect subscriptions (the last attempt failed, or the circuit is open:
 *   src/delivery/circuit.ts) no more than half the slots together, since their attempts are the
 *   ones that hold a slot until the timeout;
 * - each origin that has not answered lately a few attempts in flight, all its subscriptions
 *   together (src/delivery/origin-windows.ts): a host that never answers holds a slot each until
 *   the timeout, before any of its subscriptions is a suspect.
 */
export function createDispatcher(options: DispatcherOptions): Dispatcher {
  const { store, concurrency } = options
  const flow = createFlowControl(options.flow)
  const origins = createOriginWindows()
  let inFlight = 0
  let suspectsInFlight = 0
  const accountsInFlight = new Map<string, number>()
  let claiming = false
  let wokenWhileClaiming = false
  // Subscriptions made due since the last claim began, named by wakes (at most MAX_WOKEN).
  let wokenHooks = new Set<string>()
  let lastWokenOnly = false
  let stopped = false
  const finished: RecordedAttempt[] = []
  let recording: RecordedAttempt[] = []
  let flushing: Promise<void> | null = null
  let idle: (() => void) | null = null

  // A walk of the queue is owed when something besides the named subscriptions may be due: at the
  // start, at each poll, after each record (slots freed), on a wake that named none or more than
  // MAX_WOKEN, and while a walk found more than it could take. A wake that named subscriptions
  // owes only their claim: before, each cost a walk as well, which found nothing (a third of a
  // storm's claims: docs/performance.md, issue 37, thirteenth pass).
  let walkOwed = true

  const claimWhileSlotsFree = async (walk: boolean) => {
    if (walk) walkOwed = true
    if (claiming) {
      wokenWhileClaiming = true
      return
    }
    claiming = true
    try {
      do {
        wokenWhileClaiming = false
        let emptyClaims = 0
        while (!stopped && inFlight < concurrency) {
          const startedAt = performance.now()
          const limit = concurrency - inFlight
          // The subscriptions wakes named go first, in a claim of their own: one that walked the queue as well
          // took as long as leasing another account's 128 (docs/performance.md, issue 37, thirteenth pass).
          // Never twice in a row while a walk is owed, so that wakes coming faster than claims do not keep the
          // walk from the rest.
          const wokenOnly = wokenHooks.size > 0 && !(lastWokenOnly && walkOwed)
          if (!wokenOnly && !walkOwed) break
          lastWokenOnly = wokenOnly
          if (!wokenOnly) walkOwed = false
          const claimed = await store.claim(claimOptions(limit, wokenOnly))
          options.onClaim?.(performance.now() - startedAt)
          for (const delivery of claimed.deliveries) void sendOne(delivery)
          if (wokenOnly) continue
          // Claim again while a claim may have left work behind: it took as many as it was asked,
          // or it looked at as many due subscriptions as it may (those with no room went to the
          // back of the line: the next ones may have some; a few empty claims of that kind at
          // most). One that took less and saw every due subscription took all it could: another
          // now would find nothing (each claim is planned afresh on PGlite, ~6 ms of its one
          // thread: docs/performance.md, issue 37). New work wakes the dispatcher; slots that free
          // up bring a claim after their record.
          emptyClaims = claimed.deliveries.length > 0 ? 0 : emptyClaims + 1
          if (claimed.deliveries.length < limit && (!claimed.more || emptyClaims >= MAX_EMPTY_CLAIMS)) break
          walkOwed = true
        }
      } while (wokenWhileClaiming && !stopped && inFlight < concurrency)
    } catch (error) {
      options.onError('claiming deliveries failed', error)
    } finally {
      claiming = false
      settleIfIdle()
    }
  }

  const claimOptions = (free: number, wokenOnly: boolean): ClaimOptions => {
    // Accounts' shares come from flow control, which splits the slots by account first: one rule for both bounds.
    const accountAllowances: Record<string, number> = {}
    for (const [accountId, count] of accountsInFlight) accountAllowances[accountId] = Math.max(0, flow.accountShare(accountId, concurrency) - count)
    const told = flow.claimAllowances(concurrency)
    const toldOrigins = origins.claimAllowances(concurrency)
    const woken = [...wokenHooks]
    wokenHooks = new Set()
    return {
      limit: free,
      leaseMs: options.leaseMs,
      allowances: told.hooks,
      accountNewcomerAllowances: told.accounts,
      defaultAllowance: told.newcomer,
      accountAllowances,
      defaultAccountAllowance: flow.accountShare(undefined, concurrency),
      suspectAllowance: Math.max(0, Math.floor(concurrency / 2) - suspectsInFlight),
      originAllowances: toldOrigins.origins,
      defaultOriginAllowance: toldOrigins.newcomer,
      maxPerHook: options.maxPerHook,
      // A slot is free once its attempt ends, not once it is recorded: a subscription at its maximum would
      // otherwise wait for every record too (docs/performance.md, issue 37).
      endedUnrecorded: [...recording, ...finished].map((attempt) => attempt.deliveryId),
      woken,
      walk: !wokenOnly,
    }
  }

  const sendOne = async (delivery: ClaimedDelivery) => {
    inFlight++
    if (delivery.suspect) suspectsInFlight++
    accountsInFlight.set(delivery.accountId, (accountsInFlight.get(delivery.accountId) ?? 0) + 1)
    options.onInFlight?.(inFlight)
    flow.started(delivery.hookId, delivery.accountId)
    const originStartedAt = origins.started(delivery.origin)
    const startedAt = performance.now()
    const result = await options.send(delivery)
    flow.answered(delivery.hookId, startedAt, result)
    origins.ended(delivery.origin, originStartedAt, result)
    const attempt = { deliveryId: delivery.id, hookId: delivery.hookId, accountId: delivery.accountId, result, decision: decideAfterAttempt(result, delivery.attempts + 1, options.schedule, Math.random, delivery) }
    options.onAttempt?.(delivery, attempt)
    finished.push(attempt)
    inFlight--
    if (delivery.suspect) suspectsInFlight--
    const left = accountsInFlight.get(delivery.accountId)! - 1
    if (left === 0) accountsInFlight.delete(delivery.accountId)
    else accountsInFlight.set(delivery.accountId, left)
    options.onInFlight?.(inFlight)
    flush()
  }

  const flush = () => {
    if (flushing) return
    flushing = (async () => {
      while (finished.length > 0) {
        const batch = finished.splice(0)
        recording = batch
        try {
          await store.record(batch)
        } catch (error) {
          // The leases run out and these deliveries are sent again: at-least-once holds, the log misses these attempts.
          options.onError(`recording ${batch.length} delivery attempts failed`, error)
        }
        recording = []
      }
      flushing = null
      if (!stopped) void claimWhileSlotsFree(true)
      settleIfIdle()
    })()
  }

  const settleIfIdle = () => {
    if (idle && inFlight === 0 && !flushing && !claiming && finished.length === 0) idle()
  }

  const timer = setInterval(() => void claimWhileSlotsFree(true), options.pollMs)
  void claimWhileSlotsFree(true)

  return {
    wake: (hookIds) => {
      if (stopped) return
      let walk = !hookIds?.length
      for (const hookId of hookIds ?? []) {
        if (wokenHooks.size < MAX_WOKEN || wokenHooks.has(hookId)) wokenHooks.add(hookId)
        else walk = true
      }
      void claimWhileSlotsFree(walk)
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
