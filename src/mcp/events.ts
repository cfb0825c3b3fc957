import { and, count, eq, isNull, sql } from 'drizzle-orm'
import { Type, type Static, type TSchema } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { ProtocolError } from '@modelcontextprotocol/server'
import type { Caller } from '../auth/authenticator.ts'
import { sendWebhook } from '../delivery/send.ts'
import { accounts, grants, hooks } from '../lib/db/schema.ts'
import { markDue, targetOrigin } from '../delivery/queue.ts'
import { isUniqueViolation } from '../lib/db/errors.ts'
import { countHits, releaseHits } from '../lib/db/rate-limits.ts'
import type { Database, DatabaseTransaction } from '../lib/db/client.ts'
import { ApiError } from '../lib/http/errors.ts'
import { constantTimeEqual, newSecret } from '../lib/security/crypto.ts'
import { derivedId } from '../lib/db/ids.ts'
import { EventSchema } from '../messages/schemas.ts'
import { plainJsonSchema } from '../hooks/event-catalog.ts'
import { EVENT_DESCRIPTIONS, EVENT_TYPES, FILTER_KEYS, type EventType } from '../messages/event-types.ts'
import { ContactList } from '../hooks/schemas.ts'
import { checkCallbackUrl, checkSigningSecret, deleteSubscriptionRows } from '../hooks/service.ts'
import { CONTROL_MESSAGE_TIMEOUT_MS, controlMessageId, EVENT_ERRORS, SUBSCRIPTION_ID_HEADER, verificationBody } from '../delivery/event-wire.ts'
import type { ToolDeps } from './tools.ts'

/** docs/mcp.md#events: how many webhook subscriptions one grant (one agent, for one user) may hold. */
export const SUBSCRIPTIONS_PER_GRANT = 25

/** docs/mcp.md#events: the lifetime granted when the client suggests none, the shortest and the longest. */
export const SUBSCRIPTION_TTL_MS = { default: 24 * 3_600_000, min: 60_000, max: 7 * 24 * 3_600_000 } as const

/** A rotated secret keeps signing deliveries beside the new one this long, as for REST subscriptions. */
const PREVIOUS_SECRET_GRACE_MS = 24 * 3_600_000

/** An event type's subscription arguments: its filter (docs/api.md#filters), optional. */
export const eventArgumentsSchema = (type: EventType) =>
  Type.Object(
    { [FILTER_KEYS[type]]: Type.Optional(ContactList) },
    { additionalProperties: false, description: `Optional: deliver only ${type} events whose message's ${FILTER_KEYS[type]} is one of these numbers.` },
  )

const SubscriptionArguments = Type.Record(Type.String(), Type.Unknown())

export const ListEventsParams = Type.Object({ cursor: Type.Optional(Type.String({ maxLength: 256 })) })

export const SubscribeParams = Type.Object({
  name: Type.String({ maxLength: 128 }),
  arguments: Type.Optional(SubscriptionArguments),
  delivery: Type.Object({ mode: Type.Literal('webhook'), url: Type.String({ maxLength: 2048 }), secret: Type.String({ maxLength: 256 }) }),
  cursor: Type.Optional(Type.Union([Type.String({ maxLength: 256 }), Type.Null()])),
  maxAgeMs: Type.Optional(Type.Union([Type.Integer({ minimum: 0 }), Type.Null()])),
  ttlMs: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.Null()])),
})

export const UnsubscribeParams = Type.Object({
  name: Type.String({ maxLength: 128 }),
  arguments: Type.Optional(SubscriptionArguments),
  delivery: Type.Object({ mode: Type.Optional(Type.Literal('webhook')), url: Type.String({ maxLength: 2048 }) }),
})

/** `events/list`: the three message events, by webhook or poll, their filter as arguments and their `data` as payload. */
export function listEvents() {
  return {
    events: EVENT_TYPES.map((type) => ({
      name: type,
      description: EVENT_DESCRIPTIONS[type],
      delivery: ['webhook', 'poll'],
      inputSchema: plainJsonSchema(eventArgumentsSchema(type)),
      payloadSchema: plainJsonSchema(EventSchema.properties.data),
    })),
  }
}

