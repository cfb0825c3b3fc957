/**
 * What a subscription's `target_url` names (docs/webhooks.md#destinations): an HTTPS endpoint, a
 * RabbitMQ exchange (`amqp://`, `amqps://`) or a NATS JetStream subject (`nats://`, `tls://`).
 * Parsed once at create or update (the owner's 422s come from here) and again by the sender.
 */

export type DestinationKind = 'https' | 'rabbitmq' | 'nats'

interface BrokerAddress {
  /** TLS (`amqps://`, `tls://`); without it, only loopback and private hosts are reached. */
  tls: boolean
  /** As the URL writes it: a name, an IPv4 literal or a bracketed IPv6 literal. */
  hostname: string
  port: number
}

export interface RabbitMqDestination extends BrokerAddress {
  kind: 'rabbitmq'
  vhost: string
  /** '' is the default exchange, where `routingKey` names a queue. */
  exchange: string
  routingKey: string
  username: string
  password: string
}

export interface NatsDestination extends BrokerAddress {
  kind: 'nats'
  subject: string
  /** user:password, or a token written alone where the user goes; neither when the server needs none. */
  user?: string
  pass?: string
  token?: string
}

export type Destination = { kind: 'https'; url: URL } | RabbitMqDestination | NatsDestination

export class InvalidDestination extends Error {}

const BROKER_SCHEMES: Record<string, { kind: 'rabbitmq' | 'nats'; tls: boolean; port: number }> = {
  'amqp:': { kind: 'rabbitmq', tls: false, port: 5672 },
  'amqps:': { kind: 'rabbitmq', tls: true, port: 5671 },
  'nats:': { kind: 'nats', tls: false, port: 4222 },
  'tls:': { kind: 'nats', tls: true, port: 4222 },
}

/** The kind a URL's scheme names; https for anything that is not a broker's (refused later if it is not http(s)). */
export const kindOfScheme = (protocol: string): DestinationKind => BROKER_SCHEMES[protocol]?.kind ?? 'https'

// AMQP 0-9-1 short strings are at most 255 bytes; exchange and queue names use these characters.
const AMQP_NAME = /^[A-Za-z0-9_.:\-/]{0,255}$/
// A NATS subject to publish to: tokens separated by dots, no wildcard, no whitespace; `$…` subjects are the server's own (JetStream's API, system events).
const NATS_SUBJECT = /^[^\s.*>$][^\s.*>]*(\.[^\s.*>]+)*$/

function decoded(part: string, name: string): string {
  try {
    return decodeURIComponent(part)
  } catch {
    throw new InvalidDestination(`${name} is not valid percent-encoding`)
  }
}

function onlyParameters(url: URL, allowed: string[]): void {
  for (const name of new Set(url.searchParams.keys())) {
    if (!allowed.includes(name)) throw new InvalidDestination(`unknown parameter ${JSON.stringify(name.slice(0, 40))}: ${/^[aeiou]/.test(url.protocol) ? 'an' : 'a'} ${url.protocol}// target takes ${allowed.join(' and ')}`)
    if (url.searchParams.getAll(name).length > 1) throw new InvalidDestination(`${name} is given more than once`)
  }
}

