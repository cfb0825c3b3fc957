import { isIP } from 'node:net'
import { lookup as dnsLookup } from 'node:dns/promises'
import { getCACertificates } from 'node:tls'
import ipaddr from 'ipaddr.js'

/**
 * The one way the service reaches a URL someone else chose: webhook deliveries
 * (src/delivery/send.ts), OAuth client ID metadata documents
 * (src/oauth/client-metadata-document.ts) and clients' `jwks_uri` key sets
 * (src/oauth/client-keys.ts). See docs/webhooks.md#sending-rules. Without these
 * checks the service would send requests into its own network on a stranger's behalf: the
 * database, an admin port, the cloud metadata endpoint that hands out credentials.
 *
 * - resolveTarget: the name is resolved here and every address it resolves to is checked.
 *   The rule is an allowlist: only globally routable unicast passes. Ranges are ipaddr.js's
 *   (RFC 6890 and friends), never parsed or compared by hand.
 * - fetchPinned: the request goes to a checked address, never to a second lookup's answer,
 *   with TLS still verified against the name; redirects are never followed; no proxy.
 * - readPrefix / readLimited: bounded body reads.
 * The caller's AbortSignal covers all of it: the lookup, connecting, TLS, the answer, the body.
 */

/**
 * Metadata endpoints that ranges alone do not catch. 169.254.169.254 (AWS, GCP, Azure, Oracle)
 * and fd00:ec2::254 (AWS IPv6) are already link-local and unique-local; Azure's WireServer
 * 168.63.129.16 is a public address that answers only from inside Azure.
 */
const METADATA_ADDRESSES = new Set(['168.63.129.16'])

/** RFC 6052 well-known NAT64 prefix: DNS64 maps an IPv4-only host to 64:ff9b::<its IPv4>. */
const NAT64_PREFIX = ipaddr.IPv6.parse('64:ff9b::')
/** IPv6 global unicast (RFC 4291 §2.4); everything outside it is special or unallocated. */
const GLOBAL_UNICAST_V6 = ipaddr.IPv6.parse('2000::')

export function isForbiddenAddress(ip: string): boolean {
  let address: ipaddr.IPv4 | ipaddr.IPv6
  try {
    // process() unwraps IPv4-mapped IPv6 (::ffff:127.0.0.1, ::ffff:7f00:1) into the IPv4 it carries.
    address = ipaddr.process(ip)
  } catch {
    return true
  }
  if (METADATA_ADDRESSES.has(address.toString())) return true
  if (address.kind() === 'ipv4') return address.range() !== 'unicast'
  const v6 = address as ipaddr.IPv6
  if (v6.match(NAT64_PREFIX, 96)) {
    // A NAT64 address reaches whatever IPv4 it embeds: judge that one.
    const [a, b, c, d] = v6.toByteArray().slice(12)
    return isForbiddenAddress(`${a}.${b}.${c}.${d}`)
  }
  // 6to4 and Teredo sit inside 2000::/3 but are deprecated tunnels (RFC 7526) that embed an IPv4
  // (Teredo's obfuscated): ipaddr.js names their ranges, and they are refused with the rest.
  return !v6.match(GLOBAL_UNICAST_V6, 3) || v6.range() !== 'unicast'
}

/** `runtime`: this runtime cannot pin an https connection to an address while verifying the name (Deno). */
export type TargetRefusal = 'scheme' | 'userinfo' | 'forbidden_address' | 'unresolvable' | 'runtime'

export class TargetRefused extends Error {
  constructor(
    readonly reason: TargetRefusal,
    message: string,
  ) {
    super(message)
    this.name = 'TargetRefused'
  }
}

export type Lookup = (hostname: string) => Promise<string[]>

export interface ResolvedTarget {
  /** The URL's host name without IPv6 brackets: what TLS verifies and `Host` names. */
  hostname: string
  /** True when the URL names an address rather than a DNS name. */
  isAddressLiteral: boolean
  /** Every address checked, in resolver order; connect to these and nothing else. */
  addresses: string[]
}

const systemLookup: Lookup = async (hostname) => (await dnsLookup(hostname, { all: true })).map((entry) => entry.address)

