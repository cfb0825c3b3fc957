// The HTTPS webhook receiver of bench/webhooks.ts, its own process so that it does not share the
// load generator's thread, and its broker consumer (another process of this script, so that each
// one's CPU is measured apart).   CONTROL_PORT=<http port> CERT_DIR=<dir> bun bench/webhook-receiver.ts
//
// It listens with CERT_DIR's server.pem/server.key (fixtures/tls.ts: localhost, 127.0.0.1) on the
// ports the control port tells it to. Every POST is answered 204 at once, except:
//   - an MCP Events verification envelope ({"type":"verification","challenge":…}): its challenge
//     echoed, as an agent's callback does (not counted);
//   - /delay/<ms>/…: after <ms> ms (a slow receiver);
//   - /hang/…: never, while "hanging" is on (a receiver that accepts and never answers; the
//     listeners have no idle timeout); POST /heal turns it off and answers the held requests whose
//     sender still waits (204, counted).
// Counted per group, the first path segment after any /delay/<ms> (/g/17 and /g/18 are group g):
// answers, distinct (path, webhook-id) pairs, the last receipt (epoch ms), and send
// latency = receipt − the send time bench/webhooks.ts writes as the message text, "t=<epoch ms>",
// which the event carries as data.message.body. A broker's messages count the same way, in the
// group the consume command names, distinct by (routing key or subject, message id = event id).
// Control (plain HTTP, 127.0.0.1):
//   POST /listen?port=N       also listen on N          POST /heal     stop hanging
//   POST /listen?port=N&raw=1 a plain TCP listener that accepts and never answers nor closes
//                             (a broker that hangs), its connections counted as `hung` of group hang
//   POST /consume?url=amqp://…&queue=Q&group=G    consume RabbitMQ queue Q (auto-ack)
//   POST /consume?url=nats://…&stream=S&group=G   consume JetStream stream S (an ordered consumer)
//   POST /reset[?since=ms]    forget all counts; bodies sent before `since` are not counted
//   GET  /stats[?samples=1]   {groups: {<group>: {count, unique, lastAt, hung, sendLatencies?}}}
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { jetstream } from '@nats-io/jetstream'
import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node'
import { connect as amqpConnect, type ChannelModel } from 'amqplib'
import type { TCPSocketListener } from 'bun'

const controlPort = Number(process.env.CONTROL_PORT)
const certDir = process.env.CERT_DIR
if (!controlPort || !certDir) {
  console.error('bench/webhook-receiver.ts: CONTROL_PORT and CERT_DIR are required')
  process.exit(2)
}
const tls = { key: readFileSync(join(certDir, 'server.key'), 'utf8'), cert: readFileSync(join(certDir, 'server.pem'), 'utf8') }
const now = () => performance.timeOrigin + performance.now()
const MAX_SAMPLES = 500_000
const SENT_AT = /"body":"t=(\d+(?:\.\d+)?)/
const GROUP = /^\/(?:delay\/(\d+)\/)?([^/?]*)/

interface Tally {
  count: number
  hung: number
  lastAt: number
  keys: Set<string>
  sendLatencies: number[]
}
let groups = new Map<string, Tally>()
let since = 0
let hanging = true
let held: Array<() => void> = []

function tally(name: string): Tally {
  let t = groups.get(name)
  if (!t) groups.set(name, (t = { count: 0, hung: 0, lastAt: 0, keys: new Set(), sendLatencies: [] }))
  return t
}

/** One delivery received at `at`, distinct by `key`. */
function record(t: Tally, key: string, body: string, at: number): void {
  const sentAt = Number(SENT_AT.exec(body)?.[1] ?? Number.NaN)
  if (since > 0 && !(sentAt >= since)) return
  t.count++
  t.lastAt = at
  t.keys.add(key)
  if (Number.isFinite(sentAt) && t.sendLatencies.length < MAX_SAMPLES) t.sendLatencies.push(at - sentAt)
}