/** Parses a broker URL; an https (or other) URL comes back as it is, for the HTTPS rules (src/hooks/service.ts). */
export function parseDestination(raw: string): Destination {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new InvalidDestination('must be an absolute URL')
  }
  const scheme = BROKER_SCHEMES[url.protocol]
  if (!scheme) return { kind: 'https', url }
  if (!url.hostname) throw new InvalidDestination(`a ${url.protocol}// target names a host`)
  if (url.hash) throw new InvalidDestination('must not have a fragment')
  const address = { tls: scheme.tls, hostname: url.hostname, port: url.port ? Number(url.port) : scheme.port }
  const username = decoded(url.username, 'the user name')
  const password = decoded(url.password, 'the password')
  if (scheme.kind === 'rabbitmq') {
    onlyParameters(url, ['exchange', 'routing_key'])
    const exchange = url.searchParams.get('exchange')
    if (exchange === null) throw new InvalidDestination('names the exchange: ?exchange=<name> (empty for the default exchange, with routing_key naming the queue)')
    const routingKey = url.searchParams.get('routing_key') ?? ''
    if (!AMQP_NAME.test(exchange)) throw new InvalidDestination('exchange: at most 255 letters, digits, "-", "_", ".", ":" or "/"')
    if (new TextEncoder().encode(routingKey).length > 255) throw new InvalidDestination('routing_key: at most 255 bytes')
    if (exchange.startsWith('amq.') && exchange !== 'amq.direct' && exchange !== 'amq.topic' && exchange !== 'amq.fanout' && exchange !== 'amq.headers' && exchange !== 'amq.match') {
      throw new InvalidDestination('exchange: names starting with amq. are the broker\'s own')
    }
    if (exchange === '' && routingKey === '') throw new InvalidDestination('routing_key names the queue when the exchange is the default one (exchange=)')
    // RFC 3986 URI spec of RabbitMQ: no path is the default vhost "/"; "/name" is "name" (percent-encoded, so %2F is "/").
    if (url.pathname.indexOf('/', 1) !== -1) throw new InvalidDestination('the vhost is one path segment: percent-encode a "/" in its name as %2F')
    const vhost = url.pathname === '' || url.pathname === '/' ? '/' : decoded(url.pathname.slice(1), 'the vhost')
    if (url.password && !url.username) throw new InvalidDestination('a password needs a user name')
    return { kind: 'rabbitmq', ...address, vhost, exchange, routingKey, username: username || 'guest', password: url.username ? password : 'guest' }
  }
  onlyParameters(url, ['subject'])
  if (url.pathname !== '' && url.pathname !== '/') throw new InvalidDestination('a NATS target has no path: nats://host:4222?subject=<subject>')
  const subject = url.searchParams.get('subject')
  if (subject === null) throw new InvalidDestination('names the subject: ?subject=<subject>')
  if (subject.length > 255 || !NATS_SUBJECT.test(subject)) {
    throw new InvalidDestination('subject: tokens separated by dots, without wildcards (* or >) or whitespace, not starting with $, at most 255 characters')
  }
  const credentials = url.password ? { user: username, pass: password } : url.username ? { token: username } : {}
  return { kind: 'nats', ...address, subject, ...credentials }
}

/**
 * The URL as the owner sees it, everywhere (API, dashboard, MCP, logs, traces): a password, or a
 * NATS token written alone, becomes `***`. The real one is sealed (docs/webhooks.md#destinations).
 */
export function redactedTarget(raw: string): string {
  const url = new URL(raw)
  if (!BROKER_SCHEMES[url.protocol]) return url.href
  const userinfo = url.password ? `${url.username}:***@` : url.username ? (BROKER_SCHEMES[url.protocol]!.kind === 'nats' ? '***@' : `${url.username}@`) : ''
  // Written out, so the same target always reads the same (the runtime's URL adds a "/" path to some and not to others): a NATS URL has no path, an AMQP one at least "/" (the same vhost).
  const path = BROKER_SCHEMES[url.protocol]!.kind === 'nats' ? '' : url.pathname || '/'
  return `${url.protocol}//${userinfo}${url.host}${path}${url.search}`
}

/** Whether the URL carries a secret that redactedTarget hides (and so must be sealed). */
export function carriesCredentials(raw: string): boolean {
  const url = new URL(raw)
  const scheme = BROKER_SCHEMES[url.protocol]
  return scheme !== undefined && (url.password !== '' || (scheme.kind === 'nats' && url.username !== ''))
}

/**
 * A changed broker URL that still shows the stored password as `***` (read from the API, then
 * edited: a new routing key, say) gets the stored password back, when it goes to the same
 * broker as the same user: same scheme, host, port and user name. Null when the URL hides
 * nothing; InvalidDestination when it hides a password it may not have (another broker or user:
 * the password must be given again, so that a stored one never goes somewhere new).
 */
export function restoreHiddenSecret(raw: string, stored: string | null): string | null {
  const url = URL.parse(raw)
  const scheme = url && BROKER_SCHEMES[url.protocol]
  if (!url || !scheme) return null
  const hidesToken = scheme.kind === 'nats' && url.username === '***' && url.password === ''
  if (url.password !== '***' && !hidesToken) return null
  const previous = stored === null ? null : new URL(stored)
  const same = previous !== null && previous.protocol === url.protocol && previous.hostname === url.hostname && previous.port === url.port && (hidesToken ? previous.password === '' : previous.username === url.username)
  if (!same) throw new InvalidDestination('shows the password as ***: give the password itself to reach another broker, port or user')
  if (hidesToken) url.username = previous.username
  else url.password = previous.password
  return url.href
}