/**
 * Resolves a target and checks every address it resolves to, or throws TargetRefused.
 * All addresses must pass, not just one: a name that also resolves to a private address can be
 * answered differently on the next lookup (DNS rebinding), so the caller must connect only to
 * the addresses returned here.
 */
export async function resolveTarget(url: URL, options: { allowPrivate: boolean; lookup?: Lookup }): Promise<ResolvedTarget> {
  const plainHttp = url.protocol === 'http:' && options.allowPrivate
  if (url.protocol !== 'https:' && !plainHttp) throw new TargetRefused('scheme', `only https targets are allowed, not ${url.protocol}`)
  if (url.username || url.password) throw new TargetRefused('userinfo', 'target URLs must not carry credentials')
  return resolveHost(url.hostname, { ...options, plain: plainHttp })
}

/**
 * resolveTarget's checks for a host reached by another protocol (a message broker:
 * src/delivery/destinations/): the name resolved here, every address checked, and with `plain`
 * (no TLS) only loopback and private addresses allowed.
 */
export async function resolveHost(urlHostname: string, options: { allowPrivate: boolean; lookup?: Lookup; plain: boolean }): Promise<ResolvedTarget> {
  const plainHttp = options.plain
  const hostname = urlHostname.startsWith('[') ? urlHostname.slice(1, -1) : urlHostname
  const isAddressLiteral = ipaddr.isValid(hostname)
  let addresses: string[]
  if (isAddressLiteral) {
    addresses = [hostname]
  } else {
    try {
      addresses = [...new Set(await (options.lookup ?? systemLookup)(hostname))]
    } catch {
      addresses = []
    }
    if (addresses.length === 0) throw new TargetRefused('unresolvable', `${hostname} does not resolve`)
  }
  if (!options.allowPrivate) {
    const forbidden = addresses.find(isForbiddenAddress)
    if (forbidden !== undefined) throw new TargetRefused('forbidden_address', `${hostname} resolves to ${forbidden}, which is not a public address (WEBHOOK_ALLOW_PRIVATE_TARGETS=true allows it, for local development)`)
  }
  if (plainHttp) {
    // Plain http is for a receiver on this machine or network: never across the internet, whatever the name resolves to now.
    const open = addresses.find((address) => !isForbiddenAddress(address))
    if (open !== undefined) throw new TargetRefused('scheme', `a connection without TLS is allowed only to loopback and private addresses; ${hostname} resolves to ${open}`)
  }
  return { hostname, isAddressLiteral, addresses }
}

/**
 * For checks without DNS (creating a subscription): an address literal in a forbidden range,
 * or a `localhost` name. Other names are resolved and checked at every request.
 */
export function isForbiddenHost(hostname: string): boolean {
  const host = hostname.replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '').toLowerCase()
  if (host === 'localhost' || host.endsWith('.localhost')) return true
  return isIP(host) !== 0 && isForbiddenAddress(host)
}

/** Who may be reached, and what is trusted: WEBHOOK_ALLOW_PRIVATE_TARGETS and WEBHOOK_CA_FILE. */
export interface OutboundPolicy {
  /** Loopback and private addresses allowed (tests, local development); plain http too, to them only. */
  allowPrivate: boolean
  /** How long connecting may take, apart from the whole request's timeout; CONNECT_TIMEOUT_MS when absent. */
  connectTimeoutMs?: number
  /** Extra trusted CAs (PEM), added to the default ones rather than replacing them. */
  ca?: string
  lookup?: Lookup
}

export interface PinnedRequest {
  method: 'GET' | 'POST'
  /**
   * Sent as given. The guard writes `host` into this object (the URL's host: the request goes
   * to an address, the target still sees its name); callers build a fresh one per request.
   */
  headers: Record<string, string>
  body?: string
}

// Bun parses the CAs given to fetch on every request: one PEM string of them all costs about
// 110 µs of CPU per request on this machine, an array of the ~150 default ones about 280 µs
// (without the option, 40). NODE_EXTRA_CA_CERTS, read once at start, is the cheap way to trust a
// private CA (docs/webhooks.md); WEBHOOK_CA_FILE works without a restart of the runtime's trust.
let trustedFor: { extra: string; pem: string } | undefined
export function trustedWith(extra: string): string {
  if (trustedFor?.extra !== extra) trustedFor = { extra, pem: [...getCACertificates('default'), extra].join('\n') }
  return trustedFor.pem
}

