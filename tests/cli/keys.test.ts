import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { statSync } from 'node:fs'
import { join } from 'node:path'
import { isNull } from 'drizzle-orm'
import { decodeProtectedHeader } from 'jose'
import { runCommand } from '../../src/cli/commands.ts'
import { signingKeys } from '../../src/lib/db/schema.ts'
import { createLogger } from '../../src/lib/runtime/logger.ts'
import { createSecretBox } from '../../src/lib/security/secret-box.ts'
import { createTokenSigner } from '../../src/oauth/signing-keys.ts'
import { createTestDatabase } from '../support/database.ts'
import { freshDataDir, runCli, startServerProcess } from '../support/process.ts'

setDefaultTimeout(60_000)

const database = await createTestDatabase()
afterAll(() => database.drop())
const { db } = database.handle
const secretBox = await createSecretBox(crypto.getRandomValues(new Uint8Array(32)))
const context = { db, baseUrl: 'http://localhost:3000/v0', openSecretBox: async () => secretBox }

const activeKids = async () => (await db.select({ kid: signingKeys.kid }).from(signingKeys).where(isNull(signingKeys.retiredAt))).map((row) => row.kid)

describe('keys rotate', () => {
  test('--json names the new key and the retired one; the new key is the only active one', async () => {
    const signer = await createTokenSigner({ db, secretBox, issuer: context.baseUrl, logger: createLogger('silent') })
    const [initialKid] = await activeKids()
    const result = await runCommand(['keys', 'rotate', '--json'], context)
    expect(result.exitCode).toBe(0)
    const rotated = JSON.parse(result.output)
    expect(rotated).toEqual({ kid: expect.any(String), retired_kid: initialKid })
    expect(await activeKids()).toEqual([rotated.kid])
    await signer.reload()
    expect((await signer.jwks()).keys.map((key) => key.kid).sort()).toEqual([initialKid, rotated.kid].sort())
  })

  test('the human output says what happened to the old key', async () => {
    const result = await runCommand(['keys', 'rotate'], context)
    expect(result.exitCode).toBe(0)
    expect(result.output).toMatch(/^New signing key \S+; \S+ is retired and still verifies tokens for 24 h\./)
  })

  test('another ENCRYPTION_KEY is refused with exit code 1 and leaves the active key alone', async () => {
    const before = await activeKids()
    const otherBox = await createSecretBox(crypto.getRandomValues(new Uint8Array(32)))
    const result = await runCommand(['keys', 'rotate', '--json'], { ...context, openSecretBox: async () => otherBox })
    expect(result.exitCode).toBe(1)
    expect(JSON.parse(result.output).error).toContain('ENCRYPTION_KEY')
    expect(await activeKids()).toEqual(before)
  })
})

// The operator's path on PGlite: no ENCRYPTION_KEY, the server holds DATA_DIR, the CLI forwards.
test.if(!database.url)('without ENCRYPTION_KEY the server creates a 0600 key file, signs with a rotated key at once, and restarts on it', async () => {
  const dataDir = freshDataDir()
  const env = { DATA_DIR: dataDir, ENCRYPTION_KEY: '', DATABASE_URL: '' }
  const signInKid = async (origin: string, user: { email: string; password: string }) => {
    const response = await fetch(`${origin}/v0/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: user.email, password: user.password }),
    })
    expect(response.status).toBe(200)
    return decodeProtectedHeader(((await response.json()) as { id_token: string }).id_token).kid
  }

  const first = await startServerProcess(['bun', 'src/main.ts'], env)
  let user: { email: string; password: string }
  let rotated: { kid: string; retired_kid: string }
  try {
    expect(statSync(join(dataDir, 'encryption.key')).mode & 0o777).toBe(0o600)
    user = JSON.parse((await runCli(['demo', '--json'], env)).stdout).user
    const kidBefore = await signInKid(first.origin, user)

    const cli = await runCli(['keys', 'rotate', '--json'], env)
    expect(cli.exitCode).toBe(0)
    rotated = JSON.parse(cli.stdout)
    expect(rotated.retired_kid).toBe(kidBefore!)
    expect(await signInKid(first.origin, user)).toBe(rotated.kid)
  } finally {
    expect(await first.stop()).toBe(0)
  }

  const second = await startServerProcess(['bun', 'src/main.ts'], env)
  try {
    expect(await signInKid(second.origin, user)).toBe(rotated.kid)
    const published = ((await (await fetch(`${second.origin}/v0/.well-known/jwks.json`)).json()) as { keys: { kid: string }[] }).keys
    expect(published.map((key) => key.kid).sort()).toEqual([rotated.kid, rotated.retired_kid].sort())
  } finally {
    expect(await second.stop()).toBe(0)
  }
})
