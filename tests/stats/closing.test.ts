import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../src/lib/db/client.ts'
import { closeBuckets, closedBuckets, mergeClosedAccountRows, storeClosedPercentiles, type ClosedBucket } from '../../src/stats/closing.ts'
import { json } from '../support/server.ts'
import { startStatsFixture } from './support.ts'

setDefaultTimeout(60_000)

const { server, db, alice, call, hookId, inbound } = await startStatsFixture()

const HOUR = 3_600_000
/** The ranges a reader asks: the last hour and the last day by the minute (ragged edges), a day of whole hours by the minute, by the hour, by the day. */
function ranges(): string[] {
  const hourStart = Math.floor(Date.now() / HOUR) * HOUR
  const iso = (ms: number) => new Date(ms).toISOString()
  return [
    `interval=minute&since=${iso(Date.now() - HOUR)}`,
    'interval=minute',
    `interval=minute&since=${iso(hourStart - 23 * HOUR)}&until=${iso(hourStart + HOUR)}`,
    `interval=hour&since=${iso(hourStart - 47 * HOUR)}`,
    'interval=day&since=' + iso(Date.now() - 30 * 24 * HOUR),
  ]
}

async function answers() {
  const read = async (path: string) => {
    const response = await call('GET', path)
    expect(response.status).toBe(200)
    return json(response)
  }
  return Promise.all(ranges().flatMap((range) => [read(`/hooks/${hookId}/stats?${range}`), read(`/stats?${range}`)]))
}

/** The buckets the rows written so far are in, each taken as closed. */
async function currentBuckets(): Promise<ClosedBucket[]> {
  const rows = await queryRows<{ unit: 'minute' | 'hour' | 'day'; bucket: string }>(db, sql`select distinct unit, bucket::text as bucket from hook_stats where hook_id = ${hookId}`)
  return rows.map((row) => ({ unit: row.unit, bucket: row.bucket }))
}

/** The hook's and the account's rows with attempts: key, attempts, stored p50. */
async function rollupRows(): Promise<Map<string, { attempts: number; p50: number | null }>> {
  const rows = await queryRows<{ key: string; attempts: number; p50_ms: number | null }>(
    db,
    sql`select 'hook ' || unit || ' ' || bucket::text as key, attempts, p50_ms from hook_stats where hook_id = ${hookId}
        union all
        select 'account ' || kind || ' ' || unit || ' ' || bucket::text, attempts, p50_ms from account_stats where account_id = ${alice.accountId} and attempts > 0`,
  )
  return new Map(rows.map((row) => [row.key, { attempts: Number(row.attempts), p50: row.p50_ms }]))
}
const unfilled = async () => [...(await rollupRows()).values()].filter((row) => row.p50 === null).length

/** The account's rows by kind: how many of each. */
async function accountKinds(): Promise<Record<string, number>> {
  const rows = await queryRows<{ kind: string; n: number }>(db, sql`select kind, count(*)::int as n from account_stats where account_id = ${alice.accountId} group by 1`)
  return Object.fromEntries(rows.map((row) => [row.kind, Number(row.n)]))
}

/** Each bucket's percentiles, subscription against account: with one subscription they are the same figures. */
function expectAccountLatencyEqualsHooks(read: any[]) {
  for (let range = 0; range < read.length; range += 2) {
    expect(read[range + 1].totals.latency_ms).toEqual(read[range].totals.latency_ms)
    expect(read[range + 1].buckets.map((bucket: any) => bucket.latency_ms)).toEqual(read[range].buckets.map((bucket: any) => bucket.latency_ms))
  }
}

