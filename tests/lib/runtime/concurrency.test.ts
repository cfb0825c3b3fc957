import { expect, test } from 'bun:test'
import { createConcurrencyLimit } from '../../../src/lib/runtime/concurrency.ts'

test('at most `max` tasks run at once, the others start in the order they came as places free, and a failing task frees its place', async () => {
  const limit = createConcurrencyLimit(3)
  let running = 0
  let most = 0
  const started: number[] = []
  const task = (n: number) => async () => {
    started.push(n)
    running++
    most = Math.max(most, running)
    await Bun.sleep(5 + (n % 3))
    running--
    if (n === 4) throw new Error('task 4 failed')
    return n
  }
  const results = await Promise.allSettled(Array.from({ length: 10 }, (_, n) => limit(task(n))))
  expect(most).toBe(3)
  expect(started).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
  expect(results.map((result) => result.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'fulfilled'])
  expect(await limit(async () => 'after')).toBe('after')
})

test('a task that arrives as another ends waits behind the ones already waiting: the place is handed over, never taken twice', async () => {
  const limit = createConcurrencyLimit(1)
  const order: string[] = []
  let running = 0
  let most = 0
  const task = (name: string) => async () => {
    running++
    most = Math.max(most, running)
    order.push(name)
    await Bun.sleep(2)
    running--
  }
  let finishFirst!: () => void
  const first = limit(() => {
    order.push('first')
    return new Promise<void>((resolve) => (finishFirst = resolve))
  })
  const second = limit(task('second'))
  let third: Promise<void> | undefined
  // The first ends, and a third arrives in the very next turn: before the second has started in the place it was given.
  finishFirst()
  queueMicrotask(() => (third = limit(task('third'))))
  await first
  await second
  await third
  expect(order).toEqual(['first', 'second', 'third'])
  expect(most).toBe(1)
})
