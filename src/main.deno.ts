import { bootInstance, logFirstRunHint } from './instance.ts'

// The Deno adapter: the same app and boot sequence as src/main.ts, served by Deno.serve.
declare const Deno: {
  env: { toObject(): Record<string, string> }
  serve(
    options: { port: number; hostname: string; onListen?(address: { port: number }): void },
    handler: (request: Request, info: { remoteAddr: { hostname: string } }) => Response | Promise<Response>,
  ): { shutdown(): Promise<void>; finished: Promise<void> }
  addSignalListener(signal: 'SIGTERM' | 'SIGINT', handler: () => void): void
  exit(code: number): never
}

const booted = await bootInstance(Deno.env.toObject(), { deliverWebhooks: false })
const { config, logger, database, instance } = booted

const server = Deno.serve(
  {
    port: config.port,
    hostname: config.host,
    onListen: ({ port }) => logger.info('listening', { url: `http://${config.host}:${port}`, runtime: 'deno' }),
  },
  (request, info) => instance.fetch(request, info.remoteAddr.hostname),
)
// Signals are handled from the moment the port is open, before anything else is awaited.
async function shutdown() {
  await server.shutdown()
  await instance.stop()
  await database.close()
  await logger.flush()
  Deno.exit(0)
}
Deno.addSignalListener('SIGTERM', () => void shutdown())
Deno.addSignalListener('SIGINT', () => void shutdown())

await logFirstRunHint(booted)
await logger.flush()