/**
 * Pinning an https target by name needs fetch's `tls.serverName` (Bun). Deno's fetch ignores
 * that option and would check the certificate against the address, so under Deno such a
 * request is refused with a plain reason instead of a TLS error, and never goes out unpinned.
 */
const RUNTIME_PINS_TLS = typeof (globalThis as { Bun?: unknown }).Bun !== 'undefined'
/** A host that does not accept a connection within this long is given up on (docs/webhooks.md#timeouts), whatever the request's timeout. */
export const CONNECT_TIMEOUT_MS = 5_000
/** An address that accepted a connection this recently is not checked again: fetch's keep-alive pool usually holds one to it. */
const CONNECTED_RECENTLY_MS = 30_000
const connectedAt = new Map<string, number>()

/** No connection was accepted within the connect timeout (a host that drops packets, or one whose accept queue is full). */
export class ConnectTimeout extends Error {
  override readonly name = 'ConnectTimeout'
  constructor(readonly timeoutMs: number) {
    super(`connect timed out after ${timeoutMs} ms`)
  }
}

/**
 * Bun's fetch has no connect timeout of its own: a host that drops packets holds the request
 * until the whole timeout runs out (and the kernel keeps trying for two minutes). So before
 * fetch is asked for an address not connected to lately, a TCP connection to it is opened and
 * closed within the connect timeout. Refused, it throws the connect error fetch would have.
 */
async function checkConnects(address: string, port: number, timeoutMs: number, signal: AbortSignal): Promise<void> {
  const key = `${address}:${port}`
  if ((connectedAt.get(key) ?? -Infinity) > performance.now() - CONNECTED_RECENTLY_MS) return
  const connecting = Bun.connect({ hostname: address, port, socket: { data() {}, error() {} } })
  let timer: ReturnType<typeof setTimeout> | undefined
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ConnectTimeout(timeoutMs)), timeoutMs)
  })
  try {
    const socket = await raceSignal(Promise.race([connecting, timedOut]), signal)
    socket.end()
    if (connectedAt.size >= 10_000) connectedAt.clear()
    connectedAt.set(key, performance.now())
  } catch (error) {
    // A connection made after the check gave up is closed as soon as it exists.
    connecting.then((socket) => socket.end()).catch(() => {})
    throw error
  } finally {
    clearTimeout(timer)
  }
}

/** Errors raised before a connection exists, after which the next checked address is worth a try. */
const CONNECT_ERRORS = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL'])

/**
 * Resolves `url`, checks every address, and sends `request` to the first checked address that
 * accepts a connection. Throws TargetRefused (nothing was sent) or the network error (a
 * TimeoutError when `signal` is a timeout that ran out). Any status is returned as it came:
 * a 3xx is never followed.
 *
 * Pinning. Bun's fetch resolves host names itself, so fetching the URL would connect to
 * whatever a second lookup returns (DNS rebinding past the check). Instead the request goes
 * to `https://<checked address>:<port>/…` with `Host` set to the URL's host and
 * `tls.serverName` set to its name: Bun sends that name as SNI and verifies the certificate
 * against it, not against the address, and keys its keep-alive pool by it too (checked on Bun
 * 1.4.5: a wrong serverName fails with ERR_TLS_CERT_ALTNAME_INVALID, an SNI-selected certificate
 * is served, two names on one address get separate connections). Staying on fetch keeps its
 * connection reuse, about ten times the throughput of a connection per request.
 */
