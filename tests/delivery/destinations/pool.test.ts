import { expect, test } from 'bun:test'
import { connectionPool, type ConnectionKind } from '../../../src/delivery/destinations/broker.ts'

// The pool's rules alone (docs/webhooks.md#destinations), with connections that are plain objects:
// the brokers' own tests (rabbitmq, nats, sending) check the same against the real servers.
function kindOf(options: { failFirst?: boolean; hangOnClose?: boolean } = {}) {
  const opened: { id: number; closed: boolean; onClosed?: () => void }[] = []
  const kind: ConnectionKind<string, (typeof opened)[number]> = {
    key: (destination) => destination,
    async open() {
      await Bun.sleep(20)
      if (options.failFirst && opened.length === 0) {
        opened.push({ id: -1, closed: true })
        throw new Error('refused')
      }
      const connection = { id: opened.length, closed: false }
      opened.push(connection)
      return connection
    },
    whenClosed: (connection, forget) => {
      connection.onClosed = forget
    },
    close: async (connection) => {
      if (options.hangOnClose) await new Promise(() => {})
      connection.closed = true
    },
  }
  return { kind, opened }
}
const policy = { allowPrivate: true, timeoutMs: 1_000, idleMs: 100 }
const signal = () => AbortSignal.timeout(1_000)

test('attempts that arrive while a connection opens share it; another destination key gets its own', async () => {
  const { kind, opened } = kindOf()
  const pool = connectionPool(policy, kind)
  const [a, b, c] = await Promise.all([pool.acquire('x', signal()), pool.acquire('x', signal()), pool.acquire('y', signal())])
  expect(a).toBe(b)
  expect(c).not.toBe(a)
  expect(opened).toHaveLength(2)
  await pool.close()
})

test('a connection that failed to open, or closed by itself, is forgotten: the next attempt opens another', async () => {
  const { kind, opened } = kindOf({ failFirst: true })
  const pool = connectionPool(policy, kind)
  await expect(pool.acquire('x', signal())).rejects.toThrow('refused')
  const second = await pool.acquire('x', signal())
  second.onClosed!()
  const third = await pool.acquire('x', signal())
  expect(third).not.toBe(second)
  expect(opened.map((connection) => connection.id)).toEqual([-1, 1, 2])
  await pool.close()
})

test('a connection unused for idleMs is closed; one in use is kept', async () => {
  const { kind } = kindOf()
  const pool = connectionPool(policy, kind)
  const idle = await pool.acquire('idle', signal())
  const busy = await pool.acquire('busy', signal())
  for (let i = 0; i < 6; i++) {
    await Bun.sleep(40)
    await pool.acquire('busy', signal())
  }
  expect(idle.closed).toBe(true)
  expect(busy.closed).toBe(false)
  await pool.close()
  expect(busy.closed).toBe(true)
})

test('closing the pool gives a connection that never says goodbye 2 s at most', async () => {
  const { kind } = kindOf({ hangOnClose: true })
  const pool = connectionPool({ ...policy, idleMs: 60_000 }, kind)
  await pool.acquire('x', signal())
  const started = performance.now()
  await pool.close()
  expect(performance.now() - started).toBeLessThan(2_500)
})