describe('closing a bucket: an account\'s rows merged, percentiles stored', () => {
  test('every answer is the same before and after; a late commit into a closed bucket counts, with the percentiles of all its attempts', async () => {
    await inbound(12)
    expect((await call('POST', '/messages', { to: '+447700900123', body: 'counted as sent' })).status).toBe(202)
    for (let tries = 0; (await json(await call('GET', '/stats'))).totals.messages.delivered === 0; tries++) {
      expect(tries).toBeLessThan(400)
      await Bun.sleep(25)
    }
    const computed = await answers()
    expect(computed[0].totals.attempts).toBe(12)
    expect(computed[0].totals.latency_ms.p99).toBeGreaterThan(computed[0].totals.latency_ms.p50)
    expect(computed[1].totals.messages).toMatchObject({ sent: 1, delivered: 1 })
    expect(computed[1].totals.events['message.inbound']).toBe(12)

    // The hook's minute, hour and day rows and the account's of each kind (more should a minute have ended meanwhile).
    const kinds = await accountKinds()
    expect(Object.keys(kinds).sort()).toEqual(['attempts', 'events', 'messages'])
    const hookRows = [...(await rollupRows()).keys()].filter((key) => key.startsWith('hook ')).length
    expect(hookRows).toBeGreaterThanOrEqual(3)
    const closedRows = kinds.attempts! // every bucket with attempts has one closed row after (the message and events share those buckets or add their own)
    const closed = await closeBuckets(db, await currentBuckets())
    expect(closed.merged).toBe(kinds.attempts! + kinds.events! + kinds.messages!)
    const after = await accountKinds()
    expect(Object.keys(after)).toEqual(['closed'])
    expect(after.closed).toBeGreaterThanOrEqual(closedRows)
    expect(closed.stored).toBe(hookRows + closedRows)
    expect(await unfilled()).toBe(0)
    expect(await closeBuckets(db, await currentBuckets())).toEqual({ merged: 0, stored: 0 })
    expect(await answers()).toEqual(computed)

    // What is stored is what is served.
    await db.execute(sql`update hook_stats set p99_ms = 99999 where hook_id = ${hookId} and unit = 'minute'`)
    await db.execute(sql`update account_stats set p99_ms = 99999 where account_id = ${alice.accountId} and unit = 'minute'`)
    const served = await Promise.all([call('GET', `/hooks/${hookId}/stats?${ranges()[0]}`), call('GET', `/stats?${ranges()[0]}`)].map(async (response) => json(await response)))
    for (const [index, answer] of served.entries()) {
      expect(answer.buckets.filter((bucket: any) => bucket.latency_ms?.p99 === 99999)).toHaveLength(1)
      expect(answer.totals).toEqual(computed[index].totals)
    }

    // A transaction begun in a bucket may commit into it after the sweep: the subscription's rows
    // are open again, the account has a row of each kind again beside its closed one, and both count.
    const swept = await rollupRows()
    await inbound(3)
    const reopened = [...(await rollupRows()).entries()].filter(([key, row]) => key.startsWith('hook ') && row.attempts !== swept.get(key)?.attempts)
    expect(reopened.length).toBeGreaterThanOrEqual(3)
    for (const [key, row] of reopened) expect({ key, p50: row.p50 }).toEqual({ key, p50: null })
    const lateKinds = await accountKinds()
    expect(Object.keys(lateKinds).sort()).toEqual(['attempts', 'closed', 'events'])
    expect(lateKinds.closed).toBe(after.closed!)
    const late = await answers()
    expect(late[0].totals.attempts).toBe(15)
    expect(late[1].totals.attempts).toBe(15)
    expect(late[1].totals.events['message.inbound']).toBe(15)
    expect(late[1].totals.messages.sent).toBe(1)
    // The closed row's stored percentiles (99999 here) are not the bucket's any more: both rows' histograms are.
    expect(late[1].buckets.findLast((bucket: any) => bucket.attempts > 0).latency_ms.p99).not.toBe(99999)
    expectAccountLatencyEqualsHooks(late)

    // The next sweep merges the late rows: one row per bucket again, the same answers.
    const again = await closeBuckets(db, await currentBuckets())
    expect(again.merged).toBeGreaterThanOrEqual(2)
    expect(Object.keys(await accountKinds())).toEqual(['closed'])
    expect(await unfilled()).toBe(0)
    expect(await answers()).toEqual(late)
  })

  test.if(server.database.handle.kind === 'postgres')('a row another transaction holds is skipped, not waited for, and closed by the next sweep', async () => {
    await inbound(2)
    const buckets = await currentBuckets()
    const open = await unfilled()
    const openKinds = await accountKinds()
    const openAccountRows = openKinds.attempts! + openKinds.events!
    const held = Promise.withResolvers<void>()
    const locked = Promise.withResolvers<void>()
    const holder = db.transaction(async (tx) => {
      await tx.execute(sql`select 1 from hook_stats where hook_id = ${hookId} and unit = 'minute' order by bucket desc limit 1 for update`)
      await tx.execute(sql`select 1 from account_stats where account_id = ${alice.accountId} and kind = 'events' and unit = 'minute' order by bucket desc limit 1 for update`)
      locked.resolve()
      await held.promise
    })
    await locked.promise
    const started = performance.now()
    expect(await mergeClosedAccountRows(db, buckets)).toBe(openAccountRows - 1)
    expect(await storeClosedPercentiles(db, buckets)).toBe(open - 1)
    expect(performance.now() - started).toBeLessThan(5_000)
    held.resolve()
    await holder
    expect(await closeBuckets(db, buckets)).toEqual({ merged: 1, stored: 1 })
    expect(Object.keys(await accountKinds())).toEqual(['closed'])
  })
})

