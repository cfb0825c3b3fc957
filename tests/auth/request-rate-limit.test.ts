import { describe, expect, test } from 'bun:test'
import { createRequestRateLimiter } from '../../src/auth/request-rate-limit.ts'

const clock = () => {
  let at = 1_000_000
  return { now: () => at, advance: (ms: number) => (at += ms) }
}

describe('createRequestRateLimiter: a token bucket per credential', () => {
  test('a burst of twice the rate passes, the next request is refused until a token has come back', () => {
    const time = clock()
    const limiter = createRequestRateLimiter({ ratePerSecond: 10, now: time.now })
    for (let n = 1; n <= 20; n++) {
      const decision = limiter.take('key_a')
      expect(decision.allowed).toBe(true)
      expect(decision.remaining).toBe(20 - n)
    }
    const refused = limiter.take('key_a')
    expect(refused).toMatchObject({ allowed: false, remaining: 0, retryAfterSeconds: 1, resetSeconds: 2 })
    // One token back every 100 ms at 10 a second.
    time.advance(99)
    expect(limiter.take('key_a').allowed).toBe(false)
    time.advance(2)
    expect(limiter.take('key_a').allowed).toBe(true)
    expect(limiter.take('key_a').allowed).toBe(false)
  })

  test('the sustained rate is the configured one: 10 a second for 5 seconds after the burst, not 11', () => {
    const time = clock()
    const limiter = createRequestRateLimiter({ ratePerSecond: 10, now: time.now })
    while (limiter.take('key_a').allowed);
    let allowed = 0
    for (let ms = 0; ms < 5_000; ms += 10) {
      time.advance(10)
      while (limiter.take('key_a').allowed) allowed++
    }
    expect(allowed).toBe(50)
  })

  test('credentials are counted apart', () => {
    const limiter = createRequestRateLimiter({ ratePerSecond: 1, now: clock().now })
    expect(limiter.take('key_a').allowed).toBe(true)
    expect(limiter.take('key_a').allowed).toBe(true)
    expect(limiter.take('key_a').allowed).toBe(false)
    expect(limiter.take('grt_b').allowed).toBe(true)
  })

  test('an idle bucket fills up again, and no further than its burst', () => {
    const time = clock()
    const limiter = createRequestRateLimiter({ ratePerSecond: 5, now: time.now })
    while (limiter.take('key_a').allowed);
    time.advance(60_000)
    const decision = limiter.take('key_a')
    expect(decision).toMatchObject({ allowed: true, remaining: 9, resetSeconds: 1 })
  })

  test('headers: the policy names the sustained quota per second, RateLimit the requests left and the seconds until the bucket is full', () => {
    const time = clock()
    const limiter = createRequestRateLimiter({ ratePerSecond: 100, now: time.now })
    expect(limiter.policy).toBe('"credential";q=100;w=1')
    expect(limiter.header(limiter.take('key_a'))).toBe('"credential";r=199;t=1')
    for (let n = 0; n < 199; n++) limiter.take('key_a')
    expect(limiter.header(limiter.take('key_a'))).toBe('"credential";r=0;t=2')
  })

  test('many credentials: buckets of idle ones are dropped without changing what any credential may do', () => {
    const time = clock()
    const limiter = createRequestRateLimiter({ ratePerSecond: 1, now: time.now })
    for (let n = 0; n < 25_000; n++) limiter.take(`key_${n}`)
    // key_0's bucket is full again after 2 s idle: whether or not it was dropped, it has its burst.
    time.advance(2_000)
    for (let n = 0; n < 25_000; n++) limiter.take(`key_${n + 25_000}`)
    expect(limiter.take('key_0').remaining).toBe(1)
    // A credential that is not idle keeps its count through a sweep.
    expect(limiter.take('key_0').remaining).toBe(0)
    expect(limiter.take('key_0').allowed).toBe(false)
  })

  test('charge: a request that cost more takes more, the bucket may go below empty by at most its burst, and the next requests wait for it', () => {
    const time = clock()
    const limiter = createRequestRateLimiter({ ratePerSecond: 10, now: time.now })
    expect(limiter.take('grt_a').remaining).toBe(19)
    limiter.charge('grt_a', 30)
    const refused = limiter.take('grt_a')
    expect(refused).toMatchObject({ allowed: false, remaining: 0 })
    // 11 below empty, and one whole token to be allowed: 1.2 s at 10 a second.
    expect(refused.retryAfterSeconds).toBe(2)
    time.advance(1_100)
    expect(limiter.take('grt_a').allowed).toBe(false)
    time.advance(100)
    expect(limiter.take('grt_a').allowed).toBe(true)
    // However much is charged, the debt is one burst (20) at most: 2.1 s later a request passes.
    limiter.charge('grt_b', 1_000_000)
    time.advance(2_000)
    expect(limiter.take('grt_b').allowed).toBe(false)
    time.advance(100)
    expect(limiter.take('grt_b').allowed).toBe(true)
    limiter.charge('grt_c', 0)
    limiter.charge('grt_c', -5)
    expect(limiter.take('grt_c').remaining).toBe(19)
  })
})
