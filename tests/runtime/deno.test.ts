import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { Webhook } from 'standardwebhooks'
import { freshDataDir, runCli, startServerProcess } from '../support/process.ts'
import { createTestDatabase } from '../support/database.ts'

// The same app served by Deno.serve (src/main.deno.ts). A developer without Deno skips this file;
// CI installs Deno, and there it must run.
const denoAvailable = Bun.which('deno') !== null
setDefaultTimeout(90_000)

const database = await createTestDatabase()
afterAll(() => database.drop())
// DATA_DIR in both modes: on PostgreSQL it still holds the encryption key file.
const env: Record<string, string> = {
  ...(database.url ? { DATABASE_URL: database.url } : {}),
  DATA_DIR: freshDataDir(),
  WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
}
if (database.url) await database.handle.close()

test.if(denoAvailable || process.env.CI === 'true')('deno run src/main.deno.ts serves /healthz, an authenticated GET /v0/account and a webhook test event', async () => {
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

    // The dashboard is bundled by Bun: under Deno it is a clear 503, and the API goes on.
    const dashboard = await fetch(`${server.origin}/dashboard`)
    expect(dashboard.status).toBe(503)
    expect((await dashboard.json()).code).toBe('dashboard_unavailable')

    const refused = await fetch(`${server.origin}/v0/account?key=sk_live_wrong`)
    expect(refused.status).toBe(401)
    expect(refused.headers.get('content-type')).toBe('application/problem+json')

    const tooBig = await fetch(`${server.origin}/v0/account?key=${demo.api_key.secret}`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'x'.repeat(2 * 1024 * 1024) }),
    })
    expect(tooBig.status).toBe(413)

    // The API process sends a test event itself: over plain http to a local receiver it goes
    // out, signed; to an https name it is refused with a reason (Deno's fetch cannot pin it).
    const received: { headers: Headers; body: string }[] = []
    const local = Bun.serve({
      port: 0,
      hostname: '127.0.0.1',
      async fetch(request) {
        received.push({ headers: request.headers, body: await request.text() })
        return new Response('seen')
      },
    })
    try {
      const subscribe = async (target_url: string) => {
        const response = await fetch(`${server.origin}/v0/account/${demo.account.id}/hooks?key=${demo.api_key.secret}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ event: 'message.inbound', target_url }),
        })
        expect(response.status).toBe(201)
        return (await response.json()) as { id: string; secret: string }
      }
      const sendTest = async (hookId: string) =>
        (await (await fetch(`${server.origin}/v0/account/${demo.account.id}/hooks/${hookId}/test?key=${demo.api_key.secret}`, { method: 'POST' })).json()) as {
          status_code: number | null
          error: string | null
        }
      const plain = await subscribe(`http://127.0.0.1:${local.port}/deno`)
      expect(await sendTest(plain.id)).toMatchObject({ status_code: 200, error: null })
      expect(new Webhook(plain.secret).verify(received[0]!.body, Object.fromEntries(received[0]!.headers))).toBeTruthy()
      const named = await subscribe(`https://localhost:${local.port}/deno-tls`)
      expect(await sendTest(named.id)).toMatchObject({ status_code: null, error: expect.stringContaining('the Bun entry') })
      expect(received).toHaveLength(1)
    } finally {
      local.stop(true)
    }
  } finally {
    expect(await server.stop('SIGTERM')).toBe(0)
  }
})
