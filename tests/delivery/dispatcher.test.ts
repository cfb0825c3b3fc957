import { describe, expect, test } from 'bun:test'
import { createDispatcher, type DeliveryStore, type DispatcherOptions } from '../../src/delivery/dispatcher.ts'
import { UNANSWERED_ORIGIN_PACE_MS, UNANSWERED_ORIGIN_WINDOW } from '../../src/delivery/origin-windows.ts'
import type { AttemptResult } from '../../src/delivery/send.ts'
import type { ClaimOptions, ClaimedDelivery, RecordedAttempt } from '../../src/delivery/store.ts'

const delivery = (id: number, hookId = 'hook_1', origin = 'https://example.com'): ClaimedDelivery => ({
  id: `dlv_${id}`,
  eventId: `evt_${id}`,
  hookId,
  accountId: `acc_${hookId}`,
  attempts: 0,
  payload: '{}',
  eventType: 'message.delivered',
  targetUrl: `${origin}/`,
  targetCredentialsCiphertext: null,
  signatureScheme: 'hmac',
  secretCiphertext: 'sealed',
  previousSecretCiphertext: null,
  suspect: false,
  probe: false,
  eventSubscription: false,
  traceContext: null,
  origin,
})
const ok: AttemptResult = { ok: true, status: 200, durationMs: 1, error: null, failure: null, responseSnippet: '', retryAfterSeconds: null }

/** A queue of due deliveries in memory, honouring each allowance (subscription, account, suspects, origin), recording what the dispatcher asked of it. */
function memoryStore(due: ClaimedDelivery[]) {
  const claims: ClaimOptions[] = []
  const recorded: RecordedAttempt[][] = []
  const store: DeliveryStore = {
    async claim(options) {
      claims.push(options)
      const taken = new Map<string, number>()
      const takenByAccount = new Map<string, number>()
      const takenByOrigin = new Map<string, number>()
      let suspects = 0
      const picked: ClaimedDelivery[] = []
      for (const item of [...due]) {
        if (picked.length >= options.limit) break
        const count = taken.get(item.hookId) ?? 0
        const accountCount = takenByAccount.get(item.accountId) ?? 0
        if (count >= (options.allowances[item.hookId] ?? options.defaultAllowance)) continue
        if (accountCount >= (options.accountAllowances[item.accountId] ?? options.defaultAccountAllowance)) continue
        if (item.suspect && suspects >= options.suspectAllowance) continue
        const originCount = takenByOrigin.get(item.origin) ?? 0
        if (originCount >= (options.originAllowances?.[item.origin] ?? options.defaultOriginAllowance ?? Infinity)) continue
        taken.set(item.hookId, count + 1)
        takenByAccount.set(item.accountId, accountCount + 1)
        takenByOrigin.set(item.origin, originCount + 1)
        if (item.suspect) suspects++
        picked.push(item)
        due.splice(due.indexOf(item), 1)
      }
      return { deliveries: picked, more: false, backlog: [] }
    },
    async record(attempts) {
      // As long as a database round trip: attempts that finish meanwhile wait for the next batch.
      await Bun.sleep(3)
      recorded.push(attempts)
    },
  }
  return { store, claims, recorded, due }
}

/**
 * A dispatcher with what most tests share (8 slots, retries at once, leases and polls too long
 * to matter): each test names only what it is about.
 */
const dispatcherWith = (options: Pick<DispatcherOptions, 'store' | 'send'> & Partial<DispatcherOptions>) =>
  createDispatcher({ schedule: [0], concurrency: 8, flow: { initialWindow: 2, maxWindow: 8 }, maxPerHook: 8, leaseMs: 60_000, pollMs: 60_000, onError: () => {}, ...options })

const until = async (condition: () => boolean) => {
  for (let i = 0; i < 500 && !condition(); i++) await Bun.sleep(2)
  expect(condition()).toBe(true)
}

