import { Memoirist } from 'memoirist'

/**
 * Finds which of the app's route patterns (`/v0/account/:account_id/hooks/:hook_id`) a request
 * matched, with the router Elysia itself uses (a static path is one Map lookup), and answers the
 * value made for that pattern once, at start: the metrics' counters of a route, a span's
 * `http.route`. Undefined when no route matches: raw paths would make a series, or a span name,
 * per URL.
 */
export function createRouteMatcher<T>(routes: readonly { method: string; path: string }[], valueOf: (pattern: string) => T): (method: string, url: string) => T | undefined {
  const statics = new Map<string, Map<string, T>>()
  const dynamic = new Memoirist<T>()
  for (const { method, path } of routes) {
    if (method === 'ALL' || method === 'WS') continue
    const value = valueOf(path)
    if (!path.includes(':') && !path.includes('*')) {
      let byPath = statics.get(method)
      if (!byPath) statics.set(method, (byPath = new Map()))
      byPath.set(path, value)
    } else {
      try {
        dynamic.add(method, path, value)
      } catch {}
    }
  }
  return (method, url) => {
    // The path of an absolute URL: from the first '/' after the scheme's '//' to the query.
    const start = url.indexOf('/', url.indexOf('//') + 2)
    if (start < 0) return undefined
    const query = url.indexOf('?', start)
    const path = query < 0 ? url.slice(start) : url.slice(start, query)
    const lookup = method === 'HEAD' ? 'GET' : method
    return statics.get(lookup)?.get(path) ?? dynamic.find(lookup, path)?.store
  }
}
