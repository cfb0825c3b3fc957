import { expect, test } from 'bun:test'
import { TtlCache } from '../../../src/lib/cache/ttl-cache.ts'

const clock = () => {
  let now = 1_000
  return { now: () => now, advance: (ms: number) => (now += ms) }
}

test('entries expire after their TTL', () => {
  const time = clock()
  const cache = new TtlCache<string>({ maxEntries: 10, ttlMs: 100, now: time.now })
  cache.set('a', 'A')
  time.advance(99)
  expect(cache.get('a')).toBe('A')
  time.advance(1)
  expect(cache.get('a')).toBeUndefined()
  expect(cache.size).toBe(0)
})

test('a full cache drops its oldest entry', () => {
  const cache = new TtlCache<number>({ maxEntries: 2, ttlMs: 1000 })
  cache.set('a', 1)
  cache.set('b', 2)
  cache.set('c', 3)
  expect(cache.get('a')).toBeUndefined()
  expect(cache.get('b')).toBe(2)
  expect(cache.get('c')).toBe(3)
})

test('entries can be evicted by a secondary key, and null values are cached', () => {
  const cache = new TtlCache<{ id: string } | null>({ maxEntries: 10, ttlMs: 1000, secondaryKey: (v) => v?.id })
  cache.set('hash1', { id: 'key_1' })
  cache.set('hash2', null)
  expect(cache.get('hash2')).toBeNull()
  cache.deleteBySecondaryKey('key_1')
  expect(cache.get('hash1')).toBeUndefined()
  cache.deleteBySecondaryKey('key_unknown')
  cache.set('hash3', { id: 'key_3' })
  cache.clear()
  expect(cache.get('hash3')).toBeUndefined()
})
