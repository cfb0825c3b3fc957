interface Entry<V> {
  value: V
  expiresAt: number
}

export interface TtlCacheOptions<V> {
  maxEntries: number
  ttlMs: number
  now?: () => number
  /** A second key to evict by (an API key's id when entries are keyed by its hash). */
  secondaryKey?: (value: V) => string | undefined
}

/**
 * A bounded in-memory map whose entries expire. When full, the oldest insertion goes first:
 * cheaper on the hot path than LRU bookkeeping, and entries are refreshed by expiry anyway.
 */
export class TtlCache<V> {
  readonly #entries = new Map<string, Entry<V>>()
  readonly #bySecondary = new Map<string, string>()
  readonly #options: Required<Omit<TtlCacheOptions<V>, 'secondaryKey'>> & Pick<TtlCacheOptions<V>, 'secondaryKey'>

  constructor(options: TtlCacheOptions<V>) {
    this.#options = { ...options, now: options.now ?? Date.now }
  }

  get size(): number {
    return this.#entries.size
  }

  /** The cached value, or undefined when absent or expired. */
  get(key: string): V | undefined {
    const entry = this.#entries.get(key)
    if (!entry) return undefined
    if (entry.expiresAt <= this.#options.now()) {
      this.delete(key)
      return undefined
    }
    return entry.value
  }

  set(key: string, value: V): void {
    this.delete(key)
    if (this.#entries.size >= this.#options.maxEntries) {
      const oldest = this.#entries.keys().next()
      if (!oldest.done) this.delete(oldest.value)
    }
    this.#entries.set(key, { value, expiresAt: this.#options.now() + this.#options.ttlMs })
    const secondary = this.#options.secondaryKey?.(value)
    if (secondary !== undefined) this.#bySecondary.set(secondary, key)
  }

  delete(key: string): void {
    const entry = this.#entries.get(key)
    if (!entry) return
    this.#entries.delete(key)
    const secondary = this.#options.secondaryKey?.(entry.value)
    if (secondary !== undefined && this.#bySecondary.get(secondary) === key) this.#bySecondary.delete(secondary)
  }

  deleteBySecondaryKey(secondary: string): void {
    const key = this.#bySecondary.get(secondary)
    if (key !== undefined) this.delete(key)
  }

  clear(): void {
    this.#entries.clear()
    this.#bySecondary.clear()
  }
}
