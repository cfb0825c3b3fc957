/**
 * API_RATE_LIMIT (docs/api.md#rate-limits): a token bucket per credential (an API key, or an OAuth grant), held
 * in this instance's memory. Each credential may make `ratePerSecond` requests a second on
 * average and bursts of up to twice that; with N instances behind a load balancer a credential
 * gets up to N times the rate (docs/operations.md, "Rate limits").
 *
 * Only requests whose credential was accepted are counted, so the table holds at most one entry
 * per live credential; entries of credentials idle long enough to have a full bucket again carry
 * no information and are dropped when the table grows.
 */

export interface RateLimitDecision {
  allowed: boolean
  /** Whole requests left in the bucket after this one. */
  remaining: number
  /** Seconds until the bucket is full again (0 when it is). */
  resetSeconds: number
  /** When refused: seconds until one request is allowed again (≥ 1, for Retry-After). */
  retryAfterSeconds: number
}

export interface RequestRateLimiter {
  /** Takes one request from the credential's bucket. */
  take(credentialKey: string): RateLimitDecision
  /**
   * Takes `requests` more from the bucket, after the fact, for a request that cost that many more
   * than an ordinary one (an events/poll that read thousands of events: docs/api.md#rate-limits).
   * The bucket may go below empty, by at most its burst: the credential's next requests wait for it.
   */
  charge(credentialKey: string, requests: number): void
  /** The `RateLimit-Policy` value every authenticated response carries. */
  readonly policy: string
  /** The `RateLimit` value for a decision. */
  header(decision: RateLimitDecision): string
}

interface Bucket {
  tokens: number
  /** When `tokens` was last brought up to date, in ms of `now()`. */
  at: number
}

const SWEEP_ABOVE = 10_000
// Refills add fractions of a token: a token made of ten tenths must count as one.
const ROUNDING = 1e-9

export function createRequestRateLimiter(options: { ratePerSecond: number; now?: () => number }): RequestRateLimiter {
  const rate = options.ratePerSecond
  const capacity = rate * 2
  const now = options.now ?? (() => performance.now())
  const buckets = new Map<string, Bucket>()
  let sweepAt = SWEEP_ABOVE

  const refill = (bucket: Bucket, at: number) => {
    bucket.tokens = Math.min(capacity, bucket.tokens + ((at - bucket.at) / 1000) * rate)
    bucket.at = at
  }

  const sweep = (at: number) => {
    for (const [key, bucket] of buckets) {
      if (bucket.tokens + ((at - bucket.at) / 1000) * rate >= capacity) buckets.delete(key)
    }
    // Live credentials stay; sweep again only once as many more have arrived.
    sweepAt = Math.max(SWEEP_ABOVE, buckets.size * 2)
  }

  const bucketOf = (credentialKey: string, at: number): Bucket => {
    let bucket = buckets.get(credentialKey)
    if (bucket) {
      refill(bucket, at)
    } else {
      if (buckets.size >= sweepAt) sweep(at)
      bucket = { tokens: capacity, at }
      buckets.set(credentialKey, bucket)
    }
    return bucket
  }

  return {
    // A quota of `rate` requests per 1-second window: the sustained rate; the burst allowance
    // (twice that) is described in docs/api.md, since the header has no field for it.
    policy: `"credential";q=${rate};w=1`,
    header: (decision) => `"credential";r=${decision.remaining};t=${decision.resetSeconds}`,
    take(credentialKey) {
      const at = now()
      const bucket = bucketOf(credentialKey, at)
      const allowed = bucket.tokens + ROUNDING >= 1
      if (allowed) bucket.tokens = Math.max(0, bucket.tokens - 1)
      const resetSeconds = Math.ceil((capacity - bucket.tokens) / rate - ROUNDING)
      return {
        allowed,
        remaining: Math.max(0, Math.floor(bucket.tokens + ROUNDING)),
        resetSeconds,
        retryAfterSeconds: allowed ? 0 : Math.max(1, Math.ceil((1 - bucket.tokens) / rate)),
      }
    },
    charge(credentialKey, requests) {
      if (!(requests > 0)) return
      const bucket = bucketOf(credentialKey, now())
      bucket.tokens = Math.max(-capacity, bucket.tokens - requests)
    },
  }
}

/** The bucket a caller's requests are counted in: its API key, or its OAuth grant (every token of one authorization). */
export function rateLimitKey(credential: { kind: 'api_key'; id: string } | { kind: 'access_token'; grantId: string }): string {
  return credential.kind === 'api_key' ? credential.id : credential.grantId
}
