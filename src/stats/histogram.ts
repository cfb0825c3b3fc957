/**
 * Attempt durations are kept as histograms, not lists: a rollup row holds { "<bucket index>":
 * count }, and percentiles are read from the merged counts (docs/api.md#health-over-time).
 *
 * Durations up to EXACT_UP_TO ms have a bucket each (they are whole milliseconds); above, each
 * bucket is GROWTH times wider than the one before, and a percentile reads as the bucket's
 * geometric middle rounded to the ms: at most 2.5 % from the exact value (sqrt(1.04) − 1, and
 * half a ms of 100), whatever the scale, in about 100 + 270 buckets between 0 ms and an hour.
 */
export const EXACT_UP_TO = 100
export const GROWTH = 1.04

/** A count map as a rollup stores it: { key: count }. */
export type Counts = Record<string, number>

/** The bucket index of a duration in ms: its rounded value up to EXACT_UP_TO, then one per GROWTH step. */
export function latencyIndex(durationMs: number): number {
  const ms = Math.max(0, Math.round(durationMs))
  if (ms <= EXACT_UP_TO) return ms
  return EXACT_UP_TO + Math.ceil(Math.log(ms / EXACT_UP_TO) / Math.log(GROWTH))
}

/** The duration, in whole ms, a bucket index stands for. */
export function bucketValue(index: number): number {
  if (index <= EXACT_UP_TO) return index
  return Math.round(EXACT_UP_TO * GROWTH ** (index - EXACT_UP_TO - 0.5))
}

/** Adds `more` into `into`, key by key. */
export function addCounts(into: Counts, more: Counts): Counts {
  for (const [key, count] of Object.entries(more)) into[key] = (into[key] ?? 0) + Number(count)
  return into
}

export interface Percentiles {
  p50: number
  p95: number
  p99: number
}

/**
 * The 50th, 95th and 99th percentiles of a latency histogram by nearest rank (the value at rank
 * ⌈p·n⌉, as PostgreSQL's percentile_disc), or null when it holds nothing.
 */
export function percentiles(histogram: Counts): Percentiles | null {
  const buckets = Object.entries(histogram)
    .map(([index, count]) => [Number(index), Number(count)] as const)
    .filter(([, count]) => count > 0)
    .sort((a, b) => a[0] - b[0])
  const total = buckets.reduce((sum, [, count]) => sum + count, 0)
  if (total === 0) return null
  const at = (p: number): number => {
    const rank = Math.ceil(p * total)
    let seen = 0
    for (const [index, count] of buckets) {
      seen += count
      if (seen >= rank) return bucketValue(index)
    }
    return bucketValue(buckets[buckets.length - 1]![0])
  }
  return { p50: at(0.5), p95: at(0.95), p99: at(0.99) }
}
