import { parse, protocol, type PGlite, type QueryOptions, type Results, type Transaction } from '@electric-sql/pglite'

const { serialize } = protocol

/** What Drizzle's PGlite driver calls on its client: `query`, and `transaction` with a `query` of its own. */
export type NamedPGlite = Pick<PGlite, 'query' | 'transaction'>

/**
 * Statements of more texts than this run unnamed, as PGlite's own `query` runs them: the texts
 * given here are a fixed set (values are always parameters), and a name per text would otherwise
 * hold a plan for every text ever sent.
 */
const MAX_NAMED = 64

// Names are per client made here, since two of them may share one PGlite (a test's handles).
let clientsMade = 0

/**
 * PGlite as Drizzle's client, with each statement prepared once under a name of its own and run
 * by that name, as postgres-js runs ours on PostgreSQL (`preparedDrizzle`, src/lib/db/client.ts),
 * with `settings` in force for each call only. PGlite's `query` sends every statement unnamed,
 * so PostgreSQL parses and plans it again each time: for the delivery claim that was ~4 of its
 * 6 ms, and for a settlement and a recorded batch of attempts 2–3 ms of 4–5, all of it on the
 * server's one thread (docs/performance.md, issue 37, fourth and twenty-fifth passes). PGlite's
 * exported wire-protocol serializer and `execProtocol` can name a statement; this is the same
 * sequence `query` sends, with a name.
 *
 * The settings are set with `set_config(…, true)` before each statement, in the same implicit
 * transaction (up to the Sync), so the plan is made with them and the rest of PGlite's one
 * session (the API's queries) never sees them; in a transaction they hold until it ends. Each
 * call outside a transaction waits for PGlite's transaction and query locks, as `query` does, so
 * it never runs inside another caller's transaction.
 */
export function pgliteNamedClient(client: PGlite, settings: Record<string, string>): NamedPGlite {
  const prefix = `named_client_${++clientsMade}`
  const settingsName = `${prefix}_settings`
  const settingsText = `select ${Object.keys(settings)
    .map((_, index) => `set_config($${index * 2 + 1}, $${index * 2 + 2}, true)`)
    .join(', ')}`
  const settingsValues = Object.entries(settings).flat()
  let settingsPrepared = false
  const prepared = new Map<string, { name: string; parameterTypes: number[] }>()
  // The texts given a name, counted when a call is let through rather than once it is prepared: calls
  // that arrive together must not each take the last place.
  const admitted = new Set<string>()

  const run = async (messages: Uint8Array[]) => (await client.execProtocol(concat(messages))).messages

  const prepare = async (text: string, options: QueryOptions | undefined) => {
    if (!settingsPrepared) {
      await run([serialize.parse({ name: settingsName, text: settingsText }), serialize.sync()])
      settingsPrepared = true
    }
    const name = `${prefix}_${prepared.size + 1}`
    try {
      const described = await run([serialize.parse({ name, text, types: options?.paramTypes }), serialize.describe({ type: 'S', name }), serialize.sync()])
      const statement = { name, parameterTypes: parse.parseDescribeStatementResults(described) }
      prepared.set(text, statement)
      return statement
    } catch (error) {
      // The name must not stay taken: the next call prepares it again. The error to report is the first.
      admitted.delete(text)
      await client.execProtocol(concat([serialize.close({ type: 'S', name }), serialize.sync()]), { throwOnError: false })
      throw error
    }
  }

  // What is not run by name runs as PGlite's own `query` runs it.
  const byName = (text: string, options: QueryOptions | undefined) => !options?.blob && (admitted.has(text) || (admitted.size < MAX_NAMED && admitted.add(text).has(text)))

  const namedQuery = <T>(text: string, params: unknown[] | undefined, options: QueryOptions | undefined): Promise<Results<T>> =>
    client._runExclusiveQuery(async () => {
      const statement = prepared.get(text) ?? (await prepare(text, options))
      const values = (params ?? []).map((value, index) => {
        if (value === null || value === undefined) return null
        const type = statement.parameterTypes[index]!
        const serializer = options?.serializers?.[type] ?? client.serializers[type]
        return serializer ? serializer(value) : String(value)
      })
      try {
        const answered = await run([
          serialize.bind({ statement: settingsName, values: settingsValues }),
          serialize.describe({ type: 'P' }),
          serialize.execute({}),
          serialize.bind({ statement: statement.name, values }),
          serialize.describe({ type: 'P' }),
          serialize.execute({}),
          serialize.sync(),
        ])
        return parse.parseResults(answered, client.parsers, options).at(-1) as Results<T>
      } catch (error) {
        // As PGlite's `query` reports a failed statement: with its text and values.
        throw Object.assign(error as Error, { query: text, params, queryOptions: options })
      }
    })

  return {
    query: <T>(text: string, params?: unknown[], options?: QueryOptions) =>
      byName(text, options) ? client._runExclusiveTransaction(() => namedQuery<T>(text, params, options)) : client.query<T>(text, params, options),
    transaction: <T>(callback: (tx: Transaction) => Promise<T>) =>
      client.transaction((tx) =>
        callback(
          new Proxy(tx, {
            get: (target, property, receiver) =>
              property === 'query'
                ? <R>(text: string, params?: unknown[], options?: QueryOptions) => (byName(text, options) ? namedQuery<R>(text, params, options) : target.query<R>(text, params, options))
                : Reflect.get(target, property, receiver),
          }),
        ),
      ),
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
