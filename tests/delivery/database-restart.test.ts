import { expect, setDefaultTimeout, test } from 'bun:test'
import { testDatabaseChoice } from '../support/database.ts'
import { privatePostgresUnavailable, startPrivatePostgres, type PrivatePostgres } from '../support/private-postgres.ts'
import { freshDataDir, runCli, startServerProcess, type RunningProcess } from '../support/process.ts'
import { startReceiver } from '../support/receiver.ts'

// The server as production runs it (bun src/main.ts) on a PostgreSQL of the test's own, which the
// test stops and starts again while messages are being sent and delivered. Only in the
// PostgreSQL pass: the PGlite pass has no database server to lose.
setDefaultTimeout(120_000)

const unavailable = testDatabaseChoice() === 'pglite' ? 'the PGlite pass' : privatePostgresUnavailable()

interface Answer {
  kind: 'outbound' | 'inbound'
  status: number
  ms: number
  messageId?: string
  problem?: { code: string; contentType: string | null; retryAfter: string | null }
}

test.skipIf(unavailable !== null)(
  `PostgreSQL restarts mid-delivery: requests meanwhile get a prompt 503, readiness follows, and every accepted message's event is delivered without a process restart${unavailable ? ` (skipped: ${unavailable})` : ''}`,
  async () => {
    const receiver = startReceiver(() => new Response('ok'))
    let database: PrivatePostgres | undefined
    let server: RunningProcess | undefined
    try {
      database = startPrivatePostgres()
      const env = {
        DATABASE_URL: database.url,
        DATA_DIR: freshDataDir(),
        ENCRYPTION_KEY: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url'),
        WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
        WEBHOOK_CA_FILE: receiver.caFile,
        WEBHOOK_TIMEOUT_MS: '1000',
      }
      const demo = JSON.parse((await runCli(['demo', '--json'], env)).stdout) as { account: { id: string }; api_key: { secret: string } }
      server = await startServerProcess(['bun', 'src/main.ts'], env)
      const base = `${server.origin}/v0/account/${demo.account.id}`
      const key = `key=${demo.api_key.secret}`
      for (const [event, path] of [['message.delivered', '/restart/delivered'], ['message.inbound', '/restart/inbound']]) {
        const created = await fetch(`${base}/hooks?${key}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ event, target_url: `${receiver.origin}${path}` }) })
        expect(created.status).toBe(201)
      }

      const answers: Answer[] = []
      const readiness: { at: number; status: number }[] = []
      let sending = true
      const send = async (kind: Answer['kind']) => {
        const started = performance.now()
        const response = await fetch(kind === 'outbound' ? `${base}/messages?${key}` : `${base}/sandbox/inbound?${key}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(kind === 'outbound' ? { to: '+14155550123', body: 'through a restart' } : { from: '+14155550124', body: 'through a restart' }),
        })
        const body = (await response.json()) as { id?: string; code?: string }
        answers.push({
          kind,
          status: response.status,
          ms: performance.now() - started,
          messageId: response.ok ? body.id : undefined,
          problem: response.ok ? undefined : { code: body.code ?? '', contentType: response.headers.get('content-type'), retryAfter: response.headers.get('retry-after') },
        })
      }
      const senders = Array.from({ length: 4 }, async (_, n) => {
        while (sending) {
          await send(n % 2 === 0 ? 'outbound' : 'inbound')
          await Bun.sleep(20)
        }
      })
      const probing = (async () => {
        while (sending) {
          const response = await fetch(`${server!.origin}/readyz`)
          readiness.push({ at: performance.now(), status: response.status })
          await Bun.sleep(100)
        }
      })()

      await Bun.sleep(1_000)
      const outageStarted = performance.now()
      database.stop()
      await Bun.sleep(2_500)
      database.start()
      const outageEnded = performance.now()
      await Bun.sleep(3_000)
      sending = false
      await Promise.all([...senders, probing])

      // Nothing hung and nothing was a 500: accepted, or a 503 problem naming the database, promptly.
      expect(answers.length).toBeGreaterThan(20)
      for (const answer of answers) {
        expect([201, 202, 503]).toContain(answer.status)
        expect(answer.ms).toBeLessThan(6_000)
        if (answer.status === 503) expect(answer.problem).toEqual({ code: 'database_unavailable', contentType: 'application/problem+json', retryAfter: '5' })
      }
      expect(answers.filter((answer) => answer.status === 503).length).toBeGreaterThan(0)
      expect(readiness.some((probe) => probe.at > outageStarted && probe.at < outageEnded && probe.status === 503)).toBe(true)
      expect(readiness.at(-1)!.status).toBe(200)

      // Every message the service accepted has its event delivered: the settlement, the claim and the record all came back by themselves.
      const accepted = answers.filter((answer) => answer.messageId)
      expect(accepted.length).toBeGreaterThan(10)
      const deliveredIds = () =>
        new Set(receiver.received.map((request) => (JSON.parse(request.body) as { data: { message: { id: string } } }).data.message.id))
      await receiver.waitFor(() => accepted.every((answer) => deliveredIds().has(answer.messageId!)), 30_000)
      expect(server.process.exitCode).toBeNull()
      expect(server.output()).not.toContain('unhandled error')
      expect(server.output()).toContain('the database is unavailable')
    } finally {
      await server?.stop()
      database?.remove()
      receiver.stop()
    }
  },
)

