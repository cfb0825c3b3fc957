import { Type as t, type Static } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { readFileSync } from 'node:fs'
import { parseTrustedProxies } from './http/client-address.ts'
import { LOG_LEVELS, type LogLevel } from './runtime/logger.ts'
import { tracingSettingsFromEnv, TracingSettingsError, type TracingSettings } from './runtime/tracing-settings.ts'

const EnvSchema = t.Object({
  PORT: t.Integer({ minimum: 0, maximum: 65535, default: 3000 }),
  HOST: t.String({ minLength: 1, default: '127.0.0.1' }),
  PUBLIC_URL: t.Optional(t.String({ minLength: 1 })),
  DATABASE_URL: t.Optional(t.String({ pattern: '^postgres(ql)?://' })),
  DATA_DIR: t.String({ minLength: 1, default: './data' }),
  LOG_LEVEL: t.Union(LOG_LEVELS.map((level) => t.Literal(level)), { default: 'info' }),
  ENCRYPTION_KEY: t.Optional(t.String({ pattern: '^[A-Za-z0-9_+/-]{43}=?$' })),
  OAUTH_REFRESH_GRACE_S: t.Integer({ minimum: 0, maximum: 300, default: 30 }),
  WEBHOOK_ALLOW_PRIVATE_TARGETS: t.Boolean({ default: false }),
  WEBHOOK_TIMEOUT_MS: t.Integer({ minimum: 100, maximum: 60_000, default: 15_000 }),
  WEBHOOK_RETRY_SCHEDULE: t.String({ pattern: '^\\s*\\d+(ms|s|m|h)?(\\s*,\\s*\\d+(ms|s|m|h)?)*\\s*$', default: '0,5s,5m,30m,2h,5h,10h,14h,20h,24h' }),
  WEBHOOK_CA_FILE: t.Optional(t.String({ minLength: 1 })),
  WEBHOOK_CONCURRENCY: t.Integer({ minimum: 1, maximum: 4096, default: 256 }),
  WEBHOOK_MAX_IN_FLIGHT_PER_SUBSCRIPTION: t.Integer({ minimum: 1, maximum: 1024, default: 64 }),
  WEBHOOK_BACKLOG_LIMIT_MS: t.Integer({ minimum: 0, maximum: 600_000, default: 100 }),
  MESSAGE_HOLD_MS: t.Integer({ minimum: 0, maximum: 30_000, default: 2000 }),
  HOOKS_PER_ACCOUNT: t.Integer({ minimum: 1, maximum: 10_000, default: 100 }),
  EVENT_RETENTION_DAYS: t.Integer({ minimum: 7, maximum: 3650, default: 30 }),
  MCP_ALLOWED_ORIGINS: t.Optional(t.String()),
  TRUSTED_PROXIES: t.Optional(t.String()),
  METRICS_PORT: t.Optional(t.Integer({ minimum: 1, maximum: 65535 })),
  API_RATE_LIMIT: t.Integer({ minimum: 0, maximum: 100_000, default: 100 }),
})

export interface Config {
  port: number
  host: string
  /** External origin, no trailing slash. */
  publicUrl: string
  /** `{base_url}` of the published interface: the public origin plus `/v0`. */
  baseUrl: string
  databaseUrl: string | undefined
  dataDir: string
  logLevel: LogLevel
  /**
   * 32 bytes that encrypt secrets the service must read back (signing keys, token pairs kept
   * for the refresh grace window). Unset: a key file in DATA_DIR (see src/lib/security/secret-box.ts).
   */
  encryptionKey: Uint8Array | undefined
  oauthRefreshGraceSeconds: number
  /** Lets webhooks target loopback and private addresses: tests and local development only. */
  webhookAllowPrivateTargets: boolean
  /** Per-attempt timeout of a webhook delivery. */
  webhookTimeoutMs: number
  /** Delay before each attempt, in milliseconds; its length is the number of attempts. */
  webhookRetrySchedule: number[]
  /** PEM certificates trusted for webhook targets besides the system's (WEBHOOK_CA_FILE, read at start). */
  webhookCaPem: string | undefined
  /** Deliveries in flight at once in this process. */
  webhookConcurrency: number
  /** The most deliveries of one subscription in flight at once, across every process; its adaptive window stays below. */
  webhookMaxInFlightPerSubscription: number
  /**
   * An account whose deliveries to a quickly answering subscription have waited longer than this
   * is behind, and its new messages are held (docs/webhooks.md#when-deliveries-fall-behind); 0: never.
   */
  webhookBacklogLimitMs: number
  /** The longest a POST …/messages is held while its account is behind, before a 429 deliveries_behind. */
  messageHoldMs: number
  /** Webhook subscriptions one account may hold. */
  hooksPerAccount: number
  /** Events (with their deliveries and attempt logs) older than this many days are deleted. */
  eventRetentionDays: number
  /** Browser origins allowed to call the MCP endpoint besides PUBLIC_URL's and loopback ones. */
  mcpAllowedOrigins: string[]
  /** Normalised CIDRs of the load balancers whose X-Forwarded-For is believed (src/lib/http/client-address.ts); empty: none. */
  trustedProxies: string[]
  /** The Prometheus listener's port (on HOST); unset: no listener, and requests are not measured. */
  metricsPort: number | undefined
  /** Requests per second per credential (bursts up to twice that), per instance; 0: no limit. */
  apiRateLimit: number
  /** OpenTelemetry traces from the standard OTEL_* variables (docs/operations.md#traces); unset: off. */
  tracing: TracingSettings | undefined
}

export class ConfigError extends Error {}