export const eventError = (code: number, message: string, data?: unknown) => new ProtocolError(code, message, data)

/** Params checked against their TypeBox schema: InvalidParams naming the first few problems otherwise. */
export function parse<S extends TSchema>(schema: S, value: unknown, at = ''): Static<S> {
  if (Value.Check(schema, value)) return value as Static<S>
  const errors = [...Value.Errors(schema, value)].slice(0, 5).map((error) => ({ path: `${at}${error.path}` || '/', message: error.message }))
  throw eventError(EVENT_ERRORS.InvalidParams, `Invalid params: ${errors.map((error) => `${error.path} ${error.message}`).join('; ')}`, { errors })
}

/** An ApiError of the checks REST shares (URL, secret) as the extension's InvalidParams. */
function asInvalidParams<T>(check: () => T, path: string): T {
  try {
    return check()
  } catch (error) {
    if (!(error instanceof ApiError)) throw error
    const message = error.options.errors?.[0]?.message ?? error.detail
    throw eventError(EVENT_ERRORS.InvalidParams, `Invalid params: ${path} ${message}`, { errors: [{ path, message }] })
  }
}

/** The principal of an events/* request: the grant its token was issued from (docs/mcp.md#events). */
function grantOf(caller: Caller): string {
  if (caller.credential.kind !== 'access_token') throw eventError(EVENT_ERRORS.Forbidden, 'Forbidden: event subscriptions need an OAuth access token.')
  return caller.credential.grantId
}

export function eventTypeOf(name: string): EventType {
  if (!(EVENT_TYPES as readonly string[]).includes(name)) {
    throw eventError(EVENT_ERRORS.NotFound, `Unknown event: ${name.slice(0, 128)}. events/list names the events.`, { kind: 'event' })
  }
  return name as EventType
}

/** JSON with object keys sorted, so equal arguments are equal strings whatever order they came in. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  if (typeof value === 'object' && value !== null) {
    const record = value as Record<string, unknown>
    return `{${Object.keys(record).sort().map((key) => `${JSON.stringify(key)}:${canonicalJson(record[key])}`).join(',')}}`
  }
  return JSON.stringify(value)
}

/** The subscription key's derived id (the extension's "Subscription identity"): stable for (principal, url, name, arguments). */
const subscriptionIdOf = (grantId: string, url: string, name: string, args: Record<string, unknown>) => derivedId('evs', canonicalJson([grantId, url, name, args]))

/** The granted lifetime: the client's suggestion within bounds; `null` (no expiry) is granted the longest finite one. */
export function grantedTtlMs(suggested: number | null | undefined): number {
  if (suggested === undefined) return SUBSCRIPTION_TTL_MS.default
  if (suggested === null) return SUBSCRIPTION_TTL_MS.max
  return Math.min(SUBSCRIPTION_TTL_MS.max, Math.max(SUBSCRIPTION_TTL_MS.min, suggested))
}

export interface SubscribeResult {
  id: string
  refreshBefore: string
  cursor: null
  truncated: false
  [key: string]: unknown
}

/**
 * `events/subscribe` (webhook mode). The subscription is a row of `hooks` bound to the caller's
 * grant, so it is delivered by the same outbox, claim, retries, circuit breaker and fairness as a
 * REST subscription. Subscribing again with the same key refreshes it: a new lifetime, the secret
 * replaced (the old one still signs for 24 h), a subscription disabled after days of failures
 * active again. A new callback URL for this grant is verified first (the extension's challenge),
 * and nothing is created unless the receiver echoes the challenge.
 */
