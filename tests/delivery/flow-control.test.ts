import { describe, expect, test } from 'bun:test'
import { classifyAnswer, createFlowControl, fairShare } from '../../src/delivery/flow-control.ts'

const good = { ok: true, status: 200, durationMs: 5 }
const clock = () => {
  let t = 0
  return { now: () => t, advance: (ms: number) => (t += ms) }
}

/** Starts `n` attempts of a hook (h of account a) at the current time and answers them all with `result`. */
function round(flow: ReturnType<typeof createFlowControl>, time: ReturnType<typeof clock>, n: number, result: { ok: boolean; status: number | null; durationMs: number }, hookId = 'h', accountId = 'a') {
  const startedAt = time.now()
  for (let i = 0; i < n; i++) flow.started(hookId, accountId)
  time.advance(result.durationMs)
  for (let i = 0; i < n; i++) flow.answered(hookId, startedAt, result)
}

describe('classifyAnswer', () => {
  test('timeouts, network errors, 429 and 5xx are congestion; other refusals are neutral; a good answer is slow past twice the baseline plus 100 ms', () => {
    expect(classifyAnswer({ ok: false, status: null, durationMs: 1000 }, 5)).toBe('congested')
    expect(classifyAnswer({ ok: false, status: 429, durationMs: 1 }, 5)).toBe('congested')
    expect(classifyAnswer({ ok: false, status: 503, durationMs: 1 }, 5)).toBe('congested')
    expect(classifyAnswer({ ok: false, status: 404, durationMs: 1 }, 5)).toBe('neutral')
    expect(classifyAnswer({ ok: true, status: 200, durationMs: 110 }, 5)).toBe('good')
    expect(classifyAnswer({ ok: true, status: 200, durationMs: 111 }, 5)).toBe('slow')
    expect(classifyAnswer({ ok: true, status: 200, durationMs: 5000 }, Infinity)).toBe('good')
    // A broker's confirmation has no status code: an answer, not a failure.
    expect(classifyAnswer({ ok: true, status: null, durationMs: 1 }, 5)).toBe('good')
  })
})

describe('the window', () => {
  test('grows while answers are good and the window is used: doubling per round, never past the maximum', () => {
    const time = clock()
    const flow = createFlowControl({ initialWindow: 4, maxWindow: 20 }, time.now)
    expect(flow.allowance('h', 'a', 100)).toBe(4)
    round(flow, time, 4, good)
    expect(flow.state('h')!.window).toBe(8)
    round(flow, time, 8, good)
    expect(flow.state('h')!.window).toBe(16)
    round(flow, time, 16, good)
    expect(flow.state('h')!.window).toBe(20)
  })

  test('an unused window does not grow: one attempt at a time keeps it where it is', () => {
    const time = clock()
    const flow = createFlowControl({ initialWindow: 8, maxWindow: 64 }, time.now)
    for (let i = 0; i < 100; i++) round(flow, time, 1, good)
    expect(flow.state('h')!.window).toBe(8)
  })

  test('congestion halves it, once per round, down to 1; then it grows by one per window of answers', () => {
    const time = clock()
    const flow = createFlowControl({ initialWindow: 16, maxWindow: 64 }, time.now)
    round(flow, time, 16, { ok: false, status: 503, durationMs: 5 })
    expect(flow.state('h')!.window).toBe(8)
    round(flow, time, 8, { ok: false, status: null, durationMs: 1000 })
    round(flow, time, 4, { ok: false, status: 429, durationMs: 5 })
    round(flow, time, 2, { ok: false, status: 500, durationMs: 5 })
    round(flow, time, 1, { ok: false, status: 500, durationMs: 5 })
    expect(flow.state('h')!.window).toBe(1)
    expect(flow.allowance('h', 'a', 100)).toBe(1)
    // Below the threshold it set, growth is additive now: +1 per window's worth.
    round(flow, time, 1, good)
    expect(flow.state('h')!.window).toBe(2)
    round(flow, time, 2, good)
    expect(flow.state('h')!.window).toBeGreaterThan(2.5)
    expect(flow.state('h')!.window).toBeLessThanOrEqual(3)
  })

  test('slow answers take a quarter off per round, not below the initial window; the baseline follows a receiver that stays slow', () => {
    const time = clock()
    const flow = createFlowControl({ initialWindow: 4, maxWindow: 64 }, time.now)
    round(flow, time, 4, good)
    round(flow, time, 8, good)
    round(flow, time, 16, good)
    expect(flow.state('h')!.window).toBe(32)
    round(flow, time, 32, { ok: true, status: 200, durationMs: 400 })
    expect(flow.state('h')!.window).toBe(24)
    for (let i = 0; i < 10; i++) round(flow, time, 4, { ok: true, status: 200, durationMs: 400 })
    expect(flow.state('h')!.window).toBe(4)
    // 30 s later the fast answers have aged out of the baseline: 400 ms is this receiver's normal now.
    time.advance(31_000)
    round(flow, time, 4, { ok: true, status: 200, durationMs: 400 })
    time.advance(16_000)
    round(flow, time, 4, { ok: true, status: 200, durationMs: 400 })
    expect(flow.state('h')!.window).toBeGreaterThan(4)
  })

  test('answers to attempts sent before a decrease do not decrease it again', () => {
    const time = clock()
    const flow = createFlowControl({ initialWindow: 16, maxWindow: 64 }, time.now)
    const startedAt = time.now()
    for (let i = 0; i < 16; i++) flow.started('h', 'a')
    time.advance(10)
    for (let i = 0; i < 16; i++) flow.answered('h', startedAt, { ok: false, status: 503, durationMs: 10 })
    expect(flow.state('h')!.window).toBe(8)
  })

  test('the allowance is the window capped by the fair share of the slots, less what is in flight; subscriptions are forgotten after 10 idle minutes', () => {
    const time = clock()
    const flow = createFlowControl({ initialWindow: 4, maxWindow: 64 }, time.now)
    round(flow, time, 4, good)
    flow.started('h', 'a')
    flow.started('h', 'a')
    expect(flow.allowance('h', 'a', 100)).toBe(6)
    expect(flow.allowance('h', 'a', 10)).toBe(3)
    expect(flow.claimAllowances(100).hooks).toEqual({ h: 6 })
    // A subscription not seen yet, while h is busy: the initial window, within its share (a third).
    expect(flow.newcomerAllowance(100)).toBe(4)
    expect(flow.newcomerAllowance(6)).toBe(2)
    flow.answered('h', time.now(), good)
    flow.answered('h', time.now(), good)
    // Idle, its grown window is still told to the claim for 5 s; after that the claim gives it a
    // newcomer's allowance (what it carries stays small), while the window itself is kept.
    const grown = flow.allowance('h', 'a', 100)
    expect(grown).toBeGreaterThan(flow.newcomerAllowance(100))
    expect(flow.claimAllowances(100).hooks).toEqual({ h: grown })
    time.advance(6_000)
    expect(flow.claimAllowances(100).hooks).toEqual({})
    expect(flow.allowance('h', 'a', 100)).toBe(grown)
    time.advance(11 * 60_000)
    expect(flow.claimAllowances(100).hooks).toEqual({})
    expect(flow.allowance('h', 'a', 100)).toBe(4)
  })
})