describe('two sweeps at once', () => {
  test('each merges what the other did not take: the answers do not change, and each bucket is one row', async () => {
    await inbound(3)
    const before = await answers()
    const results = await Promise.all([closeBuckets(db, await currentBuckets()), closeBuckets(db, await currentBuckets())])
    expect(results[0]!.merged + results[1]!.merged).toBeGreaterThanOrEqual(2)
    expect(Object.keys(await accountKinds())).toEqual(['closed'])
    expect(await answers()).toEqual(before)
  })
})

describe('storeClosedPercentiles', () => {
  test('a closed row and a late row of the same bucket and attempts each get the percentiles of their own histogram', async () => {
    await inbound(2)
    await closeBuckets(db, await currentBuckets())
    const [closed] = await queryRows<{ bucket: string; attempts: number }>(
      db,
      sql`select bucket::text as bucket, attempts from account_stats where account_id = ${alice.accountId} and kind = 'closed' and unit = 'minute' order by bucket desc limit 1`,
    )
    // Both rows hold the same number of attempts, the closed one fast (all at 5 ms), the late one slow (all at 90 ms).
    await db.execute(sql`update account_stats set latency = jsonb_build_object('5', attempts), p50_ms = null, p95_ms = null, p99_ms = null
                         where account_id = ${alice.accountId} and kind = 'closed' and unit = 'minute' and bucket = ${closed!.bucket}::timestamptz`)
    await db.execute(sql`insert into account_stats (account_id, unit, bucket, kind, attempts, succeeded, latency)
                         values (${alice.accountId}, 'minute', ${closed!.bucket}::timestamptz, 'attempts', ${closed!.attempts}, ${closed!.attempts}, jsonb_build_object('90', ${closed!.attempts}::int))`)
    await storeClosedPercentiles(db, [{ unit: 'minute', bucket: closed!.bucket }])
    const rows = await queryRows<{ kind: string; p50_ms: number; p99_ms: number }>(
      db,
      sql`select kind, p50_ms, p99_ms from account_stats where account_id = ${alice.accountId} and unit = 'minute' and bucket = ${closed!.bucket}::timestamptz order by kind`,
    )
    expect(rows).toEqual([
      { kind: 'attempts', p50_ms: 90, p99_ms: 90 },
      { kind: 'closed', p50_ms: 5, p99_ms: 5 },
    ])
  })
})

describe('closedBuckets', () => {
  test('the newest buckets of each unit that ended at least 5 s ago: ten minutes, three hours, two days', () => {
    const at = (iso: string) => closedBuckets(new Date(iso)).map((bucket) => `${bucket.unit} ${bucket.bucket}`)
    const early = at('2026-11-26T12:00:03Z')
    expect(early).toHaveLength(15)
    expect(early.slice(0, 2)).toEqual(['minute 2026-11-26T11:58:00.000Z', 'minute 2026-11-26T11:57:00.000Z'])
    expect(early.slice(10, 13)).toEqual(['hour 2026-11-26T10:00:00.000Z', 'hour 2026-11-26T09:00:00.000Z', 'hour 2026-11-26T08:00:00.000Z'])
    expect(early.slice(13)).toEqual(['day 2026-11-25T00:00:00.000Z', 'day 2026-11-24T00:00:00.000Z'])
    const later = at('2026-11-26T12:00:06Z')
    expect(later[0]).toBe('minute 2026-11-26T11:59:00.000Z')
    expect(later[10]).toBe('hour 2026-11-26T11:00:00.000Z')
  })
})
