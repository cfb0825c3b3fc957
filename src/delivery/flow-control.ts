import type { AttemptResult } from './send.ts'
import { isBreakerFailure } from './circuit.ts'

/**
 * How many deliveries of one subscription this process keeps in flight: a window that follows
 * the receiver, the way TCP's congestion window follows the network (AIMD).
 *
 * - Each answer that is good (2xx) and not slow grows the window: by one per answer while
 *   below the threshold (slow start: it doubles every round trip), then by one per window's
 *   worth of answers (congestion avoidance). Only a window that is used grows (as RFC 7661
 *   has it for TCP): while the most attempts in flight since the subscription was last idle
 *   are fewer than half the window, answers leave it alone, so a quiet hour cannot build a
 *   window that a sudden burst would then fill at once.
 * - A timeout, a network error, a 429, or a 5xx halves it (never below 1) and sets the
 *   threshold there; a good answer that is slow for this receiver (more than twice its
 *   baseline plus 100 ms: its queue is growing) takes a quarter off, but not below the initial
 *   window (slowness alone is not failure). Either happens at most once a round: answers to
 *   attempts sent before the last decrease do not decrease it again.
 * - Any other answer (a 4xx: the receiver is quick to refuse) leaves it as it is.
 *
 * The baseline is the fastest good answer of the last 30 s or so (two 15 s buckets), so a
 * receiver that is slow for good settles at its new speed instead of shrinking forever.
 * The window never exceeds `maxWindow` (WEBHOOK_MAX_IN_FLIGHT_PER_SUBSCRIPTION); the
 * subscription's share of the worker's slots (its account's `fairShare`, split among the
 * account's busy subscriptions) and the database's cross-process bound (src/delivery/store.ts)
 * come on top.
 */
export interface FlowSettings {
  initialWindow: number
  maxWindow: number
}

export type AnswerSignal = 'good' | 'slow' | 'congested' | 'neutral'

const SLOW_FACTOR = 2
const SLOW_MARGIN_MS = 100
const BASELINE_BUCKET_MS = 15_000
const SLOW_DECREASE = 0.75
const CONGESTION_DECREASE = 0.5
// A subscription with nothing in flight for this long is forgotten: it starts again from the initial window.
const FORGET_AFTER_MS = 10 * 60_000
// The claim is told the allowances of subscriptions busy now or within this long: any other one
// gets the newcomer's allowance for one claim, and its own window again once it has attempts in
// flight. That keeps what each claim carries to the number of recently busy subscriptions, not
// every one this process has seen (ten thousand of them cost a claim 160 KB and 0.3 s of
// JavaScript: docs/performance.md).
const TOLD_FOR_MS = 5_000

interface Flow {
  accountId: string
  window: number
  threshold: number
  inFlight: number
  /** The most attempts in flight since inFlight was last 0. */
  peakInFlight: number
  /** Fastest good answer in the current and the previous bucket. */
  baselineMs: number
  previousBaselineMs: number
  bucketStartedAt: number
  lastDecreaseAt: number
  lastActiveAt: number
}

/** What an answer says about the receiver's capacity. */
export function classifyAnswer(result: Pick<AttemptResult, 'ok' | 'status' | 'durationMs'> & Partial<Pick<AttemptResult, 'failure'>>, baselineMs: number): AnswerSignal {
  if (isBreakerFailure(result)) return 'congested'
  if (!result.ok) return 'neutral'
  if (Number.isFinite(baselineMs) && result.durationMs > SLOW_FACTOR * baselineMs + SLOW_MARGIN_MS) return 'slow'
  return 'good'
}

