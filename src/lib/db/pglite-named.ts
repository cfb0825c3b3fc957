import { parse, protocol, types, type PGlite } from '@electric-sql/pglite'
import type { SQL } from 'drizzle-orm'
import { PgDialect } from 'drizzle-orm/pg-core'

const dialect = new PgDialect()
const { serialize } = protocol

const asSent = (value: string) => value
/**
 * Dates, times and numeric arrays stay the text PostgreSQL sent, as Drizzle's PGlite driver
 * leaves them (drizzle-orm/pglite/session.js), so a row is the same whichever way it came.
 */
const DRIZZLE_PARSERS = {
  [types.TIMESTAMP]: asSent,
  [types.TIMESTAMPTZ]: asSent,
  [types.INTERVAL]: asSent,
  [types.DATE]: asSent,
  1231: asSent, // numeric[]
  1115: asSent, // timestamp[]
  1185: asSent, // timestamptz[]
  1187: asSent, // interval[]
  1182: asSent, // date[]
}

/** One statement run over and over on PGlite, planned once. */
export type NamedStatement = <T>(query: SQL) => Promise<T[]>

/**
 * Runs one statement on PGlite as a named prepared statement with a generic plan, with
 * `settings` in force for that call only. PGlite's `query` sends every statement unnamed, so
 * PostgreSQL plans it again each time; for the delivery claim that was ~4 of its 6 ms, all of
 * it on the main thread (docs/performance.md, issue 37). PGlite's exported wire-protocol
 * serializer and `execProtocol` can name a statement; this is the same sequence `query` sends,
 * with a name.
 *
 * The settings are set with `set_config(…, true)` in the same implicit transaction (up to the
 * Sync), so the plan is made with them and the rest of PGlite's one session (the API's queries)
 * never sees them. Each call waits for PGlite's transaction and query locks, as `query` does, so
 * it never runs inside another caller's transaction. `query` must always build the same SQL
 * text: the name is bound to the first one.
 */
export function pgliteNamedStatement(client: PGlite, name: string, settings: Record<string, string>): NamedStatement {
  const settingsName = `${name}_settings`
  const settingsText = `select ${Object.keys(settings)
    .map((_, index) => `set_config($${index * 2 + 1}, $${index * 2 + 2}, true)`)
    .join(', ')}`
  const settingsValues = Object.entries(settings).flat()
  let prepared: { text: string; parameterTypes: number[] } | undefined

  const run = async (messages: Uint8Array[]) => (await client.execProtocol(concat(messages))).messages

  return async <T>(query: SQL): Promise<T[]> => {
    const { sql: text, params } = dialect.sqlToQuery(query)
    return client._runExclusiveTransaction(() =>
      client._runExclusiveQuery(async () => {
        if (prepared && prepared.text !== text) throw new Error(`the named statement ${name} was prepared for another text`)
        if (!prepared) {
          try {
            const described = await run([
              serialize.parse({ name: settingsName, text: settingsText }),
              serialize.parse({ name, text }),
              serialize.describe({ type: 'S', name }),
              serialize.sync(),
            ])
            prepared = { text, parameterTypes: parse.parseDescribeStatementResults(described) }
          } catch (error) {
            // Neither name may stay taken: the next call prepares both again.
            await run([serialize.close({ type: 'S', name: settingsName }), serialize.close({ type: 'S', name }), serialize.sync()])
            throw error
          }
        }
        const types = prepared.parameterTypes
        const values = params.map((value, index) => {
          if (value === null || value === undefined) return null
          const serializer = client.serializers[types[index]!]
          return serializer ? serializer(value) : String(value)
        })
        const answered = await run([
          serialize.bind({ statement: settingsName, values: settingsValues }),
          serialize.describe({ type: 'P' }),
          serialize.execute({}),
          serialize.bind({ statement: name, values }),
          serialize.describe({ type: 'P' }),
          serialize.execute({}),
          serialize.sync(),
        ])
        return parse.parseResults(answered, client.parsers, { parsers: DRIZZLE_PARSERS }).at(-1)!.rows as T[]
      }),
    )
  }
}

function concat(parts: Uint8Array[]): Uint8Array {
  const message = new Uint8Array(parts.reduce((length, part) => length + part.length, 0))
  let offset = 0
  for (const part of parts) {
    message.set(part, offset)
    offset += part.length
  }
  return message
}