export async function subscribe(deps: ToolDeps, caller: Caller, rawParams: unknown, now = Date.now()): Promise<SubscribeResult> {
  const params = parse(SubscribeParams, rawParams)
  const grantId = grantOf(caller)
  const type = eventTypeOf(params.name)
  const args = parse(eventArgumentsSchema(type), params.arguments ?? {}, '/arguments')
  const url = asInvalidParams(() => checkCallbackUrl(params.delivery.url, deps), '/delivery/url')
  const secret = asInvalidParams(() => checkSigningSecret(params.delivery.secret), '/delivery/secret')
  const id = subscriptionIdOf(grantId, url, type, args)
  const expiresAt = new Date(now + grantedTtlMs(params.ttlMs))
  const result: SubscribeResult = { id, refreshBefore: expiresAt.toISOString(), cursor: null, truncated: false }
  const secretCiphertext = await deps.secretBox.seal(secret)

  if (await refresh(deps, { id, grantId, secret, secretCiphertext, expiresAt })) return result
  const [known] = await deps.db
    .select({ n: count() })
    .from(hooks)
    .where(and(eq(hooks.grantId, grantId), eq(hooks.targetUrl, url)))
  if (known!.n === 0) {
    // Checked before the verification POST as well as after it: a grant that may not subscribe
    // never makes the service call out (docs/security.md, "Limits").
    await checkRoomToSubscribe(deps.db, deps.hooksPerAccount, caller.accountId, grantId)
    await verifyCallback(deps, { accountId: caller.accountId, grantId, id, url, secret })
  }
  const contacts = args[FILTER_KEYS[type]] as string[] | undefined
  try {
    await deps.db.transaction(async (tx) => {
      // Subscribes of one account queue on its row, so each counts what the one before committed (as REST creates
      // do, src/hooks/service.ts); a revocation (src/oauth/revocation.ts) takes the grant's row, so a subscription
      // is never made for a grant being revoked.
      await tx.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, caller.accountId)).for('no key update')
      await checkRoomToSubscribe(tx, deps.hooksPerAccount, caller.accountId, grantId, { lock: true })
      await tx.insert(hooks).values({
        id,
        accountId: caller.accountId,
        event: type,
        targetUrl: url,
        secretCiphertext,
        filterContacts: contacts ?? null,
        grantId,
        eventArguments: canonicalJson(args),
        expiresAt,
      })
    })
  } catch (error) {
    if (!isUniqueViolation(error)) throw error
    // The same key subscribed at the same moment by another request: this one is then a refresh.
    if (await refresh(deps, { id, grantId, secret, secretCiphertext, expiresAt })) return result
    // Or the row is still there, ended (by the owner, or a revocation) and waiting for its terminated envelope.
    throw eventError(EVENT_ERRORS.ResourceExhausted, 'The subscription with this key was just ended and is being removed: subscribe again in a few seconds.', {
      limit: 'ending',
      retryAfterMs: 5_000,
    })
  }
  return result
}

/**
 * Whether the grant may make one more subscription: not revoked, under its own bound and under the
 * account's (HOOKS_PER_ACCOUNT counts the account's webhooks and its agents' subscriptions together:
 * one event fans out to at most that many, docs/security.md). Throws the extension's error otherwise.
 * `lock` takes the grant's row, as a revocation does: inside the creating transaction only.
 */
async function checkRoomToSubscribe(db: Database | DatabaseTransaction, hooksPerAccount: number, accountId: string, grantId: string, options: { lock?: boolean } = {}): Promise<void> {
  const live = db.select({ id: grants.id }).from(grants).where(and(eq(grants.id, grantId), isNull(grants.revokedAt)))
  const [grant] = options.lock ? await live.for('no key update') : await live
  if (!grant) throw eventError(EVENT_ERRORS.Forbidden, 'Forbidden: access revoked.')
  const [held] = await db.select({ n: count() }).from(hooks).where(eq(hooks.grantId, grantId))
  if (held!.n >= SUBSCRIPTIONS_PER_GRANT) {
    throw eventError(
      EVENT_ERRORS.ResourceExhausted,
      `This agent already holds ${SUBSCRIPTIONS_PER_GRANT} event subscriptions, the most one grant may hold: unsubscribe from one first.`,
      { limit: 'subscriptions', max: SUBSCRIPTIONS_PER_GRANT },
    )
  }
  // Every grant of the account and its webhooks together: an agent that signs in again and again gets a new grant each time.
  const [accountHeld] = await db.select({ n: count() }).from(hooks).where(eq(hooks.accountId, accountId))
  if (accountHeld!.n >= hooksPerAccount) {
    throw eventError(
      EVENT_ERRORS.ResourceExhausted,
      `This account already holds ${hooksPerAccount} subscriptions, its webhooks and its agents' event subscriptions together, the most it may hold (HOOKS_PER_ACCOUNT): the account's owner can delete webhooks or end agents' subscriptions under Connected apps.`,
      { limit: 'account_subscriptions', max: hooksPerAccount },
    )
  }
}

