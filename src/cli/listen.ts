import { randomBytes } from 'node:crypto'
import { parseArgs } from 'node:util'
import { Webhook } from 'standardwebhooks'

// `bun run cli listen`: the account's webhooks delivered to this machine, like `stripe listen`.
// It is a client of a running service (its HTTP API and an API key), never of its database:
// it subscribes a receiver on 127.0.0.1, verifies and forwards what arrives, and deletes its
// subscriptions when stopped. docs/webhooks.md#local-development

/** Holds the API key when --key is not given: a key on the command line shows in `ps`. */
const API_KEY_VARIABLE = 'MESSAGING_API_KEY'

const LISTEN_USAGE = `Usage: bun run cli listen --event <type> [--event <type> …] [--forward-to <url>] [--json]
                          [--key <sk_…>] [--api <base_url>] [--port <port>]

Subscribes a receiver on 127.0.0.1 to each event type (one signing secret for all of them),
prints every delivery and forwards it, signature headers and all, to --forward-to; Ctrl-C
deletes the subscriptions. The service must run with WEBHOOK_ALLOW_PRIVATE_TARGETS=true.

  --event <type>      an event type (GET {base_url}/event-types lists them); repeat for several
  --forward-to <url>  an http(s) URL: each verified delivery is POSTed there and the service gets
                      its status; without it, deliveries are printed and answered 204
  --key <sk_…>        the API key (default: $${API_KEY_VARIABLE})
  --api <base_url>    the service (default: this configuration's PUBLIC_URL + /v0)
  --port <port>       the receiver's port (default: a free one)
  --json              each event as one JSON line on stdout; every other line goes to stderr`

/** Below the service's WEBHOOK_TIMEOUT_MS (15 s by default), so it records our 502, not its own timeout. */
const FORWARD_TIMEOUT_MS = 10_000
const API_TIMEOUT_MS = 10_000
// A null-body status cannot carry the forward's body back (the Response constructor throws).
const NULL_BODY_STATUSES = new Set([204, 205, 304])

export type Fetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>

export interface ListenOptions {
  /** `{base_url}` of the service, no trailing slash. */
  baseUrl: string
  key: string
  events: string[]
  forwardTo: URL | undefined
  /** 0: a free one. */
  port: number
  json: boolean
}

/** The command line is wrong: exit code 2, like the other commands. */
class UsageError extends Error {}

/** A call to the service failed; the message is the one line the user sees. Exit code 1. */
class ServiceError extends Error {}

function httpUrl(raw: string, option: string): URL {
  let url: URL | undefined
  try {
    url = new URL(raw)
  } catch {}
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) throw new UsageError(`--${option}: must be an http or https URL (got ${JSON.stringify(raw)})`)
  return url
}

