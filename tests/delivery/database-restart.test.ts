import { expect, setDefaultTimeout, test } from 'bun:test'
import postgres from 'postgres'
import { testDatabaseChoice } from '../support/database.ts'
import { privatePostgresUnavailable, startPrivatePostgres, type PrivatePostgres } from '../support/private-postgres.ts'
import { freshDataDir, runCli, startServerProcess, type RunningProcess } from '../support/process.ts'
import { startReceiver } from '../support/receiver.ts'

// The server as production runs it (bun src/main.ts) on a PostgreSQL of the test's own, which the
// test restarts, then stops and starts again, while messages are being sent and delivered. Only
// in the PostgreSQL pass: the PGlite pass has no database server to lose.
setDefaultTimeout(120_000)

const unavailable = testDatabaseChoice() === 'pglite' ? 'the PGlite pass has no database server to restart' : privatePostgresUnavailable()

interface Answer {
  kind: 'outbound' | 'inbound'
  sentAt: number
  ms: number
  /** 0: no answer (a network failure or our 15 s timeout). */
  status: number
  messageId?: string
  problem?: { body: Record<string, unknown>; contentType: string | null; retryAfter: string | null }
}

const PROBLEM_KEYS = ['code', 'detail', 'request_id', 'status', 'title', 'type']

