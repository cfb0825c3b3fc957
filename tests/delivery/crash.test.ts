import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { createTestDatabase } from '../support/database.ts'
import { freshDataDir, runCli, startServerProcess, type RunningProcess } from '../support/process.ts'
import { startReceiver } from '../support/receiver.ts'

// The server as it runs in production (bun src/main.ts), killed with SIGKILL mid-way.
setDefaultTimeout(120_000)

let accepting = false
const receiver = startReceiver(() => (accepting ? new Response('ok') : new Response('not yet', { status: 503 })))

const database = await createTestDatabase()
afterAll(() => database.drop())
const env: Record<string, string> = {
  ...(database.url ? { DATABASE_URL: database.url } : {}),
  DATA_DIR: freshDataDir(),
  ENCRYPTION_KEY: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url'),
  WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
  WEBHOOK_CA_FILE: receiver.caFile,
  WEBHOOK_TIMEOUT_MS: '1000',
  // Retried about every second (the poll) for a minute: long enough to outlast the restart.
  WEBHOOK_RETRY_SCHEDULE: ['0', ...Array(60).fill('200ms')].join(','),
  // 16 senders as fast as the server answers: far over the default 100 requests a second per key.
  API_RATE_LIMIT: '0',
}
if (database.url) await database.handle.close()

const EVENTS = 1000

test('with the receiver refusing, 1,000 events, kill -9 mid-way, restart, receiver accepts: every event arrives, and the health figures count each attempt once', async () => {
  const demo = JSON.parse((await runCli(['demo', '--json'], env)).stdout) as { account: { id: string }; api_key: { secret: string } }
  const account = demo.account.id
  const key = demo.api_key.secret

  let server: RunningProcess = await startServerProcess(['bun', 'src/main.ts'], env)
  const hook = await fetch(`${server.origin}/v0/account/${account}/hooks?key=${key}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ event: 'message.inbound', target_url: `${receiver.origin}/crash` }),
  })
  expect(hook.status).toBe(201)
  const hookId = ((await hook.json()) as { id: string }).id

  // Events whose 201 came back: the service promised these.
  const acknowledged = new Set<string>()
  let next = 0
  const sendEvents = async (origin: string, until: number) => {
    const senders = Array.from({ length: 16 }, async () => {
      while (next < until) {
        const n = next++
        try {
          const response = await fetch(`${origin}/v0/account/${account}/sandbox/inbound?key=${key}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ from: '+447700900400', body: `event ${n}` }),
          })
          if (response.status === 201) acknowledged.add(((await response.json()) as { id: string }).id)
          else next = Math.min(next, n)
        } catch {
          // The server was killed under this request: it may or may not have committed.
          return
        }
      }
    })
    await Promise.all(senders)
  }

  const sending = sendEvents(server.origin, EVENTS)
  while (acknowledged.size < EVENTS / 2) await Bun.sleep(5)
  server.process.kill('SIGKILL')
  await sending
  await server.process.exited
  expect(acknowledged.size).toBeLessThan(EVENTS)
  expect(receiver.received.length).toBeGreaterThan(0)
  const beforeRestart = acknowledged.size

  server = await startServerProcess(['bun', 'src/main.ts'], env)
  try {
    next = acknowledged.size
    await sendEvents(server.origin, EVENTS)
    expect(acknowledged.size).toBe(EVENTS)
    accepting = true

    // Parsed once each, as they come: the receiver shares this thread.
    const seen = new Set<string>()
    let parsed = 0
    const arrived = () => {
      for (; parsed < receiver.received.length; parsed++) {
        const request = receiver.received[parsed]!
        if (request.path === '/crash') seen.add((JSON.parse(request.body) as { data: { message: { id: string } } }).data.message.id)
      }
      return seen
    }
    await receiver.waitFor(() => [...acknowledged].every((id) => arrived().has(id)), 60_000)

    // Count them: every event in the log (acknowledged or committed under the kill) arrived.
    const logged: string[] = []
    let cursor: string | null = null
    do {
      const page = (await (await fetch(`${server.origin}/v0/account/${account}/events?key=${key}&limit=100${cursor ? `&cursor=${cursor}` : ''}`)).json()) as {
        data: { id: string; data: { message: { id: string } } }[]
        next_cursor: string | null
      }
      logged.push(...page.data.map((event) => event.data.message.id))
      cursor = page.next_cursor
    } while (cursor)
    expect(logged.length).toBeGreaterThanOrEqual(EVENTS)
    await receiver.waitFor(() => logged.every((id) => arrived().has(id)), 30_000)
    console.log(`crash test: ${beforeRestart} acknowledged before the kill, ${logged.length} events logged, ${arrived().size} distinct arrived, ${receiver.received.length} requests in all`)

    // The health figures were written with each attempt's record: the attempts in flight at the kill
    // (sent, never recorded, made again) are counted once, as the attempt log has them.
    const deliveries: { state: string; attempts: number }[] = []
    cursor = null
    do {
      const page = (await (await fetch(`${server.origin}/v0/account/${account}/hooks/${hookId}/deliveries?key=${key}&limit=100${cursor ? `&cursor=${cursor}` : ''}`)).json()) as {
        data: { state: string; attempts: number }[]
        next_cursor: string | null
      }
      deliveries.push(...page.data)
      cursor = page.next_cursor
    } while (cursor)
    expect(deliveries.every((delivery) => delivery.state === 'succeeded')).toBe(true)
    const range = `interval=minute&since=${new Date(Date.now() - 3_600_000).toISOString()}`
    const stats = (await (await fetch(`${server.origin}/v0/account/${account}/hooks/${hookId}/stats?key=${key}&${range}`)).json()) as {
      totals: { attempts: number; succeeded: number; failed: number; failures: Record<string, number> }
    }
    const attemptsLogged = deliveries.reduce((sum, delivery) => sum + delivery.attempts, 0)
    expect(stats.totals).toMatchObject({ attempts: attemptsLogged, succeeded: deliveries.length, failed: attemptsLogged - deliveries.length })
    expect(stats.totals.failures.http_5xx).toBe(attemptsLogged - deliveries.length)
    const accountStats = (await (await fetch(`${server.origin}/v0/account/${account}/stats?key=${key}&${range}`)).json()) as {
      totals: { attempts: number; events: Record<string, number>; messages: { received: number } }
    }
    expect(accountStats.totals.attempts).toBe(attemptsLogged)
    expect(accountStats.totals.events['message.inbound']).toBe(logged.length)
    expect(accountStats.totals.messages.received).toBe(logged.length)
  } finally {
    await server.stop()
  }
})
