import { afterAll, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { clearHits, countHit, countHits, deleteStaleHits, peekHits, releaseHits } from '../../../src/lib/db/rate-limits.ts'
import { queryRows } from '../../../src/lib/db/client.ts'
import { createTestDatabase } from '../../support/database.ts'

const database = await createTestDatabase()
afterAll(() => database.drop())
const db = database.handle.db
const window = { limit: 3, windowSeconds: 60 }

test('hits are counted per key; past the limit the key is limited until its window ends', async () => {
  const states = []
  for (let i = 0; i < 4; i++) states.push(await countHit(db, 'test:a', window))
  expect(states.map((state) => [state.count, state.limited])).toEqual([[1, false], [2, false], [3, false], [4, true]])
  expect(states[3]!.retryAfterSeconds).toBeGreaterThan(0)
  expect(states[3]!.retryAfterSeconds).toBeLessThanOrEqual(60)
  expect((await countHit(db, 'test:b', window)).count).toBe(1)
})

test('peeking counts nothing; clearing resets', async () => {
  await countHit(db, 'test:c', window)
  await countHit(db, 'test:c', window)
  await countHit(db, 'test:c', window)
  expect(await peekHits(db, 'test:c', window)).toMatchObject({ count: 3, limited: true })
  expect((await peekHits(db, 'test:c', window)).count).toBe(3)
  await clearHits(db, 'test:c')
  expect(await peekHits(db, 'test:c', window)).toEqual({ count: 0, limited: false, retryAfterSeconds: 0 })
})

test('a window that has passed starts again at one', async () => {
  const short = { limit: 1, windowSeconds: 1 }
  await countHit(db, 'test:d', short)
  expect((await countHit(db, 'test:d', short)).limited).toBe(true)
  await Bun.sleep(1_100)
  expect(await countHit(db, 'test:d', short)).toMatchObject({ count: 1, limited: false })
})

test('several keys counted in one statement; simultaneous callers each see a distinct count', async () => {
  const keys = ['test:multi:pair', 'test:multi:email', 'test:multi:ip']
  const results = await Promise.all(Array.from({ length: 20 }, () => countHits(db, keys, 60)))
  for (const key of keys) {
    expect(results.map((hits) => hits.get(key)!.count).sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1))
  }
  expect(results[0]!.get('test:multi:ip')!.retryAfterSeconds).toBeGreaterThan(0)
})

test('released hits are given back, concurrently too; a window restarted since keeps its new count', async () => {
  const keys = ['test:release:a', 'test:release:b']
  const counted = await Promise.all(Array.from({ length: 10 }, () => countHits(db, keys, 60)))
  await Promise.all(counted.slice(0, 7).map((hits) => releaseHits(db, [...hits.values()])))
  expect((await peekHits(db, 'test:release:a', { limit: 10, windowSeconds: 60 })).count).toBe(3)
  expect((await peekHits(db, 'test:release:b', { limit: 10, windowSeconds: 60 })).count).toBe(3)

  const [old] = [...(await countHits(db, ['test:release:c'], 1)).values()]
  await Bun.sleep(1_100)
  await countHits(db, ['test:release:c'], 1)
  await releaseHits(db, [old!])
  expect((await peekHits(db, 'test:release:c', { limit: 10, windowSeconds: 1 })).count).toBe(1)
})

test('deleteStaleHits removes counters whose window started over a day ago, and only those', async () => {
  await countHits(db, ['test:stale:old', 'test:stale:recent'], 3600)
  await db.execute(sql`update rate_limits set window_started_at = now() - interval '25 hours' where key = 'test:stale:old'`)
  expect(await deleteStaleHits(db)).toBeGreaterThanOrEqual(1)
  const left = await queryRows<{ key: string }>(db, sql`select key from rate_limits where key like 'test:stale:%' order by key`)
  expect(left.map((row) => row.key)).toEqual(['test:stale:recent'])
})
