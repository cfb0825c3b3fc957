import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, rmSync } from 'node:fs'
import { dirname } from 'node:path'
import { Webhook } from 'standardwebhooks'
import { parseListenArgs, receive, type Fetch } from '../../src/cli/listen.ts'
import { startTestServer } from '../support/server.ts'
import { ROOT, freePort, freshDataDir } from '../support/process.ts'

setDefaultTimeout(30_000)

const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' } })
// Two more instances on the same database: one as it runs in production (no local targets),
// one that lets an account hold a single subscription (the second one `listen` makes is refused).
const strict = await startTestServer({ database: server.database, deliverWebhooks: false })
const oneHookEach = await startTestServer({ database: server.database, deliverWebhooks: false, env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', HOOKS_PER_ACCOUNT: '1' } })

type Owner = { accountId: string; secret: string }

/** The local app `listen` forwards to: records every request, answers 202 and a body of its own. */
const appReceived: { path: string; headers: Record<string, string>; body: string }[] = []
const app = Bun.serve({
  port: 0,
  hostname: '127.0.0.1',
  async fetch(request) {
    appReceived.push({ path: new URL(request.url).pathname, headers: Object.fromEntries(request.headers), body: await request.text() })
    return new Response('taken by the app', { status: 202 })
  },
})
const appOrigin = `http://127.0.0.1:${app.port}`
afterAll(() => app.stop(true))
const appGot = (path: string) => appReceived.filter((request) => request.path === path)

async function waitUntil(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 15_000) {
  const until = Date.now() + timeoutMs
  while (!(await condition())) {
    if (Date.now() > until) throw new Error(`not within ${timeoutMs} ms: ${what}`)
    await Bun.sleep(20)
  }
}

const call = (owner: Owner, method: string, path: string, body?: unknown) =>
  server.fetch(`/v0/account/${owner.accountId}${path}?key=${owner.secret}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
const hooksOf = async (owner: Owner) => ((await (await call(owner, 'GET', '/hooks')).json()) as { data: { id: string; event: string; target_url: string }[] }).data
async function send(owner: Owner, to: string) {
  const response = await call(owner, 'POST', '/messages', { to, body: 'from the listen test' })
  expect(response.status).toBe(202)
  return ((await response.json()) as { id: string }).id
}
/** The status the service recorded for the latest attempt of the subscription's newest delivery. */
async function recordedStatus(owner: Owner, hookId: string) {
  let status = null as number | null
  await waitUntil(async () => {
    const page = (await (await call(owner, 'GET', `/hooks/${hookId}/deliveries`)).json()) as { data: { last_attempt: { status_code: number | null } | null }[] }
    status = page.data[0]?.last_attempt?.status_code ?? null
    return status !== null
  }, `an attempt recorded for ${hookId}`)
  return status
}
const messageIdOf = (body: string) => (JSON.parse(body) as { data: { message: { id: string } } }).data.message.id

// Every run gets a DATA_DIR that does not exist and no DATABASE_URL: `listen` must create neither.
const dataDirs: string[] = []
afterAll(() => {
  for (const dataDir of dataDirs) rmSync(dirname(dataDir), { recursive: true, force: true })
})
function cliEnv(env: Record<string, string>) {
  const dataDir = freshDataDir()
  dataDirs.push(dataDir)
  return { ...process.env, DATABASE_URL: '', DATA_DIR: dataDir, PUBLIC_URL: server.origin, ...env }
}

const running: ReturnType<typeof Bun.spawn>[] = []
afterAll(() => {
  for (const child of running) if (child.exitCode === null) child.kill('SIGKILL')
})

/** `bun src/cli.ts listen …` as a real process, once it has printed that it is ready. */
async function startListener(args: string[], env: Record<string, string>) {
  const childEnv = cliEnv(env)
  const child = Bun.spawn(['bun', 'src/cli.ts', 'listen', ...args], { cwd: ROOT, env: childEnv, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' })
  running.push(child)
  const output = { stdout: '', stderr: '' }
  const collect = async (name: keyof typeof output, stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder()
    for await (const chunk of stream) output[name] += decoder.decode(chunk, { stream: true })
  }
  const collecting = Promise.all([collect('stdout', child.stdout), collect('stderr', child.stderr)])
  const all = () => output.stdout + output.stderr
  await waitUntil(() => all().includes('Ctrl-C deletes') || child.exitCode !== null, 'listen ready')
  if (child.exitCode !== null) throw new Error(`listen exited with ${child.exitCode}:\n${all()}`)
  return {
    output,
    secret: /Webhook signing secret: (whsec_\S+)/.exec(all())![1]!,
    port: Number(/Listening on http:\/\/127\.0\.0\.1:(\d+)\//.exec(all())![1]),
    hookIds: [...all().matchAll(/^ {2}(hook_\w+) {2}/gm)].map((match) => match[1]!),
    waitFor: (stream: keyof typeof output, text: string | RegExp) =>
      waitUntil(() => (typeof text === 'string' ? output[stream].includes(text) : text.test(output[stream])), `${JSON.stringify(String(text))} on ${stream}:\n${all()}`),
    async stop(signal: NodeJS.Signals = 'SIGINT') {
      child.kill(signal)
      const code = await child.exited
      await collecting
      expect(existsSync(childEnv.DATA_DIR)).toBe(false)
      return code
    },
  }
}

/** A `listen` run expected to end by itself. */
async function runListen(args: string[], env: Record<string, string>) {
  const childEnv = cliEnv(env)
  const child = Bun.spawn(['bun', 'src/cli.ts', 'listen', ...args], { cwd: ROOT, env: childEnv, stdout: 'pipe', stderr: 'pipe' })
  const [stdout, stderr, exitCode] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  expect(existsSync(childEnv.DATA_DIR)).toBe(false)
  return { exitCode, stdout, stderr }
}

describe('bun run cli listen', () => {
  test("one secret for a subscription per --event; each delivery printed, forwarded with headers that verify, and the app's answer recorded by the service", async () => {
    const owner = await server.createAccountWithKey()
    const listener = await startListener(['--event', 'message.delivered', '--event', 'message.failed', '--forward-to', `${appOrigin}/hook`], { MESSAGING_API_KEY: owner.secret })
    expect(listener.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
    const hooks = await hooksOf(owner)
    expect(hooks.map((hook) => hook.event).sort()).toEqual(['message.delivered', 'message.failed'])
    expect(hooks.map((hook) => hook.target_url)).toEqual([`http://127.0.0.1:${listener.port}/`, `http://127.0.0.1:${listener.port}/`])
    expect(listener.hookIds.sort()).toEqual(hooks.map((hook) => hook.id).sort())

    const delivered = await send(owner, '+14155550123')
    const failed = await send(owner, '+14155550000')
    await waitUntil(() => appGot('/hook').some((request) => messageIdOf(request.body) === delivered) && appGot('/hook').some((request) => messageIdOf(request.body) === failed), 'both events forwarded')
    for (const [messageId, type] of [[delivered, 'message.delivered'], [failed, 'message.failed']] as const) {
      const forwarded = appGot('/hook').find((request) => messageIdOf(request.body) === messageId)!
      // The printed secret verifies the forwarded bytes and headers: nothing was changed on the way.
      const event = new Webhook(listener.secret).verify(forwarded.body, forwarded.headers) as { id: string; type: string }
      expect(event.type).toBe(type)
      expect(forwarded.headers['webhook-id']).toBe(event.id)
      expect(forwarded.headers['content-type']).toBe('application/json')
      await listener.waitFor('stdout', `  ${type}  ${event.id}  webhook-id ${event.id}  → ${appOrigin}/hook 202`)
    }
    const deliveredHook = hooks.find((hook) => hook.event === 'message.delivered')!
    expect(await recordedStatus(owner, deliveredHook.id)).toBe(202)
    expect(listener.output.stderr).toBe('')
    expect(await listener.stop()).toBe(0)
  })

  test('--json: stdout holds one event per line and nothing else; without --forward-to a delivery is answered 204', async () => {
    const owner = await server.createAccountWithKey()
    // --key and --api instead of the environment: PUBLIC_URL points nowhere.
    const listener = await startListener(['--event', 'message.inbound', '--json', '--key', owner.secret, '--api', `${server.origin}/v0/`], { PUBLIC_URL: 'http://127.0.0.1:9' })
    expect(listener.output.stdout).toBe('')
    expect(listener.output.stderr).toContain(listener.secret)
    const inbound = await call(owner, 'POST', '/sandbox/inbound', { from: '+447700900123', body: 'hello, listener' })
    const messageId = ((await inbound.json()) as { id: string }).id
    await listener.waitFor('stdout', /\n$/)
    const lines = listener.output.stdout.trimEnd().split('\n')
    expect(lines).toHaveLength(1)
    const event = JSON.parse(lines[0]!)
    expect(event).toMatchObject({ type: 'message.inbound', account_id: owner.accountId, data: { message: { id: messageId, body: 'hello, listener' } } })
    await listener.waitFor('stderr', `message.inbound  ${event.id}  webhook-id ${event.id}  answered 204`)
    expect(await recordedStatus(owner, listener.hookIds[0]!)).toBe(204)
    expect(await listener.stop()).toBe(0)
  })

  test('a request not signed with the secret is answered 400, printed, and not forwarded', async () => {
    const owner = await server.createAccountWithKey()
    const listener = await startListener(['--event', 'message.delivered', '--forward-to', `${appOrigin}/forged`], { MESSAGING_API_KEY: owner.secret })
    const body = JSON.stringify({ id: 'evt_forged', type: 'message.delivered', timestamp: new Date().toISOString(), account_id: owner.accountId, data: {} })
    const postSigned = (secret: string | null) => {
      const headers: Record<string, string> = { 'content-type': 'application/json' }
      if (secret) Object.assign(headers, { 'webhook-id': 'evt_forged', 'webhook-timestamp': String(Math.floor(Date.now() / 1000)), 'webhook-signature': new Webhook(secret).sign('evt_forged', new Date(), body) })
      return fetch(`http://127.0.0.1:${listener.port}/`, { method: 'POST', headers, body })
    }
    const forger = `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`
    expect((await postSigned(forger)).status).toBe(400)
    expect((await postSigned(null)).status).toBe(400)
    await listener.waitFor('stderr', "refused a request not signed with this listener's secret (No matching signature found): answered 400, not forwarded")
    await listener.waitFor('stderr', "refused a request not signed with this listener's secret (Missing required headers)")
    expect(appGot('/forged')).toHaveLength(0)
    // The same request signed with the printed secret goes through: the refusals were the signature's doing.
    const genuine = await postSigned(listener.secret)
    expect(genuine.status).toBe(202)
    expect(await genuine.text()).toBe('taken by the app')
    expect(appGot('/forged')).toHaveLength(1)
    expect(await listener.stop()).toBe(0)
  })

  test('a forward target that is down: the listener answers 502, says why, and the service records the 502', async () => {
    const owner = await server.createAccountWithKey()
    const down = `http://127.0.0.1:${freePort()}/hook`
    const listener = await startListener(['--event', 'message.delivered', '--forward-to', down], { MESSAGING_API_KEY: owner.secret })
    await send(owner, '+14155550124')
    await listener.waitFor('stdout', `forward to ${down} failed, connection failed: ECONNREFUSED: answered 502`)
    expect(await recordedStatus(owner, listener.hookIds[0]!)).toBe(502)
    expect(await listener.stop()).toBe(0)
  })

  test.each(['SIGINT', 'SIGTERM'] as const)('%s deletes the subscriptions it made, stops the receiver and exits 0', async (signal) => {
    const owner = await server.createAccountWithKey()
    // A subscription of the account's own, which listen must leave alone.
    const own = await call(owner, 'POST', '/hooks', { event: 'message.delivered', target_url: 'https://hooks.example.com/own' })
    expect(own.status).toBe(201)
    const listener = await startListener(['--event', 'message.delivered', '--event', 'message.inbound'], { MESSAGING_API_KEY: owner.secret })
    expect(await hooksOf(owner)).toHaveLength(3)
    expect(await listener.stop(signal)).toBe(0)
    expect((await hooksOf(owner)).map((hook) => hook.target_url)).toEqual(['https://hooks.example.com/own'])
    const [first, second] = listener.hookIds
    expect(listener.output.stdout).toContain(`Deleted ${first} (message.delivered), ${second} (message.inbound); stopped listening.`)
    const probe = await fetch(`http://127.0.0.1:${listener.port}/`, { method: 'POST' }).then(() => 'answered', (error: { code?: string }) => error.code)
    expect(probe).toBe('ECONNREFUSED')
  })
})

