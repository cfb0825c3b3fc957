import { afterAll, afterEach, beforeAll, describe, expect, test } from 'bun:test'
import { createServer, connect, type Server, type Socket } from 'node:net'
import { sql } from 'drizzle-orm'
import { postgresClient, preparedDrizzle, queryRows } from '../../../src/lib/db/client.ts'
import { isDatabaseUnavailable } from '../../../src/lib/db/errors.ts'
import { createTestDatabase, testDatabaseChoice, type TestDatabase } from '../../support/database.ts'

// A new postgres-js connection's first statement is its own: the array types it reads from
// pg_catalog before running the query it was opened for. These tests put a scripted proxy
// between our pool (src/lib/db/client.ts, with patches/postgres@3.4.9.patch) and the real
// test database, and make that statement fail the ways a server does: the session killed under
// it (a restart, `drop database … with (force)`), then the server starting up; or the statement
// cancelled. Only in the PostgreSQL passes: PGlite has no connection to lose.
const skipped = testDatabaseChoice() === 'pglite'

/** An ErrorResponse message (PostgreSQL protocol, "Message Formats"). */
function errorResponse(severity: 'ERROR' | 'FATAL', sqlState: string, message: string): Buffer {
  const fields = Buffer.concat(
    [`S${severity}`, `V${severity}`, `C${sqlState}`, `M${message}`].map((field) => Buffer.from(`${field}\0`)).concat(Buffer.from([0])),
  )
  const header = Buffer.alloc(5)
  header.write('E', 0)
  header.writeInt32BE(fields.length + 4, 1)
  return Buffer.concat([header, fields])
}

/** ReadyForQuery, idle: the server waits for the next statement. */
const READY_FOR_QUERY = Buffer.from([0x5a, 0, 0, 0, 5, 0x49])

/** What the proxy does with the Nth connection it accepts. */
type Script =
  | 'pass'
  /** Passes everything until the client asks for its array types; answers that with this and closes. */
  | { onArrayTypes: Buffer; close: boolean }
  /** Answers the client's startup message with this and closes, as a server starting up does. */
  | { onStartup: Buffer }

function startProxy(upstream: URL, scriptFor: (index: number) => Script) {
  let accepted = 0
  const sockets = new Set<Socket>()
  const server: Server = createServer((client) => {
    const script = scriptFor(accepted++)
    sockets.add(client)
    client.on('error', () => {})
    client.on('close', () => sockets.delete(client))
    if (typeof script === 'object' && 'onStartup' in script) {
      client.once('data', () => client.end(script.onStartup))
      return
    }
    const database = connect(Number(upstream.port || 5432), upstream.hostname)
    sockets.add(database)
    database.on('error', () => client.destroy())
    database.on('close', () => (sockets.delete(database), client.destroy()))
    client.on('close', () => database.destroy())
    database.on('data', (chunk) => client.write(chunk))
    client.on('data', (chunk) => {
      if (script !== 'pass' && chunk.includes('typarray')) {
        if (script.close) {
          database.destroy()
          client.end(script.onArrayTypes)
        } else {
          client.write(script.onArrayTypes)
        }
        return
      }
      database.write(chunk)
    })
  })
  return {
    connections: () => accepted,
    url: async (database: string) => {
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
      const address = server.address() as { port: number }
      const url = new URL(database)
      url.hostname = '127.0.0.1'
      url.port = String(address.port)
      return url.toString()
    },
    close: () => {
      for (const socket of sockets) socket.destroy()
      server.close()
    },
  }
}

/** What a promise came to within `withinMs`: its value, its error, or 'pending'. */
async function settledWithin<T>(promise: Promise<T>, withinMs: number): Promise<{ value: T } | { error: unknown } | 'pending'> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const pending = new Promise<'pending'>((resolve) => (timer = setTimeout(() => resolve('pending'), withinMs)))
  try {
    return await Promise.race([promise.then((value) => ({ value }), (error) => ({ error })), pending])
  } finally {
    clearTimeout(timer)
  }
}

describe.skipIf(skipped)(`a connection whose first statement fails${skipped ? ' (skipped: the PGlite pass has no connection to lose)' : ''}`, () => {
  let database: TestDatabase
  const unhandled: unknown[] = []
  const onUnhandled = (error: unknown) => unhandled.push(error)
  beforeAll(async () => {
    database = await createTestDatabase()
    process.on('unhandledRejection', onUnhandled)
  })
  afterAll(async () => {
    process.off('unhandledRejection', onUnhandled)
    await database?.drop()
  })
  afterEach(() => {
    unhandled.length = 0
  })

  test('a session killed while the connection starts, with the server then starting up: the query fails as unavailable at once, and the pool answers once the server is back', async () => {
    let serverUp = false
    const proxy = startProxy(new URL(database.url!), (index) =>
      index === 0
        ? { onArrayTypes: errorResponse('FATAL', '57P01', 'terminating connection due to administrator command'), close: true }
        : serverUp
          ? 'pass'
          : { onStartup: errorResponse('FATAL', '57P03', 'the database system is starting up') },
    )
    const client = postgresClient(await proxy.url(database.url!), { max: 1 })
    const db = preparedDrizzle(client)
    try {
      // Unpatched, the dead session's statement and error outlived it: every later attempt's
      // refusal was taken for that statement's, so the connection tried again forever (each
      // attempt a second apart) and the query never settled.
      const outcome = await settledWithin(queryRows(db, sql`select 1 as one`), 3_000)
      expect(outcome).not.toBe('pending')
      expect(isDatabaseUnavailable((outcome as { error: unknown }).error)).toBe(true)
      expect(proxy.connections()).toBeGreaterThanOrEqual(2)

      serverUp = true
      const started = performance.now()
      let answered: unknown
      while (performance.now() - started < 5_000 && !answered) {
        answered = await queryRows<{ one: number }>(db, sql`select 1 as one`).catch(() => undefined)
        if (!answered) await Bun.sleep(50)
      }
      expect(answered).toEqual([{ one: 1 }])
      expect(unhandled).toEqual([])
    } finally {
      await client.end({ timeout: 1 })
      proxy.close()
    }
  })

  test('the array-types statement cancelled (57014): the query fails with that error, nothing is left unhandled, and the connection serves the next query', async () => {
    const proxy = startProxy(new URL(database.url!), (index) =>
      index === 0 ? { onArrayTypes: Buffer.concat([errorResponse('ERROR', '57014', 'canceling statement due to statement timeout'), READY_FOR_QUERY]), close: false } : 'pass',
    )
    const client = postgresClient(await proxy.url(database.url!), { max: 1 })
    const db = preparedDrizzle(client)
    try {
      // Unpatched, the failed internal statement's promise was dropped: an unhandled rejection,
      // which ends a Bun or Node process.
      const first = await settledWithin(queryRows(db, sql`select 1 as one`), 3_000)
      expect(first).not.toBe('pending')
      await Bun.sleep(50)
      expect(unhandled).toEqual([])
      expect(await queryRows(db, sql`select 2 as two`)).toEqual([{ two: 2 }])
      expect(proxy.connections()).toBe(1)
    } finally {
      await client.end({ timeout: 1 })
      proxy.close()
    }
  })
})
