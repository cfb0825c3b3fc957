import { describe, expect, test } from 'bun:test'
import { createBatcher, createKeyedBatcher } from '../../src/messages/batcher.ts'

describe('createBatcher', () => {
  test('the first item goes at once; items submitted meanwhile go together in the next batch, in order', async () => {
    const batches: number[][] = []
    let release: () => void = () => {}
    const batcher = createBatcher<number, number>(
      async (items) => {
        batches.push(items)
        if (batches.length === 1) await new Promise<void>((resolve) => (release = resolve))
        return items.map((item) => item * 10)
      },
      { maxBatch: 3 },
    )
    const results = [batcher.submit(1), batcher.submit(2), batcher.submit(3), batcher.submit(4), batcher.submit(5)]
    await Bun.sleep(1)
    expect(batches).toEqual([[1]])
    release()
    expect(await Promise.all(results)).toEqual([10, 20, 30, 40, 50])
    expect(batches).toEqual([[1], [2, 3, 4], [5]])
  })

  test('a failing batch is retried one item at a time: only the bad item fails', async () => {
    const batcher = createBatcher<string, string>(
      async (items) => {
        if (items.includes('bad')) throw new Error('bad item')
        return items.map((item) => item.toUpperCase())
      },
      { maxBatch: 10 },
    )
    const first = batcher.submit('first')
    const rest = [batcher.submit('a'), batcher.submit('bad'), batcher.submit('b')]
    expect(await first).toBe('FIRST')
    const settled = await Promise.allSettled(rest)
    expect(settled.map((result) => result.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
    expect((settled[0] as PromiseFulfilledResult<string>).value).toBe('A')
    expect((settled[1] as PromiseRejectedResult).reason).toBeInstanceOf(Error)
  })
})

describe('createBatcher with a linger', () => {
  // A database on this thread (PGlite) answers before the event loop turns: a batch is written and done before the next request is read.
  const writtenAtOnce = () => {
    const batches: number[][] = []
    return { batches, run: async (items: number[]) => (batches.push(items), items) }
  }
  const submitOnePerTurn = async (submit: (item: number) => Promise<number>) => {
    const results: Promise<number>[] = []
    for (let item = 1; item <= 4; item++) {
      results.push(submit(item))
      await new Promise((resolve) => setImmediate(resolve))
    }
    return Promise.all(results)
  }

  test('without one, items arriving one turn of the event loop apart are written one by one', async () => {
    const store = writtenAtOnce()
    const batcher = createBatcher(store.run, { maxBatch: 100 })
    expect(await submitOnePerTurn(batcher.submit)).toEqual([1, 2, 3, 4])
    expect(store.batches).toEqual([[1], [2], [3], [4]])
  })

  test('with one, the first item waits for the others, and they are written together', async () => {
    const store = writtenAtOnce()
    const batcher = createBatcher(store.run, { maxBatch: 100, lingerMs: 20 })
    expect(await submitOnePerTurn(batcher.submit)).toEqual([1, 2, 3, 4])
    expect(store.batches).toEqual([[1, 2, 3, 4]])
  })

  test('with `lingerOnlyWithinMs`, an item after a quiet spell goes at once; one soon after a batch waits for the others', async () => {
    let now = 0
    const sleeps: number[] = []
    const store = writtenAtOnce()
    const clock = { now: () => now, sleep: async (ms: number) => void sleeps.push(ms) }
    const batcher = createBatcher(store.run, { maxBatch: 100, lingerMs: 1, lingerOnlyWithinMs: 5, clock })
    // The first item ever: nothing came before it, so it goes at once.
    expect(await batcher.submit(1)).toBe(1)
    expect(sleeps).toEqual([])
    // 3 ms after that batch ended (and the lane has finished): a burst, so it waits.
    await Bun.sleep(0)
    now += 3
    expect(await batcher.submit(2)).toBe(2)
    expect(sleeps).toEqual([1])
    // 50 ms of quiet: at once again.
    await Bun.sleep(0)
    now += 50
    expect(await batcher.submit(3)).toBe(3)
    expect(sleeps).toEqual([1])
    expect(store.batches).toEqual([[1], [2], [3]])
  })
})

describe('createBatcher with a cost', () => {
  test('batches are cut so their cost stays near the maximum, judged by the last batch; items dearer than the maximum go one at a time', async () => {
    const batches: number[][] = []
    const batcher = createBatcher<number, number>(
      async (items) => {
        batches.push(items)
        // Each item "writes" as many rows as its value.
        const rows = items.reduce((sum, item) => sum + item, 0)
        return items.map(() => rows)
      },
      { maxBatch: 100, lingerMs: 1, cost: { of: (_items, results) => results[0]!, max: 1000 } },
    )
    await Promise.all(Array.from({ length: 13 }, () => batcher.submit(250)))
    // All 13 waited for the first batch; until one batch has shown the cost, one item; then 250 rows an item: 4 items a batch.
    expect(batches.map((batch) => batch.length)).toEqual([1, 4, 4, 4])
    // Items dearer than the maximum: one a batch, once a batch has shown it.
    batches.length = 0
    await batcher.submit(5000)
    await Promise.all(Array.from({ length: 3 }, () => batcher.submit(5000)))
    expect(batches.map((batch) => batch.length)).toEqual([1, 1, 1, 1])
  })
})

describe('createBatcher with a cost and a share', () => {
  test('a wide batch with another behind it waits so that wide batches take at most the share of the time; narrow ones go back to back', async () => {
    let now = 0
    const events: string[] = []
    const clock = {
      now: () => now,
      sleep: async (ms: number) => {
        events.push(`pause ${ms}`)
        now += ms
      },
    }
    const batcher = createBatcher<number, number>(
      async (items) => {
        // Each batch runs 30 ms and "writes" as many rows as its items' values.
        events.push(`batch ${items.join('+')}`)
        now += 30
        const rows = items.reduce((sum, item) => sum + item, 0)
        return items.map(() => rows)
      },
      { maxBatch: 100, cost: { of: (_items, results) => results[0]!, max: 1000, share: 0.25 }, clock },
    )
    await Promise.all([batcher.submit(1000), batcher.submit(1000), batcher.submit(1000)])
    // 30 ms of writing may be a quarter of the time: 90 ms of pause before each batch that follows a wide one, none after the last.
    expect(events).toEqual(['batch 1000', 'pause 90', 'batch 1000', 'pause 90', 'batch 1000'])
    // Narrow batches (under half of the maximum): no pause.
    events.length = 0
    await Promise.all([batcher.submit(100), batcher.submit(100), batcher.submit(100)])
    expect(events.filter((event) => event.startsWith('pause'))).toEqual([])
  })

  test('without a share (or a share of 1), wide batches go back to back', async () => {
    for (const share of [undefined, 1]) {
      const sleeps: number[] = []
      const batcher = createBatcher<number, number>(async (items) => items.map(() => 1000), {
        maxBatch: 1,
        cost: { of: (_items, results) => results[0]!, max: 1000, share },
        clock: { now: () => 0, sleep: async (ms) => void sleeps.push(ms) },
      })
      await Promise.all([batcher.submit(1), batcher.submit(2), batcher.submit(3)])
      expect(sleeps).toEqual([])
    }
  })
})

describe('createBatcher with a cost, a share and a bound on the wait', () => {
  test('a pause is cut short once the next item has waited `maxPausedWaitMs`, and skipped after that', async () => {
    let now = 0
    const events: string[] = []
    const batcher = createBatcher<number, number>(
      async (items) => {
        events.push(`batch ${items.join('+')}`)
        now += 30
        return items.map(() => 1000)
      },
      {
        maxBatch: 1,
        cost: { of: (_items, results) => results[0]!, max: 1000, share: 0.25, maxPausedWaitMs: 50 },
        clock: { now: () => now, sleep: async (ms) => void (events.push(`pause ${ms}`), (now += ms)) },
      },
    )
    await Promise.all([batcher.submit(1), batcher.submit(2), batcher.submit(3)])
    // Items 2 and 3 are submitted while batch 1 runs (at 30 ms). The share asks 90 ms after each batch: item 2 may wait 50;
    // item 3 has waited 80 ms when its turn comes, so it goes at once.
    expect(events).toEqual(['batch 1', 'pause 50', 'batch 2', 'batch 3'])
  })
})

describe('createKeyedBatcher', () => {
  test("a wide lane takes `besideOthers.share` of the time while another key submitted within `withinMs`, and its own share (here: back to back) when alone, from the moment the other goes quiet", async () => {
    let now = 0
    const events: string[] = []
    const batcher = createKeyedBatcher<string, number>(
      (item) => item.split(':')[0]!,
      async (items) => {
        events.push(`batch ${items.join('+')}`)
        now += 30
        // A long batch, near whose end another key submits; wide:9 was submitted at its start, 3 s before.
        if (items.includes('wide:8')) {
          await Promise.resolve()
          now += 3000
          void batcher.submit('quiet:2')
        }
        return items.map(() => 1000)
      },
      {
        maxBatch: 1,
        cost: { of: (_items, results) => results[0]!, max: 1000, share: 1, besideOthers: { share: 0.25, withinMs: 1000 } },
        clock: { now: () => now, sleep: async (ms) => void (events.push(`pause ${ms}`), (now += ms)) },
      },
    )
    await Promise.all([batcher.submit('wide:1'), batcher.submit('wide:2')])
    expect(events).toEqual(['batch wide:1', 'batch wide:2'])
    events.length = 0
    await batcher.submit('quiet:1')
    await Promise.all([batcher.submit('wide:3'), batcher.submit('wide:4'), batcher.submit('wide:5')])
    // quiet submitted at 60 ms; wide:3 ended at 120 ms, wide:4 at 240 ms: both within a second of it, so 90 ms of pause after each.
    expect(events).toEqual(['batch quiet:1', 'batch wide:3', 'pause 90', 'batch wide:4', 'pause 90', 'batch wide:5'])
    events.length = 0
    now += 2000
    await Promise.all([batcher.submit('wide:6'), batcher.submit('wide:7')])
    expect(events).toEqual(['batch wide:6', 'batch wide:7'])
    events.length = 0
    await Promise.all([batcher.submit('wide:8'), batcher.submit('wide:9')])
    // wide:8 ran 3,060 ms (quiet:2's 30 within it): a quarter of the time asks three times that, 9,180 ms. But quiet:2 was
    // submitted as wide:8 ended and nothing after it, so the pause lasts only until quiet has been quiet for a second.
    expect(events).toEqual(['batch wide:8', 'batch quiet:2', 'pause 970', 'batch wide:9'])
  })

  test('while another key keeps submitting, a pause is looked at again each time that key might have gone quiet, and runs its full length', async () => {
    let now = 0
    const sleeps: number[] = []
    const starts: Record<string, number> = {}
    let quietSubmits = 0
    const batcher = createKeyedBatcher<string, number>(
      (item) => item.split(':')[0]!,
      async (items) => {
        starts[items.join('+')] = now
        // The wide key's batches run 1,000 ms, and the quiet key submits as the first ends; the quiet key's take no time.
        if (items[0]!.startsWith('wide')) now += 1000
        if (items[0] === 'wide:1') void batcher.submit('quiet:1')
        return items.map((item) => (item.startsWith('wide') ? 1000 : 1))
      },
      {
        maxBatch: 1,
        cost: { of: (_items, results) => results[0]!, max: 1000, share: 1, besideOthers: { share: 0.25, withinMs: 1000 } },
        clock: {
          now: () => now,
          sleep: async (ms) => {
            sleeps.push(ms)
            now += ms
            // The quiet key submits again at the end of each of the first two sleeps.
            if (quietSubmits++ < 2) await batcher.submit('quiet:more')
          },
        },
      },
    )
    await Promise.all([batcher.submit('wide:1'), batcher.submit('wide:2')])
    // A quarter of the time beside others asks 3,000 ms after wide:1's 1,000. Each sleep ends when quiet might have gone quiet;
    // it has not (it submitted at the end of each), so the pause runs its full length, in steps of at most a second.
    expect(sleeps).toEqual([1000, 1000, 1000])
    expect(starts['wide:2']! - (starts['wide:1']! + 1000)).toBe(3000)
  })

  test("a slow batch of one key delays only that key's items: another key's are written beside it, batched among themselves", async () => {
    const batches: string[][] = []
    let releaseSlow!: () => void
    const slow = new Promise<void>((resolve) => (releaseSlow = resolve))
    const batcher = createKeyedBatcher<string, string>(
      (item) => item.split(':')[0]!,
      async (items) => {
        batches.push(items)
        if (items.includes('noisy:1')) await slow
        return items.map((item) => item.toUpperCase())
      },
      { maxBatch: 10 },
    )
    const noisy = [batcher.submit('noisy:1'), batcher.submit('noisy:2')]
    const quiet = await Promise.all([batcher.submit('quiet:1'), batcher.submit('quiet:2'), batcher.submit('quiet:3')])
    expect(quiet).toEqual(['QUIET:1', 'QUIET:2', 'QUIET:3'])
    expect(batches).toEqual([['noisy:1'], ['quiet:1'], ['quiet:2', 'quiet:3']])
    releaseSlow()
    expect(await Promise.all(noisy)).toEqual(['NOISY:1', 'NOISY:2'])
    expect(batches.at(-1)).toEqual(['noisy:2'])
  })
})
