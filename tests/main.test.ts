import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { PGlite } from '@electric-sql/pglite'
import { ROOT, freshDataDir, runCli, startServerProcess } from './support/process.ts'
import { createTestDatabase } from './support/database.ts'

// The real entry point, src/main.ts, as an operator runs it: on PGlite in a fresh DATA_DIR,
// and on PostgreSQL when the suite runs against it.
// Each test starts real processes (PGlite alone takes seconds to open).
setDefaultTimeout(60_000)
const database = await createTestDatabase()
afterAll(() => database.drop())
const dataDir = freshDataDir()
// DATA_DIR in both modes: on PostgreSQL it still holds the encryption key file.
const env: Record<string, string> = database.url ? { DATABASE_URL: database.url, DATA_DIR: dataDir } : { DATA_DIR: dataDir }
if (database.url) await database.handle.close()

describe('bun src/main.ts', () => {
  test('first run: hints at the demo command; the CLI then gives a working key; SIGTERM stops cleanly', async () => {
    const server = await startServerProcess(['bun', 'src/main.ts'], env)
    try {
      // The hint follows "listening" (it counts the accounts first), possibly after /healthz first answers.
      await server.waitForOutput('"msg":"listening"')
      await server.waitForOutput('bun run cli demo', 5_000)
      const cli = await runCli(['demo', '--json'], { ...env, PORT: new URL(server.origin).port })
      expect(cli.exitCode).toBe(0)
      const demo = JSON.parse(cli.stdout)
      const response = await fetch(`${server.origin}/v0/account?key=${demo.api_key.secret}`)
      expect(response.status).toBe(200)
      expect((await response.json()).id).toBe(demo.account.id)

      const revoke = await runCli(['apikey', 'revoke', '--id', demo.api_key.id], env)
      expect(revoke.exitCode).toBe(0)
      let status = 200
      for (let i = 0; i < 60 && status === 200; i++) {
        status = (await fetch(`${server.origin}/v0/account?key=${demo.api_key.secret}`)).status
        if (status === 200) await Bun.sleep(100)
      }
      expect(status).toBe(401)
      expect(server.output()).not.toContain(demo.api_key.secret)
    } finally {
      expect(await server.stop('SIGTERM')).toBe(0)
    }
    if (!database.url) {
      expect(existsSync(join(dataDir, 'service.lock'))).toBe(false)
      expect(existsSync(join(dataDir, 'cli.sock'))).toBe(false)
    }
    expect(server.output()).toContain('"msg":"shutting down"')
  })

  test('a restart keeps the data and does not hint again', async () => {
    const server = await startServerProcess(['bun', 'src/main.ts'], env)
    try {
      await server.waitForOutput('"msg":"listening"')
      expect(server.output()).not.toContain('bun run cli demo')
    } finally {
      expect(await server.stop('SIGINT')).toBe(0)
    }
  })

  test.if(!database.url)('a second process on the same DATA_DIR refuses to start, naming the holder', async () => {
    const server = await startServerProcess(['bun', 'src/main.ts'], env)
    try {
      const second = Bun.spawnSync(['bun', 'src/main.ts'], { cwd: ROOT, env: { ...process.env, ...env, PORT: '0' } })
      expect(second.exitCode).toBe(1)
      const message = second.stderr.toString().trim()
      expect(message).toContain(`in use by process ${server.process.pid}`)
      expect(message.split('\n')).toHaveLength(1)
    } finally {
      await server.stop()
    }
  })

  test('a port already in use stops the start with one line naming PORT, not a stack trace', () => {
    const holder = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('taken') })
    try {
      const result = Bun.spawnSync(['bun', 'src/main.ts'], { cwd: ROOT, env: { ...process.env, ...env, PORT: String(holder.port) } })
      expect(result.exitCode).toBe(1)
      const lines = result.stderr.toString().trim().split('\n')
      expect(lines).toEqual([`Cannot listen on 127.0.0.1:${holder.port}: the address is in use. Stop what holds it, or set PORT (or HOST).`])
    } finally {
      holder.stop(true)
    }
  })

  test('an ENCRYPTION_KEY that cannot open the stored signing key stops the start with one line naming it', () => {
    // The file's DATA_DIR and database have started before (the first test): their signing key is sealed with DATA_DIR's key.
    const otherKey = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')
    const result = Bun.spawnSync(['bun', 'src/main.ts'], { cwd: ROOT, env: { ...process.env, ...env, PORT: '0', ENCRYPTION_KEY: otherKey } })
    expect(result.exitCode).toBe(1)
    const lines = result.stderr.toString().trim().split('\n')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toStartWith('ENCRYPTION_KEY: cannot decrypt signing key')
    expect(result.stderr.toString()).not.toContain(otherKey)
  })

  test('bad configuration stops the process with one line naming the variable', () => {
    for (const [variable, value] of [['PORT', 'http'], ['LOG_LEVEL', 'loud'], ['PUBLIC_URL', 'localhost:3000']] as const) {
      const result = Bun.spawnSync(['bun', 'src/main.ts'], { cwd: ROOT, env: { ...process.env, ...env, [variable]: value } })
      expect(result.exitCode).toBe(1)
      const lines = result.stderr.toString().trim().split('\n')
      expect(lines).toHaveLength(1)
      expect(lines[0]).toStartWith(`Invalid configuration: ${variable}:`)
    }
  })

  test.if(!!database.url)('an unreachable DATABASE_URL stops the process with one line', () => {
    const result = Bun.spawnSync(['bun', 'src/main.ts'], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere' },
    })
    expect(result.exitCode).toBe(1)
    expect(result.stderr.toString().trim()).toStartWith('DATABASE_URL: cannot open the database')
  })
})

