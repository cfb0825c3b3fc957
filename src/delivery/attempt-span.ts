import { SpanKind, SpanStatusCode, type Attributes, type Context } from '@opentelemetry/api'
import { inSpan, type Tracing } from '../lib/runtime/tracing.ts'
import type { AttemptResult } from './send.ts'

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
 * One delivery attempt as a CLIENT span (docs/operations.md#traces), a child of `parent` (the
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
  const attributes: Attributes = {
    'http.request.method': 'POST',
    ...(target ? { 'server.address': target.hostname, 'server.port': Number(target.port) || (target.protocol === 'https:' ? 443 : 80), 'url.scheme': target.protocol.slice(0, -1) } : {}),
    'app.subscription.id': input.hookId,
    'app.event.id': input.eventId,
    'app.delivery.id': input.deliveryId,
    'app.delivery.attempt': input.attempt,
  }
  if (input.probe) attributes['app.delivery.circuit_probe'] = true
  return inSpan(tracing, 'POST', { kind: SpanKind.CLIENT, attributes, parent }, async (span) => {
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