/** Reads and validates configuration; throws a ConfigError whose message names the variable. */
export function loadConfig(env: Record<string, string | undefined>): Config {
  const relevant: Record<string, unknown> = {}
  for (const name of Object.keys(EnvSchema.properties)) {
    const value = env[name]
    if (value !== undefined && value !== '') relevant[name] = value
  }
  // Value.Convert truncates "2.5" to 2 for an integer: a setting written with a fraction is refused, not cut.
  for (const [name, value] of Object.entries(relevant)) {
    if ((EnvSchema.properties as Record<string, { type?: string }>)[name]?.type === 'integer' && !/^[+-]?\d+$/.test(String(value).trim())) {
      throw new ConfigError(`${name}: Expected integer (got ${JSON.stringify(value)})`)
    }
  }
  const converted = Value.Default(EnvSchema, Value.Convert(EnvSchema, relevant))
  const firstError = Value.Errors(EnvSchema, converted).First()
  if (firstError) {
    const variable = firstError.path.replace(/^\//, '') || 'environment'
    throw new ConfigError(`${variable}: ${firstError.message} (got ${JSON.stringify(relevant[variable] ?? null)})`)
  }
  const parsed = converted as Static<typeof EnvSchema>
  const publicUrl = parsePublicUrl(parsed.PUBLIC_URL ?? `http://localhost:${parsed.PORT}`)
  return {
    port: parsed.PORT,
    host: parsed.HOST,
    publicUrl,
    baseUrl: `${publicUrl}/v0`,
    databaseUrl: parsed.DATABASE_URL,
    dataDir: parsed.DATA_DIR,
    logLevel: parsed.LOG_LEVEL,
    encryptionKey: parsed.ENCRYPTION_KEY === undefined ? undefined : Buffer.from(parsed.ENCRYPTION_KEY, 'base64'),
    oauthRefreshGraceSeconds: parsed.OAUTH_REFRESH_GRACE_S,
    webhookAllowPrivateTargets: parsed.WEBHOOK_ALLOW_PRIVATE_TARGETS,
    webhookTimeoutMs: parsed.WEBHOOK_TIMEOUT_MS,
    webhookRetrySchedule: parseDurations(parsed.WEBHOOK_RETRY_SCHEDULE),
    webhookCaPem: parsed.WEBHOOK_CA_FILE === undefined ? undefined : readCaFile(parsed.WEBHOOK_CA_FILE),
    webhookConcurrency: parsed.WEBHOOK_CONCURRENCY,
    webhookMaxInFlightPerSubscription: parsed.WEBHOOK_MAX_IN_FLIGHT_PER_SUBSCRIPTION,
    webhookBacklogLimitMs: parsed.WEBHOOK_BACKLOG_LIMIT_MS,
    messageHoldMs: parsed.MESSAGE_HOLD_MS,
    hooksPerAccount: parsed.HOOKS_PER_ACCOUNT,
    eventRetentionDays: parsed.EVENT_RETENTION_DAYS,
    mcpAllowedOrigins: parseOrigins(parsed.MCP_ALLOWED_ORIGINS ?? ''),
    trustedProxies: readTrustedProxies(parsed.TRUSTED_PROXIES ?? ''),
    metricsPort: parsed.METRICS_PORT,
    apiRateLimit: parsed.API_RATE_LIMIT,
    tracing: readTracingSettings(env),
  }
}

function readTracingSettings(env: Record<string, string | undefined>): TracingSettings | undefined {
  try {
    return tracingSettingsFromEnv(env)
  } catch (error) {
    if (error instanceof TracingSettingsError) throw new ConfigError(error.message)
    throw error
  }
}

/** `https://a.example, http://localhost:6274` → their origins; anything that is not an origin is refused. */
function parseOrigins(raw: string): string[] {
  return raw
    .split(',')
    .map((part) => part.trim())
    .filter((part) => part !== '')
    .map((part) => {
      let url: URL | undefined
      try {
        url = new URL(part)
      } catch {}
      if (!url || (url.protocol !== 'https:' && url.protocol !== 'http:') || url.origin !== part.replace(/\/$/, '')) {
        throw new ConfigError(`MCP_ALLOWED_ORIGINS: ${JSON.stringify(part)} is not an origin (scheme://host[:port])`)
      }
      return url.origin
    })
}

function readTrustedProxies(raw: string): string[] {
  try {
    return parseTrustedProxies(raw)
  } catch (error) {
    throw new ConfigError(`TRUSTED_PROXIES: ${(error as Error).message}`)
  }
}

function readCaFile(path: string): string {
  let pem: string
  try {
    pem = readFileSync(path, 'utf8')
  } catch (error) {
    throw new ConfigError(`WEBHOOK_CA_FILE: cannot read ${JSON.stringify(path)} (${(error as NodeJS.ErrnoException).code ?? 'error'})`)
  }
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new ConfigError(`WEBHOOK_CA_FILE: ${JSON.stringify(path)} holds no PEM certificate`)
  return pem
}

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

/** `0,5s,5m,2h` → milliseconds; a bare number is seconds. */
function parseDurations(raw: string): number[] {
  return raw.split(',').map((part) => {
    const [, amount, unit] = /^\s*(\d+)(ms|s|m|h)?\s*$/.exec(part)!
    return Number(amount) * UNIT_MS[unit ?? 's']!
  })
}

function parsePublicUrl(raw: string): string {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new ConfigError(`PUBLIC_URL: must be an absolute URL (got ${JSON.stringify(raw)})`)
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new ConfigError(`PUBLIC_URL: must use http or https (got ${JSON.stringify(raw)})`)
  }
  if (url.search || url.hash || url.username || url.password) {
    throw new ConfigError(`PUBLIC_URL: must not carry a query, fragment or credentials (got ${JSON.stringify(raw)})`)
  }
  return `${url.origin}${url.pathname}`.replace(/\/+$/, '')
}
