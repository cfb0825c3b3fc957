import { describe, expect, test } from 'bun:test'
import { UNANSWERED_ORIGIN_PACE_MS, UNANSWERED_ORIGIN_WINDOW, createOriginWindows, reachedReceiver } from '../../src/delivery/origin-windows.ts'

const noAnswer = (failure: 'timeout' | 'connection' | 'refused' | 'other') => ({ ok: false, status: null, failure })
const answer = (status: number) => ({ ok: status < 300, status, failure: status < 300 ? null : status < 500 ? ('http_4xx' as const) : ('http_5xx' as const) })

describe('origin windows', () => {
  test('an answer is a status code or a broker that spoke; a timeout or a failed connection is none', () => {
    for (const status of [200, 204, 301, 404, 410, 429, 500, 503]) expect(reachedReceiver(answer(status))).toBe(true)
    for (const failure of ['unroutable', 'nacked', 'denied'] as const) expect(reachedReceiver({ ok: false, status: null, failure })).toBe(true)
    expect(reachedReceiver({ ok: true, status: null, failure: null })).toBe(true)
    for (const failure of ['timeout', 'connection', 'refused', 'other'] as const) expect(reachedReceiver(noAnswer(failure))).toBe(false)
  })

  test('an origin not heard from may start its window less what it has in flight; a round with no answer halves the window, any answer lifts the bound for 30 s', () => {
    let clock = 0
    const origins = createOriginWindows(() => clock)
    const concurrency = 256
    const hangs = 'https://hangs.example'
    expect(origins.claimAllowances(concurrency)).toEqual({ origins: {}, newcomer: UNANSWERED_ORIGIN_WINDOW })
    const firstRound = [0, 1, 2].map(() => origins.started(hangs))
    expect(origins.claimAllowances(concurrency).origins).toEqual({ [hangs]: UNANSWERED_ORIGIN_WINDOW - 3 })
    // A timeout halves the window; the others of the same round time out too, and do not halve it again.
    clock += 15_000
    origins.ended(hangs, firstRound[0]!, noAnswer('timeout'))
    origins.ended(hangs, firstRound[1]!, noAnswer('timeout'))
    expect(origins.state(hangs)).toEqual({ inFlight: 1, window: UNANSWERED_ORIGIN_WINDOW / 2, answeredLately: false })
    expect(origins.claimAllowances(concurrency).origins).toEqual({ [hangs]: UNANSWERED_ORIGIN_WINDOW / 2 - 1 })
    // Rounds with no answer take it down to one attempt at a time, never none.
    for (let round = 0; round < 4; round++) {
      const startedAt = origins.started(hangs)
      clock += 1
      origins.ended(hangs, startedAt, noAnswer('refused'))
    }
    expect(origins.state(hangs)).toEqual({ inFlight: 1, window: 1, answeredLately: false })
    expect(origins.claimAllowances(concurrency).origins).toEqual({ [hangs]: 0 })
    // A 503 is an answer: the host is up, and is bounded only by the slots.
    origins.ended(hangs, firstRound[2]!, answer(503))
    expect(origins.claimAllowances(concurrency).origins).toEqual({ [hangs]: concurrency })
    expect(origins.state(hangs)).toEqual({ inFlight: 0, window: UNANSWERED_ORIGIN_WINDOW, answeredLately: true })
    // 30 s later with no answer since, the bound is back, from the start.
    const late = origins.started(hangs)
    clock += 30_001
    origins.ended(hangs, late, noAnswer('connection'))
    expect(origins.state(hangs)).toEqual({ inFlight: 0, window: UNANSWERED_ORIGIN_WINDOW / 2, answeredLately: false })
    expect(origins.claimAllowances(concurrency).origins).toEqual({ [hangs]: UNANSWERED_ORIGIN_WINDOW / 2 })
  })

  test('an origin not heard from starts no more than its window per second: a port that refuses at once is tried once a second, not in a loop', () => {
    let clock = 0
    const origins = createOriginWindows(() => clock)
    const refuses = 'https://refuses.example'
    const concurrency = 256
    const firstRound = Array.from({ length: UNANSWERED_ORIGIN_WINDOW }, () => origins.started(refuses))
    clock += 1
    for (const startedAt of firstRound) origins.ended(refuses, startedAt, noAnswer('refused'))
    // Nothing is in flight, but the window's attempts started within the second.
    expect(origins.state(refuses)).toEqual({ inFlight: 0, window: UNANSWERED_ORIGIN_WINDOW / 2, answeredLately: false })
    expect(origins.claimAllowances(concurrency).origins).toEqual({ [refuses]: 0 })
    clock = UNANSWERED_ORIGIN_PACE_MS - 1
    expect(origins.claimAllowances(concurrency).origins).toEqual({ [refuses]: 0 })
    clock = UNANSWERED_ORIGIN_PACE_MS
    expect(origins.claimAllowances(concurrency).origins).toEqual({ [refuses]: UNANSWERED_ORIGIN_WINDOW / 2 })
    // A claim every 10 ms for ten seconds, each starting what it is allowed, each refused at once.
    const startsPerSecond: number[] = []
    for (let second = 0; second < 10; second++) {
      let starts = 0
      for (let step = 0; step < 100; step++, clock += 9) {
        const allowed = origins.claimAllowances(concurrency).origins[refuses] ?? 0
        const round = Array.from({ length: allowed }, () => origins.started(refuses))
        starts += round.length
        clock += 1
        for (const startedAt of round) origins.ended(refuses, startedAt, noAnswer('refused'))
      }
      startsPerSecond.push(starts)
    }
    expect(startsPerSecond).toEqual([4, 2, 1, 1, 1, 1, 1, 1, 1, 1])
    // Its first answer lifts the bound.
    const answered = origins.started(refuses)
    origins.ended(refuses, answered, answer(200))
    expect(origins.claimAllowances(concurrency).origins).toEqual({ [refuses]: concurrency })
  })

  test('the claim is told only the origins busy now or within 5 s; one idle for 30 s is forgotten', () => {
    let clock = 0
    const origins = createOriginWindows(() => clock)
    origins.ended('https://quick.example', origins.started('https://quick.example'), answer(200))
    origins.started('https://other.example')
    clock += 5_001
    // The idle one falls back to the newcomer's allowance; the busy one is still told.
    expect(origins.claimAllowances(64)).toEqual({ origins: { 'https://other.example': UNANSWERED_ORIGIN_WINDOW - 1 }, newcomer: UNANSWERED_ORIGIN_WINDOW })
    clock += 30_000
    origins.claimAllowances(64)
    expect(origins.state('https://quick.example')).toBeUndefined()
    expect(origins.state('https://other.example')).toEqual({ inFlight: 1, window: UNANSWERED_ORIGIN_WINDOW, answeredLately: false })
  })
})