describe('shares', () => {
  test("slots are shared by account first: a thousand busy subscriptions of one account leave another account's subscription a full account's share", () => {
    const time = clock()
    const flow = createFlowControl({ initialWindow: 4, maxWindow: 128 }, time.now)
    for (let i = 0; i < 1000; i++) flow.started(`broken${i}`, 'a')
    // Account a is busy; b has nothing in flight: b gets a third of 256 (a and a free part beside it).
    expect(flow.newcomerAllowance(256, 'b')).toBe(4)
    for (let i = 0; i < 7; i++) round(flow, time, 2 ** (i + 2), good, 'healthy', 'b')
    flow.started('healthy', 'b')
    // Its window has grown to the maximum; its share is b's: 256 / 3 (a, b and the free part).
    expect(flow.state('healthy')!.window).toBe(128)
    expect(flow.allowance('healthy', 'b', 256)).toBe(85 - 1)
    // Each of a's subscriptions gets one slot at least, and a's newcomers as much.
    expect(flow.allowance('broken0', 'a', 256)).toBe(0)
    expect(flow.newcomerAllowance(256, 'a')).toBe(1)
    const told = flow.claimAllowances(256)
    expect(told.accounts).toEqual({ a: 1 })
    expect(told.hooks.healthy).toBe(84)
    expect(told.newcomer).toBe(4)
  })

  test("within an account, a subscription's share of the account's share follows the same rule: 2 / (n + 2) with n others busy", () => {
    const time = clock()
    const flow = createFlowControl({ initialWindow: 64, maxWindow: 128 }, time.now)
    flow.started('one', 'a')
    flow.started('two', 'a')
    // a alone has half of 100; each of its two busy subscriptions two thirds of that, a newcomer half.
    expect(flow.allowance('one', 'a', 100)).toBe(33 - 1)
    expect(flow.newcomerAllowance(100, 'a')).toBe(25)
    flow.answered('two', time.now(), good)
    expect(flow.allowance('one', 'a', 100)).toBe(50 - 1)
  })
})

describe('fairShare', () => {
  test('an equal part of the slots with one part kept free for a subscription that starts sending', () => {
    expect(fairShare(256, 0)).toBe(128)
    expect(fairShare(256, 1)).toBe(85)
    expect(fairShare(256, 2)).toBe(64)
    expect(fairShare(4, 10)).toBe(1)
  })
})
