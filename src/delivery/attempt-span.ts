import { SpanKind, SpanStatusCode, type Attributes, type Context } from '@opentelemetry/api'
import { inSpan, type Tracing } from '../lib/runtime/tracing.ts'
import type { AttemptResult } from './send.ts'
import { parseDestination } from './destinations/targets.ts'

/** What names an attempt in its span and its log line. */
export interface AttemptIds {
  hookId: string
  eventId: string
  deliveryId: string
  /** 1 for the first attempt. */
  attempt: number
}

/** The `trace_id` and `span_id` of an attempt's span, for its log line. */
export type AttemptTraceFields = { trace_id: string; span_id: string }

/** `error.type` of a failed attempt: the status code, or what kept an answer from coming (our words, never the receiver's). */
function errorTypeOf(result: AttemptResult): string {
  if (result.status !== null) return String(result.status)
  if (result.error && /timed out/i.test(result.error)) return 'timeout'
  return 'connection_error'
}

/**
 * A broker destination's attempt as OpenTelemetry's messaging conventions name a publish: `publish
 * <exchange or subject>`, a PRODUCER span with the system, the destination, the message id (the
 * event id) and the broker's host and port; the URL's credentials never appear (docs/operations.md#traces).
 */
function brokerSpan(target: URL): { name: string; attributes: Attributes } | undefined {
  let destination
  try {
    destination = parseDestination(target.href)
  } catch {
    return undefined
  }
  if (destination.kind === 'https') return undefined
  const name = destination.kind === 'rabbitmq' ? destination.exchange || destination.routingKey : destination.subject
  return {
    name: `publish ${name}`,
    attributes: {
      'messaging.system': destination.kind,
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'publish',
      'messaging.destination.name': name,
      ...(destination.kind === 'rabbitmq' && destination.routingKey ? { 'messaging.rabbitmq.destination.routing_key': destination.routingKey } : {}),
      'server.address': destination.hostname.replace(/^\[(.*)\]$/, '$1'),
      'server.port': destination.port,
    },
  }
}

/**
 * One delivery attempt as a CLIENT span (a PRODUCER span for a broker) (docs/operations.md#traces), a child of `parent` (the
 * span that wrote the event, whose traceparent is stored with it), in whichever process and
 * however long after. `send` gets the headers that carry the span's `traceparent`, so a traced
 * receiver continues the same trace. The URL is named by host and port only: a webhook URL's
 * path or query may hold the receiver's own secret (a Slack-style token).
 */
export async function traceAttempt(
  tracing: Tracing,
  parent: Context,
  input: AttemptIds & { url: string; probe?: boolean },
  send: (headers: Record<string, string>) => Promise<AttemptResult>,
): Promise<{ result: AttemptResult; trace: AttemptTraceFields }> {
  // A target that is not a URL fails in sendWebhook, and its span says so; it has no address to name.
  const target = URL.parse(input.url)
  const broker = target ? brokerSpan(target) : undefined
  const attributes: Attributes = {
    ...(broker ? broker.attributes : { 'http.request.method': 'POST' }),
    ...(target && !broker ? { 'server.address': target.hostname, 'server.port': Number(target.port) || (target.protocol === 'https:' ? 443 : 80), 'url.scheme': target.protocol.slice(0, -1) } : {}),
    'app.subscription.id': input.hookId,
    'app.event.id': input.eventId,
    'app.delivery.id': input.deliveryId,
    'app.delivery.attempt': input.attempt,
  }
  if (input.probe) attributes['app.delivery.circuit_probe'] = true
  return inSpan(tracing, broker?.name ?? 'POST', { kind: broker ? SpanKind.PRODUCER : SpanKind.CLIENT, attributes, parent }, async (span) => {
    const result = await send({ traceparent: tracing.traceparentOf(span!) })
    if (result.status !== null) span!.setAttribute('http.response.status_code', result.status)
    if (!result.ok) {
      span!.setAttribute('error.type', errorTypeOf(result))
      // An answer's own description (a redirect's Location, say) may hold the receiver's secret: the status
      // code says enough. Without an answer the error is ours (connection refused, timed out).
      span!.setStatus({ code: SpanStatusCode.ERROR, ...(result.status === null && result.error ? { message: result.error } : {}) })
    }
    const { traceId, spanId } = span!.spanContext()
    return { result, trace: { trace_id: traceId, span_id: spanId } }
  })
}
