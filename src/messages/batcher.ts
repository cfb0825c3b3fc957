/**
 * Group commit: items submitted while a batch is being written wait and go together in the
 * next one, so a busy path makes one statement (one round trip, one commit) per batch instead
 * of one per item, and an idle one adds no delay (the first item is written at once). With
 * `lingerMs`, a batch waits that long for company first (Kafka's linger.ms): for work nobody
 * waits on, where a millisecond of delay buys fewer, larger statements. With
 * `lingerOnlyWithinMs` as well, it waits only when the previous batch ended less than that long
 * ago: a burst's items wait for each other, and one that comes after a quiet spell goes at once
 * (a database that answers within the same turn of the event loop, PGlite, never has a batch in
 * progress for the next item to join; docs/performance.md, issue 37).
 *
 * With `cost`, a batch is also cut so that its cost (what `cost.of` says a written batch cost,
 * such as the rows it wrote) stays near `cost.max`, judged by the cost per item of the last
 * batch (the first batch is one item): items that each cost a thousand rows go a few at a
 * time, so no statement runs for seconds holding its rows (docs/performance.md, the storm).
 *
 * With `cost.share` as well, a batch that cost at least half of `cost.max` (a wide fan-out) and
 * has another behind it waits first, so that such batches take at most that share of the
 * lane's time: on PGlite the database and the event loop are one thread, and a fan-out written
 * back to back left no turn to anyone else's statements (docs/performance.md, issue 37). With
 * `cost.besideOthers`, a lane of createKeyedBatcher takes that share instead while another key
 * has submitted within `withinMs`: a fan-out yields to other accounts' work while there is some,
 * and goes at full speed alone (docs/performance.md, issue 37, sixteenth pass). A pause follows
 * the share that applies while it lasts: once the other keys have been quiet for `withinMs`, it
 * is cut to the lane's own share. No pause makes the lane's next item wait longer than
 * `maxPausedWaitMs` in all: a lane that far behind writes back to back.
 *
 * A batch that fails is retried one item at a time, so one bad item fails alone.
 */
export interface BatcherOptions<Item, Result> {
  maxBatch: number
  lingerMs?: number
  lingerOnlyWithinMs?: number
  cost?: {
    of(items: Item[], results: Result[]): number
    max: number
    share?: number
    /** The share while another key of a createKeyedBatcher submitted within `withinMs`. */
    besideOthers?: { share: number; withinMs: number }
    maxPausedWaitMs?: number
  }
  /** Time, for tests: `performance.now` and a timer by default. */
  clock?: { now(): number; sleep(ms: number): Promise<void> }
}

const systemClock = { now: () => performance.now(), sleep: (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)) }

/**
 * `othersActiveFor`: how much longer another key counts as active (it submitted within
 * `cost.besideOthers.withinMs`), 0 when none does; createKeyedBatcher gives it, and without it
 * `besideOthers` never applies.
 */
