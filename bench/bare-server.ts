// The baseline for bench/account.ts: a bare Bun.serve answering every request
// with a small JSON object shaped like our account resource (same keys, about the same size), in
// its own process.
// Usage: PORT=<port> bun bench/bare-server.ts
const port = Number(process.env.PORT ?? 0)
const body = { id: 'acc_01m81emgsenkem5jma2atf166v', name: 'Demo account', created_at: '2026-11-22T11:00:36.783Z' }

const server = Bun.serve({ port, hostname: '127.0.0.1', fetch: () => Response.json(body) })

console.log(`bare server listening on http://127.0.0.1:${server.port}`)

const shutdown = () => {
  void server.stop(true)
  process.exit(0)
}
process.on('SIGTERM', shutdown)
process.on('SIGINT', shutdown)
export {}
