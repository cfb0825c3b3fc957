import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startTestServer } from '../support/server.ts'
import { startReceiver } from '../support/receiver.ts'
import { createLogger } from '../../src/lib/runtime/logger.ts'
import { leaseFor, startDeliveryWorker } from '../../src/delivery/supervisor.ts'

setDefaultTimeout(30_000)

const receiver = startReceiver(() => new Response('ok'))
// No worker of the server's own: each test starts one whose thread dies once.
const server = await startTestServer({
  env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile, WEBHOOK_TIMEOUT_MS: '500' },
  deliverWebhooks: false,
})

describe('the delivery worker thread dies', () => {
  for (const mode of ['throw', 'exit'] as const) {
    test(`(${mode === 'throw' ? 'an uncaught exception' : 'the thread ends'}): the supervisor starts a new one, and what the dead one had claimed is sent again after the lease`, async () => {
      const owner = await server.createAccountWithKey()
      const path = `/dying-${mode}`
      const created = await server.fetch(`/v0/account/${owner.accountId}/hooks?key=${owner.secret}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ event: 'message.inbound', target_url: `${receiver.origin}${path}` }),
      })
      expect(created.status).toBe(201)
      for (let i = 0; i < 5; i++) {
        const sent = await server.fetch(`/v0/account/${owner.accountId}/sandbox/inbound?key=${owner.secret}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ from: '+447700900400', body: `${mode} ${i}` }),
        })
        expect(sent.status).toBe(201)
      }

      const dir = mkdtempSync(join(tmpdir(), 'dying-worker-'))
      const workerModule = join(dir, 'worker.ts')
      const fixture = new URL('../support/fixtures/dying-delivery-worker.ts', import.meta.url).href
      writeFileSync(workerModule, `import { dieOnceAfterFirstAttempt } from ${JSON.stringify(fixture)}\ndieOnceAfterFirstAttempt(${JSON.stringify({ mode, marker: join(dir, 'died') })})\n`)
      const lines: string[] = []
      // What the metrics listener is told (src/ops/metrics.ts): restarts, and the attempts the living threads reported.
      let restarts = 0
      let delivered = 0
      // What the API's admission is told (src/messages/admission.ts): the dead thread's report of accounts behind dies with it.
      const behindReports: string[][] = []
      const worker = startDeliveryWorker({
        metrics: { attempts: (outcomes) => (delivered += outcomes[0]), workerRestarted: () => restarts++, accountsBehind: () => {}, messageHeld: () => {} },
        config: server.config,
        handle: server.database.handle,
        encryptionKey: server.config.encryptionKey!,
        logger: createLogger('info', (line) => lines.push(line)),
        workerUrl: Bun.pathToFileURL(workerModule).href,
        onBehind: (accounts) => behindReports.push(accounts),
      })
      const started = performance.now()
      try {
        const onPath = () => receiver.received.filter((request) => request.path === path)
        const eventIds = () => new Set(onPath().map((request) => request.headers['webhook-id']))
        await receiver.waitFor(() => eventIds().size === 5 && onPath().length >= 6, leaseFor(server.config.webhookTimeoutMs) + 10_000)
        expect(lines.some((line) => line.includes('the delivery worker stopped; starting it again'))).toBe(true)
        expect(restarts).toBe(1)
        expect(behindReports).toContainEqual([])
        // The attempt the dead thread made was never recorded: the same event came again, after its lease ran out.
        const times = new Map<string, number[]>()
        for (const request of onPath()) times.set(request.headers['webhook-id']!, [...(times.get(request.headers['webhook-id']!) ?? []), request.arrivedAt])
        const [first, again] = [...times.values()].find((at) => at.length === 2)!
        expect(again! - first!).toBeGreaterThanOrEqual(leaseFor(server.config.webhookTimeoutMs) - 1_000)
        expect(performance.now() - started).toBeLessThan(leaseFor(server.config.webhookTimeoutMs) + 10_000)
        await worker.stop()
        // The new thread's attempts reach the metrics (how many the dead one had reported before dying varies).
        expect(delivered).toBeGreaterThan(0)
      } finally {
        await worker.stop()
        rmSync(dir, { recursive: true, force: true })
      }
    })
  }
})
