import type { Config } from '../lib/config.ts'
import type { DatabaseHandle } from '../lib/db/client.ts'
import type { Logger, LogFields } from '../lib/runtime/logger.ts'
import type { TracingSettings } from '../lib/runtime/tracing-settings.ts'
import type { FlowSettings } from './flow-control.ts'
import type { BacklogSettings } from './backlog.ts'
import type { DeliveryMetrics, OutcomeCounts } from './outcomes.ts'
import { claimDueDeliveries, recordDeliveryAttempts, type ClaimOptions, type RecordedAttempt } from './store.ts'

/** A subscription this process has not sent to lately starts with this many attempts in flight (src/delivery/flow-control.ts). */
export const INITIAL_WINDOW = 4
// Retries fall due without a commit to announce them; this bounds how late they are noticed.
const POLL_MS = 1000
const RESTART_DELAY_MS = 1000
/** A receiver whose last attempt succeeded within this long answers quickly: its backlog is ours (src/delivery/backlog.ts). */
const QUICK_ANSWER_MS = 250
// A claim looks at a backlogged subscription every few milliseconds; a report older than this is another process's to make.
const BACKLOG_FORGET_AFTER_MS = 1000

/** What the worker thread is started with. Plain data: it is posted to the thread. */
export interface WorkerSettings {
  /** Set on PostgreSQL: the worker opens its own pool and LISTENs. Unset on PGlite: the worker's store calls come back to this thread. */
  databaseUrl: string | undefined
  /** The payload of this process's own NOTIFYs, which the thread ignores: the process wakes it directly. */
  ownNotifications: string | undefined
  encryptionKey: Uint8Array
  timeoutMs: number
  allowPrivate: boolean
  ca: string | undefined
  schedule: number[]
  concurrency: number
  flow: FlowSettings
  maxPerHook: number
  leaseMs: number
  pollMs: number
  /** A debug line per claim: which process took how many (read by the two-process test). */
  logClaims: boolean
  /** An info line per attempt: subscription, event, delivery, status or error, duration. */
  logAttempts: boolean
  /** OpenTelemetry (docs/operations.md#traces): the thread exports its attempts' spans with a provider of its own. Unset: off. */
  tracing: TracingSettings | undefined
  /** When an account's deliveries count as behind (src/delivery/backlog.ts). */
  backlog: BacklogSettings
}

export type ToWorker =
  | { type: 'start'; settings: WorkerSettings }
  /** `hookIds`: the subscriptions a narrow settlement made due, which the next claim looks at first. */
  | { type: 'wake'; hookIds?: readonly string[] }
  | { type: 'stop' }
  | { type: 'reply'; id: number; ok: true; value: unknown }
  | { type: 'reply'; id: number; ok: false; error: string }

export type FromWorker =
  | { type: 'call'; id: number; op: 'claim'; args: ClaimOptions }
  | { type: 'call'; id: number; op: 'record'; args: RecordedAttempt[] }
  | { type: 'log'; level: 'debug' | 'info' | 'warn' | 'error'; message: string; fields?: LogFields }
  /** The attempts' log lines, several to a message: one postMessage per attempt would cost more than the line. */
  | { type: 'attempts'; lines: LogFields[] }
  /** Attempts ended since the last report by outcome (OUTCOMES order) and sends in flight now: at most one message per 50 ms. */
  | { type: 'metrics'; outcomes: OutcomeCounts; inFlight: number; claimSeconds: number[] }
  /** The accounts whose deliveries are behind (src/delivery/backlog.ts), sent when the set changes. */
  | { type: 'behind'; accounts: string[] }
  | { type: 'stopped' }

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export interface DeliveryWorker {
  /** Deliveries were committed by this process: the worker claims them now, `hookIds` by key in a claim of their own (src/delivery/dispatcher.ts). */
  wake(hookIds?: readonly string[]): void
  /** Lets the sends in flight finish and be recorded (bounded), then ends the thread. */
  stop(): Promise<void>
}

/**
 * A lease outlives the slowest attempt (the timeout) with room for recording it; when a
 * process dies, its leased deliveries are due again after at most this long.
 */
export function leaseFor(timeoutMs: number): number {
  return timeoutMs * 2 + 5000
}

/**
 * Runs the delivery worker in a Bun `Worker` thread, so sending (TLS, signatures, JSON) never
 * competes with request handling on the main thread. A thread that dies is started again.
 * On PGlite, which only this thread may touch, the worker's two store calls are answered here.
 */