/** Every path under `dir`, itself included, whose mode lets the group or others in. */
function openToOthers(dir: string): string[] {
  const found: string[] = []
  const visit = (path: string) => {
    const stat = lstatSync(path)
    if (stat.mode & 0o077) found.push(`${(stat.mode & 0o777).toString(8)} ${path}`)
    if (stat.isDirectory()) for (const name of readdirSync(path)) visit(join(path, name))
  }
  visit(dir)
  return found
}

describe('DATA_DIR permissions', () => {
  // A database of their own: on PostgreSQL each DATA_DIR holds its own encryption key.
  async function startOn(dataDir: string) {
    const own = await createTestDatabase()
    if (own.url) await own.handle.close()
    const server = await startServerProcess(['bun', 'src/main.ts'], own.url ? { DATABASE_URL: own.url, DATA_DIR: dataDir } : { DATA_DIR: dataDir })
    await server.waitForOutput('"msg":"listening"')
    return { server, drop: () => own.drop() }
  }

  async function expectClosedToOthers(dataDir: string) {
    const { server, drop } = await startOn(dataDir)
    try {
      if (!database.url) expect(existsSync(join(dataDir, 'cli.sock'))).toBe(true)
      expect(existsSync(join(dataDir, 'encryption.key'))).toBe(true)
      expect(lstatSync(dataDir).mode & 0o777).toBe(0o700)
      expect(openToOthers(dataDir)).toEqual([])
    } finally {
      expect(await server.stop('SIGTERM')).toBe(0)
      await drop()
    }
    // What the database writes as it shuts down included.
    expect(openToOthers(dataDir)).toEqual([])
  }

  test('a fresh DATA_DIR is 0700 and nothing in it is open to the group or others, running or stopped', async () => {
    await expectClosedToOthers(freshDataDir())
  })

  test('a DATA_DIR that existed open (a volume: 0755, files 0666, as earlier versions left it) is closed at start', async () => {
    const dataDir = freshDataDir()
    mkdirSync(dataDir, { mode: 0o755 })
    chmodSync(dataDir, 0o755)
    if (!database.url) {
      // An embedded database written the way earlier versions wrote it: directories 0755, files 0666.
      const earlier = await PGlite.create(dataDir)
      await earlier.close()
    }
    writeFileSync(join(dataDir, 'encryption.key'), Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url'))
    chmodSync(join(dataDir, 'encryption.key'), 0o666)
    expect(openToOthers(dataDir)).toContain(`755 ${dataDir}`)
    expect(openToOthers(dataDir)).toContain(`666 ${join(dataDir, 'encryption.key')}`)
    await expectClosedToOthers(dataDir)
  })
})