export function createBatcher<Item, Result>(run: (items: Item[]) => Promise<Result[]>, options: BatcherOptions<Item, Result>, othersActiveFor?: () => number) {
  type Waiting = { item: Item; submittedAt: number; resolve(result: Result): void; reject(error: unknown): void }
  const queue: Waiting[] = []
  let draining = false
  let costPerItem = 0

  // Until a batch has shown what an item costs, one item at a time: it might be a thousand rows.
  const batchSize = () => (!options.cost ? options.maxBatch : costPerItem > 0 ? Math.max(1, Math.min(options.maxBatch, Math.floor(options.cost.max / costPerItem))) : 1)

  const clock = options.clock ?? systemClock
  // How long the last batch ran, if it was wide (half of `cost.max` or more): the pause before the next one follows from it.
  let wideBatchMs = 0
  let lastBatchEndedAt = -Infinity

  const settle = async (batch: Waiting[]) => {
    try {
      const items = batch.map((waiting) => waiting.item)
      const startedAt = clock.now()
      const results = await run(items)
      if (options.cost) {
        const cost = options.cost.of(items, results)
        costPerItem = cost / batch.length
        if (cost >= options.cost.max / 2) wideBatchMs = clock.now() - startedAt
      }
      batch.forEach((waiting, index) => waiting.resolve(results[index]!))
    } catch (error) {
      if (batch.length === 1) return batch[0]!.reject(error)
      for (const waiting of batch) await settle([waiting])
    }
  }

  // How long to sleep next before the batch after a wide one (0: go). The share is looked at again after each sleep, and a
  // sleep ends when the other keys may have gone quiet, so a pause follows the share that applies while it lasts.
  const nextPauseSleepMs = (batchMs: number, pausedAt: number) => {
    if (!options.cost) return 0
    const othersFor = options.cost.besideOthers ? (othersActiveFor?.() ?? 0) : 0
    const share = othersFor > 0 ? options.cost.besideOthers!.share : options.cost.share
    const pauseMs = share && share < 1 ? (batchMs * (1 - share)) / share : 0
    const left = Math.min(pausedAt + pauseMs, queue[0]!.submittedAt + (options.cost.maxPausedWaitMs ?? Infinity)) - clock.now()
    return left <= 0 ? 0 : othersFor > 0 ? Math.min(left, othersFor) : left
  }

  const drain = async () => {
    draining = true
    const quietSince = clock.now() - lastBatchEndedAt
    if (options.lingerMs && (options.lingerOnlyWithinMs === undefined || quietSince < options.lingerOnlyWithinMs)) await clock.sleep(options.lingerMs)
    while (queue.length > 0) {
      const [batchMs, pausedAt] = [wideBatchMs, clock.now()]
      wideBatchMs = 0
      for (let sleepMs = nextPauseSleepMs(batchMs, pausedAt); sleepMs > 0; sleepMs = nextPauseSleepMs(batchMs, pausedAt)) await clock.sleep(sleepMs)
      await settle(queue.splice(0, batchSize()))
    }
    wideBatchMs = 0
    lastBatchEndedAt = clock.now()
    draining = false
  }

  return {
    submit(item: Item): Promise<Result> {
      return new Promise<Result>((resolve, reject) => {
        queue.push({ item, submittedAt: clock.now(), resolve, reject })
        if (!draining) void drain()
      })
    },
  }
}

/**
 * One batcher per key (an account), each draining on its own: items of one key are grouped as
 * above, and a slow batch of one key (a fan-out to a thousand subscriptions) delays only that
 * key's items, while other keys' batches are written beside it. A key's batcher is dropped once
 * it has nothing left, so keys that come and go cost nothing (and what its `cost` learned goes
 * with it: a key's first batch after a pause is one item).
 */
export function createKeyedBatcher<Item, Result>(keyOf: (item: Item) => string, run: (items: Item[]) => Promise<Result[]>, options: BatcherOptions<Item, Result>) {
  const lanes = new Map<string, { batcher: ReturnType<typeof createBatcher<Item, Result>>; waiting: number }>()
  const clock = options.clock ?? systemClock
  // The two keys that submitted last, each with its time (they differ): enough to tell whether any key besides a given one submitted lately.
  let latest = { key: '', at: -Infinity }
  let previous = { key: '', at: -Infinity }
  const othersActiveFor = (key: string) => () => {
    const other = latest.key === key ? previous : latest
    return Math.max(0, other.at + (options.cost?.besideOthers?.withinMs ?? 0) - clock.now())
  }
  return {
    async submit(item: Item): Promise<Result> {
      const key = keyOf(item)
      const at = clock.now()
      if (latest.key === key) latest.at = at
      else [previous, latest] = [latest, { key, at }]
      let lane = lanes.get(key)
      if (!lane) {
        lane = { batcher: createBatcher(run, options, othersActiveFor(key)), waiting: 0 }
        lanes.set(key, lane)
      }
      lane.waiting++
      try {
        return await lane.batcher.submit(item)
      } finally {
        if (--lane.waiting === 0) lanes.delete(key)
      }
    },
  }
}
