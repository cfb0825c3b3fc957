import { describe, expect, test } from 'bun:test'
import { UNANSWERED_ORIGIN_WINDOW, createOriginWindows, reachedReceiver } from '../../src/delivery/origin-windows.ts'

const noAnswer = (failure: 'timeout' | 'connection' | 'refused' | 'other') => ({ ok: false, status: null, failure })
const answer = (status: number) => ({ ok: status < 300, status, failure: status < 300 ? null : status < 500 ? ('http_4xx' as const) : ('http_5xx' as const) })

describe('origin windows', () => {
  test('an answer is a status code or a broker that spoke; a timeout or a failed connection is none', () => {
    for (const status of [200, 204, 301, 404, 410, 429, 500, 503]) expect(reachedReceiver(answer(status))).toBe(true)
    for (const failure of ['unroutable', 'nacked', 'denied'] as const) expect(reachedReceiver({ ok: false, status: null, failure })).toBe(true)
    expect(reachedReceiver({ ok: true, status: null, failure: null })).toBe(true)
    for (const failure of ['timeout', 'connection', 'refused', 'other'] as const) expect(reachedReceiver(noAnswer(failure))).toBe(false)
  })

  test('an origin not heard from may start the window less what it has in flight; any answer lifts that for 30 s', () => {
    let clock = 0
    const origins = createOriginWindows(() => clock)
    const concurrency = 256
    expect(origins.claimAllowances(concurrency)).toEqual({ origins: {}, newcomer: UNANSWERED_ORIGIN_WINDOW })
    for (let i = 0; i < 3; i++) origins.started('https://hangs.example')
    expect(origins.claimAllowances(concurrency).origins).toEqual({ 'https://hangs.example': UNANSWERED_ORIGIN_WINDOW - 3 })
    // A timeout frees its place, and says nothing good.
    clock += 15_000
    origins.ended('https://hangs.example', noAnswer('timeout'))
    expect(origins.claimAllowances(concurrency).origins).toEqual({ 'https://hangs.example': UNANSWERED_ORIGIN_WINDOW - 2 })
    // A 503 is an answer: the host is up.
    origins.ended('https://hangs.example', answer(503))
    expect(origins.claimAllowances(concurrency).origins).toEqual({ 'https://hangs.example': concurrency })
    expect(origins.state('https://hangs.example')).toEqual({ inFlight: 1, answeredLately: true })
    // 30 s later with no answer since (the last attempt timed out), the bound is back.
    clock += 30_001
    origins.ended('https://hangs.example', noAnswer('connection'))
    expect(origins.state('https://hangs.example')).toEqual({ inFlight: 0, answeredLately: false })
    expect(origins.claimAllowances(concurrency).origins).toEqual({ 'https://hangs.example': UNANSWERED_ORIGIN_WINDOW })
  })

  test('the claim is told only the origins busy now or within 5 s; one idle for 30 s is forgotten', () => {
    let clock = 0
    const origins = createOriginWindows(() => clock)
    origins.started('https://quick.example')
    origins.ended('https://quick.example', answer(200))
    origins.started('https://other.example')
    clock += 5_001
    // The idle one falls back to the newcomer's allowance; the busy one is still told.
    expect(origins.claimAllowances(64)).toEqual({ origins: { 'https://other.example': UNANSWERED_ORIGIN_WINDOW - 1 }, newcomer: UNANSWERED_ORIGIN_WINDOW })
    clock += 30_000
    origins.claimAllowances(64)
    expect(origins.state('https://quick.example')).toBeUndefined()
    expect(origins.state('https://other.example')).toEqual({ inFlight: 1, answeredLately: false })
  })
})
