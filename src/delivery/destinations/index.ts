import { sendWebhook, standardWebhookHeaders, type AttemptResult, type SendOptions, type WebhookRequest } from '../send.ts'
import { publishAttempt, type BrokerPool, type BrokerPolicy } from './broker.ts'
import { createNatsPool } from './nats.ts'
import { createRabbitMqPool } from './rabbitmq.ts'
import { InvalidDestination, parseDestination, type NatsDestination, type RabbitMqDestination } from './targets.ts'

/**
 * Where an attempt goes (docs/webhooks.md#destinations; docs/architecture.md says how a kind is
 * added). Everything before and after an attempt (the outbox, the claim, flow control, the
 * circuit, retries, the attempt log, the figures) is the same for every kind; only sending
 * differs, and each kind answers with the same AttemptResult. HTTPS is sendWebhook; a broker is
 * a pool of connections whose `publish` resolves on the broker's confirmation.
 */
export interface DestinationRequest extends WebhookRequest {
  /** The URL to connect to: for a broker, with the credentials the stored, redacted one hides. */
  url: string
  /** The event type, for broker consumers that route on it. */
  eventType: string
  /** The subscription's id: with the event's, what a broker deduplicates re-sends on. */
  subscriptionId: string
}

export interface Destinations {
  /** One attempt, to whichever kind the URL names; never throws. */
  send(request: DestinationRequest): Promise<AttemptResult>
  /** Closes the pooled broker connections. */
  close(): Promise<void>
}

/** How long a pooled broker connection stays open without an attempt. */
const BROKER_IDLE_MS = 5 * 60_000

/** `options` hold for every attempt: the pools' connections were opened under them. */
export function createDestinations(options: SendOptions): Destinations {
  let rabbitmq: BrokerPool<RabbitMqDestination> | undefined
  let nats: BrokerPool<NatsDestination> | undefined
  const policy: BrokerPolicy = {
    allowPrivate: options.allowPrivate,
    ca: options.ca,
    lookup: options.lookup,
    timeoutMs: options.timeoutMs,
    connectTimeoutMs: options.connectTimeoutMs,
    idleMs: BROKER_IDLE_MS,
  }
  return {
    async send(request) {
      let destination
      try {
        destination = parseDestination(request.url)
      } catch (error) {
        if (!(error instanceof InvalidDestination)) throw error
        return { ok: false, status: null, durationMs: 0, error: `invalid target URL: ${error.message}`, failure: 'other', responseSnippet: '', retryAfterSeconds: null }
      }
      if (destination.kind === 'https') return sendWebhook(request, options)
      const now = options.now?.() ?? new Date()
      let signed: Record<string, string>
      try {
        signed = await standardWebhookHeaders(request, Math.floor(now.getTime() / 1000))
      } catch {
        return { ok: false, status: null, durationMs: 0, error: 'the attempt could not be signed', failure: 'other', responseSnippet: '', retryAfterSeconds: null }
      }
      const message = { id: request.id, deduplicationId: `${request.id}:${request.subscriptionId}`, type: request.eventType, body: request.body, headers: { ...request.headers, ...signed }, now }
      if (destination.kind === 'rabbitmq') {
        rabbitmq ??= createRabbitMqPool(policy)
        return publishAttempt(rabbitmq, destination, message, options.timeoutMs)
      }
      nats ??= createNatsPool(policy)
      return publishAttempt(nats, destination, message, options.timeoutMs)
    },
    async close() {
      await Promise.all([rabbitmq?.close(), nats?.close()])
    },
  }
}
