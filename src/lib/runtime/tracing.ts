import { context, diag, DiagLogLevel, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span, type TextMapGetter, type Tracer } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import { OTLPTraceExporter as JsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { OTLPTraceExporter as ProtobufTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { resourceFromAttributes } from '@opentelemetry/resources'
import { AlwaysOffSampler, AlwaysOnSampler, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, TracerProvider, type Sampler } from '@opentelemetry/sdk-trace'
import type { LogFields, Logger } from './logger.ts'
import type { TracingSettings } from './tracing-settings.ts'

/**
 * OpenTelemetry traces (docs/operations.md#traces), when TracingSettings say so: one tracer
 * provider per thread (the main thread's and the delivery worker's), exporting over OTLP/HTTP in
 * batches. Nothing here is global but the context manager, which only carries the active span
 * across awaits: with tracing off nothing of this is created and no span object exists.
 */
export interface Tracing {
  tracer: Tracer
  /** A context whose span is the W3C `traceparent` (and `tracestate`) given, on top of `base`; `base` when there is none or it is malformed. */
  contextFrom(carrier: { traceparent?: string | null; tracestate?: string | null }, base?: Context): Context
  /** The `traceparent` that names a span as a parent: stored with a message or an event, sent with a webhook. */
  traceparentOf(span: Span): string
  /** Exports what is buffered, then stops. */
  shutdown(): Promise<void>
}

/** The instrumentation scope of every span the service makes (its tracer's name). */
export const SERVICE_INSTRUMENTATION = 'messaging-service'

const propagator = new W3CTraceContextPropagator()
const carrierGetter: TextMapGetter<{ traceparent?: string | null; tracestate?: string | null }> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => (key === 'traceparent' || key === 'tracestate' ? (carrier[key] ?? undefined) : undefined),
}

let contextManagerSet = false

function samplerOf(settings: TracingSettings['sampler']): Sampler {
  const ratio = new TraceIdRatioBasedSampler(settings.ratio)
  switch (settings.name) {
    case 'always_on':
      return new AlwaysOnSampler()
    case 'always_off':
      return new AlwaysOffSampler()
    case 'traceidratio':
      return ratio
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() })
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio })
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() })
  }
}

/**
 * `warn`: where the SDK's own warnings and errors go (an export refused or timed out, spans dropped
 * from a full queue), so that a wrong endpoint or key shows in the logs. Process-wide, as the
 * SDK's diagnostics are: the first thread's tracing to start sets it.
 */
export function startTracing(settings: TracingSettings, options: { instrumentationName?: string; warn?(message: string): void } = {}): Tracing {
  if (!contextManagerSet) {
    contextManagerSet = context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
    const warn = options.warn
    if (warn) {
      const write = (message: string, ...args: unknown[]) => warn([message, ...args.map((arg) => (arg instanceof Error ? arg.message : String(arg)))].join(' ').slice(0, 1_000))
      diag.setLogger({ error: write, warn: write, info: () => {}, debug: () => {}, verbose: () => {} }, DiagLogLevel.WARN)
    }
  }
  const Exporter = settings.protocol === 'http/json' ? JsonTraceExporter : ProtobufTraceExporter
  const provider = new TracerProvider({
    resource: resourceFromAttributes(settings.resource),
    sampler: samplerOf(settings.sampler),
    spanProcessors: [new BatchSpanProcessor({ exporter: new Exporter({ url: settings.url, headers: settings.headers }), ...settings.batch })],
  })
  return {
    tracer: provider.getTracer(options.instrumentationName ?? SERVICE_INSTRUMENTATION),
    contextFrom: (carrier, base = ROOT_CONTEXT) => (carrier.traceparent ? propagator.extract(base, carrier, carrierGetter) : base),
    traceparentOf(span) {
      const { traceId, spanId, traceFlags } = span.spanContext()
      return `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, '0')}`
    },
    shutdown: () => provider.shutdown(),
  }
}

/** The `trace_id` and `span_id` of the active span, for a log line written inside it (none outside one). */
export function activeTraceFields(): LogFields | undefined {
  const span = trace.getActiveSpan()
  if (!span) return undefined
  const { traceId, spanId } = span.spanContext()
  return { trace_id: traceId, span_id: spanId }
}

/** `logger`, its lines written inside a span carrying that span's `trace_id` and `span_id`. */
export function tracedLogger(logger: Logger): Logger {
  const withTrace = (fields: LogFields | undefined): LogFields | undefined => {
    const ids = activeTraceFields()
    return ids && !(fields && 'trace_id' in fields) ? { ...fields, ...ids } : fields
  }
  return {
    debug: (msg, fields) => logger.debug(msg, withTrace(fields)),
    info: (msg, fields) => logger.info(msg, withTrace(fields)),
    warn: (msg, fields) => logger.warn(msg, withTrace(fields)),
    error: (msg, fields) => logger.error(msg, withTrace(fields)),
    isEnabled: (level) => logger.isEnabled(level),
    flush: () => logger.flush(),
  }
}

/**
 * Runs `work` inside a new span of `tracing` (a child of `options.parent`, else of the active
 * span), which ends when `work` settles, its status ERROR when it throws. Without tracing, just
 * `work(undefined)`: no span object is made.
 */
export async function inSpan<T>(
  tracing: Tracing | undefined,
  name: string,
  options: { kind?: SpanKind; attributes?: Attributes; parent?: Context },
  work: (span: Span | undefined) => Promise<T>,
): Promise<T> {
  if (!tracing) return work(undefined)
  const parent = options.parent ?? context.active()
  const span = tracing.tracer.startSpan(name, { kind: options.kind ?? SpanKind.INTERNAL, attributes: options.attributes }, parent)
  try {
    return await context.with(trace.setSpan(parent, span), () => work(span))
  } catch (error) {
    span.setStatus({ code: SpanStatusCode.ERROR })
    span.setAttribute('error.type', error instanceof Error ? error.name : 'Error')
    throw error
  } finally {
    span.end()
  }
}
