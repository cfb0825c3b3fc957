import { expect, test } from 'bun:test'
import { isId, newId } from '../../../src/lib/db/ids.ts'

test('ids carry their prefix and 26 Crockford base32 characters', () => {
  const id = newId('acc')
  expect(id).toMatch(/^acc_[0-9a-hjkmnp-tv-z]{26}$/)
  expect(isId('acc', id)).toBe(true)
  expect(isId('key', id)).toBe(false)
  expect(isId('acc', 'acc_' + 'u'.repeat(26))).toBe(false)
  expect(isId('acc', id + 'x')).toBe(false)
})

test('ids sort by creation time', () => {
  const earlier = newId('key', Date.UTC(2026, 0, 1))
  const later = newId('key', Date.UTC(2026, 0, 1, 0, 0, 0, 1))
  expect(earlier < later).toBe(true)
})

test('ids do not repeat', () => {
  const ids = new Set(Array.from({ length: 10_000 }, () => newId('usr')))
  expect(ids.size).toBe(10_000)
})

test('ids made in the same millisecond still sort in creation order', () => {
  const now = Date.now()
  const ids = Array.from({ length: 1_000 }, () => newId('hook', now))
  expect([...ids].sort()).toEqual(ids)
  expect(new Set(ids).size).toBe(1_000)
})
