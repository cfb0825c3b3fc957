import { and, eq, sql } from 'drizzle-orm'
import { t, type Context } from 'elysia'
import type { Database } from '../db/client.ts'
import { idempotencyKeys } from '../db/schema.ts'
import { ApiError } from './errors.ts'
import { sha256Hex } from '../security/crypto.ts'
import type { SecretBox } from '../security/secret-box.ts'

const IDEMPOTENCY_WINDOW_HOURS = 24
const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/

/**
 * The header of a route that accepts Idempotency-Key, for its `headers` schema (so the OpenAPI
 * document lists it). Any value passes the schema: `runIdempotently` refuses a malformed key with
 * its own 400 `invalid_idempotency_key`.
 */
export const IdempotencyKeyHeader = t.Object(
  { 'idempotency-key': t.Optional(t.String({ description: 'Repeat a request safely: 1 to 255 visible ASCII characters.' })) },
  { additionalProperties: true },
)

interface IdempotentResult<Body> {
  status: number
  body: Body
  /** True when this is the stored answer to an earlier request with the same key. */
  replayed: boolean
}

/**
 * Runs `create` once per (account, Idempotency-Key). The same key with the same request within
 * 24 h gets the first response again; with another request, 422 `idempotency_key_reused`; while
 * the first is still running, 409 `idempotency_key_in_use`. A request that fails leaves no record,
 * so it can be retried with the same key.
 */
async function runIdempotently<Body>(
  deps: { db: Database; secretBox: SecretBox },
  scope: { accountId: string; key: string | null; request: string },
  create: () => Promise<{ status: number; body: Body }>,
): Promise<IdempotentResult<Body>> {
  if (scope.key === null) return { ...(await create()), replayed: false }
  if (!KEY_PATTERN.test(scope.key)) {
    throw new ApiError(400, 'invalid_idempotency_key', 'Idempotency-Key must be 1 to 255 visible ASCII characters.')
  }
  const requestHash = sha256Hex(scope.request)
  const where = and(eq(idempotencyKeys.accountId, scope.accountId), eq(idempotencyKeys.key, scope.key))
  // A record from before the window no longer counts.
  await deps.db
    .delete(idempotencyKeys)
    .where(and(where, sql`${idempotencyKeys.createdAt} < now() - make_interval(hours => ${IDEMPOTENCY_WINDOW_HOURS})`))
  const claimed = await deps.db
    .insert(idempotencyKeys)
    .values({ accountId: scope.accountId, key: scope.key, requestHash })
    .onConflictDoNothing()
    .returning({ key: idempotencyKeys.key })

  if (claimed.length === 0) {
    const [existing] = await deps.db.select().from(idempotencyKeys).where(where)
    if (!existing) throw new ApiError(409, 'idempotency_key_in_use', 'A request with this Idempotency-Key just finished or failed: retry.')
    if (existing.requestHash !== requestHash) {
      throw new ApiError(422, 'idempotency_key_reused', 'This Idempotency-Key was used with another request in the last 24 hours.')
    }
    if (existing.responseStatus === null || existing.responseCiphertext === null) {
      throw new ApiError(409, 'idempotency_key_in_use', 'A request with this Idempotency-Key is still being processed.')
    }
    return { status: existing.responseStatus, body: JSON.parse(await deps.secretBox.open(existing.responseCiphertext)) as Body, replayed: true }
  }

  try {
    const result = await create()
    await deps.db
      .update(idempotencyKeys)
      .set({ responseStatus: result.status, responseCiphertext: await deps.secretBox.seal(JSON.stringify(result.body)) })
      .where(where)
    return { ...result, replayed: false }
  } catch (error) {
    await deps.db.delete(idempotencyKeys).where(where)
    throw error
  }
}

/**
 * A route that accepts Idempotency-Key (docs/api.md#idempotency): `create` runs once per key, and
 * a replay answers with the first response's status and body, marked `Idempotent-Replayed: true`.
 * `request` names the endpoint and what was asked; the stored hash is of `POST {account} {request}`,
 * so changing that form would turn a retry across a deploy into 422 `idempotency_key_reused`.
 */
export async function answerIdempotently<Body>(
  deps: { db: Database; secretBox: SecretBox },
  context: Pick<Context, 'request' | 'set'>,
  scope: { accountId: string; request: string },
  create: () => Promise<{ status: number; body: Body }>,
): Promise<Body> {
  const key = context.request.headers.get('idempotency-key')
  const result = await runIdempotently(deps, { accountId: scope.accountId, key, request: `POST ${scope.accountId} ${scope.request}` }, create)
  context.set.status = result.status
  if (result.replayed) context.set.headers['idempotent-replayed'] = 'true'
  return result.body
}
