import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { PGlite } from '@electric-sql/pglite'
import { TurnTakingPGlite } from '../../../src/lib/db/client.ts'

// The embedded database of every pass: PGlite runs in this process whatever TEST_DATABASE says. A new data
// directory is an initdb, seconds on a busy machine.
setDefaultTimeout(30_000)

describe('the embedded database leaves the event loop its turns (src/lib/db/client.ts, TurnTakingPGlite)', () => {
  let dataDir: string
  let client: PGlite
  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'pglite-turns-'))
    client = await TurnTakingPGlite.create({ dataDir })
  })
  afterAll(async () => {
    await client.close()
    rmSync(dataDir, { recursive: true, force: true })
  })

  // What a burst of one account's work looks like to the event loop: each statement's continuation issues the next.
  async function chainOfStatements(forMs: number): Promise<number> {
    const started = performance.now()
    let statements = 0
    while (performance.now() - started < forMs) {
      await client.query('select count(*) from generate_series(1, 2000)')
      statements++
    }
    return statements
  }

  test('a timer due during a long chain of statements fires within milliseconds, not when the chain ends', async () => {
    const ticks: number[] = []
    const timer = setInterval(() => ticks.push(performance.now()), 1)
    const started = performance.now()
    const statements = await chainOfStatements(300)
    const ended = performance.now()
    clearInterval(timer)
    expect(statements).toBeGreaterThan(10)
    const during = ticks.filter((at) => at < ended)
    let longestWait = 0
    let previous = started
    for (const at of during) [longestWait, previous] = [Math.max(longestWait, at - previous), at]
    longestWait = Math.max(longestWait, ended - previous)
    // Without the turns the first tick came after the whole chain (300 ms); the bound leaves room for a slow machine.
    expect(longestWait).toBeLessThan(100)
  })

  test('a socket is read during the chain: a request to a server in this process is answered before the chain ends', async () => {
    const server = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('ok') })
    try {
      let answeredAt = Infinity
      const chain = chainOfStatements(300).then(() => performance.now())
      await Bun.sleep(0)
      const request = fetch(`http://127.0.0.1:${server.port}/`).then(async (response) => {
        await response.text()
        answeredAt = performance.now()
      })
      const chainEnded = await chain
      await request
      expect(answeredAt).toBeLessThan(chainEnded - 100)
    } finally {
      await server.stop(true)
    }
  })

  test('create, given a data directory and options as PGlite takes them, also makes a turn-taking client', async () => {
    const inMemory = await TurnTakingPGlite.create('memory://', { debug: 0 })
    try {
      expect(inMemory).toBeInstanceOf(TurnTakingPGlite)
      expect(inMemory.dataDir).toBe('memory://')
      expect((await inMemory.query<{ one: number }>('select 1 as one')).rows).toEqual([{ one: 1 }])
    } finally {
      await inMemory.close()
    }
  })
})