async function receive(request: Request): Promise<Response> {
  const body = await request.text()
  const at = now()
  if (body.startsWith('{"type":"verification"')) return Response.json({ challenge: (JSON.parse(body) as { challenge: string }).challenge })
  const url = request.url
  const path = url.slice(url.indexOf('/', url.indexOf('//') + 2))
  const [, delay, group = ''] = GROUP.exec(path) ?? []
  const t = tally(group)
  if (group === 'hang' && hanging) {
    t.hung++
    await new Promise<void>((resolve) => held.push(resolve))
    // Healed: answered like any other, unless the sender has given up on it meanwhile.
    if (request.signal.aborted) return new Response(null, { status: 503 })
  }
  if (delay) await Bun.sleep(Math.min(60_000, Number(delay)))
  record(t, `${path} ${request.headers.get('webhook-id')}`, body, at)
  return new Response(null, { status: 204 })
}

const brokers: Array<ChannelModel | NatsConnection> = []

/** Consumes a RabbitMQ queue or a JetStream stream into `group` until the process ends. */
async function consume(url: string, source: string, group: string): Promise<void> {
  if (url.startsWith('amqp')) {
    const model = await amqpConnect(url)
    brokers.push(model)
    const channel = await model.createChannel()
    await channel.consume(
      source,
      (m) => {
        const at = now()
        if (m) record(tally(group), `${m.fields.routingKey} ${m.properties.messageId}`, m.content.toString(), at)
      },
      { noAck: true },
    )
    return
  }
  const nc = await natsConnect({ servers: new URL(url).host })
  brokers.push(nc)
  const messages = await (await jetstream(nc).consumers.get(source)).consume()
  void (async () => {
    for await (const m of messages) {
      const at = now()
      record(tally(group), `${m.subject} ${m.headers?.get('Nats-Msg-Id')}`, m.string(), at)
    }
  })()
}

const listeners: ReturnType<typeof Bun.serve>[] = []
const rawListeners: TCPSocketListener[] = []
const control = Bun.serve({
  port: controlPort,
  hostname: '127.0.0.1',
  async fetch(request) {
    const url = new URL(request.url)
    const post = request.method === 'POST'
    const port = Number(url.searchParams.get('port'))
    if (post && url.pathname === '/listen' && url.searchParams.get('raw') === '1') {
      rawListeners.push(Bun.listen({ port, hostname: '127.0.0.1', socket: { open: () => void tally('hang').hung++, data: () => {} } }))
    } else if (post && url.pathname === '/listen') {
      listeners.push(Bun.serve({ port, hostname: '127.0.0.1', tls, idleTimeout: 0, fetch: receive }))
    } else if (post && url.pathname === '/consume') {
      const p = url.searchParams
      try {
        await consume(p.get('url') ?? '', p.get('queue') ?? p.get('stream') ?? '', p.get('group') ?? '')
      } catch (error) {
        return new Response(`consume: ${(error as Error).message}`, { status: 502 })
      }
    } else if (post && url.pathname === '/heal') {
      hanging = false
      for (const resolve of held) resolve()
      held = []
    } else if (post && url.pathname === '/reset') {
      groups = new Map()
      since = Number(url.searchParams.get('since') ?? 0) || 0
    } else if (url.pathname === '/stats') {
      const samples = url.searchParams.get('samples') === '1'
      const out: Record<string, unknown> = {}
      for (const [name, t] of groups) {
        out[name] = { count: t.count, unique: t.keys.size, lastAt: t.lastAt, hung: t.hung, ...(samples ? { sendLatencies: t.sendLatencies } : {}) }
      }
      return Response.json({ groups: out })
    } else return new Response('not found', { status: 404 })
    return Response.json({ ok: true })
  },
})

const shutdown = async () => {
  for (const listener of [control, ...listeners]) void listener.stop(true)
  for (const listener of rawListeners) listener.stop(true)
  await Promise.all(brokers.map((broker) => broker.close().catch(() => {})))
  process.exit(0)
}
process.on('SIGTERM', shutdown)
process.on('SIGINT', shutdown)
console.log(`webhook receiver: control http://127.0.0.1:${control.port}`)
