import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../src/lib/db/client.ts'
import { closedBuckets, storeClosedPercentiles, type ClosedBucket } from '../../src/stats/closing.ts'
import { startTestServer, json } from '../support/server.ts'
import { startReceiver } from '../support/receiver.ts'

setDefaultTimeout(60_000)

// Each delivery is answered after a different delay, so that the percentiles differ.
const receiver = startReceiver(async (_request, nth) => {
  await Bun.sleep((nth * 37) % 120)
  return new Response('ok')
})
const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile } })
const db = server.database.handle.db
const alice = await server.createAccountWithKey('Alice')
const call = (method: string, path: string, body?: unknown) =>
  server.fetch(`/v0/account/${alice.accountId}${path}${path.includes('?') ? '&' : '?'}key=${alice.secret}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
const created = await call('POST', '/hooks', { event: 'message.inbound', target_url: `${receiver.origin}/hook` })
const hookId = (await json(created)).id as string

async function inbound(count: number) {
  const before = (await queryRows<{ n: number }>(db, sql`select count(*)::int as n from delivery_attempts where hook_id = ${hookId}`))[0]!.n
  for (let i = 0; i < count; i++) expect((await call('POST', '/sandbox/inbound', { from: '+447700900800', body: `hello ${i}` })).status).toBe(201)
  for (let tries = 0; ; tries++) {
    const [row] = await queryRows<{ n: number }>(db, sql`select count(*)::int as n from delivery_attempts where hook_id = ${hookId}`)
    if (Number(row!.n) >= Number(before) + count) return
    expect(tries).toBeLessThan(400)
    await Bun.sleep(25)
  }
}

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
        select 'account ' || unit || ' ' || bucket::text, attempts, p50_ms from account_stats where account_id = ${alice.accountId} and kind = 'attempts'`,
  )
  return new Map(rows.map((row) => [row.key, { attempts: Number(row.attempts), p50: row.p50_ms }]))
}
const unfilled = async () => [...(await rollupRows()).values()].filter((row) => row.p50 === null).length

describe('percentiles stored when a bucket closes', () => {
  test('every answer is the same before and after they are stored; a late commit into a closed bucket clears them and counts', async () => {
    await inbound(12)
    const computed = await answers()
    expect(computed[0].totals.attempts).toBe(12)
    expect(computed[0].totals.latency_ms.p99).toBeGreaterThan(computed[0].totals.latency_ms.p50)

    // The hook's minute, hour and day rows and the account's (more should a minute have ended meanwhile): filled once.
    const open = await unfilled()
    expect(open).toBeGreaterThanOrEqual(6)
    expect(await storeClosedPercentiles(db, await currentBuckets())).toBe(open)
    expect(await unfilled()).toBe(0)
    expect(await storeClosedPercentiles(db, await currentBuckets())).toBe(0)
    expect(await answers()).toEqual(computed)

    // What is stored is what is served.
    await db.execute(sql`update hook_stats set p99_ms = 99999 where hook_id = ${hookId} and unit = 'minute'`)
    const served = await json(await call('GET', `/hooks/${hookId}/stats?${ranges()[0]}`))
    expect(served.buckets.filter((bucket: any) => bucket.latency_ms?.p99 === 99999)).toHaveLength(1)
    expect(served.totals).toEqual(computed[0].totals)

    // A transaction begun in a bucket may commit into it after the sweep: its rows are open again and count it.
    const swept = await rollupRows()
    await inbound(3)
    const reopened = [...(await rollupRows()).entries()].filter(([key, row]) => row.attempts !== swept.get(key)?.attempts)
    expect(reopened.length).toBeGreaterThanOrEqual(6)
    for (const [key, row] of reopened) expect({ key, p50: row.p50 }).toEqual({ key, p50: null })
    const after = await answers()
    expect(after[0].totals.attempts).toBe(15)
    expect(after[1].totals.attempts).toBe(15)
    const lastBucket = after[0].buckets.findLast((bucket: any) => bucket.attempts > 0)
    expect(lastBucket.latency_ms.p99).not.toBe(99999)
    const reopenedCount = await unfilled()
    expect(await storeClosedPercentiles(db, await currentBuckets())).toBe(reopenedCount)
    expect(await unfilled()).toBe(0)
    expect(await answers()).toEqual(after)
  })

  test.if(server.database.handle.kind === 'postgres')('a row another transaction holds is skipped, not waited for, and filled by the next sweep', async () => {
    await inbound(2)
    const buckets = await currentBuckets()
    const open = await unfilled()
    const held = Promise.withResolvers<void>()
    const locked = Promise.withResolvers<void>()
    const holder = db.transaction(async (tx) => {
      await tx.execute(sql`select 1 from hook_stats where hook_id = ${hookId} and unit = 'minute' order by bucket desc limit 1 for update`)
      locked.resolve()
      await held.promise
    })
    await locked.promise
    const started = performance.now()
    expect(await storeClosedPercentiles(db, buckets)).toBe(open - 1)
    expect(performance.now() - started).toBeLessThan(5_000)
    held.resolve()
    await holder
    expect(await storeClosedPercentiles(db, buckets)).toBe(1)
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
