import { expect, test } from 'bun:test'
import { constantTimeEqual, hashPassword, newSecret, sha256Hex, verifyPassword } from '../../../src/lib/security/crypto.ts'

test('passwords: scrypt with its parameters stored; only the right password verifies', async () => {
  const stored = await hashPassword('correct horse battery staple')
  expect(stored).toMatch(/^scrypt\$32768\$8\$1\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$/)
  expect(stored).not.toContain('correct horse')
  expect(await verifyPassword('correct horse battery staple', stored)).toBe(true)
  expect(await verifyPassword('correct horse battery stapl', stored)).toBe(false)
  expect(await verifyPassword('', stored)).toBe(false)
  expect(await hashPassword('correct horse battery staple')).not.toBe(stored)
})

test('passwords: a malformed stored hash never verifies', async () => {
  expect(await verifyPassword('x', 'plaintext')).toBe(false)
  expect(await verifyPassword('x', 'bcrypt$1$2$3$a$b')).toBe(false)
})

test('secrets: prefixed, 32 random bytes, never repeated', () => {
  const secret = newSecret('sk_live_')
  expect(secret).toMatch(/^sk_live_[A-Za-z0-9_-]{43}$/)
  expect(newSecret('sk_live_')).not.toBe(secret)
  expect(sha256Hex('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad')
})

test('constantTimeEqual', () => {
  expect(constantTimeEqual('abc', 'abc')).toBe(true)
  expect(constantTimeEqual('abc', 'abd')).toBe(false)
  expect(constantTimeEqual('abc', 'abcd')).toBe(false)
  expect(constantTimeEqual('', '')).toBe(true)
})
