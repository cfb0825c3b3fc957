// As `URL.hostname` writes them (IPv6 in brackets). RFC 8252 §7.3 and §8.3: the loopback
// addresses, and `localhost`, which the MCP and OAuth clients of this age still use.
const LOOPBACK_HOSTS = new Set(['127.0.0.1', '[::1]', 'localhost'])

/** True for a loopback host name: where a native app or a local tool listens. */
export const isLoopbackHost = (hostname: string): boolean => LOOPBACK_HOSTS.has(hostname.toLowerCase())
