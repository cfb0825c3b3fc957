import type { FailureReason } from '../../stats/failure-reasons.ts'
import { ConnectTimeout, TargetRefused, errorCode, isTimeout, raceSignal, type Lookup } from '../../lib/security/outbound.ts'
import type { AttemptResult } from '../send.ts'

/** What a broker destination publishes: the stored body bytes, and the Standard Webhooks headers as message headers. */
export interface BrokerMessage {
  /** The event id (AMQP message-id; `webhook-id` in the headers, the consumer's key to drop duplicates). */
  id: string
  /**
   * What a broker with a duplicate window deduplicates on (Nats-Msg-Id): the event id and the
   * subscription's, so a re-send of one delivery is dropped while the same event sent by two
   * subscriptions into one stream is kept twice (docs/webhooks.md#destinations).
   */
  deduplicationId: string
  /** The event type, for consumers that route on it (AMQP type; NATS header). */
  type: string
  body: string
  headers: Record<string, string>
  now: Date
}

/** WEBHOOK_ALLOW_PRIVATE_TARGETS, WEBHOOK_CA_FILE and the timeouts, as for HTTPS (docs/webhooks.md#timeouts). */
export interface BrokerPolicy {
  allowPrivate: boolean
  ca?: string
  lookup?: Lookup
  /** The whole attempt: connecting (when no pooled connection is open), publishing, the confirmation. */
  timeoutMs: number
  connectTimeoutMs?: number
  /** A pooled connection unused this long is closed. */
  idleMs: number
}

/** A kind of broker's connections, pooled per broker and credentials, reused across attempts. */
export interface BrokerPool<D> {
  /**
   * Resolves once the broker confirmed the message, with what its confirmation says (kept as the
   * attempt's response); rejects with a BrokerFailure (or the signal's reason) otherwise.
   */
  publish(destination: D, message: BrokerMessage, signal: AbortSignal): Promise<string>
  close(): Promise<void>
}

/** Why a publish failed, in the attempt log's words and the health figures' reasons. */
export class BrokerFailure extends Error {
  constructor(
    readonly reason: FailureReason,
    message: string,
  ) {
    super(message)
    this.name = 'BrokerFailure'
  }

  /** A failure before the broker answered: the guard's refusal, no connection, or no answer in time. */
  static ofNetwork(error: unknown, where: string): BrokerFailure {
    if (error instanceof BrokerFailure) return error
    if (error instanceof TargetRefused) return new BrokerFailure(error.reason === 'unresolvable' ? 'connection' : 'refused', `refused (${error.reason}): ${error.message}`)
    if (isTimeout(error) || error instanceof ConnectTimeout || /ETIMEDOUT|timed? ?out/i.test(String((error as Error)?.message))) return new BrokerFailure('timeout', `${where}: no answer in time`)
    const code = errorCode(error)
    // Our words, or the error's code: a library's message may quote the URL it was given.
    return new BrokerFailure('connection', `${where}: ${code ?? 'the connection failed or closed'}`)
  }
}

/** One publish as an attempt for the attempt log; never throws. */
export async function publishAttempt<D>(pool: BrokerPool<D>, destination: D, message: BrokerMessage, timeoutMs: number): Promise<AttemptResult> {
  const started = performance.now()
  const signal = AbortSignal.timeout(timeoutMs)
  try {
    const confirmation = await pool.publish(destination, message, signal)
    return { ok: true, status: null, durationMs: Math.round(performance.now() - started), error: null, failure: null, responseSnippet: confirmation, retryAfterSeconds: null }
  } catch (error) {
    const failure = isTimeout(error) ? new BrokerFailure('timeout', `timed out after ${timeoutMs} ms`) : BrokerFailure.ofNetwork(error, 'publishing')
    return { ok: false, status: null, durationMs: Math.round(performance.now() - started), error: failure.message, failure: failure.reason, responseSnippet: '', retryAfterSeconds: null }
  }
}

/** How long closing a pooled connection may wait for the broker's goodbye: one that hangs does not hold up a shutdown. */
const CLOSE_TIMEOUT_MS = 2_000

/** What a kind of broker tells its pool about its connections. */
export interface ConnectionKind<D, C> {
  /** Destinations with the same key share a connection (the broker, and the credentials it was opened with). */
  key(destination: D): string
  /** Through the outbound guard; bounded by `signal`. */
  open(destination: D, signal: AbortSignal): Promise<C>
  /** Calls `forget` once the connection closes by itself (a broker restart, a lost network). */
  whenClosed(connection: C, forget: () => void): void
  /** Whether an unused connection may be closed now; by default, yes. */
  closable?(connection: C): boolean
  close(connection: C): Promise<unknown>
}

/**
 * Connections shared by every attempt to the same broker: opened once (attempts that arrive
 * while it opens wait for the same one), forgotten when they close so the next attempt opens
 * another, closed after `policy.idleMs` unused, and all closed (each given a bounded time) by `close`.
 */
export function connectionPool<D, C>(policy: BrokerPolicy, kind: ConnectionKind<D, C>) {
  const connections = new Map<string, { opening: Promise<C>; usedAt: number }>()
  const sweep = setInterval(() => {
    for (const [key, entry] of connections) {
      entry.opening.then((connection) => {
        if (performance.now() - entry.usedAt > policy.idleMs && (kind.closable?.(connection) ?? true) && connections.get(key) === entry) {
          connections.delete(key)
          kind.close(connection).catch(() => {})
        }
      }, () => {})
    }
  }, Math.min(60_000, policy.idleMs))
  ;(sweep as { unref?: () => void }).unref?.()
  return {
    acquire(destination: D, signal: AbortSignal): Promise<C> {
      const key = kind.key(destination)
      let entry = connections.get(key)
      if (!entry) {
        // Bounded by its own timeout, not the first caller's: other attempts wait on the same connect.
        const opened = { opening: kind.open(destination, AbortSignal.timeout(policy.timeoutMs)), usedAt: performance.now() }
        const forget = () => {
          if (connections.get(key) === opened) connections.delete(key)
        }
        connections.set(key, opened)
        opened.opening.then((connection) => kind.whenClosed(connection, forget), forget)
        entry = opened
      }
      entry.usedAt = performance.now()
      return raceSignal(entry.opening, signal)
    },
    async close(): Promise<void> {
      clearInterval(sweep)
      const open = [...connections.values()]
      connections.clear()
      await Promise.all(
        open.map((entry) => Promise.race([entry.opening.then((connection) => kind.close(connection)).catch(() => {}), new Promise((resolve) => setTimeout(resolve, CLOSE_TIMEOUT_MS))])),
      )
    },
  }
}