/** Refreshes the grant's subscription `id` if it exists (and is not being ended); false when there is none. */
async function refresh(
  deps: ToolDeps,
  input: { id: string; grantId: string; secret: string; secretCiphertext: string; expiresAt: Date },
): Promise<boolean> {
  const [existing] = await deps.db
    .select({ secretCiphertext: hooks.secretCiphertext, status: hooks.status })
    .from(hooks)
    .where(and(eq(hooks.id, input.id), eq(hooks.grantId, input.grantId)))
  if (!existing || existing.status === 'terminated') return false
  const rotated = !constantTimeEqual(await deps.secretBox.open(existing.secretCiphertext), input.secret)
  const updated = await deps.db
    .update(hooks)
    .set({
      expiresAt: input.expiresAt,
      ...(rotated
        ? { secretCiphertext: input.secretCiphertext, previousSecretCiphertext: existing.secretCiphertext, previousSecretExpiresAt: new Date(Date.now() + PREVIOUS_SECRET_GRACE_MS) }
        : {}),
      // A refresh is the client's sign of life: a subscription the service disabled is active again (the extension's "active").
      status: sql`case when ${hooks.status} = 'disabled' then 'active' else ${hooks.status} end`,
      disabledReason: sql`case when ${hooks.status} = 'disabled' then null else ${hooks.disabledReason} end`,
      failingSince: sql`case when ${hooks.status} = 'disabled' then null else ${hooks.failingSince} end`,
    })
    .where(and(eq(hooks.id, input.id), eq(hooks.grantId, input.grantId), sql`${hooks.status} <> 'terminated'`))
    .returning({ id: hooks.id })
  if (updated.length === 0) return false
  // The claim takes an expired subscription off the queue; renewed before the sweep deleted it, it has to be put back.
  await deps.db.execute(markDue(sql`select id, account_id, ${targetOrigin(sql`target_url`)} from hooks where id = ${input.id}`))
  return true
}

/** The extension's `lastError` categories, from an attempt's result (never the receiver's own words). */
function failureCategory(status: number | null, error: string | null): string {
  // A 2xx without the echo, or a redirect (never followed), reached the receiver but did not verify.
  if (status !== null) return status >= 500 ? 'http_5xx' : status >= 400 ? 'http_4xx' : 'challenge_failed'
  if (error && /timed out/i.test(error)) return 'timeout'
  if (error && /tls|certificate|ssl/i.test(error)) return 'tls_error'
  return 'connection_refused'
}

/**
 * docs/mcp.md#events: failed callback verifications one grant, and all the grants of one account
 * together (an agent that signs in again gets a new grant), may have in an hour; past them,
 * subscribing to a new URL waits.
 */
export const FAILED_VERIFICATIONS = { perGrant: 10, perAccount: 30, windowSeconds: 3_600 } as const

/**
 * Whether a 2xx body answers the challenge: `{"challenge": "<it>"}`. A body that carries the
 * verification envelope back (its `type`) is an echo, as any endpoint that returns what it was
 * sent would give, not a receiver that chose to take these deliveries.
 */
