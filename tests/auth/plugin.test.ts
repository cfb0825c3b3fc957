import { expect, test } from 'bun:test'
import { keyParameter } from '../../src/auth/plugin.ts'

const url = (query: string) => `http://127.0.0.1:3000/v0/account${query}`

test('keyParameter finds ?key= wherever it stands in the query', () => {
  expect(keyParameter(url('?key=sk_live_a'))).toBe('sk_live_a')
  expect(keyParameter(url('?limit=5&key=sk_live_a&x=1'))).toBe('sk_live_a')
  expect(keyParameter(url('?key='))).toBe('')
  expect(keyParameter(url('?key=sk_live_a#key=other'))).toBe('sk_live_a')
})

test('keyParameter ignores look-alikes', () => {
  expect(keyParameter(url(''))).toBeUndefined()
  expect(keyParameter(url('?monkey=1&keys=2&KEY=3&key'))).toBeUndefined()
  expect(keyParameter(url('?x=1#&key=sk_live_a'))).toBeUndefined()
})

test('keyParameter decodes percent-encoding and refuses nothing silently', () => {
  expect(keyParameter(url('?key=sk_live_a%2Db'))).toBe('sk_live_a-b')
  expect(keyParameter(url('?key=a+b'))).toBe('a b')
  expect(keyParameter(url('?key=%E0%A4%A'))).toBe('%E0%A4%A')
})

test('keyParameter reports a repeated key rather than choosing one', () => {
  expect(typeof keyParameter(url('?key=a&key=b'))).toBe('symbol')
  expect(typeof keyParameter(url('?key=a&x=1&key=a'))).toBe('symbol')
})
