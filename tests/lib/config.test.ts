import { describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ConfigError, loadConfig } from '../../src/lib/config.ts'

describe('loadConfig', () => {
  test('defaults are the documented ones (README, Configuration)', () => {
    expect(loadConfig({})).toEqual({
      port: 3000,
      host: '127.0.0.1',
      publicUrl: 'http://localhost:3000',
      baseUrl: 'http://localhost:3000/v0',
      databaseUrl: undefined,
      dataDir: './data',
      logLevel: 'info',
      encryptionKey: undefined,
      oauthRefreshGraceSeconds: 30,
      webhookAllowPrivateTargets: false,
      webhookTimeoutMs: 15_000,
      webhookRetrySchedule: [0, 5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 50_400_000, 72_000_000, 86_400_000],
      webhookCaPem: undefined,
      webhookConcurrency: 256,
      webhookMaxInFlightPerSubscription: 64,
      webhookBacklogLimitMs: 100,
      messageHoldMs: 2000,
      hooksPerAccount: 100,
      eventRetentionDays: 30,
      mcpAllowedOrigins: [],
      trustedProxies: [],
      metricsPort: undefined,
      apiRateLimit: 100,
      tracing: undefined,
    })
  })

  test('traces: the standard OTEL_* variables; no endpoint, OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none is off', () => {
    expect(loadConfig({ OTEL_SERVICE_NAME: 'api' }).tracing).toBeUndefined()
    expect(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'true' }).tracing).toBeUndefined()
    expect(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'none' }).tracing).toBeUndefined()
    expect(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }).tracing).toEqual({
      url: 'http://collector:4318/v1/traces',
      protocol: 'http/protobuf',
      headers: {},
      resource: { 'service.name': 'messaging-service' },
      sampler: { name: 'parentbased_always_on', ratio: 1 },
      batch: { scheduledDelayMillis: 5000, maxQueueSize: 2048, maxExportBatchSize: 512, exportTimeoutMillis: 30_000 },
    })
    const full = loadConfig({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://ignored:4318',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://api.honeycomb.io/v1/traces',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_HEADERS: 'x-honeycomb-team=abc%3D%3D, x-other = 1',
      OTEL_SERVICE_NAME: 'messaging-eu',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=prod,service.name=overridden',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.25',
      OTEL_BSP_SCHEDULE_DELAY: '100',
      OTEL_BSP_MAX_QUEUE_SIZE: '256',
    }).tracing
    expect(full).toEqual({
      url: 'https://api.honeycomb.io/v1/traces',
      protocol: 'http/json',
      headers: { 'x-honeycomb-team': 'abc==', 'x-other': '1' },
      resource: { 'deployment.environment.name': 'prod', 'service.name': 'messaging-eu' },
      sampler: { name: 'parentbased_traceidratio', ratio: 0.25 },
      batch: { scheduledDelayMillis: 100, maxQueueSize: 256, maxExportBatchSize: 256, exportTimeoutMillis: 30_000 },
    })
  })

  test('traces: a bad OTEL_* value stops the start naming the variable', () => {
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }
    const cases: [Record<string, string>, RegExp][] = [
      [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'collector:4318' }, /^OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: /],
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'ftp://collector' }, /^OTEL_EXPORTER_OTLP_ENDPOINT: must be http or https/],
      [{ ...endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, /^OTEL_EXPORTER_OTLP_PROTOCOL: .*grpc is not supported/],
      [{ ...endpoint, OTEL_EXPORTER_OTLP_HEADERS: 'x-ok=1,Authorization: Bearer sekrit-api-key' }, /^OTEL_EXPORTER_OTLP_HEADERS: pair 2 is not key=value$/],
      [{ ...endpoint, OTEL_EXPORTER_OTLP_HEADERS: 'x-api-key=sekrit%zz' }, /^OTEL_EXPORTER_OTLP_HEADERS: pair 1 is not percent-encoded$/],
      [{ ...endpoint, OTEL_TRACES_SAMPLER: 'sometimes' }, /^OTEL_TRACES_SAMPLER: /],
      [{ ...endpoint, OTEL_TRACES_SAMPLER_ARG: '2' }, /^OTEL_TRACES_SAMPLER_ARG: /],
      [{ ...endpoint, OTEL_TRACES_EXPORTER: 'zipkin' }, /^OTEL_TRACES_EXPORTER: /],
      [{ ...endpoint, OTEL_BSP_SCHEDULE_DELAY: 'soon' }, /^OTEL_BSP_SCHEDULE_DELAY: /],
    ]
    for (const [env, message] of cases) expect(() => loadConfig(env)).toThrow(message)
    expect(() => loadConfig({ ...endpoint, OTEL_TRACES_SAMPLER: 'sometimes' })).toThrow(ConfigError)
  })

  test('TRUSTED_PROXIES is a list of CIDRs (a bare address is one host), normalised', () => {
    expect(loadConfig({ TRUSTED_PROXIES: ' 10.0.0.0/8, 2001:DB8::/32 ,192.0.2.7,' }).trustedProxies).toEqual(['10.0.0.0/8', '2001:db8::/32', '192.0.2.7/32'])
  })

  test('PUBLIC_URL defaults to the port and sets {base_url}', () => {
    expect(loadConfig({ PORT: '8080' }).baseUrl).toBe('http://localhost:8080/v0')
    const config = loadConfig({ PUBLIC_URL: 'https://api.example.com/' })
    expect(config.publicUrl).toBe('https://api.example.com')
    expect(config.baseUrl).toBe('https://api.example.com/v0')
  })

  test('ENCRYPTION_KEY is 32 bytes in base64 or base64url', () => {
    const key = Buffer.alloc(32, 7)
    expect(loadConfig({ ENCRYPTION_KEY: key.toString('base64url') }).encryptionKey).toEqual(new Uint8Array(key))
    expect(loadConfig({ ENCRYPTION_KEY: key.toString('base64') }).encryptionKey).toEqual(new Uint8Array(key))
  })

  test('WEBHOOK_RETRY_SCHEDULE takes ms, s, m, h and bare seconds', () => {
    expect(loadConfig({ WEBHOOK_RETRY_SCHEDULE: '0, 200ms,1,2m ,1h' }).webhookRetrySchedule).toEqual([0, 200, 1_000, 120_000, 3_600_000])
  })

  test('WEBHOOK_CA_FILE is read at load; MCP_ALLOWED_ORIGINS is a list of origins', () => {
    const dir = mkdtempSync(join(tmpdir(), 'config-ca-'))
    try {
      const pem = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n'
      writeFileSync(join(dir, 'ca.pem'), pem)
      expect(loadConfig({ WEBHOOK_CA_FILE: join(dir, 'ca.pem') }).webhookCaPem).toBe(pem)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
    expect(loadConfig({ MCP_ALLOWED_ORIGINS: ' https://agent.example/ , http://localhost:6274,,' }).mcpAllowedOrigins).toEqual(['https://agent.example', 'http://localhost:6274'])
  })

  test('empty values count as unset', () => {
    expect(loadConfig({ DATABASE_URL: '', PORT: '' }).databaseUrl).toBeUndefined()
  })

  const bad: [Record<string, string>, string][] = [
    [{ PORT: 'eighty' }, 'PORT'],
    [{ PORT: '70000' }, 'PORT'],
    [{ PORT: '-1' }, 'PORT'],
    [{ LOG_LEVEL: 'verbose' }, 'LOG_LEVEL'],
    [{ DATABASE_URL: 'mysql://localhost/db' }, 'DATABASE_URL'],
    [{ ENCRYPTION_KEY: 'too-short' }, 'ENCRYPTION_KEY'],
    [{ OAUTH_REFRESH_GRACE_S: '3600' }, 'OAUTH_REFRESH_GRACE_S'],
    [{ WEBHOOK_ALLOW_PRIVATE_TARGETS: 'maybe' }, 'WEBHOOK_ALLOW_PRIVATE_TARGETS'],
    [{ WEBHOOK_RETRY_SCHEDULE: '5s,soon' }, 'WEBHOOK_RETRY_SCHEDULE'],
    [{ WEBHOOK_TIMEOUT_MS: '10' }, 'WEBHOOK_TIMEOUT_MS'],
    [{ PUBLIC_URL: 'not a url' }, 'PUBLIC_URL'],
    [{ PUBLIC_URL: 'ftp://example.com' }, 'PUBLIC_URL'],
    [{ PUBLIC_URL: 'https://example.com/?x=1' }, 'PUBLIC_URL'],
    [{ PUBLIC_URL: 'https://user:pw@example.com' }, 'PUBLIC_URL'],
    [{ WEBHOOK_CONCURRENCY: '0' }, 'WEBHOOK_CONCURRENCY'],
    [{ WEBHOOK_CONCURRENCY: '5000' }, 'WEBHOOK_CONCURRENCY'],
    [{ WEBHOOK_BACKLOG_LIMIT_MS: '-1' }, 'WEBHOOK_BACKLOG_LIMIT_MS'],
    [{ WEBHOOK_BACKLOG_LIMIT_MS: '600001' }, 'WEBHOOK_BACKLOG_LIMIT_MS'],
    [{ WEBHOOK_BACKLOG_LIMIT_MS: 'soon' }, 'WEBHOOK_BACKLOG_LIMIT_MS'],
    [{ MESSAGE_HOLD_MS: '30001' }, 'MESSAGE_HOLD_MS'],
    [{ MESSAGE_HOLD_MS: '2.5' }, 'MESSAGE_HOLD_MS'],
    [{ PORT: '3000.5' }, 'PORT'],
    [{ HOOKS_PER_ACCOUNT: '0' }, 'HOOKS_PER_ACCOUNT'],
    [{ HOOKS_PER_ACCOUNT: '100000' }, 'HOOKS_PER_ACCOUNT'],
    [{ WEBHOOK_CA_FILE: '/nonexistent/ca.pem' }, 'WEBHOOK_CA_FILE'],
    [{ WEBHOOK_CA_FILE: join(import.meta.dir, '../../package.json') }, 'WEBHOOK_CA_FILE'],
    [{ MCP_ALLOWED_ORIGINS: 'https://agent.example/path' }, 'MCP_ALLOWED_ORIGINS'],
    [{ MCP_ALLOWED_ORIGINS: 'agent.example' }, 'MCP_ALLOWED_ORIGINS'],
    [{ MCP_ALLOWED_ORIGINS: 'ftp://agent.example' }, 'MCP_ALLOWED_ORIGINS'],
    [{ MCP_ALLOWED_ORIGINS: 'https://ok.example, *' }, 'MCP_ALLOWED_ORIGINS'],
    [{ TRUSTED_PROXIES: 'load-balancer.internal' }, 'TRUSTED_PROXIES'],
    [{ TRUSTED_PROXIES: '10.0.0.0/8, 10.0.0.0/33' }, 'TRUSTED_PROXIES'],
    [{ TRUSTED_PROXIES: '10.1.2.3/8' }, 'TRUSTED_PROXIES'],
    [{ TRUSTED_PROXIES: '0.0.0.0/0' }, 'TRUSTED_PROXIES'],
    [{ TRUSTED_PROXIES: '10.0.0.0/8 192.168.0.0/16' }, 'TRUSTED_PROXIES'],
  ]
  for (const [env, variable] of bad) {
    test(`${JSON.stringify(env)} is refused with a message naming ${variable}`, () => {
      let error: unknown
      try {
        loadConfig(env)
      } catch (caught) {
        error = caught
      }
      expect(error).toBeInstanceOf(ConfigError)
      expect((error as Error).message.startsWith(`${variable}:`)).toBe(true)
      expect((error as Error).message).not.toContain('\n')
    })
  }
})
