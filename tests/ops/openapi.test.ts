import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { plugin } from 'bun'
import { mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { validate } from '@readme/openapi-parser'
import { json, startTestServer } from '../support/server.ts'
import { ROOT } from '../support/process.ts'
import { authorizeAndRedeem, flowFixture } from '../oauth/support.ts'

setDefaultTimeout(60_000)

// openapi-typescript builds its output with the TypeScript 5 compiler API; the project's own
// `typescript` is 7 (the native compiler, which has no such API). Give it TypeScript 5 from the
// `typescript5` alias, for this test process only.
const typescript5 = Bun.resolveSync('typescript5', import.meta.dir)
plugin({
  name: 'typescript 5 for openapi-typescript',
  setup(build) {
    build.onLoad({ filter: /\/node_modules\/typescript\/lib\/version\.cjs$/ }, () => ({ contents: `import ts from ${JSON.stringify(typescript5)}; export default ts`, loader: 'js' }))
  },
})
const { default: openapiTS, astToString } = await import('openapi-typescript')

type Json = Record<string, any>

const server = await startTestServer()
const document = (await json(await server.fetch('/v0/openapi.json'))) as Json
const METHODS = ['get', 'put', 'post', 'delete', 'patch']
const operations = Object.entries(document.paths as Record<string, Json>).flatMap(([path, item]) =>
  METHODS.filter((method) => item[method]).map((method) => ({ path, method, operation: item[method] as Json })),
)
const operation = (operationId: string) => operations.find((entry) => entry.operation.operationId === operationId)!.operation

/** Every node of the document, depth first. */
function* nodes(value: unknown): Generator<Json> {
  if (Array.isArray(value)) for (const item of value) yield* nodes(item)
  else if (typeof value === 'object' && value !== null) {
    yield value as Json
    for (const item of Object.values(value)) yield* nodes(item)
  }
}

describe('the OpenAPI document', () => {
  test('validates with @readme/openapi-parser (OpenAPI 3.1), without warnings', async () => {
    const result = await validate(structuredClone(document) as never)
    expect(result).toEqual({ valid: true, warnings: [], specification: 'OpenAPI' })
    expect(document.openapi).toBe('3.1.0')
  })

  test('every operation has a stable, hand-chosen operationId', () => {
    expect(operations.map((entry) => entry.operation.operationId).sort()).toEqual(
      [
        'approveAuthorization', 'createHook', 'deleteHook', 'deleteMcp', 'enableHook', 'getAccount', 'getApiResourceMetadata',
        'getApiResourceMetadataAtRoot', 'getAuthorizationServerMetadata', 'getAuthorizationServerMetadataAtRoot',
        'getAccountStats', 'getAuthorizationServerMetadataBare', 'getDelivery', 'getHealth', 'getHook', 'getHookDelivery', 'getHookStats', 'getJwks', 'getMcp',
        'getMcpResourceMetadata', 'getMcpResourceMetadataAtRoot', 'getMessage', 'getReadiness', 'getSession', 'listDeliveries',
        'listEventTypes', 'listEvents', 'listHooks', 'postMcp', 'recoverDeliveries', 'refreshToken', 'registerClient',
        'requestToken', 'retryDelivery', 'retryHookDelivery', 'revokeToken', 'rotateHookSecret', 'sendMessage', 'showConsentPage',
        'signIn', 'simulateInboundMessage', 'testHook', 'updateAccount', 'updateHook',
        'listApiKeys', 'createApiKey', 'revokeApiKey', 'listGrants', 'revokeGrant', 'listEventSubscriptions', 'endEventSubscription',
        'listIdentityProviders', 'createIdentityProvider', 'getIdentityProvider', 'deleteIdentityProvider', 'listSubjectLinks', 'linkSubject', 'unlinkSubject',
      ].sort(),
    )
  })

  test('request and response bodies are named component schemas', () => {
    for (const { path, operation } of operations) {
      for (const [type, media] of Object.entries((operation.requestBody?.content ?? {}) as Record<string, Json>)) {
        if (path === '/v0/mcp') continue
        expect({ path, type, ref: media.schema.$ref }).toEqual({ path, type, ref: expect.stringMatching(/^#\/components\/schemas\/[A-Z]\w+$/) })
      }
      for (const [status, response] of Object.entries(operation.responses as Record<string, Json>)) {
        for (const [type, media] of Object.entries((response.content ?? {}) as Record<string, Json>)) {
          if (type !== 'application/json') continue
          if (path === '/v0/mcp') continue
          expect({ path, status, ref: media.schema.$ref }).toEqual({ path, status, ref: expect.stringMatching(/^#\/components\/schemas\/[A-Z]\w+$/) })
        }
      }
    }
    const schemas = Object.keys(document.components.schemas)
    for (const name of ['Hook', 'CreatedHook', 'HookPage', 'Delivery', 'DeliveryDetail', 'DeliveryPage', 'Problem', 'FieldError', 'OAuthError', 'TokenResponse', 'TokenRequest', 'MessageDeliveredEvent']) {
      expect(schemas).toContain(name)
    }
    // Every reference points at something that exists.
    for (const node of nodes(document)) {
      if (typeof node.$ref !== 'string') continue
      let target: any = document
      for (const segment of node.$ref.slice(2).split('/')) target = target?.[segment]
      expect({ ref: node.$ref, found: target !== undefined }).toEqual({ ref: node.$ref, found: true })
    }
  })

  test('integers are integers: no numeric strings, no format "integer", no $id, no defaults in what the service sends', () => {
    for (const node of nodes(document)) {
      expect(node.format === 'integer' || node.format === 'numeric').toBe(false)
      expect('$id' in node).toBe(false)
    }
    expect(document.components.schemas.Hook.properties.rate_limit_per_s).toEqual(expect.objectContaining({ type: ['integer', 'null'] }))
    expect(document.components.schemas.Hook.properties.status.default).toBeUndefined()
    expect(document.components.schemas.CreateHookRequest.properties.rate_limit_per_s).toEqual(expect.objectContaining({ type: 'integer', minimum: 1, maximum: 10000 }))
    // The subscription filter is one schema wherever it appears, nullable where it can be absent or removed.
    const filterRef = { $ref: '#/components/schemas/HookFilter' }
    expect(document.components.schemas.HookFilter).toMatchObject({ type: 'object', additionalProperties: false, minProperties: 1, maxProperties: 1 })
    expect(document.components.schemas.HookFilter.properties.to).toMatchObject({ type: 'array', minItems: 1, maxItems: 10, uniqueItems: true, items: { type: 'string', pattern: '^\\+[1-9][0-9]{6,14}$' } })
    expect(document.components.schemas.CreateHookRequest.properties.filter).toEqual(filterRef)
    // Where it may be null, @elysiajs/openapi writes it inline as `type: ["object", "null"]`, as it does `rate_limit_per_s`.
    const { type: _object, ...filter } = document.components.schemas.HookFilter
    expect(document.components.schemas.UpdateHookRequest.properties.filter).toEqual({ ...filter, type: ['object', 'null'] })
    expect(document.components.schemas.Hook.properties.filter).toEqual({ ...filter, type: ['object', 'null'] })
    expect(document.components.schemas.Hook.required).toContain('filter')
    const limit = (operation('listHooks').parameters as Json[]).find((parameter) => parameter.name === 'limit')!
    expect(limit.schema).toEqual(expect.objectContaining({ type: 'integer', minimum: 1, maximum: 100, default: 20 }))
  })

  test('every operation lists its failures with the shared problem schema, and the OAuth error object at OAuth endpoints', () => {
    const errorsOf = (operationId: string) => Object.fromEntries(Object.entries(operation(operationId).responses as Record<string, Json>).filter(([status]) => Number(status) >= 400))
    const createHook = errorsOf('createHook')
    expect(Object.keys(createHook)).toEqual(['400', '401', '403', '404', '409', '413', '415', '422', '429', '500', '503'])
    expect(createHook['401']).toEqual({ $ref: '#/components/responses/Unauthorized' })
    expect(document.components.responses.Unauthorized.content['application/problem+json'].schema).toEqual({ $ref: '#/components/schemas/Problem' })
    expect(document.components.responses.Unauthorized.headers['WWW-Authenticate']).toBeDefined()
    expect(document.components.responses.RateLimited.headers['Retry-After']).toBeDefined()
    expect(Object.keys(errorsOf('retryDelivery'))).toContain('409')
    expect(Object.keys(errorsOf('signIn'))).toEqual(expect.arrayContaining(['401', '429']))

    const token = errorsOf('requestToken')
    expect(Object.keys(token)).toEqual(['400', '401', '413', '415', '500', '503'])
    expect(token['400']).toEqual({ $ref: '#/components/responses/OAuthBadRequest' })
    expect(document.components.responses.OAuthBadRequest.content['application/json'].schema).toEqual({ $ref: '#/components/schemas/OAuthError' })
    expect(Object.keys(errorsOf('registerClient'))).toEqual(['400', '413', '415', '429', '500', '503'])

    // Every operation but the consent page (an HTML page) says what a failure of ours looks like.
    for (const { operation: op } of operations) {
      if (op.operationId === 'showConsentPage') continue
      expect({ op: op.operationId, has500: '500' in op.responses }).toEqual({ op: op.operationId, has500: true })
    }
    expect(operation('showConsentPage').responses['400'].content['text/html']).toBeDefined()
    expect(operation('deleteHook').responses['204']).toEqual({ description: 'Done; no content.' })
  })

  test('both media types at the token endpoints; Idempotency-Key where it is accepted; oauth2 with the code flow and the scopes', () => {
    for (const id of ['requestToken', 'refreshToken', 'revokeToken']) {
      expect(Object.keys(operation(id).requestBody.content).sort()).toEqual(['application/json', 'application/x-www-form-urlencoded'])
    }
    for (const id of ['createHook', 'rotateHookSecret', 'createIdentityProvider', 'linkSubject']) {
      expect(operation(id).parameters).toContainEqual({ $ref: '#/components/parameters/IdempotencyKey' })
    }
    expect(operation('getHook').parameters).not.toContainEqual({ $ref: '#/components/parameters/IdempotencyKey' })
    const base = server.config.baseUrl
    expect(document.components.securitySchemes.oauth2).toEqual({
      type: 'oauth2',
      description: expect.any(String),
      flows: {
        authorizationCode: {
          authorizationUrl: `${base}/auth/authorize`,
          tokenUrl: `${base}/auth/token`,
          refreshUrl: `${base}/auth/token/refresh`,
          scopes: expect.objectContaining({ 'hooks:read': expect.any(String), 'hooks:write': expect.any(String), 'account:read': expect.any(String) }),
        },
      },
    })
    expect(operation('createHook').security).toEqual([{ apiKey: [] }, { oauth2: ['hooks:write'] }])
    expect(operation('createIdentityProvider').security).toEqual([{ apiKey: [] }, { oauth2: ['identity_providers:write'] }])
    expect(operation('listIdentityProviders').security).toEqual([{ apiKey: [] }, { oauth2: ['identity_providers:read'] }])
    expect(operation('getSession').security).toEqual([{ oauth2: [] }])
    expect(operation('getAuthorizationServerMetadata').security).toEqual([])
  })
})

describe('a client generated by openapi-typescript', () => {
  // Under node_modules so that the generated client resolves openapi-fetch and @types/bun as the project does.
  const dir = join(ROOT, 'node_modules', '.cache', `openapi-client-${process.pid}`)

  const typeCheck = (tsconfig: string) =>
    Bun.spawnSync([join(ROOT, 'node_modules', '.bin', 'tsc'), '-p', join(dir, tsconfig)], { cwd: dir, stdout: 'pipe', stderr: 'pipe' })

  test('type-checks, and runs against the running server with the types it was given', async () => {
    rmSync(dir, { recursive: true, force: true })
    mkdirSync(dir, { recursive: true })
    try {
      writeFileSync(join(dir, 'schema.d.ts'), astToString(await openapiTS(structuredClone(document) as never)))
      const compilerOptions = { strict: true, noEmit: true, target: 'ES2022', module: 'ESNext', moduleResolution: 'bundler', types: ['bun'], skipLibCheck: true }
      writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: ['client.ts'] }))
      writeFileSync(join(dir, 'tsconfig.wrong.json'), JSON.stringify({ compilerOptions, files: ['wrong.ts'] }))
      writeFileSync(join(dir, 'client.ts'), CLIENT)
      writeFileSync(join(dir, 'wrong.ts'), WRONG_CLIENT)

      const checked = typeCheck('tsconfig.json')
      expect(checked.stdout.toString() + checked.stderr.toString()).toBe('')
      expect(checked.exitCode).toBe(0)

      // The types are not `any`: a client that sends an event type that does not exist, or reads
      // a nullable integer as a string, does not compile.
      const wrong = typeCheck('tsconfig.wrong.json')
      const errors = wrong.stdout.toString()
      expect(wrong.exitCode).not.toBe(0)
      expect(errors).toContain('wrong.ts(5,')
      expect(errors).toContain('"message.sent"')
      expect(errors).toContain('wrong.ts(7,')
      expect(errors.match(/error TS/g)?.length).toBe(2)

      const owner = await server.createAccountWithKey()
      const fixture = await flowFixture(server)
      const { tokens } = await authorizeAndRedeem(server, fixture)
      // Asynchronously: the server answering it runs in this process.
      const run = Bun.spawn([process.execPath, join(dir, 'client.ts')], {
        cwd: dir,
        env: { ...process.env, API_ORIGIN: server.origin, API_KEY: owner.secret, API_ACCOUNT: owner.accountId, REFRESH_TOKEN: tokens.refresh_token, CLIENT_ID: fixture.clientId },
        stdout: 'pipe',
        stderr: 'pipe',
        timeout: 30_000,
      })
      const [stdout, stderr] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited])
      expect(stderr).toBe('')
      const result = JSON.parse(stdout)
      expect(result).toEqual({
        created: { status: 201, secretPrefix: 'whsec_', signature: 'hmac', publicKey: null, event: 'message.delivered' },
        replayed: { status: 201, sameId: true },
        listed: { status: 200, count: 1, rateLimitHeader: expect.stringMatching(/^"credential";r=\d+;t=\d+$/) },
        missing: { status: 404, code: 'not_found', type: `${server.origin}/docs/errors#not_found` },
        invalid: { status: 422, code: 'validation_failed', paths: ['/rate_limit_per_s'] },
        refreshed: { status: 200, tokenType: 'Bearer', expiresIn: 900 },
        replayedRefresh: { status: 400, error: 'invalid_grant' },
        stats: { status: 200, buckets: 61, attempts: 0, p99: null, messagesSent: 0 },
        badRange: { status: 422, paths: ['query:/since'] },
      })
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

// A small integrator's client: openapi-fetch typed by the generated `paths`, an API key added to
// every request's query (the apiKey scheme), and the OAuth refresh grant. What it prints is
// checked above; that it compiles is the point.
const CLIENT = `
import createClient, { type Middleware } from 'openapi-fetch'
import type { components, paths } from './schema'

type Hook = components['schemas']['Hook']
type Problem = components['schemas']['Problem']
type OAuthError = components['schemas']['OAuthError']

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(name + ' is not set')
  return value
}
const account = env('API_ACCOUNT')
const apiKey: Middleware = {
  onRequest({ request }) {
    const url = new URL(request.url)
    url.searchParams.set('key', env('API_KEY'))
    return new Request(url, request)
  },
}
const api = createClient<paths>({ baseUrl: env('API_ORIGIN') })
api.use(apiKey)
const oauth = createClient<paths>({ baseUrl: env('API_ORIGIN') })

const create = () =>
  api.POST('/v0/account/{account_id}/hooks', {
    params: { path: { account_id: account }, header: { 'Idempotency-Key': 'generated-client-1' } },
    body: { event: 'message.delivered', target_url: 'https://example.com/generated-client' },
  })
const created = await create()
if (!created.data) throw new Error('not created: ' + JSON.stringify(created.error))
// Only an hmac subscription has a secret; an ed25519 one has a public key instead (docs/webhooks.md#signatures).
const secret: string | undefined = created.data.secret
const publicKey: string | null = created.data.public_key
const replayed = await create()

const listed = await api.GET('/v0/account/{account_id}/hooks', { params: { path: { account_id: account }, query: { limit: 5 } } })
const hooks: Hook[] = listed.data?.data ?? []

const missing = await api.GET('/v0/account/{account_id}/hooks/{hook_id}', { params: { path: { account_id: account, hook_id: 'hook_missing' } } })
const notFound: Problem | undefined = missing.error

const invalid = await api.POST('/v0/account/{account_id}/hooks', {
  params: { path: { account_id: account } },
  body: { event: 'message.failed', target_url: 'https://example.com/other', rate_limit_per_s: 0 },
})
const invalidProblem: Problem | undefined = invalid.error

const refresh = () =>
  oauth.POST('/v0/auth/token', { body: { grant_type: 'refresh_token', refresh_token: env('REFRESH_TOKEN'), client_id: env('CLIENT_ID') } })
const refreshed = await refresh()
const expiresIn: number | undefined = refreshed.data?.expires_in
// Past the grace window a replayed refresh token is refused; the same request with a made-up token is refused the same way.
const refused = await oauth.POST('/v0/auth/token', { body: { grant_type: 'refresh_token', refresh_token: 'not-a-token', client_id: env('CLIENT_ID') } })
const oauthError: OAuthError | undefined = refused.error

const since = new Date(Date.now() - 3_600_000).toISOString()
const health = await api.GET('/v0/account/{account_id}/stats', { params: { path: { account_id: account }, query: { interval: 'minute', since } } })
const latency = health.data?.totals.latency_ms
const p99: number | null | undefined = latency === null ? null : latency?.p99
const tooLong = await api.GET('/v0/account/{account_id}/stats', { params: { path: { account_id: account }, query: { interval: 'minute', since: '2026-01-01T00:00:00Z' } } })

console.log(JSON.stringify({
  created: { status: created.response.status, secretPrefix: secret?.slice(0, 6), signature: created.data.signature, publicKey, event: created.data.event },
  replayed: { status: replayed.response.status, sameId: replayed.data?.id === created.data.id },
  listed: { status: listed.response.status, count: hooks.length, rateLimitHeader: listed.response.headers.get('ratelimit') },
  missing: { status: missing.response.status, code: notFound?.code, type: notFound?.type },
  invalid: { status: invalid.response.status, code: invalidProblem?.code, paths: invalidProblem?.errors?.map((error) => error.path) },
  refreshed: { status: refreshed.response.status, tokenType: refreshed.data?.token_type, expiresIn },
  replayedRefresh: { status: refused.response.status, error: oauthError?.error },
  stats: { status: health.response.status, buckets: health.data?.buckets.length, attempts: health.data?.totals.attempts, p99, messagesSent: health.data?.totals.messages.sent },
  badRange: { status: tooLong.response.status, paths: tooLong.error?.errors?.map((error) => error.path) },
}))
`

const WRONG_CLIENT = `
import createClient from 'openapi-fetch'
import type { paths } from './schema'
const api = createClient<paths>({ baseUrl: 'http://127.0.0.1' })
await api.POST('/v0/account/{account_id}/hooks', { params: { path: { account_id: 'acc_1' } }, body: { event: 'message.sent', target_url: 'https://example.com' } })
const hook = await api.GET('/v0/account/{account_id}/hooks/{hook_id}', { params: { path: { account_id: 'acc_1', hook_id: 'hook_1' } } })
const limit: string | undefined = hook.data?.rate_limit_per_s
export { limit }
`