/** The options of `listen`, or 'help'; throws a UsageError. */
export function parseListenArgs(argv: string[], defaults: { env: Record<string, string | undefined>; baseUrl: string }): ListenOptions | 'help' {
  let values
  try {
    ;({ values } = parseArgs({
      args: argv,
      options: {
        event: { type: 'string', multiple: true },
        'forward-to': { type: 'string' },
        key: { type: 'string' },
        api: { type: 'string' },
        port: { type: 'string' },
        json: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }))
  } catch (error) {
    throw new UsageError((error as Error).message)
  }
  if (values.help) return 'help'
  const events = [...new Set(values.event ?? [])]
  if (events.length === 0) throw new UsageError('--event is required (message.delivered, for example); repeat it for several')
  const key = values.key ?? defaults.env[API_KEY_VARIABLE]
  if (!key) throw new UsageError(`an API key is needed: --key sk_live_… or ${API_KEY_VARIABLE} (bun run cli demo prints one)`)
  const port = values.port === undefined ? 0 : Number(values.port)
  if (values.port !== undefined && !(Number.isInteger(port) && port >= 1 && port <= 65535)) {
    throw new UsageError(`--port: must be a port number from 1 to 65535 (got ${JSON.stringify(values.port)})`)
  }
  const api = values.api === undefined ? defaults.baseUrl : httpUrl(values.api, 'api').href
  return {
    baseUrl: api.replace(/\/+$/, ''),
    key,
    events,
    forwardTo: values['forward-to'] === undefined ? undefined : httpUrl(values['forward-to'], 'forward-to'),
    port,
    json: values.json,
  }
}

/** A Standard Webhooks secret for this run: one secret signs every subscription it makes. */
const newWebhookSecret = () => `whsec_${randomBytes(32).toString('base64')}`

function describeNetworkError(error: unknown, timeoutMs: number): string {
  if ((error as { name?: unknown } | null)?.name === 'TimeoutError') return `timed out after ${timeoutMs / 1000} s`
  const code = (error as { code?: unknown } | null)?.code
  if (typeof code === 'string') return `connection failed: ${code}`
  return `connection failed: ${error instanceof Error ? error.message : String(error)}`
}

/** What the service said, in one line: its problem's field errors or detail, or that it is not the service at all. */
async function describeRefusal(response: Response, baseUrl: string): Promise<string> {
  const problem = (await response.json().catch(() => null)) as { code?: string; detail?: string; errors?: { path: string; message: string }[] } | null
  if (!problem?.code || !problem.detail) {
    return `HTTP ${response.status}, and not from the messaging service's API: is ${baseUrl} its {base_url} (PUBLIC_URL + /v0)?`
  }
  if (response.status === 401) return `the service refused the API key: ${problem.detail}`
  if (problem.errors?.length) return problem.errors.map((error) => `${error.path.replace(/^\//, '')} ${error.message}`).join('; ')
  return `${response.status} ${problem.code}: ${problem.detail}`
}

interface Subscription {
  id: string
  event: string
}

/** The few calls `listen` makes, with the key in `?key=` (which the API reads and its logs redact). Failures are ServiceErrors. */
function serviceClient(baseUrl: string, key: string, fetch: Fetch) {
  async function call(what: string, method: string, path: string, body?: unknown, alsoFine?: number): Promise<Response> {
    let response: Response
    try {
      response = await fetch(`${baseUrl}${path}?key=${encodeURIComponent(key)}`, {
        method,
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(API_TIMEOUT_MS),
      })
    } catch (error) {
      throw new ServiceError(`${what}: cannot reach the service at ${baseUrl} (${describeNetworkError(error, API_TIMEOUT_MS)}). Is it running? --api names another address.`)
    }
    if (!response.ok && response.status !== alsoFine) throw new ServiceError(`${what}: ${await describeRefusal(response, baseUrl)}`)
    return response
  }
  return {
    async accountId(): Promise<string> {
      const response = await call('reading the account', 'GET', '/account', undefined, 404)
      // Every {base_url} has /account: a 404 is an address that is not one.
      if (response.status === 404) throw new ServiceError(`reading the account: ${baseUrl}/account is not found. Is ${baseUrl} the service's {base_url} (PUBLIC_URL + /v0)?`)
      return ((await response.json()) as { id: string }).id
    },
    async eventTypes(): Promise<string[]> {
      const page = (await (await call('reading the event types', 'GET', '/event-types')).json()) as { data: { type: string }[] }
      return page.data.map((eventType) => eventType.type)
    },
    async createHook(accountId: string, input: { event: string; target_url: string; secret: string }): Promise<Subscription> {
      const response = await call(`subscribing ${input.target_url} to ${input.event}`, 'POST', `/account/${accountId}/hooks`, input)
      return (await response.json()) as Subscription
    },
    async deleteHook(accountId: string, hookId: string): Promise<void> {
      // 404: deleted already, by someone else.
      await call(`deleting ${hookId}`, 'DELETE', `/account/${accountId}/hooks/${hookId}`, undefined, 404)
    },
  }
}

type ForwardOutcome = { status: number } | { error: string }

export type Received =
  | { verified: false; reason: string }
  | { verified: true; event: { id: string; type: string }; webhookId: string; forward: ForwardOutcome | undefined }

export interface ReceiverDeps {
  webhook: Webhook
  forwardTo: URL | undefined
  fetch: Fetch
  forwardTimeoutMs?: number
}

/**
 * Answers one request to the receiver. Unless it is signed with this run's secret it is
 * refused (400) and goes no further. A verified delivery is forwarded as it came, its exact
 * bytes and webhook-* headers, and the service gets the forward's answer, so its delivery log
 * and retries follow the local app; a forward that fails is 502, with the reason as the body
 * the service's attempt log keeps.
 */
export async function receive(request: Request, deps: ReceiverDeps): Promise<{ response: Response; received: Received }> {
  const body = Buffer.from(await request.arrayBuffer())
  const headers = Object.fromEntries(request.headers)
  let event: { id: string; type: string }
  try {
    event = deps.webhook.verify(body, headers) as { id: string; type: string }
  } catch (error) {
    const reason = (error as Error).message
    return { response: new Response(`not signed with this listener's secret: ${reason}`, { status: 400 }), received: { verified: false, reason } }
  }
  const verified = { verified: true as const, event, webhookId: headers['webhook-id']! }
  if (!deps.forwardTo) return { response: new Response(null, { status: 204 }), received: { ...verified, forward: undefined } }

  const timeoutMs = deps.forwardTimeoutMs ?? FORWARD_TIMEOUT_MS
  const forwarded: Record<string, string> = {}
  for (const [name, value] of Object.entries(headers)) if (name === 'content-type' || name.startsWith('webhook-')) forwarded[name] = value
  try {
    // No redirects followed: the service follows none either, and the app should see what it would.
    const answer = await deps.fetch(deps.forwardTo, { method: 'POST', headers: forwarded, body, redirect: 'manual', signal: AbortSignal.timeout(timeoutMs) })
    const answerBody = await answer.arrayBuffer()
    const passed = new Headers()
    for (const name of ['content-type', 'retry-after']) {
      const value = answer.headers.get(name)
      if (value !== null) passed.set(name, value)
    }
    const response = new Response(NULL_BODY_STATUSES.has(answer.status) ? null : answerBody, { status: answer.status, headers: passed })
    return { response, received: { ...verified, forward: { status: answer.status } } }
  } catch (error) {
    const reason = describeNetworkError(error, timeoutMs)
    return { response: new Response(`forward to ${deps.forwardTo} failed: ${reason}`, { status: 502 }), received: { ...verified, forward: { error: reason } } }
  }
}

/** One line per request to the receiver. */
function describeReceived(received: Received, at: Date, forwardTo: URL | undefined): string {
  const time = at.toISOString()
  if (!received.verified) return `${time}  refused a request not signed with this listener's secret (${received.reason}): answered 400, not forwarded`
  const what = `${time}  ${received.event.type}  ${received.event.id}  webhook-id ${received.webhookId}`
  const forward = received.forward
  if (!forward) return `${what}  answered 204`
  if ('error' in forward) return `${what}  forward to ${forwardTo} failed, ${forward.error}: answered 502`
  return `${what}  → ${forwardTo} ${forward.status}`
}

export interface ListenDeps {
  fetch: Fetch
  /** One line to stdout, one to stderr. */
  out(line: string): void
  err(line: string): void
  /** Aborted to stop (SIGINT, SIGTERM): the subscriptions are deleted and `listen` returns. */
  signal: AbortSignal
  env: Record<string, string | undefined>
  /** This configuration's `{base_url}`, the default of --api. */
  baseUrl: string
  now?: () => Date
}

const untilAborted = (signal: AbortSignal) => new Promise<void>((resolve) => (signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true })))

