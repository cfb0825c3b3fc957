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
  // Per subscription (times are `now()` readings): from the last claim that reported it, since when its oldest
  // waiting delivery has been due (undefined: none waits); from its last answer, whether it was quick.
  const hooks = new Map<string, { accountId?: string; dueSince?: number; reportedAt: number; quick: boolean; answeredAt: number }>()
  const entry = (hookId: string) => {
    let found = hooks.get(hookId)
    if (!found) hooks.set(hookId, (found = { reportedAt: -Infinity, quick: false, answeredAt: -Infinity }))
    return found
  }

  return {
    /** What one claim saw. */
    report(backlog: readonly HookBacklog[]) {
      const at = now()
      for (const { hookId, accountId, waitedMs } of backlog) {
        const hook = entry(hookId)
        hook.accountId = accountId
        hook.dueSince = waitedMs > 0 ? at - waitedMs : undefined
        hook.reportedAt = at
      }
    },

    /** A subscription's attempt ended: whether its receiver answers quickly follows its last answer. */
    answered(hookId: string, answer: HookAnswer) {
      const hook = entry(hookId)
      hook.quick = answer.ok && answer.durationMs <= settings.quickAnswerMs
      hook.answeredAt = now()
    },

    /** The accounts behind now, sorted. */
    behindAccounts(): string[] {
      if (settings.limitMs <= 0) return []
      const at = now()
      const accounts = new Set<string>()
      for (const [hookId, hook] of hooks) {
        const reported = at - hook.reportedAt <= settings.forgetAfterMs
        if (!reported && at - hook.answeredAt > settings.forgetAfterMs) hooks.delete(hookId)
        else if (reported && hook.quick && hook.dueSince !== undefined && at - hook.dueSince > settings.limitMs) accounts.add(hook.accountId!)
      }
      return [...accounts].sort()
    },
  }
}

export type BacklogTracker = ReturnType<typeof createBacklogTracker>
