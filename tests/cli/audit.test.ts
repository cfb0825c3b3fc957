import { afterAll, expect, spyOn, test } from 'bun:test'
import { runCommand } from '../../src/cli/commands.ts'
import { createLogger } from '../../src/lib/runtime/logger.ts'
import { createSecretBox } from '../../src/lib/security/secret-box.ts'
import { createTestDatabase } from '../support/database.ts'
import { freshDataDir, runCli, startServerProcess } from '../support/process.ts'

const database = await createTestDatabase()
afterAll(() => database.drop())
const lines: string[] = []
// What the server passes when a command comes through its CLI socket.
const logger = createLogger('info', (line) => lines.push(line))
const secretBox = await createSecretBox(crypto.getRandomValues(new Uint8Array(32)))
const context = { db: database.handle.db, baseUrl: 'http://localhost:3000/v0', logger, openSecretBox: async () => secretBox }
const audits = () => lines.map((line) => JSON.parse(line)).filter((line) => line.audit === true)

async function runJson(...argv: string[]) {
  const result = await runCommand([...argv, '--json'], context)
  expect(result.exitCode).toBe(0)
  return JSON.parse(result.output)
}

test('each administrative action leaves one info audit line with its ids and no secret', async () => {
  const account = await runJson('account', 'create', '--name', 'Audited')
  const user = await runJson('user', 'create', '--account', account.id, '--email', 'audit@example.com', '--password', 'a long passphrase')
  const key = await runJson('apikey', 'create', '--account', account.id)
  await runJson('apikey', 'list', '--account', account.id)
  await runJson('apikey', 'revoke', '--id', key.id)
  const rotated = await runJson('keys', 'rotate')

  expect(audits()).toEqual([
    expect.objectContaining({ level: 'info', msg: 'audit', audit: true, command: 'account create', action: 'account.created', account_id: account.id }),
    expect.objectContaining({ level: 'info', audit: true, command: 'user create', action: 'user.created', user_id: user.id, account_id: account.id }),
    expect.objectContaining({ level: 'info', audit: true, command: 'apikey create', action: 'api_key.created', api_key_id: key.id, account_id: account.id }),
    expect.objectContaining({ level: 'info', audit: true, command: 'apikey revoke', action: 'api_key.revoked', api_key_id: key.id }),
    expect.objectContaining({ level: 'info', audit: true, command: 'keys rotate', action: 'signing_key.rotated', kid: rotated.kid, retired_kid: rotated.retired_kid }),
  ])
  const all = lines.join('\n')
  for (const secret of [key.secret, 'a long passphrase', 'audit@example.com']) expect(all).not.toContain(secret)
})

test('demo audits the account, the user and the key it creates; refused commands audit nothing', async () => {
  lines.length = 0
  const demo = await runJson('demo')
  expect(audits().map((line) => line.action)).toEqual(['account.created', 'user.created', 'api_key.created'])
  const all = lines.join('\n')
  expect(all).not.toContain(demo.api_key.secret)
  expect(all).not.toContain(demo.user.password)

  lines.length = 0
  expect((await runCommand(['apikey', 'revoke', '--id', 'key_00000000000000000000000000'], context)).exitCode).not.toBe(0)
  expect((await runCommand(['account', 'create'], context)).exitCode).toBe(2)
  expect(audits()).toEqual([])
})

test('run locally (no logger given), audit lines go to stderr, never stdout', async () => {
  const stderr = spyOn(console, 'error').mockImplementation(() => {})
  const stdout = spyOn(console, 'log').mockImplementation(() => {})
  try {
    const result = await runCommand(['account', 'create', '--name', 'Local', '--json'], { db: database.handle.db, baseUrl: 'http://localhost:3000/v0' })
    expect(result.exitCode).toBe(0)
    const { id } = JSON.parse(result.output)
    const written = stderr.mock.calls.map(([line]) => JSON.parse(String(line)))
    expect(written).toEqual([expect.objectContaining({ msg: 'audit', audit: true, action: 'account.created', account_id: id })])
    expect(stdout).not.toHaveBeenCalled()
  } finally {
    stderr.mockRestore()
    stdout.mockRestore()
  }
})

// Only PGlite has the socket: on PostgreSQL the CLI opens the database itself (the test above).
test.if(!database.url)('a command sent through the running server’s CLI socket leaves its audit line in the server’s log', async () => {
  const env = { DATA_DIR: freshDataDir() }
  const server = await startServerProcess(['bun', 'src/main.ts'], env)
  try {
    const cli = await runCli(['demo', '--json'], env)
    expect(cli.exitCode).toBe(0)
    const demo = JSON.parse(cli.stdout)
    await server.waitForOutput('"audit":true')
    const audit = server
      .output()
      .split('\n')
      .filter((line) => line.includes('"audit":true'))
      .map((line) => JSON.parse(line))
    expect(audit.map((line) => line.account_id)).toContain(demo.account.id)
    expect(server.output()).not.toContain(demo.api_key.secret)
    expect(cli.stderr).not.toContain('"audit":true')
  } finally {
    expect(await server.stop('SIGTERM')).toBe(0)
  }
}, 60_000)