describe('bun run cli listen refused: one line, exit code 1, nothing left subscribed', () => {
  test('a service without WEBHOOK_ALLOW_PRIVATE_TARGETS names the setting', async () => {
    const owner = await server.createAccountWithKey()
    const result = await runListen(['--event', 'message.delivered'], { MESSAGING_API_KEY: owner.secret, PUBLIC_URL: strict.origin })
    expect(result.exitCode).toBe(1)
    expect(result.stdout).toBe('')
    const lines = result.stderr.trimEnd().split('\n')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^error: subscribing http:\/\/127\.0\.0\.1:\d+\/ to message\.delivered: target_url .*WEBHOOK_ALLOW_PRIVATE_TARGETS=true/)
    expect(await hooksOf(owner)).toEqual([])
  })

  test('when the second subscription is refused, the first is deleted before exiting', async () => {
    const owner = await server.createAccountWithKey()
    const result = await runListen(['--event', 'message.delivered', '--event', 'message.failed'], { MESSAGING_API_KEY: owner.secret, PUBLIC_URL: oneHookEach.origin })
    expect(result.exitCode).toBe(1)
    expect(result.stderr).toMatch(/^error: subscribing http:\/\/127\.0\.0\.1:\d+\/ to message\.failed: 409 hooks_limit_reached: /)
    expect(result.stderr).toMatch(/\nDeleted hook_\w+ \(message\.delivered\), made before that\.\n$/)
    expect(await hooksOf(owner)).toEqual([])
  })

  test.each([
    ['a bad key', ['--key', 'sk_live_not-a-real-key'], 'error: reading the account: the service refused the API key: The API key is invalid or has been revoked.'],
    ['an unknown event type', ['--event', 'message.bogus'], 'error: unknown event type message.bogus: the service sends message.delivered, message.failed, message.inbound'],
    ['a service that is not running', ['--api', `http://127.0.0.1:${freePort()}/v0`], 'connection failed: ECONNREFUSED). Is it running?'],
  ])('%s', async (_case, args, line) => {
    const owner = await server.createAccountWithKey()
    const result = await runListen(['--event', 'message.delivered', ...args], { MESSAGING_API_KEY: owner.secret })
    expect(result.exitCode).toBe(1)
    expect(result.stdout).toBe('')
    expect(result.stderr.trimEnd().split('\n')).toHaveLength(1)
    expect(result.stderr).toContain(line)
    expect(await hooksOf(owner)).toEqual([])
  })
})

