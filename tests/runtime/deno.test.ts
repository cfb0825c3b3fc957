import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { freshDataDir, runCli, startServerProcess } from '../support/process.ts'
import { createTestDatabase } from '../support/database.ts'

// The same app served by Deno.serve (src/main.deno.ts). A developer without Deno skips this file;
// CI installs Deno, and there it must run.
const denoAvailable = Bun.which('deno') !== null
setDefaultTimeout(90_000)

const database = await createTestDatabase()
afterAll(() => database.drop())
// DATA_DIR in both modes: on PostgreSQL it still holds the encryption key file.
const env: Record<string, string> = database.url ? { DATABASE_URL: database.url, DATA_DIR: freshDataDir() } : { DATA_DIR: freshDataDir() }
if (database.url) await database.handle.close()

test.if(denoAvailable || process.env.CI === 'true')('deno run src/main.deno.ts serves /healthz and an authenticated GET /v0/account', async () => {
  const cli = await runCli(['demo', '--json'], env)
  expect(cli.exitCode).toBe(0)
  const demo = JSON.parse(cli.stdout)

  const server = await startServerProcess(['deno', 'run', '--allow-all', '--quiet', 'src/main.deno.ts'], env, 60_000)
  try {
    await server.waitForOutput('"runtime":"deno"')
    expect(await (await fetch(`${server.origin}/healthz`)).json()).toEqual({ status: 'ok' })

    const account = await fetch(`${server.origin}/v0/account?key=${demo.api_key.secret}`)
    expect(account.status).toBe(200)
    expect((await account.json()).id).toBe(demo.account.id)
    expect(account.headers.get('x-request-id')).toMatch(/^req_/)

    const refused = await fetch(`${server.origin}/v0/account?key=sk_live_wrong`)
    expect(refused.status).toBe(401)
    expect(refused.headers.get('content-type')).toBe('application/problem+json')

    const tooBig = await fetch(`${server.origin}/v0/account?key=${demo.api_key.secret}`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'x'.repeat(2 * 1024 * 1024) }),
    })
    expect(tooBig.status).toBe(413)
  } finally {
    expect(await server.stop('SIGTERM')).toBe(0)
  }
})
