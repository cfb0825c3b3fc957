import { sql } from 'drizzle-orm'
import { Type } from '@sinclair/typebox'
import type { Caller } from '../auth/authenticator.ts'
import { rateLimitKey, type RequestRateLimiter } from '../auth/request-rate-limit.ts'
import { queryRows, type Database } from '../lib/db/client.ts'
import { FILTER_KEYS } from '../messages/event-types.ts'
import { EVENT_ERRORS } from '../delivery/event-wire.ts'
import type { SecretBox } from '../lib/security/secret-box.ts'
import { eventArgumentsSchema, eventError, eventTypeOf, parse } from './events.ts'

/** docs/mcp.md#poll: at most this many events per poll, and the wait the server suggests between polls. */
export const POLL_MAX_EVENTS = 100
const POLL_DEFAULT_EVENTS = 50
export const NEXT_POLL_MS = 5_000

export const PollParams = Type.Object({
  name: Type.String({ maxLength: 128 }),
  arguments: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  cursor: Type.Optional(Type.Union([Type.String({ maxLength: 512 }), Type.Null()])),
  maxAgeMs: Type.Optional(Type.Union([Type.Integer({ minimum: 0 }), Type.Null()])),
  maxEvents: Type.Optional(Type.Integer({ minimum: 1, maximum: POLL_MAX_EVENTS })),
})

/** Events one filtered poll reads at most, matching or not: a filter that matches little cannot make a poll walk the whole log. */
export const POLL_SCAN = 5_000

/**
 * A poll counts against the grant's rate limit (docs/api.md#rate-limits) as one request per this many
 * events it read: an old cursor with a rare filter reads up to POLL_SCAN and costs 50 requests, a poll
 * that reads one page costs one or two.
 */
export const POLL_EVENTS_PER_REQUEST = 100

/** What a poll counts as in the rate limiter, given the events it read. */
export const pollCost = (read: number) => Math.max(1, Math.ceil(read / POLL_EVENTS_PER_REQUEST))

/**
 * A position in an account's event log: after the event (`x`: its transaction, `i`: its id),
 * established at `t` (ms), for that account (`a`). Sealed with the service's key (src/lib/security/secret-box.ts),
 * so a client can neither read nor forge one: a made-up position could skip the retention check.
 */
interface Position {
  a: string
  x: string
  i: string
  t: number
}

const encode = (box: SecretBox, position: Position) => box.seal(JSON.stringify(position))

async function decode(box: SecretBox, cursor: string, accountId: string): Promise<Position> {
  try {
    const position = JSON.parse(await box.open(cursor)) as Position
    if (position.a === accountId && /^\d{1,20}$/.test(position.x) && typeof position.i === 'string' && Number.isSafeInteger(position.t)) return position
  } catch {
    // Not one of ours: refused below.
  }
  throw eventError(EVENT_ERRORS.InvalidParams, 'Invalid params: /cursor is not a cursor this server gave.', { errors: [{ path: '/cursor', message: 'not a cursor this server gave' }] })
}

// Sorts after every event id: a position "after everything of transaction x".
const AFTER_ALL_IDS = '~'

export interface PollResult {
  events: { eventId: string; name: string; timestamp: string; data: Record<string, unknown> }[]
  cursor: string
  truncated: boolean
  hasMore: boolean
  nextPollMs: number
  [key: string]: unknown
}

/**
 * `events/poll` (docs/mcp.md#poll): the account's events of one type that match the arguments,
 * after the cursor, in the order they were written.
 *
 * The order is by writing transaction (`events.xact`), and a poll reads only up to the oldest
 * transaction still running (the snapshot's xmin): every transaction below it has ended, so no
 * event can commit later at a position the cursor has passed. Event ids alone would not do: an
 * id is made before its transaction commits, and a slow one commits after a later id was read.
 *
 * A poll reads what one answer needs: without a filter, one page and one more event; with one,
 * at most POLL_SCAN events, past which it answers what matched so far with a cursor where it
 * stopped and `hasMore: true`. It reads them from an index (position and contact, no payload) and
 * charges the rate limiter by what it read (pollCost). A null cursor starts from now (no events, a fresh cursor). A cursor older than the retention
 * (EVENT_RETENTION_DAYS) or than `maxAgeMs` starts from now too, with `truncated: true`: the
 * events in between may be gone, or are older than the client wants. Holds no state: the cursor
 * says everything.
 */