describe('listen, its parts', () => {
  const defaults = { env: { MESSAGING_API_KEY: 'sk_live_from_env' }, baseUrl: 'http://localhost:3000/v0' }

  test('the key comes from --key or MESSAGING_API_KEY, the service from --api or the configuration', () => {
    expect(parseListenArgs(['--event', 'message.delivered', '--event', 'message.delivered'], defaults)).toEqual({
      baseUrl: 'http://localhost:3000/v0',
      key: 'sk_live_from_env',
      events: ['message.delivered'],
      forwardTo: undefined,
      port: 0,
      json: false,
    })
    const given = parseListenArgs(['--event', 'message.failed', '--key', 'sk_live_given', '--api', 'https://api.example.com/v0/', '--port', '4000'], defaults)
    expect(given).toMatchObject({ key: 'sk_live_given', baseUrl: 'https://api.example.com/v0', port: 4000 })
    expect(() => parseListenArgs(['--event', 'message.failed'], { ...defaults, env: {} })).toThrow(/MESSAGING_API_KEY/)
    expect(() => parseListenArgs(['--event', 'x', '--forward-to', 'ftp://example.com'], defaults)).toThrow(/--forward-to/)
    expect(() => parseListenArgs([], defaults)).toThrow(/--event is required/)
  })

  const secret = `whsec_${Buffer.alloc(32, 7).toString('base64')}`
  const signed = () => {
    const body = JSON.stringify({ id: 'evt_1', type: 'message.delivered' })
    const now = new Date()
    const headers = { 'content-type': 'application/json', 'webhook-id': 'evt_1', 'webhook-timestamp': String(Math.floor(now.getTime() / 1000)), 'webhook-signature': new Webhook(secret).sign('evt_1', now, body) }
    return new Request('http://127.0.0.1/', { method: 'POST', headers, body })
  }
  const answering = (response: Response): Fetch => async () => response

  test("the app's answer goes back as it came: a redirect is not followed, a 204 has no body, Retry-After is kept", async () => {
    const forwardTo = new URL('http://localhost:8080/hook')
    const cases = [
      [new Response(null, { status: 302, headers: { location: '/elsewhere' } }), 302],
      [new Response(null, { status: 204 }), 204],
      [new Response('slow down', { status: 429, headers: { 'retry-after': '30' } }), 429],
    ] as const
    for (const [answer, status] of cases) {
      const { response, received } = await receive(signed(), { webhook: new Webhook(secret), forwardTo, fetch: answering(answer) })
      expect(response.status).toBe(status)
      expect(received).toMatchObject({ verified: true, forward: { status } })
      if (status === 429) expect([response.headers.get('retry-after'), await response.text()]).toEqual(['30', 'slow down'])
    }
  })

  test('a forward that takes longer than its timeout is answered 502', async () => {
    const hang: Fetch = (_input, init) => new Promise((_resolve, reject) => init!.signal!.addEventListener('abort', () => reject(init!.signal!.reason)))
    const { response, received } = await receive(signed(), { webhook: new Webhook(secret), forwardTo: new URL('http://localhost:8080/hook'), fetch: hang, forwardTimeoutMs: 50 })
    expect(response.status).toBe(502)
    expect(received).toMatchObject({ forward: { error: 'timed out after 0.05 s' } })
  })
})
