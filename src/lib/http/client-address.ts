import ipaddr from 'ipaddr.js'

// Who is calling, by address: the socket's peer, unless that peer is one of our own load
// balancers (TRUSTED_PROXIES). Each proxy appends the address it received the request from to
// X-Forwarded-For, so the list is read from the right: entries written by trusted proxies are
// skipped, and the first address that is not a trusted proxy is the client. Everything left of
// it was written by the client (or by proxies we know nothing of) and could be anything.

type Address = ipaddr.IPv4 | ipaddr.IPv6

/** Decides whether an address is one of the trusted proxies; built once from the configuration. */
export type TrustedProxies = (address: Address) => boolean

const OCTET = '(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)'
/** A dotted quad exactly as ipaddr.js writes it back (no leading zeros). */
const CANONICAL_IPV4 = new RegExp(`^${OCTET}(?:\\.${OCTET}){3}$`)
const IPV4_WITH_PORT = /^(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/
const BRACKETED_IPV6 = /^\[([^\]]+)\](?::\d{1,5})?$/

/**
 * An address as proxies write it (`203.0.113.9`, `203.0.113.9:4711`, `2001:db8::1`,
 * `[2001:db8::1]:443`), IPv4-mapped IPv6 read as the IPv4 it carries; null for anything else.
 * Only dotted-quad IPv4: `127.1` or `2130706433` are not what a proxy writes.
 */
function parseAddress(text: string): Address | null {
  let candidate = text.trim()
  const v4 = IPV4_WITH_PORT.exec(candidate)
  if (v4) candidate = v4[1]!
  else {
    const v6 = BRACKETED_IPV6.exec(candidate)
    if (v6) candidate = v6[1]!
  }
  if (candidate.length > 64) return null
  if (ipaddr.IPv4.isValidFourPartDecimal(candidate)) return ipaddr.IPv4.parse(candidate)
  if (!candidate.includes(':') || candidate.includes('%') || !ipaddr.IPv6.isValid(candidate)) return null
  const v6 = ipaddr.IPv6.parse(candidate)
  return v6.isIPv4MappedAddress() ? v6.toIPv4Address() : v6
}

/**
 * `10.0.0.0/8, 2001:db8::/32, 192.0.2.7` → normalised CIDRs (a bare address is a single host).
 * Refused, with the entry named: anything that is not an address or CIDR, a prefix with host
 * bits set (`10.1.2.3/8`, most often a typo for a narrower range), and `/0`, which would let
 * every client choose its own address.
 */
export function parseTrustedProxies(raw: string): string[] {
  const ranges: string[] = []
  for (const part of raw.split(',')) {
    const entry = part.trim()
    if (entry === '') continue
    const refuse = (why: string): never => {
      throw new Error(`${JSON.stringify(entry)} ${why}; expected comma-separated CIDRs such as 10.0.0.0/8, 2001:db8::/32`)
    }
    const [addressText, bitsText, extra] = entry.split('/') as [string, string | undefined, string | undefined]
    if (extra !== undefined || (bitsText !== undefined && !/^\d{1,3}$/.test(bitsText))) refuse('is not a CIDR')
    let network: Address
    let bits: number
    if (ipaddr.IPv4.isValidFourPartDecimal(addressText)) {
      network = ipaddr.IPv4.parse(addressText)
      bits = bitsText === undefined ? 32 : Number(bitsText)
      if (bits > 32) refuse('has a prefix longer than 32 bits')
    } else if (addressText.includes(':') && !addressText.includes('%') && ipaddr.IPv6.isValid(addressText)) {
      network = ipaddr.IPv6.parse(addressText)
      bits = bitsText === undefined ? 128 : Number(bitsText)
      if (bits > 128) refuse('has a prefix longer than 128 bits')
      // An IPv4-mapped range (::ffff:10.0.0.0/104) is the IPv4 range it maps: clients are read that way.
      if (network.isIPv4MappedAddress() && bits >= 96) {
        network = network.toIPv4Address()
        bits -= 96
      }
    } else {
      return refuse('is not an IP address or CIDR')
    }
    if (bits === 0) refuse('trusts every address, so any client could choose its own')
    const cidr = `${network.toString()}/${bits}`
    const base = network.kind() === 'ipv4' ? ipaddr.IPv4.networkAddressFromCIDR(cidr) : ipaddr.IPv6.networkAddressFromCIDR(cidr)
    if (base.toString() !== network.toString()) refuse(`has host bits set (the network is ${base.toString()}/${bits})`)
    ranges.push(cidr)
  }
  return ranges
}

/** A matcher for normalised CIDRs (from parseTrustedProxies). */
export function trustedProxies(cidrs: readonly string[]): TrustedProxies {
  const ranges = cidrs.map((cidr) => ipaddr.parseCIDR(cidr))
  return (address) => ranges.some(([network, bits]) => network.kind() === address.kind() && address.match(network, bits))
}

/**
 * The client's address: the socket's peer (`socketAddress`, 'unknown' when the runtime did not
 * say) unless that peer is a trusted proxy; then the first X-Forwarded-For entry from the right
 * that is not a trusted proxy. When every entry is trusted, the farthest one. An entry that is
 * not an address where one should be stops the walk at the last trusted hop: junk never becomes
 * a client address of its own, so it cannot be varied to dodge a per-address limit.
 */
export function clientAddress(socketAddress: string | undefined, forwardedFor: string | null, isTrusted: TrustedProxies): string {
  if (socketAddress === undefined) return 'unknown'
  // Every request's log line asks: a plain IPv4 peer with nothing forwarded is already canonical.
  if (!forwardedFor && CANONICAL_IPV4.test(socketAddress)) return socketAddress
  let current = parseAddress(socketAddress)
  if (!current) return socketAddress
  if (!forwardedFor || !isTrusted(current)) return current.toString()
  const hops = forwardedFor.split(',')
  for (let i = hops.length - 1; i >= 0; i--) {
    // Empty list elements are ignored (RFC 9110 §5.6.1): `a, , b` and a trailing comma.
    if (hops[i]!.trim() === '') continue
    const hop = parseAddress(hops[i]!)
    if (!hop) break
    current = hop
    if (!isTrusted(hop)) break
  }
  return current.toString()
}

/**
 * The address rate limits count: an IPv4 address as itself, an IPv6 address as its /64, which
 * one subscriber holds whole (RFC 6177) and could otherwise spread its attempts across.
 */
export function addressForLimits(address: string): string {
  if (!address.includes(':') || !ipaddr.IPv6.isValid(address)) return address
  const parts = ipaddr.IPv6.parse(address).parts.slice(0, 4)
  return `${new ipaddr.IPv6([...parts, 0, 0, 0, 0]).toString()}/64`
}
