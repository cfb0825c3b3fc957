import { beforeEach, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../src/lib/db/client.ts'
import { ENTRY_BUCKETS, SettledPartCache } from '../../src/stats/cache.ts'
import { closeBuckets, closedBuckets, type ClosedBucket } from '../../src/stats/closing.ts'
import { createStatsCache, readAccountStats, readHookStats, statsRange, type StatsCache } from '../../src/stats/service.ts'
import { json } from '../support/server.ts'
import { startStatsFixture } from './support.ts'

setDefaultTimeout(60_000)

const { db, alice, call, hookId, inbound } = await startStatsFixture()

/**
 * Waits, if need be, until the clock is 6 to 50 s into a minute: a range is cut where its buckets
 * settle, a minute less 5 s (src/stats/service.ts, splitRange), and the reads of one test must
 * all cut it at the same place, and cover the hour before the current one whole.
 */
async function awayFromMinuteEdge() {
  const second = (Date.now() % 60_000) / 1000
  if (second < 6) await Bun.sleep((6 - second) * 1000)
  else if (second >= 50) await Bun.sleep((66 - second) * 1000)
}

await awayFromMinuteEdge()
// Attempts recorded by the service, then their minute and hour rows moved an hour back: settled
// buckets, which only the writes below change.
await inbound(9)
expect((await call('POST', '/messages', { to: '+447700900123', body: 'counted as sent' })).status).toBe(202)
for (let tries = 0; (await json(await call('GET', '/stats'))).totals.messages.delivered === 0; tries++) {
  expect(tries).toBeLessThan(400)
  await Bun.sleep(25)
}
for (const table of ['hook_stats', 'account_stats']) {
  await db.execute(sql`update ${sql.identifier(table)} set bucket = bucket - interval '1 hour' where unit in ('minute', 'hour')`)
}
// What the closing sweep (every 30 s) does to the moved hour rows, done now: a sweep during a test then changes none of them.
await closeBuckets(db, closedBuckets(new Date()))
const [moved] = await queryRows<{ bucket: string }>(db, sql`select bucket::text as bucket from hook_stats where hook_id = ${hookId} and unit = 'minute' order by bucket limit 1`)
const settledMinute = moved!.bucket

/** The last 24 hours by the minute and the last two days by the hour, as the API reads them. */
const ranges = () => [statsRange({ interval: 'minute' }, new Date()), statsRange({ interval: 'hour', since: new Date(Date.now() - 48 * 3_600_000).toISOString() }, new Date())]
const read = (cache: StatsCache): Promise<any[]> =>
  Promise.all(ranges().flatMap((range) => [readHookStats(db, cache, alice.accountId, hookId, range), readAccountStats(db, cache, alice.accountId, range)]))
/** Read without a cache: every part from its rows. */
const fresh = () => read(createStatsCache(0))
const settledBucketOf = (answer: { buckets: { start: string; attempts: number }[] }) => answer.buckets.find((bucket) => bucket.attempts > 0)!

describe('the settled part of an answer, kept between answers', () => {
  beforeEach(awayFromMinuteEdge)

  test('is read once, then served while its rows are unchanged: the same answer as reading every row', async () => {
    const cache = createStatsCache()
    const first = await read(cache)
    expect(first[0]!.totals.attempts).toBe(9)
    expect(first[1]!.totals.messages).toMatchObject({ sent: 1, delivered: 1 })
    expect(cache.size().entries).toBe(4)
    const second = await read(cache)
    expect(second).toEqual(first)
    expect(second).toEqual(await fresh())
    // The very objects of the first answer: nothing was read again.
    for (const [index, answer] of second.entries()) expect(settledBucketOf(answer)).toBe(settledBucketOf(first[index]!))
  })

  test('the open bucket is read on every answer: an attempt made now counts at once', async () => {
    const cache = createStatsCache()
    const before = await read(cache)
    await inbound(1)
    const after = await read(cache)
    for (const [index, answer] of after.entries()) {
      expect(answer.totals.attempts).toBe(before[index]!.totals.attempts + 1)
      expect(settledBucketOf(answer)).toBe(settledBucketOf(before[index]!))
    }
    expect(after).toEqual(await fresh())
  })

  test('any write to a settled row is seen by the next answer: a late commit, the closing sweep, a late row beside a closed one, retention', async () => {
    const cache = createStatsCache()
    let last = await read(cache)
    const expectReadAgain = async () => {
      const answers = await read(cache)
      expect(answers).toEqual(await fresh())
      for (const [index, answer] of answers.entries()) expect(settledBucketOf(answer)).not.toBe(settledBucketOf(last[index]!))
      last = answers
      return answers
    }

    // A transaction begun in the bucket commits into it late: one more attempt, failed, in its
    // minute, hour and day, the subscription's and the account's (src/stats/rollups.ts).
    for (const [table, owner] of [['hook_stats', sql`hook_id = ${hookId}`], ['account_stats', sql`account_id = ${alice.accountId} and attempts > 0`]] as const) {
      await db.execute(sql`update ${sql.identifier(table)} set attempts = attempts + 1, failures = '{"http_5xx": 1}', latency = latency || '{"7": 1}', p50_ms = null, p95_ms = null, p99_ms = null
        where ${owner} and bucket = date_trunc(unit, ${settledMinute}::timestamptz, 'UTC')`)
    }
    const late = await expectReadAgain()
    for (const answer of late) expect(settledBucketOf(answer)).toMatchObject({ failed: 1, failures: { http_5xx: 1 } })

    // A write to a coarser row alone: the hour's, which the day by the minute takes its totals' percentiles from.
    await db.execute(sql`update hook_stats set latency = latency || '{"300": 50}'
      where hook_id = ${hookId} and unit = 'hour' and bucket = date_trunc('hour', ${settledMinute}::timestamptz, 'UTC')`)
    const coarse = await read(cache)
    expect(coarse[0].totals.latency_ms).not.toEqual(late[0].totals.latency_ms)
    expect(coarse).toEqual(await fresh())
    last = coarse

    // The closing sweep merges the account's rows and stores percentiles: the figures stay, the rows change.
    const buckets = await queryRows<ClosedBucket>(db, sql`select distinct unit, bucket::text as bucket from account_stats where account_id = ${alice.accountId}`)
    expect((await closeBuckets(db, buckets)).merged).toBeGreaterThan(0)
    const closed = await read(createStatsCache(0))
    expect(closed.map((answer) => answer.totals)).toEqual(coarse.map((answer) => answer.totals))
    await expectReadAgain()

    // A late row of events beside the account's closed one.
    await db.execute(sql`insert into account_stats (account_id, unit, bucket, kind, events) values (${alice.accountId}, 'minute', ${settledMinute}::timestamptz, 'events', '{"message.inbound": 2}')`)
    const withLateRow = await read(cache)
    expect(withLateRow[1]!.totals.events['message.inbound']).toBe(late[1]!.totals.events['message.inbound']! + 2)
    expect(withLateRow).toEqual(await fresh())
    last = withLateRow

    // Retention deletes the minute's rows.
    await db.execute(sql`delete from hook_stats where hook_id = ${hookId} and unit = 'minute' and bucket = ${settledMinute}::timestamptz`)
    await db.execute(sql`delete from account_stats where account_id = ${alice.accountId} and unit = 'minute' and bucket = ${settledMinute}::timestamptz`)
    const retained = await read(cache)
    expect(retained[0]!.buckets.find((bucket: { start: string; attempts: number }) => bucket.start === new Date(settledMinute).toISOString())!.attempts).toBe(0)
    expect(retained).toEqual(await fresh())
  })

  test('GET …/stats answers from the cache the app holds as from the rows', async () => {
    const path = `/stats?interval=minute`
    const [first, second] = [await json(await call('GET', path)), await json(await call('GET', path))]
    expect(second).toEqual(first)
    expect(first.totals.attempts).toBeGreaterThan(0)
    const [rows] = await Promise.all([readAccountStats(db, createStatsCache(0), alice.accountId, statsRange({ interval: 'minute' }, new Date()))])
    expect(JSON.parse(JSON.stringify(rows))).toEqual(second)
  })
})

describe('SettledPartCache', () => {
  test('answers a key only for the version it was stored with', () => {
    const cache = new SettledPartCache<string>(100)
    cache.set('a', 'v1', 'part', 3)
    expect(cache.get('a', 'v1')).toBe('part')
    expect(cache.get('a', 'v2')).toBeUndefined()
    expect(cache.get('b', 'v1')).toBeUndefined()
  })

  test('holds at most its buckets, each entry weighing its buckets and its totals, dropping the least recently used first; an entry larger than all is not kept', () => {
    const entry = 4 + ENTRY_BUCKETS
    const cache = new SettledPartCache<string>(2 * entry)
    cache.set('a', 'v', 'A', 4)
    cache.set('b', 'v', 'B', 4)
    expect(cache.get('a', 'v')).toBe('A')
    cache.set('c', 'v', 'C', 4)
    expect(cache.get('b', 'v')).toBeUndefined()
    expect(cache.get('a', 'v')).toBe('A')
    expect(cache.size()).toEqual({ entries: 2, buckets: 2 * entry })
    cache.set('a', 'v2', 'A2', 2)
    expect(cache.size()).toEqual({ entries: 2, buckets: 2 + ENTRY_BUCKETS + entry })
    cache.set('d', 'v', 'D', 2 * entry)
    expect(cache.get('d', 'v')).toBeUndefined()
    expect(cache.size()).toEqual({ entries: 2, buckets: 2 + ENTRY_BUCKETS + entry })
    // Many one-bucket entries fill it as their totals weigh, not as their buckets alone.
    const small = new SettledPartCache<string>(100)
    for (let i = 0; i < 100; i++) small.set(`k${i}`, 'v', 'part', 1)
    expect(small.size().entries).toBe(Math.floor(100 / (1 + ENTRY_BUCKETS)))
  })
})