describe('the dispatcher', () => {
  test('never has more than `concurrency` sends in flight, and sends everything that is due', async () => {
    const memory = memoryStore(Array.from({ length: 50 }, (_, i) => delivery(i, `hook_${i % 10}`)))
    let inFlight = 0
    let most = 0
    const sent: string[] = []
    const dispatcher = dispatcherWith({
      store: memory.store,
      async send(item) {
        inFlight++
        most = Math.max(most, inFlight)
        await Bun.sleep(1 + (Number(item.id.slice(4)) % 3))
        inFlight--
        sent.push(item.id)
        return ok
      },
      onError: (message, error) => {
        throw new Error(`${message}: ${error}`)
      },
    })
    await until(() => sent.length === 50)
    await dispatcher.stop()
    expect(most).toBe(8)
    expect(new Set(sent).size).toBe(50)
    expect(memory.claims.every((claim) => claim.limit >= 1 && claim.limit <= 8 && claim.maxPerHook === 8)).toBe(true)
    // Attempts finishing together are recorded together.
    expect(memory.recorded.flat().map((attempt) => attempt.deliveryId).sort()).toEqual(sent.slice().sort())
    expect(memory.recorded.length).toBeLessThan(50)
  })

  test('each result is recorded with the decision of the retry policy', async () => {
    const memory = memoryStore([{ ...delivery(1), attempts: 1 }])
    const dispatcher = dispatcherWith({
      store: memory.store,
      send: async () => ({ ok: false, status: 500, durationMs: 1, error: 'HTTP 500', failure: 'http_5xx' as const, responseSnippet: '', retryAfterSeconds: null }),
      schedule: [0, 1_000, 60_000],
      concurrency: 4,
    })
    await until(() => memory.recorded.length === 1)
    await dispatcher.stop()
    const [attempt] = memory.recorded[0]!
    expect(attempt!.decision.kind).toBe('retry')
    // Second attempt made: the next delay is schedule[2] (60 s) ± 20 %.
    expect((attempt!.decision as { delayMs: number }).delayMs).toBeGreaterThanOrEqual(48_000)
  })

  test('wake claims at once; stop waits for the sends in flight to be recorded', async () => {
    const memory = memoryStore([])
    let release: () => void = () => {}
    const dispatcher = dispatcherWith({
      store: memory.store,
      send: () => new Promise<AttemptResult>((resolve) => (release = () => resolve(ok))),
      concurrency: 4,
    })
    await until(() => memory.claims.length === 1)
    memory.due.push(delivery(7))
    dispatcher.wake()
    await until(() => dispatcher.stats().inFlight === 1)
    let stopped = false
    const stopping = dispatcher.stop().then(() => (stopped = true))
    await Bun.sleep(20)
    expect(stopped).toBe(false)
    release()
    await stopping
    expect(memory.recorded.flat().map((attempt) => attempt.deliveryId)).toEqual(['dlv_7'])
  })

  test('the subscriptions wakes name get a claim of their own (no walk of the queue); a walk comes only when owed, and then before a second such claim; at most 64 named', async () => {
    const memory = memoryStore([])
    let blockClaims: (() => void) | undefined
    const claimOnce = memory.store.claim
    memory.store.claim = async (options) => {
      const result = await claimOnce(options)
      if (memory.claims.length === 2) await new Promise<void>((resolve) => (blockClaims = resolve))
      return result
    }
    const dispatcher = dispatcherWith({ store: memory.store, send: async () => ok })
    const named = (index: number) => ({ woken: memory.claims[index]!.woken, walk: memory.claims[index]!.walk })
    await until(() => memory.claims.length === 1)
    expect(named(0)).toEqual({ woken: [], walk: true })
    dispatcher.wake(['hook_a', 'hook_b'])
    await until(() => blockClaims !== undefined)
    expect(named(1)).toEqual({ woken: ['hook_a', 'hook_b'], walk: false })
    // Named while that claim runs, past the bound: the ones left out owe a walk, which comes next and names the rest.
    dispatcher.wake(['hook_c'])
    dispatcher.wake(Array.from({ length: 100 }, (_, i) => `hook_${i}`))
    blockClaims!()
    await until(() => memory.claims.length >= 3)
    expect(memory.claims[2]!.walk).toBe(true)
    expect(memory.claims[2]!.woken).toHaveLength(64)
    expect(memory.claims[2]!.woken![0]).toBe('hook_c')
    // With no walk owed, named wakes are claims of their own, one after another, and nothing else.
    dispatcher.wake(['hook_y'])
    await until(() => memory.claims.length === 4)
    dispatcher.wake(['hook_z'])
    await until(() => memory.claims.length === 5)
    await Bun.sleep(30)
    expect(memory.claims.slice(3).map((_, i) => named(3 + i))).toEqual([
      { woken: ['hook_y'], walk: false },
      { woken: ['hook_z'], walk: false },
    ])
    // A wake that names nothing owes a walk.
    dispatcher.wake()
    await until(() => memory.claims.length === 6)
    expect(named(5)).toEqual({ woken: [], walk: true })
    await dispatcher.stop()
  })

  test('a record owes a walk: a named claim that follows a record is followed by a walk before the next named one', async () => {
    const memory = memoryStore([])
    const dispatcher = dispatcherWith({ store: memory.store, send: async () => ok })
    await until(() => memory.claims.length === 1)
    memory.due.push(delivery(1, 'hook_named'))
    dispatcher.wake(['hook_named'])
    // The named claim leases it; its record owes a walk.
    await until(() => memory.recorded.length === 1 && memory.claims.length >= 3)
    expect(memory.claims.slice(1, 3).map((claim) => claim.walk)).toEqual([false, true])
    await dispatcher.stop()
  })

  test('a claim that took less than it asked for and saw every due subscription ends the round; a full one, or one that saw as many as it may, is followed by another', async () => {
    const memory = memoryStore([delivery(1, 'hook_1'), delivery(2, 'hook_2')])
    const releases: (() => void)[] = []
    const store: DeliveryStore = {
      // The third claim says it looked at as many due subscriptions as it may (`more`).
      claim: async (options) => ({ ...(await memory.store.claim(options)), more: memory.claims.length === 3 }),
      record: memory.store.record,
    }
    const dispatcher = dispatcherWith({
      store,
      send: () => new Promise<AttemptResult>((resolve) => releases.push(() => resolve(ok))),
      flow: { initialWindow: 8, maxWindow: 8 },
    })
    await until(() => dispatcher.stats().inFlight === 2)
    await Bun.sleep(20)
    // Two of a limit of 8, and every due subscription seen: no empty claim after it.
    expect(memory.claims.map((claim) => claim.limit)).toEqual([8])
    // Woken with as many due as the slots left: that claim takes all it asked for, and no slot is left to claim more.
    memory.due.push(...Array.from({ length: 6 }, (_, i) => delivery(10 + i, `hook_${10 + i}`)))
    dispatcher.wake()
    await until(() => dispatcher.stats().inFlight === 8)
    await Bun.sleep(20)
    expect(memory.claims.map((claim) => claim.limit)).toEqual([8, 6])
    // The records free the slots: a claim follows them; it found nothing but says there may be more, so one more follows, and that ends the round.
    releases.splice(0).forEach((release) => release())
    await until(() => memory.recorded.flat().length === 8 && memory.claims.length === 4)
    await Bun.sleep(20)
    expect(memory.claims.length).toBe(4)
    await dispatcher.stop()
  })

  test('a claim made while attempts wait to be recorded, or are being recorded, names them: their slots are free (src/delivery/store.ts)', async () => {
    const memory = memoryStore([delivery(1), delivery(2), delivery(3)])
    let releaseRecord!: () => void
    const recordReleased = new Promise<void>((resolve) => (releaseRecord = resolve))
    const recordStarted: RecordedAttempt[][] = []
    const store: DeliveryStore = {
      claim: memory.store.claim,
      async record(attempts) {
        recordStarted.push(attempts)
        await recordReleased
        memory.recorded.push(attempts)
      },
    }
    // dlv_1 and dlv_2 answer at once; dlv_3 waits, so a second batch forms while the first is being recorded.
    let answerThird!: () => void
    const thirdAnswers = new Promise<void>((resolve) => (answerThird = resolve))
    const dispatcher = dispatcherWith({
      store,
      send: async (item) => {
        if (item.id === 'dlv_3') await thirdAnswers
        return ok
      },
      flow: { initialWindow: 8, maxWindow: 8 },
      onError: (message, error) => {
        throw new Error(`${message}: ${error}`)
      },
    })
    await until(() => recordStarted.length === 1)
    const beingRecorded = recordStarted[0]!.map((attempt) => attempt.deliveryId)
    answerThird()
    await Bun.sleep(5)
    dispatcher.wake()
    await until(() => memory.claims.some((claim) => (claim.endedUnrecorded ?? []).includes('dlv_3')))
    const during = memory.claims.find((claim) => (claim.endedUnrecorded ?? []).includes('dlv_3'))!
    // The batch being recorded, and the attempts that ended after it was cut.
    expect(beingRecorded).toContain('dlv_1')
    expect([...during.endedUnrecorded!].sort()).toEqual(['dlv_1', 'dlv_2', 'dlv_3'])
    releaseRecord()
    await until(() => memory.recorded.flat().length === 3)
    expect(memory.recorded.flat().map((attempt) => attempt.deliveryId).sort()).toEqual(['dlv_1', 'dlv_2', 'dlv_3'])
    // Once recorded, they are named no more.
    const claimsSoFar = memory.claims.length
    dispatcher.wake()
    await until(() => memory.claims.length > claimsSoFar)
    expect(memory.claims.at(-1)!.endedUnrecorded).toEqual([])
    await dispatcher.stop()
  })

  test('a store that fails is reported, and the dispatcher keeps going', async () => {
    let failClaim = true
    const errors: string[] = []
    const memory = memoryStore([delivery(1)])
    const dispatcher = dispatcherWith({
      store: {
        claim: (options) => (failClaim ? Promise.reject(new Error('connection lost')) : memory.store.claim(options)),
        record: memory.store.record,
      },
      send: async () => ok,
      concurrency: 4,
      onError: (message) => errors.push(message),
    })
    await until(() => errors.length === 1)
    failClaim = false
    dispatcher.wake()
    await until(() => memory.recorded.length === 1)
    await dispatcher.stop()
    expect(errors).toEqual(['claiming deliveries failed'])
  })
  test('fairness: a slow subscription holds at most its fair share of the slots; a quick one is sent while the slow one holds them', async () => {
    const memory = memoryStore(Array.from({ length: 200 }, (_, i) => delivery(i, 'hook_slow')))
    const inFlight = new Map<string, number>()
    const most = new Map<string, number>()
    // First the slow one's answers come in 100 ms, so that its window grows; then none comes until the end.
    let holdingSlow = false
    let releaseSlow!: () => void
    const slowReleased = new Promise<void>((resolve) => (releaseSlow = resolve))
    let slowAnswering = 0
    let quickSent = 0
    // How many of the slow one's attempts were in flight as each quick one went out.
    const slowBesideQuick: number[] = []
    const dispatcher = dispatcherWith({
      store: memory.store,
      async send(item) {
        inFlight.set(item.hookId, (inFlight.get(item.hookId) ?? 0) + 1)
        most.set(item.hookId, Math.max(most.get(item.hookId) ?? 0, inFlight.get(item.hookId)!))
        if (item.hookId === 'hook_slow') {
          if (holdingSlow) await slowReleased
          else {
            slowAnswering++
            await Bun.sleep(100)
            slowAnswering--
          }
        } else {
          slowBesideQuick.push(inFlight.get('hook_slow') ?? 0)
          quickSent++
          await Bun.sleep(1)
        }
        inFlight.set(item.hookId, inFlight.get(item.hookId)! - 1)
        return { ...ok, durationMs: item.hookId === 'hook_slow' ? 100 : 1 }
      },
      concurrency: 12,
      flow: { initialWindow: 4, maxWindow: 64 },
      maxPerHook: 64,
      onError: (message, error) => {
        throw new Error(`${message}: ${error}`)
      },
    })
    try {
      await Bun.sleep(150)
      holdingSlow = true
      // Its answered slots go to attempts of its own that are held in turn.
      await until(() => slowAnswering === 0 && (inFlight.get('hook_slow') ?? 0) >= 2)
      const slowHolding = inFlight.get('hook_slow')!
      for (let i = 0; i < 20; i++) {
        memory.due.push(delivery(1000 + i, 'hook_quick'))
        dispatcher.wake()
        await until(() => quickSent === i + 1)
      }
      // Every quick one went out while the slow one held all it had: none waited for a slow answer.
      expect(Math.min(...slowBesideQuick)).toBeGreaterThanOrEqual(slowHolding)
    } finally {
      releaseSlow()
      await dispatcher.stop()
    }
    // Alone, the slow one may use half the slots (one share is kept free); with the quick one busy too, a third.
    expect(most.get('hook_slow')).toBeLessThanOrEqual(6)
  })

  test("one account's hanging receivers never hold every slot: another account's delivery goes out at once", async () => {
    const hanging = Array.from({ length: 40 }, (_, i) => ({ ...delivery(i, `hook_${i}`), accountId: 'acc_noisy', suspect: i % 2 === 0 }))
    const memory = memoryStore(hanging)
    const release: (() => void)[] = []
    const sent: string[] = []
    const dispatcher = dispatcherWith({
      store: memory.store,
      async send(item) {
        sent.push(item.id)
        if (item.accountId === 'acc_noisy') await new Promise<void>((resolve) => release.push(resolve))
        return ok
      },
      concurrency: 16,
      flow: { initialWindow: 4, maxWindow: 16 },
      maxPerHook: 16,
      onError: (message, error) => {
        throw new Error(`${message}: ${error}`)
      },
    })
    // Alone, an account may use half the slots (one share kept free for others): 8 of 16.
    await until(() => sent.length === 8)
    await Bun.sleep(20)
    expect(dispatcher.stats().inFlight).toBe(8)
    // The suspects among them were held to half the slots as well; now a quiet account's delivery arrives and is sent while the noisy one's still hang.
    memory.due.push({ ...delivery(100, 'hook_quiet', 'https://quiet.example'), accountId: 'acc_quiet' })
    dispatcher.wake()
    await until(() => sent.includes('dlv_100'))
    expect(memory.claims.some((claim) => claim.accountAllowances.acc_noisy === 0 && claim.defaultAccountAllowance > 0)).toBe(true)
    expect(memory.claims.every((claim) => claim.suspectAllowance >= 0 && claim.suspectAllowance <= 8)).toBe(true)
    for (let i = 0; i < 200 && sent.length < 41; i++) {
      for (const resolve of release.splice(0)) resolve()
      await Bun.sleep(2)
    }
    expect(new Set(sent).size).toBe(41)
    for (const resolve of release.splice(0)) resolve()
    await dispatcher.stop()
  })

  test("an origin that has not answered keeps a few attempts in flight, its subscriptions together, fewer after a round with no answer; its first answer lifts the bound", async () => {
    const hanging = Array.from({ length: 40 }, (_, i) => ({ ...delivery(i, `hook_${i}`, 'https://hangs.example'), accountId: 'acc_one' }))
    const memory = memoryStore(hanging)
    const release: ((result: AttemptResult) => void)[] = []
    const sent: string[] = []
    const dispatcher = dispatcherWith({
      store: memory.store,
      async send(item) {
        sent.push(item.id)
        if (item.origin !== 'https://hangs.example') return ok
        return new Promise<AttemptResult>((resolve) => release.push(resolve))
      },
      concurrency: 64,
      flow: { initialWindow: 4, maxWindow: 16 },
      maxPerHook: 16,
      onError: (message, error) => {
        throw new Error(`${message}: ${error}`)
      },
    })
    try {
      // The account may use 32 of the 64 slots; the origin that has never answered, 8.
      await until(() => sent.length === UNANSWERED_ORIGIN_WINDOW)
      await Bun.sleep(20)
      expect(dispatcher.stats().inFlight).toBe(UNANSWERED_ORIGIN_WINDOW)
      // The same account's receiver at another origin is not held back by it.
      memory.due.push({ ...delivery(100, 'hook_elsewhere', 'https://answers.example'), accountId: 'acc_one' })
      dispatcher.wake()
      await until(() => sent.includes('dlv_100'))
      // A round of timeouts is no answer: it halves the origin's window, once, and the places it freed stay empty until fewer than that are in flight.
      const timeout: AttemptResult = { ok: false, status: null, durationMs: 15_000, error: 'timed out', failure: 'timeout', responseSnippet: '', retryAfterSeconds: null }
      release.shift()!(timeout)
      await Bun.sleep(20)
      expect(sent.length).toBe(UNANSWERED_ORIGIN_WINDOW + 1)
      expect(memory.claims.some((claim) => claim.originAllowances?.['https://hangs.example'] === 0 && claim.defaultOriginAllowance === UNANSWERED_ORIGIN_WINDOW)).toBe(true)
      // The window's first round started within the second, which would hold the place too (the test below): wait it out.
      await Bun.sleep(UNANSWERED_ORIGIN_PACE_MS)
      for (let i = 0; i < UNANSWERED_ORIGIN_WINDOW / 2; i++) release.shift()!(timeout)
      await until(() => sent.length === UNANSWERED_ORIGIN_WINDOW + 2)
      await Bun.sleep(20)
      expect(dispatcher.stats().inFlight).toBe(UNANSWERED_ORIGIN_WINDOW / 2)
      // A 503 is an answer: the host is up, and its subscriptions may use the account's share again.
      release.shift()!({ ok: false, status: 503, durationMs: 5, error: 'HTTP 503', failure: 'http_5xx', responseSnippet: '', retryAfterSeconds: null })
      await until(() => dispatcher.stats().inFlight > UNANSWERED_ORIGIN_WINDOW)
    } finally {
      for (let i = 0; i < 200 && sent.length < 41; i++) {
        for (const resolve of release.splice(0)) resolve(ok)
        await Bun.sleep(2)
      }
      for (const resolve of release.splice(0)) resolve(ok)
      await dispatcher.stop()
    }
    expect(new Set(sent).size).toBe(41)
  })

  test('an origin that refuses at once starts its window per second, not a loop of claims and records', async () => {
    const origin = 'https://refuses.example'
    const memory = memoryStore(Array.from({ length: 40 }, (_, i) => ({ ...delivery(i, `hook_${i}`, origin), accountId: 'acc_one' })))
    const sent: string[] = []
    const refused: AttemptResult = { ok: false, status: null, durationMs: 0, error: 'connect ECONNREFUSED', failure: 'connection', responseSnippet: '', retryAfterSeconds: null }
    const dispatcher = dispatcherWith({
      store: memory.store,
      async send(item) {
        sent.push(item.id)
        return refused
      },
      concurrency: 64,
      flow: { initialWindow: 4, maxWindow: 16 },
      maxPerHook: 16,
    })
    try {
      await until(() => sent.length === UNANSWERED_ORIGIN_WINDOW)
      await until(() => memory.recorded.flat().length === UNANSWERED_ORIGIN_WINDOW)
      dispatcher.wake()
      await Bun.sleep(200)
      // Each refusal was recorded, and a record and a wake each bring a claim: nothing more started within the second.
      expect(sent.length).toBe(UNANSWERED_ORIGIN_WINDOW)
      expect(memory.claims.at(-1)?.originAllowances?.[origin]).toBe(0)
      // A second after the first round, half the window starts: the round had no answer.
      await Bun.sleep(UNANSWERED_ORIGIN_PACE_MS)
      dispatcher.wake()
      await until(() => sent.length === UNANSWERED_ORIGIN_WINDOW * 1.5)
      await Bun.sleep(100)
      expect(sent.length).toBe(UNANSWERED_ORIGIN_WINDOW * 1.5)
    } finally {
      await dispatcher.stop()
    }
  })
})