/** Runs `listen` until the signal is aborted; resolves to the exit code. */
export async function listen(argv: string[], deps: ListenDeps): Promise<number> {
  let options
  try {
    options = parseListenArgs(argv, deps)
  } catch (error) {
    if (!(error instanceof UsageError)) throw error
    deps.err(`error: ${error.message} (bun run cli listen --help)`)
    return 2
  }
  if (options === 'help') {
    deps.out(LISTEN_USAGE)
    return 0
  }
  const { baseUrl, forwardTo } = options
  // With --json, stdout carries nothing but events.
  const say = options.json ? deps.err : deps.out
  const now = deps.now ?? (() => new Date())
  const client = serviceClient(baseUrl, options.key, deps.fetch)
  const failed = (error: unknown) => {
    if (!(error instanceof ServiceError)) throw error
    deps.err(`error: ${error.message}`)
    return 1
  }

  let accountId: string
  try {
    accountId = await client.accountId()
    // The service's own refusal of an unknown type says no more than "Expected union value".
    const known = await client.eventTypes()
    const unknown = options.events.filter((event) => !known.includes(event))
    if (unknown.length) throw new ServiceError(`unknown event type ${unknown.join(', ')}: the service sends ${known.join(', ')}`)
  } catch (error) {
    return failed(error)
  }

  const secret = newWebhookSecret()
  const webhook = new Webhook(secret)
  let server: ReturnType<typeof Bun.serve>
  try {
    server = Bun.serve({
      hostname: '127.0.0.1',
      port: options.port,
      // Bun's default 10 s would close a connection whose forward is still within its own 10 s.
      idleTimeout: 30,
      async fetch(request) {
        const { response, received } = await receive(request, { webhook, forwardTo, fetch: deps.fetch })
        const line = describeReceived(received, now(), forwardTo)
        if (!received.verified) deps.err(line)
        else if (options.json) {
          deps.out(JSON.stringify(received.event))
          deps.err(line)
        } else deps.out(line)
        return response
      },
    })
  } catch (error) {
    deps.err(`error: cannot listen on 127.0.0.1:${options.port} (${(error as Error).message})`)
    return 1
  }
  const targetUrl = `http://127.0.0.1:${server.port}/`

  const created: Subscription[] = []
  // Deletes what this run created, then stops the receiver once its requests in flight are answered.
  const closeDown = async () => {
    let exitCode = 0
    const deleted: string[] = []
    for (const subscription of created) {
      try {
        await client.deleteHook(accountId, subscription.id)
        deleted.push(`${subscription.id} (${subscription.event})`)
      } catch (error) {
        exitCode = failed(error)
      }
    }
    await server.stop()
    if (exitCode !== 0) deps.err(`Delete what is left with DELETE ${baseUrl}/account/${accountId}/hooks/{hook_id}.`)
    return { exitCode, deleted: deleted.length ? `Deleted ${deleted.join(', ')}` : 'Deleted no subscription' }
  }

  try {
    for (const event of options.events) {
      // Stopped while subscribing: make no more, delete those made.
      if (deps.signal.aborted) break
      created.push(await client.createHook(accountId, { event, target_url: targetUrl, secret }))
    }
  } catch (error) {
    const exitCode = failed(error)
    const { deleted } = await closeDown()
    if (created.length) deps.err(`${deleted}, made before that.`)
    return exitCode
  }

  if (!deps.signal.aborted) {
    say(`Listening on ${targetUrl} for ${accountId} at ${baseUrl}:`)
    for (const subscription of created) say(`  ${subscription.id}  ${subscription.event}`)
    say(`Webhook signing secret: ${secret}  (every delivery is signed with it: verify with it in your app)`)
    say(
      forwardTo
        ? `Forwarding to ${forwardTo}; the service gets its answer. Ctrl-C deletes the subscriptions and stops.`
        : 'Not forwarding (no --forward-to): each delivery is printed and answered 204. Ctrl-C deletes the subscriptions and stops.',
    )
    await untilAborted(deps.signal)
  }
  const { exitCode, deleted } = await closeDown()
  say(`${deleted}; stopped listening.`)
  return exitCode
}
