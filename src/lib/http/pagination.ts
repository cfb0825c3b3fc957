import { t } from 'elysia'
import { badRequest } from './errors.ts'
import { isId, type IdPrefix } from '../db/ids.ts'

/**
 * The paging parameters of every list, a REST query and an MCP tool's input alike: `limit` 1..100 (default 20) and an opaque `cursor`.
 * `limit` is Elysia's coercing `t.Integer` because a query string arrives as text; integers in JSON
 * bodies and responses are TypeBox's plain `Type.Integer`, which takes JSON numbers only.
 */
export const PageParams = {
  limit: t.Optional(t.Integer({ minimum: 1, maximum: 100, default: 20, description: 'How many to return, 1 to 100 (default 20).' })),
  cursor: t.Optional(t.String({ maxLength: 128, description: 'next_cursor of the previous page, to read the next one.' })),
}

/** `?key=` may stand beside any query: callers without a bearer token authenticate with it. */
export const ApiKeyParam = { key: t.Optional(t.String({ maxLength: 256, description: 'An API key, for callers without a bearer token.' })) }

export const PageQuery = t.Object({ ...PageParams, ...ApiKeyParam }, { additionalProperties: false })

/** A page of `item`s, named after them (`HookPage`) in the OpenAPI document. */
export const pageOf = <T extends import('elysia').TSchema>(item: T) =>
  t.Object(
    { data: t.Array(item), next_cursor: t.Union([t.String(), t.Null()], { description: 'Pass it as `cursor` to read the next page; null on the last one.' }) },
    { title: `${item.title ?? 'Item'}Page` },
  )

export interface Page<T> {
  data: T[]
  next_cursor: string | null
}

/**
 * Cursors are the last id of a page, opaque to clients. Ids sort by creation time, so
 * `id < cursor` in descending order is a stable keyset page, newest first.
 */
function decodeCursor(cursor: string | undefined, prefix: IdPrefix): string | undefined {
  if (cursor === undefined) return undefined
  const id = Buffer.from(cursor, 'base64url').toString('utf8')
  if (!isId(prefix, id)) throw badRequest('invalid_cursor', 'cursor is not one this list returned.')
  return id
}

/**
 * One page of a list, newest first: `fetch` reads up to `take` rows with ids below `before`
 * (all rows when it is undefined), in descending id order.
 */
export async function readPage<Row extends { id: string }, Item>(
  page: { limit?: number; cursor?: string },
  prefix: IdPrefix,
  fetch: (before: string | undefined, take: number) => Promise<Row[]>,
  shape: (row: Row) => Item,
): Promise<Page<Item>> {
  const limit = page.limit ?? 20
  return toPage(await fetch(decodeCursor(page.cursor, prefix), limit + 1), limit, shape)
}

/** Expects `limit + 1` rows: the extra one only says whether another page exists. */
function toPage<Row extends { id: string }, Item>(rows: Row[], limit: number, shape: (row: Row) => Item): Page<Item> {
  const more = rows.length > limit
  const kept = more ? rows.slice(0, limit) : rows
  return {
    data: kept.map(shape),
    next_cursor: more ? Buffer.from(kept[kept.length - 1]!.id).toString('base64url') : null,
  }
}