export interface PollDeps {
  db: Database
  secretBox: SecretBox
  retentionDays: number
  /** API_RATE_LIMIT's limiter: a poll that read more than one page is charged the difference. */
  rateLimiter?: RequestRateLimiter
}

export async function pollEvents(deps: PollDeps, caller: Caller, rawParams: unknown, now = Date.now()): Promise<PollResult> {
  const params = parse(PollParams, rawParams)
  const type = eventTypeOf(params.name)
  const args = parse(eventArgumentsSchema(type), params.arguments ?? {}, '/arguments')
  const position = params.cursor ? await decode(deps.secretBox, params.cursor, caller.accountId) : null
  const [{ horizon }] = (await queryRows<{ horizon: string }>(deps.db, sql`select pg_snapshot_xmin(pg_current_snapshot())::text as horizon`)) as [{ horizon: string }]
  // Everything before the horizon: the transaction just below it has ended.
  const fromNow: Position = { a: caller.accountId, x: (BigInt(horizon) - 1n).toString(), i: AFTER_ALL_IDS, t: now }
  const empty = async (truncated: boolean): Promise<PollResult> => ({ events: [], cursor: await encode(deps.secretBox, fromNow), truncated, hasMore: false, nextPollMs: NEXT_POLL_MS })
  if (!position) return empty(false)
  const oldest = Math.max(now - deps.retentionDays * 86_400_000, params.maxAgeMs == null ? -Infinity : now - params.maxAgeMs)
  if (position.t < oldest) return empty(true)

  const limit = params.maxEvents ?? POLL_DEFAULT_EVENTS
  const contacts = args[FILTER_KEYS[type]] as string[] | undefined
  // Without a filter every event read is answered: one page and one more tell all. With one, up to POLL_SCAN.
  const scanLimit = contacts ? POLL_SCAN : limit + 1
  // The scan reads positions and contacts from events_poll_idx, never a payload; only the page answered (at most
  // limit + 1 events) is joined back for its payloads. One last row, its payload null, names the last event read
  // and how many were.
  const rows = await queryRows<{ id: string; xact: string; payload: string | null; scanned: number | null }>(
    deps.db,
    sql`with scanned as (
          select e.id, e.xact, e.contact from events e
          where e.account_id = ${caller.accountId} and e.type = ${type} and not e.test
            and (e.xact, e.id) > (${position.x}::xid8, ${position.i}) and e.xact < ${horizon}::xid8
          order by e.xact, e.id
          limit ${scanLimit}
        ),
        matched as (
          select s.id, s.xact from scanned s
          ${contacts ? sql`where s.contact in (${sql.join(contacts.map((contact) => sql`${contact}`), sql`, `)})` : sql``}
          order by s.xact, s.id
          limit ${limit + 1}
        )
        select m.id, m.xact::text as xact, e.payload, null::int as scanned from matched m join events e on e.id = m.id
        union all
        select l.id, l.xact::text, null, (select count(*)::int from scanned) from (select id, xact from scanned order by xact desc, id desc limit 1) l`,
  )
  const found = rows.filter((row) => row.payload !== null).sort((a, b) => (BigInt(a.xact) === BigInt(b.xact) ? (a.id < b.id ? -1 : 1) : BigInt(a.xact) < BigInt(b.xact) ? -1 : 1))
  const lastRead = rows.find((row) => row.payload === null)
  const read = Number(lastRead?.scanned ?? 0)
  // The request itself was counted when it was authenticated.
  deps.rateLimiter?.charge(rateLimitKey(caller.credential), pollCost(read) - 1)
  const page = found.slice(0, limit)
  const last = page.at(-1)
  // A full page ends at its last event; a poll that read all it may ends where it stopped reading;
  // otherwise everything below the horizon has been read.
  const next: Position =
    found.length > limit && last
      ? { a: caller.accountId, x: last.xact, i: last.id, t: now }
      : lastRead && read >= scanLimit
        ? { a: caller.accountId, x: lastRead.xact, i: lastRead.id, t: now }
        : fromNow
  return {
    events: page.map((row) => {
      const event = JSON.parse(row.payload!) as { id: string; type: string; timestamp: string; data: Record<string, unknown> }
      return { eventId: event.id, name: event.type, timestamp: event.timestamp, data: event.data }
    }),
    cursor: await encode(deps.secretBox, next),
    truncated: false,
    hasMore: next !== fromNow,
    nextPollMs: NEXT_POLL_MS,
  }
}