export async function fetchPinned(url: URL, request: PinnedRequest, policy: OutboundPolicy, signal: AbortSignal): Promise<Response> {
  const target = await raceSignal(resolveTarget(url, policy), signal)
  if (!RUNTIME_PINS_TLS && url.protocol === 'https:' && !target.isAddressLiteral) {
    throw new TargetRefused('runtime', 'this runtime cannot verify TLS for a name while connecting to its checked address; the Bun entry (src/main.ts) sends https requests to names')
  }
  request.headers.host = url.host
  const tls = {
    // An address literal is verified against itself; a name must be verified (and sent as SNI) as the name.
    serverName: target.isAddressLiteral ? undefined : target.hostname,
    ca: policy.ca === undefined ? undefined : trustedWith(policy.ca),
  }
  let lastError: unknown
  for (const address of target.addresses) {
    const pinned = new URL(url)
    pinned.hostname = address.includes(':') ? `[${address}]` : address
    pinned.hash = ''
    try {
      if (RUNTIME_PINS_TLS) await checkConnects(address, Number(pinned.port) || (url.protocol === 'https:' ? 443 : 80), policy.connectTimeoutMs ?? CONNECT_TIMEOUT_MS, signal)
      // proxy: false because a proxy would connect on its own terms, not to the checked address.
      return await fetch(pinned, { method: request.method, headers: request.headers, body: request.body, redirect: 'manual', signal, tls, proxy: false })
    } catch (error) {
      lastError = error
      if (!(error instanceof ConnectTimeout) && !CONNECT_ERRORS.has(errorCode(error) ?? '')) break
    }
  }
  throw lastError
}

/** The lookup does not take a signal: give up waiting for it when the signal aborts. */
export function raceSignal<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason)
    if (signal.aborted) return onAbort()
    signal.addEventListener('abort', onAbort, { once: true })
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort))
  })
}

/** Reads at most `maxBytes` and drops the rest unread; a character cut at the limit is left out. */
export async function readPrefix(response: Response, maxBytes: number): Promise<string> {
  if (!response.body) return ''
  const reader = response.body.getReader()
  const decoder = new TextDecoder()
  let text = ''
  let remaining = maxBytes
  try {
    while (remaining > 0) {
      const { done, value } = await reader.read()
      if (done) break
      const chunk = value.subarray(0, remaining)
      remaining -= chunk.length
      // stream: true holds back a trailing partial UTF-8 sequence instead of emitting U+FFFD.
      text += decoder.decode(chunk, { stream: true })
    }
  } finally {
    await reader.cancel().catch(() => {})
  }
  return text
}

/** A body over the limit: refused whole, never cut. */
export class BodyTooLarge extends Error {
  constructor(readonly maxBytes: number) {
    super(`the body is larger than ${maxBytes} bytes`)
    this.name = 'BodyTooLarge'
  }
}

/**
 * The whole body if it is at most `maxBytes`, else BodyTooLarge: a declared Content-Length over
 * the limit is refused before reading, an undeclared one as soon as the limit is passed.
 */
export async function readLimited(response: Response, maxBytes: number): Promise<Uint8Array> {
  const declared = response.headers.get('content-length')
  if (declared !== null && Number(declared) > maxBytes) {
    await response.body?.cancel().catch(() => {})
    throw new BodyTooLarge(maxBytes)
  }
  if (!response.body) return new Uint8Array(0)
  const reader = response.body.getReader()
  const chunks: Uint8Array[] = []
  let total = 0
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      total += value.length
      if (total > maxBytes) throw new BodyTooLarge(maxBytes)
      chunks.push(value)
    }
  } finally {
    await reader.cancel().catch(() => {})
  }
  const body = new Uint8Array(total)
  let offset = 0
  for (const chunk of chunks) {
    body.set(chunk, offset)
    offset += chunk.length
  }
  return body
}

export function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'string' ? code : undefined
}

export const isTimeout = (error: unknown) => (error as { name?: unknown } | null)?.name === 'TimeoutError'

/** A network failure in a few words: the timeout, or the error code (ECONNREFUSED, a TLS verification code), or the message. */
export function describeNetworkError(error: unknown, timeoutMs: number): string {
  if (isTimeout(error)) return `timed out after ${timeoutMs} ms`
  if (error instanceof ConnectTimeout) return error.message
  const code = errorCode(error)
  if (code) return `connection failed: ${code}`
  return `connection failed: ${error instanceof Error ? error.message.slice(0, 200) : String(error)}`
}
