import type { Metrics } from './metrics.ts'

/**
 * The metrics listener (Bun only, started by src/main.ts when METRICS_PORT is set): `GET /metrics`
 * in the Prometheus text format, 404 for anything else. No authentication: bind it where only
 * the scraper reaches it (docs/operations.md#metrics).
 */
export function serveMetrics(metrics: Metrics, options: { port: number; hostname: string; onError(error: unknown): void }) {
  return Bun.serve({
    port: options.port,
    hostname: options.hostname,
    async fetch(request) {
      const { pathname } = new URL(request.url)
      if (pathname !== '/metrics') return new Response('Not found\n', { status: 404, headers: { 'content-type': 'text/plain; charset=utf-8' } })
      if (request.method !== 'GET' && request.method !== 'HEAD') return new Response('Method not allowed\n', { status: 405, headers: { allow: 'GET, HEAD' } })
      try {
        return new Response(await metrics.render(), { headers: { 'content-type': metrics.contentType } })
      } catch (error) {
        options.onError(error)
        return new Response('Metrics failed\n', { status: 500 })
      }
    },
  })
}
