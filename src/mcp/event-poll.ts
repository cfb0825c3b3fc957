import { sql } from 'drizzle-orm'
import { Type } from '@sinclair/typebox'
import type { Caller } from '../auth/authenticator.ts'
import { queryRows, type Database } from '../lib/db/client.ts'
import { FILTER_KEYS } from '../hooks/event-types.ts'
import { EVENT_ERRORS } from './event-wire.ts'
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

/**
 * A position in the account's event log: after the event (`x`: its transaction, `i`: its id),
 * established at `t` (ms). Opaque to clients: base64url of this JSON.
 */
interface Position {
  x: string
  i: string
  t: number
}

const encode = (position: Position) => Buffer.from(JSON.stringify(position)).toString('base64url')

function decode(cursor: string): Position {
  try {
    const position = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as Position
    if (/^\d{1,20}$/.test(position.x) && typeof position.i === 'string' && position.i.length <= 64 && Number.isSafeInteger(position.t)) return position
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
 * A null cursor starts from now (no events, a fresh cursor). A cursor older than the retention
 * (EVENT_RETENTION_DAYS) or than `maxAgeMs` starts from now too, with `truncated: true`: the
 * events in between may be gone, or are older than the client wants. Holds no state: the cursor
 * says everything.
 */
export async function pollEvents(deps: { db: Database; retentionDays: number }, caller: Caller, rawParams: unknown, now = Date.now()): Promise<PollResult> {
  const params = parse(PollParams, rawParams)
  const type = eventTypeOf(params.name)
  const args = parse(eventArgumentsSchema(type), params.arguments ?? {}, '/arguments')
  const position = params.cursor ? decode(params.cursor) : null
  const [{ horizon }] = (await queryRows<{ horizon: string }>(deps.db, sql`select pg_snapshot_xmin(pg_current_snapshot())::text as horizon`)) as [{ horizon: string }]
  // Everything before the horizon: the transaction just below it has ended.
  const fromNow: Position = { x: (BigInt(horizon) - 1n).toString(), i: AFTER_ALL_IDS, t: now }
  const empty = (truncated: boolean): PollResult => ({ events: [], cursor: encode(fromNow), truncated, hasMore: false, nextPollMs: NEXT_POLL_MS })
  if (!position) return empty(false)
  const oldest = Math.max(now - deps.retentionDays * 86_400_000, params.maxAgeMs == null ? -Infinity : now - params.maxAgeMs)
  if (position.t < oldest) return empty(true)

  const limit = params.maxEvents ?? POLL_DEFAULT_EVENTS
  const contacts = args[FILTER_KEYS[type]] as string[] | undefined
  const contactOf = sql`(e.payload::jsonb #>> ${`{data,message,${FILTER_KEYS[type]}}`})`
  const rows = await queryRows<{ id: string; xact: string; payload: string }>(
    deps.db,
    sql`select e.id, e.xact::text as xact, e.payload from events e
        where e.account_id = ${caller.accountId} and e.type = ${type} and not e.test
          and (e.xact, e.id) > (${position.x}::xid8, ${position.i}) and e.xact < ${horizon}::xid8
          ${contacts ? sql`and ${contactOf} in (${sql.join(contacts.map((contact) => sql`${contact}`), sql`, `)})` : sql``}
        order by e.xact, e.id
        limit ${limit + 1}`,
  )
  const page = rows.slice(0, limit)
  const hasMore = rows.length > limit
  const last = page.at(-1)
  // A full page ends at its last event; otherwise everything below the horizon has been read.
  const next: Position = hasMore && last ? { x: last.xact, i: last.id, t: now } : fromNow
  return {
    events: page.map((row) => {
      const event = JSON.parse(row.payload) as { id: string; type: string; timestamp: string; data: Record<string, unknown> }
      return { eventId: event.id, name: event.type, timestamp: event.timestamp, data: event.data }
    }),
    cursor: encode(next),
    truncated: false,
    hasMore,
    nextPollMs: NEXT_POLL_MS,
  }
}