export function startDeliveryWorker(options: {
  config: Config
  handle: DatabaseHandle
  encryptionKey: Uint8Array
  logger: Logger
  /** Where the thread's counts go (METRICS_PORT set). */
  metrics?: DeliveryMetrics
  /** The thread's module: src/delivery/worker.ts, or a wrapper of it (tests make it die). */
  workerUrl?: string
  /** The accounts whose deliveries are behind, each time the set changes (src/delivery/backlog.ts). */
  onBehind?(accounts: string[]): void
  /** The payload of this process's NOTIFYs (src/delivery/commit-notifier.ts): its worker, woken directly, ignores them. */
  notifyOrigin?: string
}): DeliveryWorker {
  const workerUrl = options.workerUrl ?? new URL('./worker.ts', import.meta.url).href
  const { config, handle, logger } = options
  const settings: WorkerSettings = {
    databaseUrl: handle.kind === 'postgres' ? config.databaseUrl : undefined,
    ownNotifications: options.notifyOrigin,
    encryptionKey: options.encryptionKey,
    timeoutMs: config.webhookTimeoutMs,
    allowPrivate: config.webhookAllowPrivateTargets,
    ca: config.webhookCaPem,
    schedule: config.webhookRetrySchedule,
    concurrency: config.webhookConcurrency,
    flow: { initialWindow: Math.min(INITIAL_WINDOW, config.webhookMaxInFlightPerSubscription), maxWindow: config.webhookMaxInFlightPerSubscription },
    maxPerHook: config.webhookMaxInFlightPerSubscription,
    leaseMs: leaseFor(config.webhookTimeoutMs),
    pollMs: POLL_MS,
    logClaims: logger.isEnabled('debug'),
    logAttempts: logger.isEnabled('info'),
    tracing: config.tracing,
    backlog: { limitMs: config.webhookBacklogLimitMs, quickAnswerMs: QUICK_ANSWER_MS, forgetAfterMs: BACKLOG_FORGET_AFTER_MS },
  }
  let stopping = false
  let stopped: (() => void) | null = null
  let worker: Worker
  let restartTimer: ReturnType<typeof setTimeout> | undefined

  const answer = async (message: Extract<FromWorker, { type: 'call' }>) => {
    try {
      // Planned once, as the worker's own connections plan them on PostgreSQL (`keyedDb`, src/lib/db/client.ts).
      const value = message.op === 'claim' ? await claimDueDeliveries(handle.keyedDb, message.args, { sole: true }) : await recordDeliveryAttempts(handle.keyedDb, message.args)
      worker.postMessage({ type: 'reply', id: message.id, ok: true, value } satisfies ToWorker)
    } catch (error) {
      worker.postMessage({ type: 'reply', id: message.id, ok: false, error: error instanceof Error ? error.message : String(error) } satisfies ToWorker)
    }
  }

  const spawn = () => {
    worker = new Worker(workerUrl)
    worker.addEventListener('message', (event: MessageEvent<FromWorker>) => {
      const message = event.data
      if (message.type === 'call') void answer(message)
      else if (message.type === 'log') logger[message.level](message.message, message.fields)
      else if (message.type === 'attempts') for (const fields of message.lines) logger.info('delivery attempt', fields)
      else if (message.type === 'metrics') options.metrics?.attempts(message.outcomes, message.inFlight, message.claimSeconds)
      else if (message.type === 'behind') options.onBehind?.(message.accounts)
      else if (message.type === 'stopped') stopped?.()
    })
    worker.addEventListener('error', (event) => logger.error('the delivery worker failed', { error: event.message }))
    worker.addEventListener('close', () => {
      if (stopping) return stopped?.()
      // What it reported died with it: the thread started again reports afresh.
      options.onBehind?.([])
      logger.error('the delivery worker stopped; starting it again', { in_ms: RESTART_DELAY_MS })
      options.metrics?.workerRestarted()
      restartTimer = setTimeout(spawn, RESTART_DELAY_MS)
    })
    worker.postMessage({ type: 'start', settings } satisfies ToWorker)
  }
  spawn()

  return {
    wake: (hookIds) => worker.postMessage({ type: 'wake', hookIds } satisfies ToWorker),
    async stop() {
      if (stopping) return
      stopping = true
      clearTimeout(restartTimer)
      const done = new Promise<void>((resolve) => (stopped = resolve))
      worker.postMessage({ type: 'stop' } satisfies ToWorker)
      // An attempt takes at most the timeout; past that (and a margin to record it), stop anyway: the leases bring the rest back.
      const gaveUp = await Promise.race([done.then(() => false), delay(config.webhookTimeoutMs + 2000).then(() => true)])
      if (gaveUp) logger.warn('the delivery worker did not stop in time; its leased deliveries will be sent again')
      worker.terminate()
    },
  }
}