export function createFlowControl(settings: FlowSettings, now: () => number = () => performance.now()) {
  const flows = new Map<string, Flow>()
  // Subscriptions with attempts in flight in this process, counted per account, kept as attempts start and end.
  const busyByAccount = new Map<string, number>()
  let forgottenAt = now()

  const flowOf = (hookId: string, accountId: string): Flow => {
    let flow = flows.get(hookId)
    if (!flow) {
      const at = now()
      flow = {
        accountId,
        window: settings.initialWindow,
        threshold: settings.maxWindow,
        inFlight: 0,
        peakInFlight: 0,
        baselineMs: Infinity,
        previousBaselineMs: Infinity,
        bucketStartedAt: at,
        lastDecreaseAt: -Infinity,
        lastActiveAt: at,
      }
      flows.set(hookId, flow)
    }
    return flow
  }

  const baselineOf = (flow: Flow) => Math.min(flow.baselineMs, flow.previousBaselineMs)

  /** The account's fair share of the slots among the accounts with attempts in flight. */
  const accountShare = (accountId: string | undefined, concurrency: number) =>
    fairShare(concurrency, busyByAccount.size - (accountId !== undefined && busyByAccount.has(accountId) ? 1 : 0))

  /**
   * A subscription's share of its account's share, by the rule `fairShare` applies to the slots:
   * with n other busy subscriptions in the account, 2 / (n + 2) of it (alone: all of it; with one
   * other: two thirds), so one part is kept free for a subscription of the account that starts
   * sending, and the account's own bound holds the sum. With one account busy this is
   * `fairShare` of the slots itself. Shares are split by account first, so a thousand busy
   * subscriptions of one account leave another account's single subscription its account's
   * whole share (the storm in docs/performance.md: split over every busy subscription, it got
   * one slot).
   */
  const subscriptionShare = (accountId: string | undefined, concurrency: number, othersBusy: number) =>
    Math.max(1, Math.floor((2 * accountShare(accountId, concurrency)) / (othersBusy + 2)))

  const busyIn = (accountId: string | undefined) => (accountId === undefined ? 0 : (busyByAccount.get(accountId) ?? 0))

  const newcomerAllowance = (concurrency: number, accountId?: string) => Math.min(settings.initialWindow, subscriptionShare(accountId, concurrency, busyIn(accountId)))

  const allowanceOf = (flow: Flow, concurrency: number) => {
    const share = subscriptionShare(flow.accountId, concurrency, busyIn(flow.accountId) - (flow.inFlight > 0 ? 1 : 0))
    return Math.max(0, Math.min(Math.floor(flow.window), share) - flow.inFlight)
  }

  return {
    /** An attempt of this subscription (of this account) started. */
    started(hookId: string, accountId: string) {
      const flow = flowOf(hookId, accountId)
      if (flow.inFlight === 0) busyByAccount.set(accountId, busyIn(accountId) + 1)
      flow.inFlight++
      flow.peakInFlight = Math.max(flow.peakInFlight, flow.inFlight)
      flow.lastActiveAt = now()
    },

    /** The attempt started at `startedAt` (a `now()` reading) answered. */
    answered(hookId: string, startedAt: number, result: Pick<AttemptResult, 'ok' | 'status' | 'durationMs'> & Partial<Pick<AttemptResult, 'failure'>>): AnswerSignal {
      const flow = flows.get(hookId)
      if (!flow) return classifyAnswer(result, Infinity)
      const at = now()
      const used = flow.peakInFlight >= flow.window / 2
      if (flow.inFlight === 1) {
        const left = busyIn(flow.accountId) - 1
        if (left > 0) busyByAccount.set(flow.accountId, left)
        else busyByAccount.delete(flow.accountId)
      }
      flow.inFlight = Math.max(0, flow.inFlight - 1)
      if (flow.inFlight === 0) flow.peakInFlight = 0
      flow.lastActiveAt = at
      if (at - flow.bucketStartedAt >= BASELINE_BUCKET_MS) {
        flow.previousBaselineMs = flow.baselineMs
        flow.baselineMs = Infinity
        flow.bucketStartedAt = at
      }
      const signal = classifyAnswer(result, baselineOf(flow))
      if (result.ok) flow.baselineMs = Math.min(flow.baselineMs, result.durationMs)
      const sentAfterLastDecrease = startedAt >= flow.lastDecreaseAt
      if (signal === 'good' && used) {
        const step = flow.window < flow.threshold ? 1 : 1 / flow.window
        flow.window = Math.min(settings.maxWindow, flow.window + step)
      } else if ((signal === 'congested' || signal === 'slow') && sentAfterLastDecrease) {
        flow.window =
          signal === 'congested'
            ? Math.max(1, flow.window * CONGESTION_DECREASE)
            : Math.max(Math.min(flow.window, settings.initialWindow), flow.window * SLOW_DECREASE)
        flow.threshold = Math.max(1, flow.window)
        flow.lastDecreaseAt = at
      }
      return signal
    },

    /**
     * Further attempts this subscription of this account may start now: its window, capped by its
     * share of the worker's `concurrency` slots, less what it has in flight. A subscription this
     * process keeps no window for gets the initial window within its share (`newcomerAllowance`).
     */
    allowance(hookId: string, accountId: string, concurrency: number): number {
      const flow = flows.get(hookId)
      return flow ? allowanceOf(flow, concurrency) : newcomerAllowance(concurrency, accountId)
    },

    newcomerAllowance,

    /** An account's fair share of the `concurrency` slots among the accounts with attempts in flight (undefined: one with none). */
    accountShare,

    /**
     * The claim's input: `newcomer`, what a subscription of an account with nothing in flight may
     * start; `accounts`, what any other subscription of an account with attempts in flight may
     * start, where that differs; `hooks`, the allowance of each subscription busy now or lately
     * where it differs from its account's. Linear in the subscriptions this process keeps a
     * window for.
     */
    claimAllowances(concurrency: number): { hooks: Record<string, number>; accounts: Record<string, number>; newcomer: number } {
      const at = now()
      if (at - forgottenAt >= TOLD_FOR_MS) {
        forgottenAt = at
        for (const [hookId, flow] of flows) if (flow.inFlight === 0 && at - flow.lastActiveAt > FORGET_AFTER_MS) flows.delete(hookId)
      }
      const newcomer = newcomerAllowance(concurrency)
      const accounts: Record<string, number> = {}
      for (const accountId of busyByAccount.keys()) {
        const allowance = newcomerAllowance(concurrency, accountId)
        if (allowance !== newcomer) accounts[accountId] = allowance
      }
      const hooks: Record<string, number> = {}
      for (const [hookId, flow] of flows) {
        if (flow.inFlight === 0 && at - flow.lastActiveAt > TOLD_FOR_MS) continue
        const allowance = allowanceOf(flow, concurrency)
        if (allowance !== (accounts[flow.accountId] ?? newcomer)) hooks[hookId] = allowance
      }
      return { hooks, accounts, newcomer }
    },

    /** For tests, logs and metrics. */
    state(hookId: string): { window: number; inFlight: number } | undefined {
      const flow = flows.get(hookId)
      return flow && { window: flow.window, inFlight: flow.inFlight }
    },
  }
}

export type FlowControl = ReturnType<typeof createFlowControl>

/**
 * A subscription's fair share of the worker's `concurrency` slots while `others` other
 * subscriptions have attempts in flight: an equal part, with one part always kept free, so a
 * subscription that starts sending finds free slots at once instead of waiting for a slow
 * one's attempts to end. Alone, a subscription may use half the slots.
 */
export function fairShare(concurrency: number, others: number): number {
  return Math.max(1, Math.floor(concurrency / (others + 2)))
}
