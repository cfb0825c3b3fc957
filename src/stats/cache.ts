/** What an entry weighs besides its buckets, in buckets: its totals' histogram, about 5 KB. */
export const ENTRY_BUCKETS = 10

/**
 * The settled part of a health answer (the buckets of its range that ended more than 5 s before:
 * src/stats/service.ts, readRange), kept in memory with the version of the rollup rows it was
 * read from. A day by the minute is 1,440 rows to fetch and decode and 1,440 buckets to build,
 * and all but the newest stay as they are: re-reading them for each answer was most of its cost
 * (docs/performance.md). The reader checks the version on every answer, so an entry is used only
 * while its rows are exactly the rows it was read from.
 */
export class SettledPartCache<T> {
  private readonly entries = new Map<string, { version: string; part: T; buckets: number }>()
  private buckets = 0

  /**
   * At most `maxBuckets` in all entries, a bucket being about half a kilobyte; each entry also
   * counts ENTRY_BUCKETS for its totals (a latency histogram of a few hundred counts), so that
   * many small entries cannot hold more memory than few large ones. The least recently used entry
   * goes first.
   */
  constructor(private readonly maxBuckets = 50_000) {}

  /** The part stored under `key`, if it was read from rows of this version. */
  get(key: string, version: string): T | undefined {
    const entry = this.entries.get(key)
    if (!entry || entry.version !== version) return undefined
    this.entries.delete(key)
    this.entries.set(key, entry)
    return entry.part
  }

  set(key: string, version: string, part: T, partBuckets: number): void {
    this.remove(key)
    const buckets = partBuckets + ENTRY_BUCKETS
    if (buckets > this.maxBuckets) return
    this.entries.set(key, { version, part, buckets })
    this.buckets += buckets
    for (const [oldest] of this.entries) {
      if (this.buckets <= this.maxBuckets) break
      this.remove(oldest)
    }
  }

  /** What it holds, ENTRY_BUCKETS included: for tests. */
  size(): { entries: number; buckets: number } {
    return { entries: this.entries.size, buckets: this.buckets }
  }

  private remove(key: string): void {
    const entry = this.entries.get(key)
    if (!entry) return
    this.entries.delete(key)
    this.buckets -= entry.buckets
  }
}
