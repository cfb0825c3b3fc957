import { isIP } from 'node:net'
import { lookup as dnsLookup } from 'node:dns/promises'
import ipaddr from 'ipaddr.js'

/**
 * Which addresses a webhook delivery may connect to (docs/webhooks.md#sending-rules). A subscriber chooses the
 * target URL, so without these checks the service would POST into its own network on their
 * behalf: the database, an admin port, the cloud metadata endpoint that hands out credentials.
 *
 * The rule is an allowlist: only globally routable unicast passes. Ranges are ipaddr.js's
 * (RFC 6890 and friends), never parsed or compared by hand.
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

export type TargetRefusal = 'scheme' | 'userinfo' | 'forbidden_address' | 'unresolvable'

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
 * Resolves a delivery target and checks every address it resolves to, or throws TargetRefused.
 * All addresses must pass, not just one: a name that also resolves to a private address can be
 * answered differently on the next lookup (DNS rebinding), so the caller must connect only to
 * the addresses returned here.
 */
export async function resolveTarget(url: URL, options: { allowPrivate: boolean; lookup?: Lookup }): Promise<ResolvedTarget> {
  const plainHttp = url.protocol === 'http:' && options.allowPrivate
  if (url.protocol !== 'https:' && !plainHttp) throw new TargetRefused('scheme', `only https targets are allowed, not ${url.protocol}`)
  if (url.username || url.password) throw new TargetRefused('userinfo', 'target URLs must not carry credentials')
  const hostname = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
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
    if (open !== undefined) throw new TargetRefused('scheme', `plain http is allowed only to loopback and private addresses; ${hostname} resolves to ${open}`)
  }
  return { hostname, isAddressLiteral, addresses }
}

/**
 * For checks without DNS (creating a subscription): an address literal in a forbidden range,
 * or a `localhost` name. Other names are resolved and checked at every delivery.
 */
export function isForbiddenHost(hostname: string): boolean {
  const host = hostname.replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '').toLowerCase()
  if (host === 'localhost' || host.endsWith('.localhost')) return true
  return isIP(host) !== 0 && isForbiddenAddress(host)
}
