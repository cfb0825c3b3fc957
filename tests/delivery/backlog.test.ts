import { describe, expect, test } from 'bun:test'
import { createBacklogTracker } from '../../src/delivery/backlog.ts'

const settings = { limitMs: 250, quickAnswerMs: 250, forgetAfterMs: 1000 }
const quick = { ok: true, durationMs: 5 }

function tracker(limitMs = settings.limitMs) {
  let now = 10_000
  const backlog = createBacklogTracker({ ...settings, limitMs }, () => now)
  return { backlog, advance: (ms: number) => (now += ms) }
}

describe('which accounts are behind', () => {
  test("an account is behind once a quick subscription's delivery has been due longer than the limit, and no longer once a claim leaves none waiting", () => {
    const { backlog, advance } = tracker()
    backlog.answered('hook_a', quick)
    backlog.report([{ hookId: 'hook_a', accountId: 'acc_a', waitedMs: 200 }])
    expect(backlog.behindAccounts()).toEqual([])
    // Not seen again, the delivery keeps waiting: 60 ms later it has waited 260.
    advance(60)
    expect(backlog.behindAccounts()).toEqual(['acc_a'])
    backlog.report([{ hookId: 'hook_a', accountId: 'acc_a', waitedMs: 0 }])
    expect(backlog.behindAccounts()).toEqual([])
  })

  test('a slow or failing receiver, or one never heard from, never makes its account behind', () => {
    const { backlog } = tracker()
    backlog.answered('hook_slow', { ok: true, durationMs: 2000 })
    backlog.answered('hook_failing', { ok: false, durationMs: 3 })
    backlog.report([
      { hookId: 'hook_slow', accountId: 'acc_a', waitedMs: 5000 },
      { hookId: 'hook_failing', accountId: 'acc_a', waitedMs: 5000 },
      { hookId: 'hook_unknown', accountId: 'acc_a', waitedMs: 5000 },
    ])
    expect(backlog.behindAccounts()).toEqual([])
    // The slow one speeds up: its backlog is now the service's.
    backlog.answered('hook_slow', quick)
    expect(backlog.behindAccounts()).toEqual(['acc_a'])
  })

  test('a quick answer heard while nothing waited still counts when a later claim finds a backlog', () => {
    const { backlog, advance } = tracker()
    backlog.answered('hook_a', quick)
    backlog.report([{ hookId: 'hook_a', accountId: 'acc_a', waitedMs: 0 }])
    expect(backlog.behindAccounts()).toEqual([])
    advance(10)
    backlog.report([{ hookId: 'hook_a', accountId: 'acc_a', waitedMs: 300 }])
    expect(backlog.behindAccounts()).toEqual(['acc_a'])
  })

  test('a report no claim repeats is forgotten (another process may have drained it); each account is named once', () => {
    const { backlog, advance } = tracker()
    for (const hookId of ['hook_a', 'hook_b', 'hook_c']) backlog.answered(hookId, quick)
    backlog.report([
      { hookId: 'hook_a', accountId: 'acc_a', waitedMs: 900 },
      { hookId: 'hook_b', accountId: 'acc_a', waitedMs: 900 },
      { hookId: 'hook_c', accountId: 'acc_b', waitedMs: 900 },
    ])
    expect(backlog.behindAccounts()).toEqual(['acc_a', 'acc_b'])
    advance(1001)
    expect(backlog.behindAccounts()).toEqual([])
  })

  test('a limit of 0 turns it off', () => {
    const { backlog } = tracker(0)
    backlog.answered('hook_a', quick)
    backlog.report([{ hookId: 'hook_a', accountId: 'acc_a', waitedMs: 60_000 }])
    expect(backlog.behindAccounts()).toEqual([])
  })
})
