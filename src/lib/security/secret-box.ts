import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { closeToOthers } from './file-modes.ts'
import type { Logger } from '../runtime/logger.ts'

/**
 * Authenticated encryption (AES-256-GCM, Web Crypto) for secrets the service must read back:
 * signing keys, and token pairs kept for the refresh grace window. Hashing is not possible
 * for those; everything that can be hashed is hashed instead.
 *
 * Sealed values read `v1.<base64url(iv ‖ ciphertext ‖ tag)>`; the prefix leaves room for a
 * later key or algorithm.
 */
export interface SecretBox {
  seal(plaintext: string): Promise<string>
  open(sealed: string): Promise<string>
}

export class SecretBoxError extends Error {}

export async function createSecretBox(keyBytes: Uint8Array): Promise<SecretBox> {
  if (keyBytes.length !== 32) throw new SecretBoxError('the encryption key must be 32 bytes')
  const key = await crypto.subtle.importKey('raw', keyBytes as Uint8Array<ArrayBuffer>, 'AES-GCM', false, ['encrypt', 'decrypt'])
  return {
    async seal(plaintext) {
      const iv = crypto.getRandomValues(new Uint8Array(12))
      const ciphertext = new Uint8Array(await crypto.subtle.encrypt({ name: 'AES-GCM', iv }, key, new TextEncoder().encode(plaintext)))
      const joined = new Uint8Array(iv.length + ciphertext.length)
      joined.set(iv)
      joined.set(ciphertext, iv.length)
      return `v1.${Buffer.from(joined).toString('base64url')}`
    },
    async open(sealed) {
      if (!sealed.startsWith('v1.')) throw new SecretBoxError('unknown sealed format')
      const joined = Buffer.from(sealed.slice(3), 'base64url')
      try {
        const plaintext = await crypto.subtle.decrypt({ name: 'AES-GCM', iv: joined.subarray(0, 12) }, key, joined.subarray(12))
        return new TextDecoder().decode(plaintext)
      } catch {
        throw new SecretBoxError('cannot decrypt: ENCRYPTION_KEY is not the key these secrets were sealed with')
      }
    },
  }
}

/**
 * ENCRYPTION_KEY when set; otherwise `DATA_DIR/encryption.key`, created on first use (mode
 * 0600). Fine for one instance; several instances must share one ENCRYPTION_KEY. A key file
 * or DATA_DIR found open to other users (copied in, a volume made by someone else) is closed:
 * 0600 and 0700.
 */
export function resolveEncryptionKey(options: { configured: Uint8Array | undefined; dataDir: string; logger: Logger; multiInstance: boolean }): Uint8Array {
  if (options.configured) return options.configured
  const path = join(options.dataDir, 'encryption.key')
  const read = () => {
    const key = new Uint8Array(Buffer.from(readFileSync(path, 'utf8').trim(), 'base64url'))
    closeToOthers(options.dataDir)
    closeToOthers(path)
    return key
  }
  try {
    return read()
  } catch {
    mkdirSync(options.dataDir, { recursive: true, mode: 0o700 })
    closeToOthers(options.dataDir)
    const key = crypto.getRandomValues(new Uint8Array(32))
    try {
      writeFileSync(path, Buffer.from(key).toString('base64url'), { mode: 0o600, flag: 'wx' })
    } catch (error) {
      // Another process starting at the same moment wrote it first: use theirs.
      if ((error as NodeJS.ErrnoException).code === 'EEXIST') return read()
      throw error
    }
    chmodSync(path, 0o600)
    if (options.multiInstance) {
      options.logger.warn(`ENCRYPTION_KEY is not set: created ${path}. Every instance sharing this database needs the same key: set ENCRYPTION_KEY.`)
    }
    return key
  }
}