function answersChallenge(body: string, challenge: string): boolean {
  let answer: unknown
  try {
    answer = JSON.parse(body)
  } catch {
    return false
  }
  if (typeof answer !== 'object' || answer === null || 'type' in answer) return false
  const echoed = (answer as { challenge?: unknown }).challenge
  return typeof echoed === 'string' && constantTimeEqual(echoed, challenge)
}

/**
 * The extension's endpoint verification: a signed `verification` envelope with a single-use
 * challenge, POSTed through the outbound guard like any delivery; the receiver proves it wants
 * these deliveries by answering the challenge in a 2xx body. Anything else is
 * CallbackEndpointError. A grant and an account have FAILED_VERIFICATIONS failures an hour, counted
 * before the POST (so concurrent calls cannot pass the bound) and given back when it verifies: an
 * agent cannot make the service probe address after address.
 */
async function verifyCallback(deps: ToolDeps, input: { accountId: string; grantId: string; id: string; url: string; secret: string }): Promise<void> {
  const grantKey = `mcp-verification:${input.grantId}`
  const accountKey = `mcp-verification-account:${input.accountId}`
  const hits = await countHits(deps.db, [grantKey, accountKey], FAILED_VERIFICATIONS.windowSeconds)
  const counted = [...hits.values()]
  const over = [
    { hit: hits.get(grantKey)!, max: FAILED_VERIFICATIONS.perGrant, whose: "This agent's callbacks" },
    { hit: hits.get(accountKey)!, max: FAILED_VERIFICATIONS.perAccount, whose: "This account's agents' callbacks" },
  ].find(({ hit, max }) => hit.count > max)
  if (over) {
    await releaseHits(deps.db, counted)
    throw eventError(
      EVENT_ERRORS.ResourceExhausted,
      `${over.whose} failed verification ${over.max} times within the hour: try a new callback URL again in ${over.hit.retryAfterSeconds} s.`,
      { limit: 'verifications', max: over.max, retryAfterMs: over.hit.retryAfterSeconds * 1_000 },
    )
  }
  const challenge = newSecret('')
  const send = { ...deps.send, timeoutMs: Math.min(deps.send.timeoutMs, CONTROL_MESSAGE_TIMEOUT_MS) }
  const result = await sendWebhook(
    { url: input.url, id: controlMessageId('verification'), body: verificationBody(challenge), keys: { scheme: 'hmac', current: input.secret }, headers: { [SUBSCRIPTION_ID_HEADER]: input.id } },
    send,
  )
  if (result.ok && answersChallenge(result.responseSnippet, challenge)) {
    await releaseHits(deps.db, counted)
    return
  }
  const reason = failureCategory(result.status, result.error)
  deps.logger.info('event callback verification failed', { subscription_id: input.id, reason, status_code: result.status, error: result.error })
  throw eventError(EVENT_ERRORS.CallbackEndpointError, `The callback did not verify (${reason}): it must answer the verification POST with 2xx and {"challenge": "<the challenge>"}.`, { reason })
}

/** `events/unsubscribe`: ends the caller's subscription with this key at once (its pending deliveries with it). */
export async function unsubscribe(deps: ToolDeps, caller: Caller, rawParams: unknown): Promise<Record<string, never>> {
  const params = parse(UnsubscribeParams, rawParams)
  const grantId = grantOf(caller)
  const type = eventTypeOf(params.name)
  // Checked as subscribing checks them: arguments no subscription could have are refused, not hashed.
  const args = parse(eventArgumentsSchema(type), params.arguments ?? {}, '/arguments')
  const url = asInvalidParams(() => checkCallbackUrl(params.delivery.url, deps), '/delivery/url')
  const id = subscriptionIdOf(grantId, url, type, args)
  const deleted = await deleteSubscriptionRows(deps.db, and(eq(hooks.id, id), eq(hooks.grantId, grantId))!)
  if (deleted.length === 0) throw eventError(EVENT_ERRORS.NotFound, 'No subscription matches this name, arguments and callback URL.', { kind: 'subscription' })
  return {}
}
