import { deliveriesBehind } from '../lib/http/errors.ts'

/**
 * Holds an account's new messages while its webhook deliveries are behind (src/delivery/backlog.ts
 * says which accounts are), so that the service accepts them no faster than it reports them and
 * no subscription's backlog grows without bound while its receiver answers in milliseconds
 * (docs/webhooks.md#when-deliveries-fall-behind). A held request goes on as soon as its account
 * is no longer behind; after `holdMs` it is refused with a 429 and Retry-After, the message not
 * accepted. Other accounts are never held for this one: the worker shares its slots fairly, so
 * a neighbour's backlog does not make this account's deliveries wait.
 */
export interface Admission {
  /** Resolves when a message of this account may be accepted; rejects with a 429 problem after the hold. */
  admit(accountId: string): Promise<void>
  /** The accounts behind now (all others are not). */
  setBehind(accountIds: readonly string[]): void
}

export const HOLD_RETRY_AFTER_SECONDS = 1

export function createAdmission(options: { holdMs: number; onHeld?(waitedMs: number, admitted: boolean): void }): Admission {
  let behind = new Set<string>()
  // Per account, the held requests: each is let go when its account leaves `behind`.
  const held = new Map<string, Set<() => void>>()

  return {
    admit(accountId) {
      if (!behind.has(accountId)) return Promise.resolve()
      const startedAt = performance.now()
      return new Promise<void>((resolve, reject) => {
        let waiters = held.get(accountId)
        if (!waiters) held.set(accountId, (waiters = new Set()))
        const end = (accepted: boolean) => {
          clearTimeout(timer)
          waiters!.delete(admitted)
          if (waiters!.size === 0 && held.get(accountId) === waiters) held.delete(accountId)
          options.onHeld?.(performance.now() - startedAt, accepted)
        }
        const admitted = () => {
          end(true)
          resolve()
        }
        const timer = setTimeout(() => {
          end(false)
          reject(deliveriesBehind(HOLD_RETRY_AFTER_SECONDS))
        }, options.holdMs)
        waiters.add(admitted)
      })
    },

    setBehind(accountIds) {
      behind = new Set(accountIds)
      for (const [accountId, waiters] of held) if (!behind.has(accountId)) for (const admitted of [...waiters]) admitted()
    },
  }
}
