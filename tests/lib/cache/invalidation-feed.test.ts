import { afterAll, expect, test } from 'bun:test'
import { createLogger } from '../../../src/lib/runtime/logger.ts'
import { recordInvalidation, startInvalidationFeed } from '../../../src/lib/cache/invalidation-feed.ts'
import { createTestDatabase } from '../../support/database.ts'

const database = await createTestDatabase()
afterAll(() => database.drop())
const warnings: string[] = []
const logger = createLogger('warn', (line) => warnings.push(line))

test('each poll reports the invalidations of the recent window', async () => {
  const seen: string[] = []
  const feed = await startInvalidationFeed({
    db: database.handle.db,
    logger,
    intervalMs: 60_000,
    onInvalidated: (kind, id) => seen.push(`${kind}:${id}`),
    onResync: () => {},
  })
  try {
    expect(feed.isFresh()).toBe(true)
    await recordInvalidation(database.handle.db, 'api_key', 'key_a')
    await database.handle.db.transaction(async (tx) => recordInvalidation(tx, 'account', 'acc_b'))
    await feed.pollNow()
    expect(seen).toContain('api_key:key_a')
    expect(seen).toContain('account:acc_b')
  } finally {
    feed.stop()
  }
})

test('an invalidation rolled back with its transaction is never reported', async () => {
  const seen: string[] = []
  const feed = await startInvalidationFeed({
    db: database.handle.db,
    logger,
    intervalMs: 60_000,
    onInvalidated: (_kind, id) => seen.push(id),
    onResync: () => {},
  })
  try {
    await database.handle.db
      .transaction(async (tx) => {
        await recordInvalidation(tx, 'api_key', 'key_rolled_back')
        throw new Error('abort')
      })
      .catch(() => {})
    await feed.pollNow()
    expect(seen).not.toContain('key_rolled_back')
  } finally {
    feed.stop()
  }
})

test('the feed reports itself stale when polls stop succeeding, and resyncs when they resume', async () => {
  let now = 0
  let resyncs = 0
  const feed = await startInvalidationFeed({
    db: database.handle.db,
    logger,
    intervalMs: 60_000,
    staleAfterMs: 3_500,
    now: () => now,
    onInvalidated: () => {},
    onResync: () => resyncs++,
  })
  try {
    const afterStart = resyncs
    now = 3_500
    expect(feed.isFresh()).toBe(true)
    now = 3_501
    expect(feed.isFresh()).toBe(false)
    await feed.pollNow()
    expect(resyncs).toBe(afterStart + 1)
    expect(feed.isFresh()).toBe(true)
  } finally {
    feed.stop()
  }
})

test('a failing poll is logged and leaves the feed stale', async () => {
  const broken = await createTestDatabase()
  let now = 0
  const feed = await startInvalidationFeed({
    db: broken.handle.db,
    logger,
    intervalMs: 60_000,
    now: () => now,
    onInvalidated: () => {},
    onResync: () => {},
  })
  try {
    await broken.drop()
    now = 10_000
    await feed.pollNow()
    expect(feed.isFresh()).toBe(false)
    expect(warnings.some((line) => line.includes('cache invalidation poll failed'))).toBe(true)
  } finally {
    feed.stop()
  }
})
