import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { createTestDatabase } from '../support/database.ts'
import { freshDataDir, startServerProcess, type RunningProcess } from '../support/process.ts'
import { startReceiver } from '../support/receiver.ts'
import { createAccount } from '../../src/accounts/service.ts'
import { createHook } from '../../src/hooks/service.ts'
import { createMessageSettler, receiveInboundMessage } from '../../src/messages/service.ts'
import { createSecretBox } from '../../src/lib/security/secret-box.ts'
import { isForbiddenHost } from '../../src/lib/security/outbound.ts'

// Two servers on one PostgreSQL drain one backlog. PGlite is one process's database: nothing to share there.
setDefaultTimeout(90_000)

// Nothing is answered until both processes have claimed deliveries: one whose worker started first
// (the other waits on the migration lock, or its worker thread is slow to start on a busy machine)
// would otherwise drain the whole backlog alone.
let bothClaimed: () => void
const claimedByBoth = new Promise<void>((resolve) => (bothClaimed = resolve))

const receiver = startReceiver(async () => {
  await claimedByBoth
  // Slow enough that a second concurrent send of one delivery would overlap the first.
  await Bun.sleep(15)
  return new Response('ok')
})

const database = await createTestDatabase()
afterAll(() => database.drop())

const HOOKS = 8
const EVENTS_PER_HOOK = 60

test.if(!!database.url)('two processes on one PostgreSQL send every delivery once, never the same one at the same time', async () => {
  const encryptionKey = crypto.getRandomValues(new Uint8Array(32))
  const db = database.handle.db
  const deps = { db, secretBox: await createSecretBox(encryptionKey), isForbiddenHost, allowPrivateTargets: true, hooksPerAccount: 100 }
  // The backlog is committed before either process starts.
  for (let n = 0; n < HOOKS; n++) {
    const account = await createAccount(db, { name: `drained ${n}` })
    await createHook(deps, account.id, { event: 'message.inbound', target_url: `${receiver.origin}/drain/${n}` })
    for (let i = 0; i < EVENTS_PER_HOOK; i++) await receiveInboundMessage({ db, deliveriesQueued: () => {}, fanOuts: createMessageSettler(db).fanOuts }, account.id, { from: '+447700900500', body: `${n}/${i}` })
  }
  await database.handle.close()

  const env = {
    DATABASE_URL: database.url!,
    DATA_DIR: freshDataDir(),
    ENCRYPTION_KEY: Buffer.from(encryptionKey).toString('base64url'),
    WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
    WEBHOOK_CA_FILE: receiver.caFile,
    LOG_LEVEL: 'debug',
    // Fewer slots per process than the subscriptions have between them (8 × 2): one process cannot
    // keep every subscription at its bound, so the other always finds due rows to claim.
    WEBHOOK_CONCURRENCY: '4',
    // The bound across processes: each process's windows may grow, their sum may not pass it.
    WEBHOOK_MAX_IN_FLIGHT_PER_SUBSCRIPTION: '2',
  }
  const servers: RunningProcess[] = await Promise.all([startServerProcess(['bun', 'src/main.ts'], env), startServerProcess(['bun', 'src/main.ts'], env)])
  try {
    // Each holds its claimed deliveries unanswered meanwhile, so the backlog is still there for the other.
    await Promise.all(servers.map((server) => server.waitForOutput('"msg":"claimed deliveries"', 30_000)))
    bothClaimed!()
    await receiver.waitFor((received) => received.length >= HOOKS * EVENTS_PER_HOOK, 60_000)
    await Bun.sleep(500)

    const timesSent = new Map<string, number>()
    for (const request of receiver.received) timesSent.set(request.headers['webhook-id']!, (timesSent.get(request.headers['webhook-id']!) ?? 0) + 1)
    expect(timesSent.size).toBe(HOOKS * EVENTS_PER_HOOK)
    // Every delivery answered 200 within the lease, so each was sent exactly once.
    expect([...timesSent.values()].every((times) => times === 1)).toBe(true)
    for (let n = 0; n < HOOKS; n++) expect(receiver.maxConcurrent(`/drain/${n}`)).toBeLessThanOrEqual(2)

    // Both processes took part.
    const claimedBy = servers.map((server) =>
      server
        .output()
        .split('\n')
        .filter((line) => line.includes('"msg":"claimed deliveries"'))
        .reduce((sum, line) => sum + (JSON.parse(line) as { count: number }).count, 0),
    )
    expect(claimedBy.every((count) => count > 0)).toBe(true)
    expect(claimedBy[0]! + claimedBy[1]!).toBe(HOOKS * EVENTS_PER_HOOK)
    console.log(`two processes: claimed ${claimedBy.join(' + ')} deliveries`)
  } finally {
    await Promise.all(servers.map((server) => server.stop()))
  }
})
