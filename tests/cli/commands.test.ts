import { afterAll, describe, expect, test } from 'bun:test'
import { eq } from 'drizzle-orm'
import { runCommand } from '../../src/cli/commands.ts'
import { users } from '../../src/lib/db/schema.ts'
import { verifyPassword } from '../../src/lib/security/crypto.ts'
import { createTestDatabase } from '../support/database.ts'

const database = await createTestDatabase()
afterAll(() => database.drop())
const context = { db: database.handle.db, baseUrl: 'http://localhost:3000/v0' }
const run = (...argv: string[]) => runCommand(argv, context)
const runJson = async (...argv: string[]) => {
  const result = await run(...argv, '--json')
  expect(result.exitCode).toBe(0)
  return JSON.parse(result.output)
}

describe('cli', () => {
  test('account, user and API key, created and listed', async () => {
    const account = await runJson('account', 'create', '--name', 'Acme')
    expect(account).toEqual({ id: expect.stringMatching(/^acc_/), name: 'Acme', created_at: expect.any(String) })

    const user = await runJson('user', 'create', '--account', account.id, '--email', 'Ada@Example.com', '--password', 'a long passphrase')
    // Not toMatchObject: under Bun it writes its matchers back into `user`.
    expect(user.id).toMatch(/^usr_/)
    expect([user.account_id, user.email]).toEqual([account.id, 'ada@example.com'])
    const [stored] = await database.handle.db.select().from(users).where(eq(users.id, user.id))
    expect(stored!.passwordHash).not.toContain('a long passphrase')
    expect(await verifyPassword('a long passphrase', stored!.passwordHash)).toBe(true)

    const key = await runJson('apikey', 'create', '--account', account.id, '--name', 'server')
    expect(key.secret).toMatch(/^sk_live_/)
    expect(key.secret_prefix).toBe(key.secret.slice(0, 12))

    const listed = await runJson('apikey', 'list', '--account', account.id)
    expect(listed.data).toHaveLength(1)
    expect(JSON.stringify(listed)).not.toContain(key.secret)

    expect(await runJson('apikey', 'revoke', '--id', key.id)).toEqual({ id: key.id, revoked: true })
    expect((await runJson('apikey', 'list', '--account', account.id)).data[0].revoked_at).toEqual(expect.any(String))
    expect((await run('apikey', 'revoke', '--id', key.id)).exitCode).toBe(2)
  })

  test('the human output of apikey create shows the secret once and a call to try', async () => {
    const account = await runJson('account', 'create', '--name', 'Human')
    const result = await run('apikey', 'create', '--account', account.id)
    expect(result.exitCode).toBe(0)
    expect(result.output).toContain("curl 'http://localhost:3000/v0/account?key=sk_live_")
  })

  test('demo creates an account, a user and a key that belong together', async () => {
    const demo = await runJson('demo')
    expect(demo.api_key.account_id).toBe(demo.account.id)
    expect(demo.user.email).toMatch(/^demo(\+[a-z0-9_-]+)?@example\.com$/)
    const again = await runJson('demo')
    expect(again.user.email).not.toBe(demo.user.email)
  })

  test('a duplicate email is refused', async () => {
    const account = await runJson('account', 'create', '--name', 'Dup')
    await runJson('user', 'create', '--account', account.id, '--email', 'same@example.com', '--password', 'passphrase-1')
    const result = await run('user', 'create', '--account', account.id, '--email', 'SAME@example.com', '--password', 'passphrase-2')
    expect(result.exitCode).toBe(1)
    expect(result.output).toContain('already exists')
  })

  const refused: [string[], string][] = [
    [['account', 'create'], '--name is required'],
    [['account', 'create', '--name', '   '], '--name'],
    [['account', 'create', '--name', 'x'.repeat(201)], '--name'],
    [['user', 'create', '--account', 'acc_nope', '--email', 'a@b.co', '--password', 'long enough pw'], '--account'],
    [['user', 'create', '--account', 'acc_00000000000000000000000000', '--email', 'a@b.co', '--password', 'long enough pw'], 'no account'],
    [['apikey', 'revoke', '--id', 'acc_00000000000000000000000000'], '--id'],
    [['apikey', 'create'], '--account is required'],
    [['frobnicate'], 'Unknown command'],
    [['account', 'create', '--colour', 'red'], "Unknown option '--colour'"],
    [[], 'Usage'],
  ]
  for (const [argv, message] of refused) {
    test(`refuses ${JSON.stringify(argv)} with exit code 2`, async () => {
      const result = await run(...argv)
      expect(result.exitCode).toBe(2)
      expect(result.output).toContain(message)
    })
  }

  test('user create checks the email and password', async () => {
    const account = await runJson('account', 'create', '--name', 'Checks')
    expect((await run('user', 'create', '--account', account.id, '--email', 'not-an-email', '--password', 'long enough pw')).exitCode).toBe(2)
    expect((await run('user', 'create', '--account', account.id, '--email', 'a@b.co', '--password', 'short')).exitCode).toBe(2)
  })

  test('--json errors are JSON', async () => {
    const result = await run('account', 'create', '--json')
    expect(JSON.parse(result.output)).toEqual({ error: '--name is required' })
  })
})

test('a forwarded command must be { argv: string[] }', async () => {
  const { parseForwardedCommand } = await import('../../src/cli/socket.ts')
  expect(parseForwardedCommand({ argv: ['demo', '--json'] })).toEqual(['demo', '--json'])
  for (const bad of [null, 'demo', {}, { argv: 'demo' }, { argv: ['demo', 1] }]) expect(parseForwardedCommand(bad)).toBeNull()
})
