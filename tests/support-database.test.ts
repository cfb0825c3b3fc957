import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ROOT } from './support/process.ts'

// tests/support/database.ts and the preload that checks it (tests/support/preflight.ts), seen as
// a user sees them: `bun test` of a one-test fixture in a child process, under each TEST_DATABASE.

setDefaultTimeout(60_000)

const FIXTURE = './tests/support/fixtures/database.fixture.ts'
/** A failure must come at once: well under what one test file's database would take to give up. */
const FAILURE_WITHIN_MS = 15_000

const home = mkdtempSync(join(tmpdir(), 'test-database-home-'))
afterAll(() => rmSync(home, { recursive: true, force: true }))

async function runFixture(env: Record<string, string>) {
  const inherited = { ...process.env }
  for (const name of ['TEST_DATABASE', 'DATABASE_URL', 'DOCKER_HOST', 'TEST_POSTGRES_IMAGE']) delete inherited[name]
  const started = Date.now()
  const child = Bun.spawn(['bun', 'test', FIXTURE], {
    cwd: ROOT,
    env: { ...inherited, ...env },
    stdout: 'pipe',
    stderr: 'pipe',
    timeout: 45_000,
  })
  const [stdout, stderr, exitCode] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  return { stdout, stderr, exitCode, signal: child.signalCode, ms: Date.now() - started }
}

/** The one line a failed run prints: stderr without blank lines and bun's "<file>:" heading. */
function expectOneLineFailure(run: Awaited<ReturnType<typeof runFixture>>, line: RegExp) {
  expect(run.signal).toBeNull()
  expect(run.exitCode).toBe(1)
  expect(run.ms).toBeLessThan(FAILURE_WITHIN_MS)
  const lines = run.stderr.split('\n').filter((text) => text.trim() !== '' && !text.endsWith('.fixture.ts:'))
  expect(lines).toHaveLength(1)
  expect(lines[0]).toMatch(line)
  expect(run.stderr).not.toMatch(/^\s+at /m)
  expect(run.stdout).not.toContain('TEST_DATABASE')
  expect(run.stdout + run.stderr).not.toContain('(pass)')
}

describe('TEST_DATABASE: a database that cannot be used stops the run with one line', () => {
  test('postgres, nothing listening at DATABASE_URL: the URL without its password, and the reason', async () => {
    const run = await runFixture({ TEST_DATABASE: 'postgres', DATABASE_URL: 'postgres://postgres:hunter2@127.0.0.1:1/test' })
    expectOneLineFailure(run, /^TEST_DATABASE=postgres: cannot reach postgres:\/\/postgres@127\.0\.0\.1:1\/test \(ECONNREFUSED\)$/)
    expect(run.stdout + run.stderr).not.toContain('hunter2')
  })

  test('postgres without DATABASE_URL', async () => {
    const run = await runFixture({ TEST_DATABASE: 'postgres' })
    expectOneLineFailure(run, /^TEST_DATABASE=postgres needs DATABASE_URL /)
  })

  // DOCKER_HOST names the one engine to use: unreachable, the run stops there, even on a machine
  // whose usual socket has a running engine (testcontainers alone would fall back to it).
  test('container, the engine at DOCKER_HOST unreachable (a socket that does not exist, a port nothing listens on)', async () => {
    const unix = await runFixture({ TEST_DATABASE: 'container', DOCKER_HOST: 'unix:///nonexistent.sock', HOME: home, XDG_RUNTIME_DIR: home })
    expectOneLineFailure(
      unix,
      /^TEST_DATABASE=container: no Docker engine reachable at unix:\/\/\/nonexistent\.sock \(.+\): install and start one, or use TEST_DATABASE=pglite\|postgres$/,
    )
    const tcp = await runFixture({ TEST_DATABASE: 'container', DOCKER_HOST: 'tcp://127.0.0.1:1', HOME: home, XDG_RUNTIME_DIR: home })
    expectOneLineFailure(tcp, /^TEST_DATABASE=container: no Docker engine reachable at tcp:\/\/127\.0\.0\.1:1 \(.+\): install and start one, or use TEST_DATABASE=pglite\|postgres$/)
  })

  test('a value that is not a test database: the accepted ones', async () => {
    const run = await runFixture({ TEST_DATABASE: 'bogus' })
    expectOneLineFailure(run, /^TEST_DATABASE=bogus: .*pglite, postgres or container/)
  })
})

describe('TEST_DATABASE: the run says which database it uses', () => {
  test('pglite runs on PGlite even with a DATABASE_URL that goes nowhere', async () => {
    const run = await runFixture({ TEST_DATABASE: 'pglite', DATABASE_URL: 'postgres://nobody:secret@127.0.0.1:1/nowhere' })
    expect(run.exitCode, run.stderr).toBe(0)
    expect(run.stderr).toContain('test database: PGlite (in-memory clones)\n')
    expect(run.stdout + run.stderr).toContain('fixture ran on pglite')
    expect(run.stderr).toMatch(/^ *1 pass$/m)
  })

  // The preload leaves DATABASE_URL in this process only when this run is itself on that server.
  const serverUrl = process.env.DATABASE_URL
  test.if(!!serverUrl)('unset, with DATABASE_URL: that PostgreSQL, named without a password', async () => {
    const run = await runFixture({ DATABASE_URL: serverUrl! })
    expect(run.exitCode, run.stderr).toBe(0)
    expect(run.stderr).toMatch(/^test database: PostgreSQL at postgres:\/\/[^:@/]*@/m)
    expect(run.stdout + run.stderr).toContain('fixture ran on postgres')
  })

  test('unset, without DATABASE_URL: PGlite', async () => {
    const run = await runFixture({})
    expect(run.exitCode, run.stderr).toBe(0)
    expect(run.stderr).toContain('test database: PGlite (in-memory clones)\n')
  })
})
