/**
 * OpenTelemetry's standard variables, read once at start (docs/operations.md#traces): plain data,
 * so the delivery worker thread gets the same settings. Tracing is on when a traces endpoint is set
 * (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT plus /v1/traces) and neither
 * OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none says otherwise.
 */
export interface TracingSettings {
  /** Where spans are POSTed (OTLP/HTTP). */
  url: string
  protocol: 'http/protobuf' | 'http/json'
  /** Sent with every export (…_HEADERS: `key=value` pairs, values percent-encoded). */
  headers: Record<string, string>
  /** The resource: service.name (OTEL_SERVICE_NAME, else `messaging-service`) and OTEL_RESOURCE_ATTRIBUTES. */
  resource: Record<string, string>
  sampler: { name: TracesSampler; ratio: number }
  /** The batch span processor (OTEL_BSP_*): how often spans are exported, and how many wait at most (more are dropped). */
  batch: { scheduledDelayMillis: number; maxQueueSize: number; maxExportBatchSize: number; exportTimeoutMillis: number }
}

export const TRACES_SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const
export type TracesSampler = (typeof TRACES_SAMPLERS)[number]

export const DEFAULT_SERVICE_NAME = 'messaging-service'

/** A bad value, naming its variable (src/lib/config.ts turns it into the one line the process stops with). */
export class TracingSettingsError extends Error {}

/** `key=value,key=value`, keys and values percent-decoded and trimmed (the OTLP exporter and resource specifications). */
function keyValues(variable: string, raw: string | undefined): Record<string, string> {
  const pairs: Record<string, string> = {}
  if (!raw?.trim()) return pairs
  // A refusal names the pair by its place, never by its text: a header's value is an API key.
  raw.split(',').forEach((part, index) => {
    if (!part.trim()) return
    const at = part.indexOf('=')
    if (at < 1 || !part.slice(0, at).trim()) throw new TracingSettingsError(`${variable}: pair ${index + 1} is not key=value`)
    try {
      pairs[decodeURIComponent(part.slice(0, at).trim())] = decodeURIComponent(part.slice(at + 1).trim())
    } catch {
      throw new TracingSettingsError(`${variable}: pair ${index + 1} is not percent-encoded`)
    }
  })
  return pairs
}

/** A whole number from `min` to `max`, or `fallback` when unset. */
function wholeNumber(env: Record<string, string | undefined>, variable: string, fallback: number, min: number, max: number): number {
  const raw = env[variable]?.trim()
  if (!raw) return fallback
  const value = Number(raw)
  if (!Number.isInteger(value) || value < min || value > max) throw new TracingSettingsError(`${variable}: a whole number from ${min} to ${max} (got ${JSON.stringify(raw.slice(0, 50))})`)
  return value
}

function endpointOf(env: Record<string, string | undefined>): { variable: string; url: string } | undefined {
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim()
  if (traces) return { variable: 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', url: traces }
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim()
  // The base endpoint gets the signal's path; the signal's own endpoint is used as it is.
  if (base) return { variable: 'OTEL_EXPORTER_OTLP_ENDPOINT', url: `${base.replace(/\/+$/, '')}/v1/traces` }
  return undefined
}

export function tracingSettingsFromEnv(env: Record<string, string | undefined>): TracingSettings | undefined {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return undefined
  const exporter = env.OTEL_TRACES_EXPORTER?.trim().toLowerCase()
  if (exporter === 'none') return undefined
  if (exporter && exporter !== 'otlp') throw new TracingSettingsError(`OTEL_TRACES_EXPORTER: only otlp (or none) is supported (got ${JSON.stringify(exporter)})`)
  const endpoint = endpointOf(env)
  if (!endpoint) return undefined
  let parsed: URL
  try {
    parsed = new URL(endpoint.url)
  } catch {
    throw new TracingSettingsError(`${endpoint.variable}: not an absolute URL (got ${JSON.stringify(endpoint.url.slice(0, 200))})`)
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new TracingSettingsError(`${endpoint.variable}: must be http or https (got ${JSON.stringify(parsed.protocol)})`)

  const protocolVariable = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL?.trim() ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : 'OTEL_EXPORTER_OTLP_PROTOCOL'
  const protocol = env[protocolVariable]?.trim() || 'http/protobuf'
  if (protocol !== 'http/protobuf' && protocol !== 'http/json') {
    throw new TracingSettingsError(`${protocolVariable}: http/protobuf or http/json (grpc is not supported; got ${JSON.stringify(protocol)})`)
  }

  const headersVariable = env.OTEL_EXPORTER_OTLP_TRACES_HEADERS?.trim() ? 'OTEL_EXPORTER_OTLP_TRACES_HEADERS' : 'OTEL_EXPORTER_OTLP_HEADERS'
  const headers = keyValues(headersVariable, env[headersVariable])

  const sampler = (env.OTEL_TRACES_SAMPLER?.trim().toLowerCase() || 'parentbased_always_on') as TracesSampler
  if (!TRACES_SAMPLERS.includes(sampler)) throw new TracingSettingsError(`OTEL_TRACES_SAMPLER: one of ${TRACES_SAMPLERS.join(', ')} (got ${JSON.stringify(sampler)})`)
  const rawRatio = env.OTEL_TRACES_SAMPLER_ARG?.trim()
  const ratio = rawRatio ? Number(rawRatio) : 1
  if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1) throw new TracingSettingsError(`OTEL_TRACES_SAMPLER_ARG: a ratio from 0 to 1 (got ${JSON.stringify(rawRatio)})`)

  const resource = keyValues('OTEL_RESOURCE_ATTRIBUTES', env.OTEL_RESOURCE_ATTRIBUTES)
  resource['service.name'] = env.OTEL_SERVICE_NAME?.trim() || resource['service.name'] || DEFAULT_SERVICE_NAME
  // The specification's defaults.
  const maxQueueSize = wholeNumber(env, 'OTEL_BSP_MAX_QUEUE_SIZE', 2048, 1, 1_000_000)
  const batch = {
    scheduledDelayMillis: wholeNumber(env, 'OTEL_BSP_SCHEDULE_DELAY', 5000, 1, 3_600_000),
    maxQueueSize,
    maxExportBatchSize: Math.min(maxQueueSize, wholeNumber(env, 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 512, 1, 1_000_000)),
    exportTimeoutMillis: wholeNumber(env, 'OTEL_BSP_EXPORT_TIMEOUT', 30_000, 1, 3_600_000),
  }
  return { url: parsed.href, protocol, headers, resource, sampler: { name: sampler, ratio }, batch }
}
