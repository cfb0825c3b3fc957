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

/** Adds `more` into `into`, key by key (for…in: an answer adds a few thousand small maps, and Object.entries builds an array for each). */
export function addCounts(into: Counts, more: Counts): Counts {
  for (const key in more) into[key] = (into[key] ?? 0) + Number(more[key])
  return into
}

export interface Percentiles {
  p50: number
  p95: number
  p99: number
}

/** A histogram as read back: bucket indexes in ascending order, each with its count. */
export interface Histogram {
  indexes: number[]
  counts: number[]
}

const QUOTE = 34
const DIGIT_0 = 48
const DIGIT_9 = 57

/**
 * Reads a latency histogram as PostgreSQL prints a jsonb map, `{"40": 12, "41": 7}`: a thousand
 * of them per answer, scanned in one pass rather than built as objects (docs/performance.md).
 * jsonb prints keys shorter first, then byte by byte, which for these integer keys is ascending;
 * should that ever not hold, the pairs are sorted.
 */
export function parseHistogram(text: string): Histogram {
  const indexes: number[] = []
  const counts: number[] = []
  let ordered = true
  for (let at = 0; at < text.length; ) {
    if (text.charCodeAt(at) !== QUOTE) {
      at++
      continue
    }
    let index = 0
    for (at++; text.charCodeAt(at) !== QUOTE; at++) index = index * 10 + text.charCodeAt(at) - DIGIT_0
    let code = text.charCodeAt(++at)
    while (code < DIGIT_0 || code > DIGIT_9) code = text.charCodeAt(++at)
    let count = 0
    for (; code >= DIGIT_0 && code <= DIGIT_9; code = text.charCodeAt(++at)) count = count * 10 + code - DIGIT_0
    if (indexes.length > 0 && index <= indexes[indexes.length - 1]!) ordered = false
    indexes.push(index)
    counts.push(count)
  }
  if (ordered) return { indexes, counts }
  const order = indexes.map((_, i) => i).sort((a, b) => indexes[a]! - indexes[b]!)
  return { indexes: order.map((i) => indexes[i]!), counts: order.map((i) => counts[i]!) }
}

const QUANTILES = [0.5, 0.95, 0.99] as const

/**
 * The 50th, 95th and 99th percentiles of a latency histogram by nearest rank (the value at rank
 * ⌈p·n⌉, as PostgreSQL's percentile_disc), or null when it holds nothing.
 */
export function percentiles({ indexes, counts }: Histogram): Percentiles | null {
  let total = 0
  for (const count of counts) total += count
  if (total === 0) return null
  const values: number[] = []
  let seen = 0
  for (let i = 0; i < indexes.length && values.length < QUANTILES.length; i++) {
    seen += counts[i]!
    while (values.length < QUANTILES.length && seen >= Math.ceil(QUANTILES[values.length]! * total)) values.push(bucketValue(indexes[i]!))
  }
  return { p50: values[0]!, p95: values[1]!, p99: values[2]! }
}

/** Histograms added together in an array indexed by bucket: a range's totals add up a thousand of them. */
export class HistogramSum {
  private counts = new Float64Array(512)

  add({ indexes, counts }: Histogram): void {
    const last = indexes[indexes.length - 1] ?? 0
    if (last >= this.counts.length) {
      const grown = new Float64Array(Math.max(last + 1, this.counts.length * 2))
      grown.set(this.counts)
      this.counts = grown
    }
    for (let i = 0; i < indexes.length; i++) this.counts[indexes[i]!] = this.counts[indexes[i]!]! + counts[i]!
  }

  histogram(): Histogram {
    const indexes: number[] = []
    const counts: number[] = []
    this.counts.forEach((count, index) => {
      if (count > 0) {
        indexes.push(index)
        counts.push(count)
      }
    })
    return { indexes, counts }
  }

  percentiles(): Percentiles | null {
    return percentiles(this.histogram())
  }
}
