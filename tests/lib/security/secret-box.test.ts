import { expect, test } from 'bun:test'
import { mkdtempSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SecretBoxError, createSecretBox, resolveEncryptionKey } from '../../../src/lib/security/secret-box.ts'
import { createLogger } from '../../../src/lib/runtime/logger.ts'

const key = () => crypto.getRandomValues(new Uint8Array(32))
const logger = createLogger('silent')

test('sealed secrets open with the same key only, and tampering is detected', async () => {
  const box = await createSecretBox(key())
  const sealed = await box.seal('the private key')
  expect(sealed).toStartWith('v1.')
  expect(sealed).not.toContain('the private key')
  expect(await box.seal('the private key')).not.toBe(sealed)
  expect(await box.open(sealed)).toBe('the private key')
  await expect((await createSecretBox(key())).open(sealed)).rejects.toBeInstanceOf(SecretBoxError)
  // Flip a bit of the ciphertext itself: editing the last base64url characters can touch only padding bits.
  const bytes = Buffer.from(sealed.slice(3), 'base64url')
  bytes[20]! ^= 1
  const tampered = `v1.${bytes.toString('base64url')}`
  await expect(box.open(tampered)).rejects.toBeInstanceOf(SecretBoxError)
  await expect(box.open('v0.abc')).rejects.toBeInstanceOf(SecretBoxError)
  await expect(createSecretBox(new Uint8Array(16))).rejects.toBeInstanceOf(SecretBoxError)
})

test('without ENCRYPTION_KEY a key file is made once (0600) and reused; a configured key wins', () => {
  const dataDir = join(mkdtempSync(join(tmpdir(), 'box-')), 'data')
  const first = resolveEncryptionKey({ configured: undefined, dataDir, logger, multiInstance: false })
  expect(first).toHaveLength(32)
  expect(statSync(join(dataDir, 'encryption.key')).mode & 0o777).toBe(0o600)
  expect(resolveEncryptionKey({ configured: undefined, dataDir, logger, multiInstance: false })).toEqual(first)
  const configured = key()
  expect(resolveEncryptionKey({ configured, dataDir, logger, multiInstance: false })).toBe(configured)
})

test('a key file written by another process first is the one used', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'box-'))
  const theirs = key()
  writeFileSync(join(dataDir, 'encryption.key'), Buffer.from(theirs).toString('base64url'))
  expect(resolveEncryptionKey({ configured: undefined, dataDir, logger, multiInstance: true })).toEqual(theirs)
})
