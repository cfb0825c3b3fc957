// The delivery worker thread (started by src/delivery/supervisor.ts): claim → send → record.
import { POOL_SIZES, postgresClient, preparedDrizzle } from '../lib/db/client.ts'
import { createSecretBox, type SecretBox } from '../lib/security/secret-box.ts'
import { describeError, type LogFields } from '../lib/runtime/logger.ts'
import { createDispatcher, type DeliveryStore, type Dispatcher } from './dispatcher.ts'
import type { AttemptResult } from './send.ts'
import type { SigningKeys } from './signing.ts'
import { createDestinations } from './destinations/index.ts'
import { traceAttempt, type AttemptTraceFields } from './attempt-span.ts'
import { startTracing, type Tracing } from '../lib/runtime/tracing.ts'
import { occurrenceBody, SUBSCRIPTION_ID_HEADER } from './event-wire.ts'
import { DELIVERIES_CHANNEL, claimDueDeliveries, recordDeliveryAttempts, type ClaimedDelivery } from './store.ts'
import { KEYED_PLAN_SETTINGS } from '../lib/db/keyed-plans.ts'
import type { FromWorker, ToWorker, WorkerSettings } from './supervisor.ts'
import { OUTCOME_INDEX, type OutcomeCounts } from './outcomes.ts'
import { createBacklogTracker } from './backlog.ts'

const post = (message: FromWorker) => postMessage(message)
const log = (level: 'debug' | 'info' | 'warn' | 'error', message: string, fields?: LogFields) => post({ type: 'log', level, message, fields })

let dispatcher: Dispatcher | undefined
let tracing: Tracing | undefined
let flushAttemptLogs = () => {}
let backlogTimer: ReturnType<typeof setInterval> | undefined
let closeDatabase: () => Promise<void> = async () => {}
let closeDestinations: () => Promise<void> = async () => {}
const pendingCalls = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>()
let nextCallId = 0

/** PGlite: the thread that owns the database runs each store call and posts the answer back. */
function proxiedStore(): DeliveryStore {
  const call = <T>(message: { op: 'claim'; args: unknown } | { op: 'record'; args: unknown }) =>
    new Promise<T>((resolve, reject) => {
      const id = nextCallId++
      pendingCalls.set(id, { resolve: resolve as (value: unknown) => void, reject })
      post({ type: 'call', id, ...message } as FromWorker)
    })
  return {
    claim: (options) => call({ op: 'claim', args: options }),
    record: (attempts) => call({ op: 'record', args: attempts }),
  }
}

/**
 * PostgreSQL: a pool of this thread's own, and LISTEN so that commits in any process wake it.
 * While the database is away the pool refuses claims and records at once (src/lib/db/client.ts):
 * the dispatcher logs them, its poll claims again, and attempts whose record was lost are sent
 * again when their lease runs out. postgres-js listens again by itself on a new connection
 * once its listening one is lost (and keeps trying until it can); `onlisten` says when it has.
 */
async function postgresStore(url: string, onNotified: () => void, ownNotifications: string | undefined): Promise<DeliveryStore> {
  const client = postgresClient(url, {
    max: POOL_SIZES.worker,
    settings: KEYED_PLAN_SETTINGS,
    onAvailability: (available, error) =>
      available
        ? log('info', 'the database answers again: claiming deliveries')
        : log('warn', 'the database is unavailable: claims and records fail until it answers', { error: error instanceof Error ? error.message : String(error) }),
  })
  const db = preparedDrizzle(client)
  let listened = false
  const listening = await client.listen(DELIVERIES_CHANNEL, (payload) => payload !== ownNotifications && onNotified(), () => {
    // Notifications sent while the connection was away are lost: claim now rather than at the next poll.
    if (listened) {
      log('info', `listening for ${DELIVERIES_CHANNEL} again`)
      onNotified()
    }
    listened = true
  })
  closeDatabase = async () => {
    await listening.unlisten().catch(() => {})
    await client.end({ timeout: 5 })
  }
  return {
    claim: (options) => claimDueDeliveries(db, options),
    record: (attempts) => recordDeliveryAttempts(db, attempts),
  }
}

