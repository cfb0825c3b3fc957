import type { Subprocess } from 'bun'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { connect, type ConnectionOptions, type NatsConnection } from '@nats-io/transport-node'
import { freePort } from './process.ts'

export interface NatsUser {
  user: string
  password: string
  /** Subjects this user may not publish to (the server answers a publish there with a permissions violation). */
  denyPublish?: string[]
}

export interface PrivateNatsServer {
  port: number
  /** A connection to it as `user` (the first user when not named). */
  connect(user?: NatsUser): Promise<NatsConnection>
  /** SIGKILL: the server goes away with no goodbye to its clients. */
  kill(): Promise<void>
  /** Starts it again on the same port, with the same store (its streams and their messages). */
  restart(): Promise<void>
  stop(): Promise<void>
}

const NATS_SERVER = '/usr/sbin/nats-server'

/**
 * A nats-server of the test's own, with JetStream and a file store in a temporary directory,
 * on a free loopback port, with these users (any user may publish anywhere unless denied).
 */
export async function startPrivateNatsServer(users: NatsUser[]): Promise<PrivateNatsServer> {
  const dir = mkdtempSync(join(tmpdir(), 'nats-'))
  const config = join(dir, 'server.conf')
  const quoted = (value: string) => JSON.stringify(value)
  writeFileSync(
    config,
    `authorization {\n  users = [\n${users
      .map((user) => `    { user: ${quoted(user.user)}, password: ${quoted(user.password)}${user.denyPublish ? `, permissions: { publish: { deny: ${JSON.stringify(user.denyPublish)} } }` : ''} }`)
      .join('\n')}\n  ]\n}\n`,
  )
  const port = freePort()
  let child: Subprocess<'ignore', 'pipe', 'pipe'> | undefined
  let output = ''

  const options = (user: NatsUser): ConnectionOptions => ({ servers: `127.0.0.1:${port}`, user: user.user, pass: user.password, reconnect: false, timeout: 2_000 })

  const start = async () => {
    output = ''
    const spawned = Bun.spawn([NATS_SERVER, '-c', config, '-a', '127.0.0.1', '-p', String(port), '-js', '-sd', join(dir, 'store')], { stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' })
    child = spawned
    for (const stream of [spawned.stdout, spawned.stderr]) {
      void (async () => {
        for await (const chunk of stream) output += new TextDecoder().decode(chunk)
      })()
    }
    // Up once a client can connect and JetStream answers (a restart recovers the store first).
    const until = Date.now() + 15_000
    for (;;) {
      if (spawned.exitCode !== null) throw new Error(`nats-server exited with ${spawned.exitCode}:\n${output}`)
      const ready = await connect(options(users[0]!)).then(
        async (nc) => {
          try {
            await nc.request('$JS.API.INFO', undefined, { timeout: 1_000 })
            return true
          } catch {
            return false
          } finally {
            await nc.close()
          }
        },
        () => false,
      )
      if (ready) return
      if (Date.now() > until) throw new Error(`nats-server on port ${port} was not ready within 15 s:\n${output}`)
      await Bun.sleep(100)
    }
  }

  const kill = async () => {
    if (!child || child.exitCode !== null) return
    child.kill('SIGKILL')
    await child.exited
  }

  await start()
  return {
    port,
    connect: (user = users[0]!) => connect(options(user)),
    kill,
    restart: start,
    async stop() {
      await kill()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
