import { isLoopbackHost } from '../lib/http/loopback.ts'

/**
 * Whether a browser page on `origin` may call the MCP endpoint. DNS rebinding makes a page on
 * an attacker's name reach a local or internal server; its Origin is still the attacker's. So
 * accepted are: the service's own origin (PUBLIC_URL), loopback origins (a tool running on the
 * user's machine, such as the MCP Inspector), and the origins an operator lists.
 */
export function isAllowedOrigin(origin: string, options: { publicUrl: string; allowed: readonly string[] }): boolean {
  let parsed: URL
  try {
    parsed = new URL(origin)
  } catch {
    return false
  }
  if (parsed.origin === 'null') return false
  if (parsed.origin === new URL(options.publicUrl).origin) return true
  if (isLoopbackHost(parsed.hostname) && (parsed.protocol === 'http:' || parsed.protocol === 'https:')) return true
  return options.allowed.includes(parsed.origin)
}