/** Signing secrets opened once each: a busy subscription would otherwise decrypt its secret for every attempt. */
function secretOpener(box: SecretBox) {
  const opened = new Map<string, string>()
  return async (ciphertext: string) => {
    let secret = opened.get(ciphertext)
    if (secret === undefined) {
      secret = await box.open(ciphertext)
      if (opened.size >= 10_000) opened.clear()
      opened.set(ciphertext, secret)
    }
    return secret
  }
}

async function start(settings: WorkerSettings) {
  const openSecret = secretOpener(await createSecretBox(settings.encryptionKey))
  tracing = settings.tracing ? startTracing(settings.tracing, { warn: (message) => log('warn', 'OpenTelemetry', { error: message }) }) : undefined
  // Each attempt's span, for its log line (written when the dispatcher reports the attempt).
  const attemptTraces = new Map<ClaimedDelivery, AttemptTraceFields>()
  const wake = () => dispatcher?.wake()
  const database = settings.databaseUrl ? await postgresStore(settings.databaseUrl, wake, settings.ownNotifications) : proxiedStore()
  // The accounts whose deliveries are behind go to the API thread when they change (src/messages/admission.ts).
  const backlog = createBacklogTracker(settings.backlog)
  let behind: string[] = []
  const reportBehind = () => {
    const now = backlog.behindAccounts()
    if (now.length === behind.length && now.every((accountId, index) => accountId === behind[index])) return
    behind = now
    post({ type: 'behind', accounts: now })
  }
  backlogTimer = setInterval(reportBehind, settings.backlog.forgetAfterMs)
  const store: DeliveryStore = {
    async claim(options) {
      const claimed = await database.claim(options)
      if (settings.logClaims && claimed.deliveries.length > 0) log('debug', 'claimed deliveries', { count: claimed.deliveries.length })
      backlog.report(claimed.backlog)
      reportBehind()
      return claimed
    },
    record: database.record,
  }
  const destinations = createDestinations({ timeoutMs: settings.timeoutMs, allowPrivate: settings.allowPrivate, ca: settings.ca })
  closeDestinations = () => destinations.close()
  const send = async (delivery: ClaimedDelivery): Promise<AttemptResult> => {
    let keys: SigningKeys
    let url: string
    try {
      keys = {
        scheme: delivery.signatureScheme,
        current: await openSecret(delivery.secretCiphertext),
        previous: delivery.previousSecretCiphertext ? await openSecret(delivery.previousSecretCiphertext) : null,
      }
      url = delivery.targetCredentialsCiphertext ? await openSecret(delivery.targetCredentialsCiphertext) : delivery.targetUrl
    } catch (error) {
      log('error', 'cannot open a webhook signing secret or a destination\'s credentials', { hook_id: delivery.hookId, error: String(error) })
      return { ok: false, status: null, durationMs: 0, error: 'the signing secret or the destination\'s credentials could not be opened', failure: 'other', responseSnippet: '', retryAfterSeconds: null }
    }
    const body = delivery.eventSubscription ? occurrenceBody(delivery.payload) : delivery.payload
    const send = (headers: Record<string, string>) =>
      destinations.send(
        { url, id: delivery.eventId, eventType: delivery.eventType, subscriptionId: delivery.hookId, body, keys, headers: delivery.eventSubscription ? { ...headers, [SUBSCRIPTION_ID_HEADER]: delivery.hookId } : headers },
      )
    if (!tracing) return send({})
    const ids = { hookId: delivery.hookId, eventId: delivery.eventId, deliveryId: delivery.id, attempt: delivery.attempts + 1, url: delivery.targetUrl, probe: delivery.probe }
    const { result, trace } = await traceAttempt(tracing, tracing.contextFrom({ traceparent: delivery.traceContext }), ids, send)
    if (settings.logAttempts) attemptTraces.set(delivery, trace)
    return result
  }
  // Attempt lines go to the main thread's logger in batches, at most 50 ms late.
  let attemptLines: LogFields[] = []
  let attemptTimer: ReturnType<typeof setTimeout> | undefined
  const flushAttemptLines = () => {
    attemptTimer = undefined
    if (attemptLines.length > 0) post({ type: 'attempts', lines: attemptLines })
    attemptLines = []
  }
  // Counts for the metrics, posted like the lines: at most one message per 50 ms.
  const outcomes: OutcomeCounts = [0, 0, 0, 0, 0]
  let claimSeconds: number[] = []
  let inFlight = 0
  let countsTimer: ReturnType<typeof setTimeout> | undefined
  const flushCounts = () => {
    countsTimer = undefined
    post({ type: 'metrics', outcomes: [...outcomes], inFlight, claimSeconds })
    outcomes.fill(0)
    claimSeconds = []
  }
  flushAttemptLogs = () => {
    flushAttemptLines()
    clearTimeout(countsTimer)
    flushCounts()
  }
  dispatcher = createDispatcher({
    store,
    send,
    schedule: settings.schedule,
    concurrency: settings.concurrency,
    flow: settings.flow,
    maxPerHook: settings.maxPerHook,
    leaseMs: settings.leaseMs,
    pollMs: settings.pollMs,
    // The database's message and SQLSTATE, and a failed statement's text, never its parameters.
    onError: (message, error) => log('error', message, { ...describeError(error) }),
    onInFlight(now) {
      inFlight = now
      countsTimer ??= setTimeout(flushCounts, 50)
    },
    onClaim(durationMs) {
      claimSeconds.push(durationMs / 1000)
      countsTimer ??= setTimeout(flushCounts, 50)
    },
    onAttempt: (delivery, { result, decision }) => {
      backlog.answered(delivery.hookId, result)
      outcomes[OUTCOME_INDEX[decision.kind]]! += 1
      countsTimer ??= setTimeout(flushCounts, 50)
      if (settings.logAttempts) {
        const trace = attemptTraces.get(delivery)
        attemptTraces.delete(delivery)
        attemptLines.push({
          hook_id: delivery.hookId,
          event_id: delivery.eventId,
          delivery_id: delivery.id,
          attempt: delivery.attempts + 1,
          status: result.status,
          ...(result.error ? { error: result.error } : {}),
          duration_ms: result.durationMs,
          outcome: decision.kind,
          // The one attempt an open circuit let through (src/delivery/circuit.ts).
          ...(delivery.probe ? { circuit: 'probe' } : {}),
          ...trace,
        })
        if (attemptLines.length >= 500) flushAttemptLines()
        else attemptTimer ??= setTimeout(flushAttemptLines, 50)
      }
    },
  })
}

async function stop() {
  clearInterval(backlogTimer)
  await dispatcher?.stop()
  await closeDestinations()
  flushAttemptLogs()
  await tracing?.shutdown()
  await closeDatabase()
  post({ type: 'stopped' })
}

addEventListener('message', (event: MessageEvent<ToWorker>) => {
  const message = event.data
  switch (message.type) {
    case 'start':
      start(message.settings).catch((error) => {
        log('error', 'the delivery worker could not start', { error: String(error) })
        // Ending the thread (only the thread) makes the supervisor start a new one after a pause.
        close()
      })
      break
    case 'wake':
      dispatcher?.wake(message.hookIds)
      break
    case 'stop':
      void stop()
      break
    case 'reply': {
      const pending = pendingCalls.get(message.id)
      pendingCalls.delete(message.id)
      if (message.ok) pending?.resolve(message.value)
      else pending?.reject(new Error(message.error))
      break
    }
  }
})
