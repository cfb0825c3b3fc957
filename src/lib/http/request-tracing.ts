import { context, SpanKind, SpanStatusCode, trace, type Attributes } from '@opentelemetry/api'
import { redactedPath } from '../runtime/logger.ts'
import type { Tracing } from '../runtime/tracing.ts'
import { clientAddressOf, loggedUserAgent, type FetchHandler } from './foundation.ts'
import { createRouteMatcher } from './route-patterns.ts'

const KNOWN_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'CONNECT', 'TRACE'])

/**
 * Wraps the instance's handler when tracing is on (docs/operations.md#traces): every request is a
 * SERVER span named by its route pattern, continuing the caller's W3C `traceparent` and
 * `tracestate`, and active while the app answers, so the spans and log lines of the work it
 * causes belong to it. Attributes follow the HTTP semantic conventions; `url.path` and `url.query`
 * are redacted as the request log's `path` is (no key, token, code or secret-shaped value).
 */
export function traceRequests(handler: FetchHandler, options: { tracing: Tracing; routes: readonly { method: string; path: string }[] }): FetchHandler {
  const { tracing } = options
  const routeOf = createRouteMatcher(options.routes, (pattern) => pattern)
  return (request, clientAddress) => {
    const method = request.method
    const route = routeOf(method, request.url)
    const parent = tracing.contextFrom({ traceparent: request.headers.get('traceparent'), tracestate: request.headers.get('tracestate') })
    const redacted = redactedPath(request.url)
    const queryAt = redacted.indexOf('?')
    const known = KNOWN_METHODS.has(method)
    const attributes: Attributes = {
      'http.request.method': known ? method : '_OTHER',
      'url.scheme': request.url.startsWith('https:') ? 'https' : 'http',
      'url.path': queryAt < 0 ? redacted : redacted.slice(0, queryAt),
    }
    if (!known) attributes['http.request.method_original'] = method.slice(0, 32)
    if (queryAt >= 0) attributes['url.query'] = redacted.slice(queryAt + 1)
    if (route) attributes['http.route'] = route
    if (clientAddress) attributes['network.peer.address'] = clientAddress
    const userAgent = loggedUserAgent(request.headers.get('user-agent'))
    if (userAgent) attributes['user_agent.original'] = userAgent
    // A method we do not know is the client's text: the name says HTTP, as the conventions ask, and keeps the span names few.
    const name = known ? method : 'HTTP'
    const span = tracing.tracer.startSpan(route ? `${name} ${route}` : name, { kind: SpanKind.SERVER, attributes }, parent)

    const finish = (response: Response): Response => {
      span.setAttribute('http.response.status_code', response.status)
      // The client address the request log names: the first untrusted hop when TRUSTED_PROXIES is set.
      span.setAttribute('client.address', clientAddressOf(request))
      const requestId = response.headers.get('x-request-id')
      if (requestId) span.setAttribute('app.request.id', requestId)
      // A 4xx is the client's error, not the server's (the HTTP semantic conventions for SERVER spans).
      if (response.status >= 500) {
        span.setAttribute('error.type', String(response.status))
        span.setStatus({ code: SpanStatusCode.ERROR })
      }
      span.end()
      return response
    }
    // The request handler answers every failure itself (a 500 problem); a throw reaching here still ends the span.
    const failed = (error: unknown): never => {
      span.setAttribute('error.type', error instanceof Error ? error.name : 'Error')
      span.setStatus({ code: SpanStatusCode.ERROR })
      span.end()
      throw error
    }
    let answered: Response | Promise<Response>
    try {
      answered = context.with(trace.setSpan(parent, span), () => handler(request, clientAddress))
    } catch (error) {
      return failed(error)
    }
    return answered instanceof Promise ? answered.then(finish, failed) : finish(answered)
  }
}