test.skipIf(unavailable !== null)(
  `PostgreSQL restarts mid-delivery: requests meanwhile get a prompt 503, readiness follows, the worker listens again, and every accepted message's event is delivered without a process restart${unavailable ? ` (skipped: ${unavailable})` : ''}`,
  async () => {
    // Answers after 150 ms, so that attempts are in flight when the database goes away and their records fail.
    const receiver = startReceiver(async () => {
      await Bun.sleep(150)
      return new Response('ok')
    })
    let database: PrivatePostgres | undefined
    let server: RunningProcess | undefined
    let observer: postgres.Sql | undefined
    try {
      database = await startPrivatePostgres()
      const env = {
        DATABASE_URL: database.url,
        DATA_DIR: freshDataDir(),
        ENCRYPTION_KEY: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url'),
        WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
        WEBHOOK_CA_FILE: receiver.caFile,
        // Leases of 2 × 1 s + 5 s: attempts whose record was lost are sent again 7 s after their claim.
        WEBHOOK_TIMEOUT_MS: '1000',
      }
      const demo = JSON.parse((await runCli(['demo', '--json'], env)).stdout) as { account: { id: string }; api_key: { secret: string } }
      server = await startServerProcess(['bun', 'src/main.ts'], env)
      const origin = server.origin
      const base = `${origin}/v0/account/${demo.account.id}`
      const key = `key=${demo.api_key.secret}`
      for (const [event, path] of [['message.delivered', '/restart/delivered'], ['message.inbound', '/restart/inbound']]) {
        const created = await fetch(`${base}/hooks?${key}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ event, target_url: `${receiver.origin}${path}` }) })
        expect(created.status).toBe(201)
      }

      const answers: Answer[] = []
      const send = async (kind: Answer['kind']) => {
        const sentAt = performance.now()
        const answer: Answer = { kind, sentAt, ms: 0, status: 0 }
        try {
          const response = await fetch(kind === 'outbound' ? `${base}/messages?${key}` : `${base}/sandbox/inbound?${key}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(kind === 'outbound' ? { to: '+14155550123', body: 'through a restart' } : { from: '+14155550124', body: 'through a restart' }),
            signal: AbortSignal.timeout(15_000),
          })
          const body = (await response.json()) as Record<string, unknown>
          answer.status = response.status
          if (response.ok) answer.messageId = body.id as string
          else answer.problem = { body, contentType: response.headers.get('content-type'), retryAfter: response.headers.get('retry-after') }
        } catch {
          // No answer: status 0.
        }
        answer.ms = performance.now() - sentAt
        answers.push(answer)
      }
      // An open loop: a request every 20 ms whatever the earlier ones are doing. Requests that
      // queue for a connection show up as slow answers (a closed loop would slow down with them).
      let sending = true
      const inFlight = new Set<Promise<void>>()
      const sender = (async () => {
        for (let n = 0; sending; n++) {
          const sent = send(n % 2 === 0 ? 'outbound' : 'inbound')
          inFlight.add(sent)
          void sent.finally(() => inFlight.delete(sent))
          await Bun.sleep(20)
        }
      })()
      const readiness: { at: number; ms: number; status: number }[] = []
      const probing = (async () => {
        while (sending) {
          const at = performance.now()
          const status = await fetch(`${origin}/readyz`, { signal: AbortSignal.timeout(15_000) }).then((response) => response.status, () => 0)
          readiness.push({ at, ms: performance.now() - at, status })
          await Bun.sleep(100)
        }
      })()

      await Bun.sleep(1_000)
      // A restart as an operator does it, in the middle of sending and delivering.
      await database.restart()
      await Bun.sleep(1_500)
      // Then 2.5 s without a database: long enough to watch readiness and the answers meanwhile.
      await database.stop()
      const stopped = performance.now()
      await Bun.sleep(2_500)
      const starting = performance.now()
      await database.start()
      const started = performance.now()
      await Bun.sleep(3_000)
      sending = false
      await Promise.all([sender, probing])
      await Promise.all(inFlight)

      // Every request was answered promptly: accepted, or a 503 problem naming the database. Never a 500, never a hang.
      const summary = (answer: Answer) => ({ status: answer.status, ms: Math.round(answer.ms), at: Math.round(answer.sentAt - stopped), code: answer.problem?.body.code, detail: answer.problem?.body.detail })
      expect(answers.length).toBeGreaterThan(200)
      expect(answers.filter((answer) => ![201, 202, 503].includes(answer.status) || answer.ms > 5_000).map(summary)).toEqual([])
      const refused = answers.filter((answer) => answer.status === 503)
      expect(refused.length).toBeGreaterThan(0)
      for (const { problem } of refused) {
        expect(problem!.contentType).toBe('application/problem+json')
        expect(problem!.retryAfter).toBe('5')
        expect(problem!.body.code).toBe('database_unavailable')
        // No stack, no driver message, no address: the same fixed body every time.
        expect(Object.keys(problem!.body).sort()).toEqual(PROBLEM_KEYS)
        expect(String(problem!.body.detail)).not.toMatch(/ECONN|CONNECT|127\.0\.0\.1|postgres|terminat|select|insert/i)
      }
      // While the database was down every request was refused at once (none waited for it to come back: nothing could be stored), and once it was back everything was accepted again, by itself.
      expect(answers.filter((answer) => answer.sentAt > stopped && answer.sentAt < starting && (answer.status !== 503 || answer.ms > 2_000)).map(summary)).toEqual([])
      expect(answers.filter((answer) => answer.sentAt > started + 2_000 && answer.status !== 201 && answer.status !== 202).map(summary)).toEqual([])

      // Readiness: 503 all through the outage, 200 again within about a second of the database's return, always answered promptly.
      const down = readiness.filter((probe) => probe.at > stopped && probe.at + probe.ms < starting)
      expect(down.length).toBeGreaterThan(5)
      expect(down.filter((probe) => probe.status !== 503)).toEqual([])
      expect(readiness.filter((probe) => probe.ms > 3_000 || probe.status === 0)).toEqual([])
      const back = readiness.find((probe) => probe.at > started && probe.status === 200)
      expect(back).toBeDefined()
      expect(back!.at - started).toBeLessThan(2_500)
      expect(readiness.at(-1)!.status).toBe(200)

      // Every message the service accepted has its event delivered: the settlement, the claim and the record all came back by themselves.
      const accepted = answers.filter((answer) => answer.messageId)
      expect(accepted.length).toBeGreaterThan(50)
      const receipts = () => {
        const count = new Map<string, number>()
        for (const request of receiver.received) {
          const id = (JSON.parse(request.body) as { data: { message: { id: string } } }).data.message.id
          count.set(id, (count.get(id) ?? 0) + 1)
        }
        return count
      }
      await receiver.waitFor(() => {
        const delivered = receipts()
        return accepted.every((answer) => delivered.has(answer.messageId!))
      }, 30_000)
      // At least once: attempts were in flight when the database went away (the receiver takes
      // 150 ms), their records failed, and they were sent again when their leases ran out.
      const output = server.output()
      expect(output).toMatch(/recording \d+ delivery attempts failed/)
      await receiver.waitFor(() => [...receipts().values()].some((count) => count > 1), 15_000)

      // The worker's LISTEN came back after each outage (postgres-js listens again on a new
      // connection by itself), and PostgreSQL has that session listening now.
      expect(output.split('listening for deliveries_due again').length - 1).toBeGreaterThanOrEqual(2)
      observer = postgres(database.url, { max: 1, onnotice: () => {} })
      const listeners = await observer`select count(*)::int as n from pg_stat_activity where query = 'listen "deliveries_due"'`
      expect(listeners[0]!.n).toBe(1)

      // One process and one worker thread all along, and no failure went unrecognised.
      expect(server.process.exitCode).toBeNull()
      expect(output).not.toContain('the delivery worker stopped')
      expect(output).not.toContain('unhandled error')
      expect(output).toContain('the database is unavailable')
    } finally {
      await observer?.end({ timeout: 1 })
      await server?.stop()
      await database?.remove()
      receiver.stop()
    }
  },
)
