import type { HookBacklog } from './store.ts'

/**
 * Which accounts' webhook deliveries are behind because of us, for the API's admission of new
 * messages (src/messages/admission.ts; docs/webhooks.md#when-deliveries-fall-behind).
 *
 * Each claim reports, for the subscriptions it may have left deliveries of, how long the oldest
 * it found had been due: the wait at the head of the line (src/delivery/store.ts); 0 for those
 * it took everything of. An account is behind while one of its subscriptions whose receiver
 * answers quickly (its last attempt succeeded within `quickAnswerMs`) has a delivery that has
 * waited longer than `limitMs` and may still be waiting: such a subscription's
 * backlog grows only because the service accepts messages faster than its worker sends them.
 * A subscription whose receiver is slow or failing, or that is held back by its own rate limit,
 * Retry-After or circuit, is never counted: its backlog is its receiver's pace, and holding the
 * account's messages back would not shorten it.
 *
 * A report stands until the next claim that reports the subscription, or `forgetAfterMs`:
 * another process's worker may have drained it, and a backlog that is real is reported again by
 * the next claim.
 */
export interface BacklogSettings {
  /** 0: no account is ever behind. */
  limitMs: number
  quickAnswerMs: number
  forgetAfterMs: number
}

export interface HookAnswer {
  ok: boolean
  durationMs: number
}

export function createBacklogTracker(settings: BacklogSettings, now: () => number = () => performance.now()) {
  // Per subscription: since when (a `now()` reading) its oldest waiting delivery has been due, and when that was reported.
  const waiting = new Map<string, { accountId: string; dueSince: number; reportedAt: number }>()
  const quick = new Map<string, boolean>()

  return {
    /** What one claim saw. */
    report(backlog: readonly HookBacklog[]) {
      const at = now()
      for (const { hookId, accountId, waitedMs } of backlog) {
        if (waitedMs > 0) waiting.set(hookId, { accountId, dueSince: at - waitedMs, reportedAt: at })
        else waiting.delete(hookId)
      }
    },

    /** A subscription's attempt ended: whether its receiver answers quickly follows its last answer. */
    answered(hookId: string, answer: HookAnswer) {
      quick.set(hookId, answer.ok && answer.durationMs <= settings.quickAnswerMs)
    },

    /** The accounts behind now, sorted. */
    behindAccounts(): string[] {
      if (settings.limitMs <= 0) return []
      const at = now()
      const accounts = new Set<string>()
      for (const [hookId, entry] of waiting) {
        if (at - entry.reportedAt > settings.forgetAfterMs) {
          waiting.delete(hookId)
          quick.delete(hookId)
        } else if (quick.get(hookId) === true && at - entry.dueSince > settings.limitMs) accounts.add(entry.accountId)
      }
      for (const hookId of quick.keys()) if (!waiting.has(hookId)) quick.delete(hookId)
      return [...accounts].sort()
    },
  }
}

export type BacklogTracker = ReturnType<typeof createBacklogTracker>
