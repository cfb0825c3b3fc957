import { randomBytes } from 'node:crypto'
import { and, count, desc, eq, isNull, lt, sql, type SQL } from 'drizzle-orm'
import type { PgUpdateSetSource } from 'drizzle-orm/pg-core'
import type { Static } from 'elysia'
import { circuitState } from '../delivery/circuit.ts'
import { markDue, targetOrigin } from '../delivery/queue.ts'
import type { Database } from '../lib/db/client.ts'
import { accounts, hooks } from '../lib/db/schema.ts'
import { ApiError, notFound, validationFailed } from '../lib/http/errors.ts'
import { isUniqueViolation } from '../lib/db/errors.ts'
import { isId, newId } from '../lib/db/ids.ts'
import { readPage, type Page } from '../lib/http/pagination.ts'
import type { SecretBox } from '../lib/security/secret-box.ts'
import { InvalidDestination, carriesCredentials, kindOfScheme, parseDestination, redactedTarget, restoreHiddenSecret, type Destination } from '../delivery/destinations/targets.ts'
import { EVENT_TYPES, FILTER_KEYS, type EventType, type FilterKey } from '../messages/event-types.ts'
import { newEd25519KeyPair, type SignatureScheme } from '../delivery/signing.ts'
import type { HookFilterSchema, HookSchema } from './schemas.ts'

export type Hook = typeof hooks.$inferSelect
export type HookResource = Static<typeof HookSchema>
type HookFilter = Static<typeof HookFilterSchema>

export interface HookDeps {
  db: Database
  secretBox: SecretBox
  /** True for a host that names a private, loopback, link-local… address (src/lib/security/outbound.ts). */
  isForbiddenHost(hostname: string): boolean
  allowPrivateTargets: boolean
  /** HOOKS_PER_ACCOUNT: the subscriptions one account may hold. */
  hooksPerAccount: number
}

export function toHookResource(hook: Hook): HookResource {
  return {
    id: hook.id,
    account_id: hook.accountId,
    event: hook.event as EventType,
    target_url: hook.targetUrl,
    status: hook.status as HookResource['status'],
    ...(hook.disabledReason ? { disabled_reason: hook.disabledReason } : {}),
    rate_limit_per_s: hook.rateLimitPerS,
    circuit: {
      state: circuitState(hook),
      consecutive_failures: hook.consecutiveFailures,
      opened_at: hook.circuitOpenedAt?.toISOString() ?? null,
      next_probe_at: hook.circuitProbeAt?.toISOString() ?? null,
    },
    filter: filterOf(hook.event as EventType, hook.filterContacts),
    ...publicKeysOf(hook),
    created_at: hook.createdAt.toISOString(),
  }
}

/** docs/webhooks.md#signatures: the public keys that verify an ed25519 subscription's deliveries now. */
function publicKeysOf(hook: Hook): Pick<HookResource, 'signature' | 'public_key' | 'previous_public_key' | 'previous_public_key_expires_at'> {
  const previousExpiresAt = hook.previousPublicKey && hook.previousSecretExpiresAt && hook.previousSecretExpiresAt.getTime() > Date.now() ? hook.previousSecretExpiresAt : null
  return {
    signature: hook.signatureScheme as SignatureScheme,
    public_key: hook.publicKey,
    previous_public_key: previousExpiresAt && hook.previousPublicKey,
    previous_public_key_expires_at: previousExpiresAt?.toISOString() ?? null,
  }
}

function filterOf(event: EventType, contacts: string[] | null): HookFilter | null {
  if (contacts === null) return null
  return FILTER_KEYS[event] === 'to' ? { to: contacts } : { from: contacts }
}

/**
 * docs/api.md#filters: the numbers a filter holds, as stored (hooks.filter_contacts; null: no
 * filter). Its one member (the schema allows no more, no fewer) must be the one of the event type:
 * `to` for the outcome of a message sent, `from` for a message received.
 */
function filterContactsOf(event: EventType, filter: HookFilter | null): string[] | null {
  if (filter === null) return null
  const given = Object.keys(filter)[0] as FilterKey
  const key = FILTER_KEYS[event]
  if (given !== key) {
    const typesOfGiven = EVENT_TYPES.filter((type) => FILTER_KEYS[type] === given).join(' and ')
    throw validationFailed([{ path: `/filter/${given}`, message: `a ${event} subscription filters on ${key}; ${given} is for ${typesOfGiven}` }])
  }
  return filter[key]!
}

/**
 * docs/api.md#create-a-subscription: an absolute https URL, no credentials in it, not an address literal in a private
 * range. Names are resolved and checked again at every delivery, where rebinding is caught.
 * With WEBHOOK_ALLOW_PRIVATE_TARGETS (local development), private targets are allowed, and so
 * is plain http to a loopback or private address literal or `localhost`, never to a public one.
 * A message broker's URL (docs/webhooks.md#destinations) follows the same address rules, with
 * amqps:// and tls:// in the place of https; its credentials are kept, sealed, and shown as `***`.
 */
export function checkTargetUrl(raw: string, deps: Pick<HookDeps, 'isForbiddenHost' | 'allowPrivateTargets'>): CheckedTarget {
  const refuse = (message: string) => validationFailed([{ path: '/target_url', message }])
  let destination: Destination
  try {
    destination = parseDestination(raw)
  } catch (error) {
    if (error instanceof InvalidDestination) throw refuse(error.message)
    throw error
  }
  const privateHint = '(WEBHOOK_ALLOW_PRIVATE_TARGETS=true allows it, for local development)'
  if (destination.kind !== 'https') {
    const secure = destination.kind === 'rabbitmq' ? 'amqps' : 'tls'
    const local = deps.isForbiddenHost(destination.hostname)
    if (!destination.tls && !(deps.allowPrivateTargets && local)) {
      throw refuse(
        local
          ? `must use ${secure}:// (a connection without TLS to a local address needs WEBHOOK_ALLOW_PRIVATE_TARGETS=true, for local development)`
          : `must use ${secure}://${deps.allowPrivateTargets ? ' (without TLS, only a loopback or private broker is reached)' : ''}`,
      )
    }
    if (!deps.allowPrivateTargets && local) throw refuse(`must not point at a private, loopback or link-local address ${privateHint}`)
    return { targetUrl: redactedTarget(raw), credentials: carriesCredentials(raw) ? new URL(raw).href : null }
  }
  const url = destination.url
  const localHttp = url.protocol === 'http:' && deps.allowPrivateTargets && deps.isForbiddenHost(url.hostname)
  if (url.protocol !== 'https:' && !localHttp) {
    throw refuse(
      url.protocol === 'http:' && deps.isForbiddenHost(url.hostname)
        ? 'must use https (plain http to a local address needs WEBHOOK_ALLOW_PRIVATE_TARGETS=true, for local development)'
        : url.protocol === 'http:'
          ? 'must use https'
          : 'must use https, or name a message broker (amqps://, tls://: docs/webhooks.md#destinations)',
    )
  }
  if (url.username || url.password) throw refuse('must not carry credentials')
  if (url.hash) throw refuse('must not have a fragment')
  if (!deps.allowPrivateTargets && deps.isForbiddenHost(url.hostname)) {
    throw refuse(`must not point at a private, loopback or link-local address ${privateHint}`)
  }
  return { targetUrl: url.href, credentials: null }
}

/** An agent's callback (docs/mcp.md#events) is an HTTPS endpoint: the extension's webhook delivery has no broker form. */
export function checkCallbackUrl(raw: string, deps: Pick<HookDeps, 'isForbiddenHost' | 'allowPrivateTargets'>): string {
  if (URL.canParse(raw) && kindOfScheme(new URL(raw).protocol) !== 'https') throw validationFailed([{ path: '/target_url', message: 'must use https' }])
  return checkTargetUrl(raw, deps).targetUrl
}

/** docs/webhooks.md#destinations: a changed broker URL may keep showing the stored password as `***` (restoreHiddenSecret). */
async function withStoredSecret(box: SecretBox, raw: string, current: Hook | undefined): Promise<string> {
  try {
    return restoreHiddenSecret(raw, current?.targetCredentialsCiphertext ? await box.open(current.targetCredentialsCiphertext) : null) ?? raw
  } catch (error) {
    if (error instanceof InvalidDestination) throw validationFailed([{ path: '/target_url', message: error.message }])
    throw error
  }
}

/** A target as stored: what everyone sees, and the URL with its credentials when it has any (sealed before it is stored). */
export interface CheckedTarget {
  targetUrl: string
  credentials: string | null
}

const sealedCredentials = async (box: SecretBox, target: CheckedTarget) => ({
  targetUrl: target.targetUrl,
  targetCredentialsCiphertext: target.credentials === null ? null : await box.seal(target.credentials),
})

// Standard Webhooks secrets: `whsec_` and base64 of 24 to 64 random bytes.
const newSigningSecret = () => `whsec_${randomBytes(32).toString('base64')}`
const SECRET_FORMAT = /^whsec_([A-Za-z0-9+/]+={0,2})$/

/**
 * What a subscription signs with (docs/webhooks.md#signatures): for hmac a whsec_ secret (the
 * owner's, or a new one), for ed25519 a new key pair whose whsk_ private key never leaves the service.
 */
async function newSigningKey(scheme: SignatureScheme, ownSecret?: string): Promise<{ signing: string; publicKey: string | null }> {
  if (scheme === 'hmac') return { signing: ownSecret ?? newSigningSecret(), publicKey: null }
  const pair = await newEd25519KeyPair()
  return { signing: pair.privateKey, publicKey: pair.publicKey }
}

/** A secret the owner brings: `whsec_` and the canonical base64 of 24 to 64 bytes. */
export function checkSigningSecret(raw: string): string {
  const body = SECRET_FORMAT.exec(raw)?.[1]
  const bytes = body === undefined ? undefined : Buffer.from(body, 'base64')
  if (!bytes || bytes.toString('base64') !== body || bytes.length < 24 || bytes.length > 64) {
    throw validationFailed([{ path: '/secret', message: 'must be whsec_ followed by the base64 of 24 to 64 bytes' }])
  }
  return raw
}

/** REST and MCP alike: the account holds as many subscriptions as it may. */
const hooksLimitReached = (limit: number, agents: number) =>
  new ApiError(
    409,
    'hooks_limit_reached',
    `This account already holds ${limit} subscriptions, the most it may hold: its webhooks and its agents' MCP event subscriptions together ` +
      `(${agents} of them are agents'). Delete a webhook it no longer needs (DELETE /v0/account/{account_id}/hooks/{hook_id}) or end an agent's ` +
      `subscriptions (Connected apps) and try again; the service's operator sets the limit (HOOKS_PER_ACCOUNT).`,
  )

/**
 * Creates a subscription unless the account already holds `hooksPerAccount` of them. Counting
 * and inserting in one statement would not be enough: under READ COMMITTED two concurrent
 * creates would each count the other's row as absent. So creates for one account queue on the
 * account's row (FOR NO KEY UPDATE, which foreign-key checks of other writes for the account do
 * not wait for), and each counts, in a statement of its own, what the one before it committed.
 * On PGlite transactions already run one at a time.
 */
export async function createHook(
  deps: HookDeps,
  accountId: string,
  input: { event: EventType; target_url: string; secret?: string; signature?: SignatureScheme; rate_limit_per_s?: number; filter?: HookFilter },
): Promise<{ hook: Hook; secret: string | null }> {
  const target = await sealedCredentials(deps.secretBox, checkTargetUrl(await withStoredSecret(deps.secretBox, input.target_url, undefined), deps))
  const targetUrl = target.targetUrl
  const filterContacts = filterContactsOf(input.event, input.filter ?? null)
  const signatureScheme = input.signature ?? 'hmac'
  if (signatureScheme === 'ed25519' && input.secret !== undefined) {
    throw validationFailed([{ path: '/secret', message: 'an ed25519 subscription takes no secret: the service makes its key pair and answers the public key' }])
  }
  const key = await newSigningKey(signatureScheme, input.secret === undefined ? undefined : checkSigningSecret(input.secret))
  const secretCiphertext = await deps.secretBox.seal(key.signing)
  try {
    const hook = await deps.db.transaction(async (tx) => {
      await tx.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, accountId)).for('no key update')
      // Agents' MCP event subscriptions count too: HOOKS_PER_ACCOUNT bounds what one event fans out to (docs/security.md).
      const [held] = await tx.select({ n: count(), agents: count(hooks.grantId) }).from(hooks).where(eq(hooks.accountId, accountId))
      if (held!.n >= deps.hooksPerAccount) throw hooksLimitReached(deps.hooksPerAccount, held!.agents)
      const [inserted] = await tx
        .insert(hooks)
        .values({
          id: newId('hook'),
          accountId,
          event: input.event,
          ...target,
          signatureScheme,
          secretCiphertext,
          publicKey: key.publicKey,
          rateLimitPerS: input.rate_limit_per_s ?? null,
          filterContacts,
        })
        .returning()
      return inserted!
    })
    return { hook, secret: key.publicKey === null ? key.signing : null }
  } catch (error) {
    if (isUniqueViolation(error)) {
      throw new ApiError(409, 'conflict', `This account already has a ${input.event} subscription for ${targetUrl}.`)
    }
    throw error
  }
}

export async function listHooks(db: Database, accountId: string, page: { limit?: number; cursor?: string }): Promise<Page<HookResource>> {
  return readPage(
    page,
    'hook',
    (before, take) =>
      db
        .select()
        .from(hooks)
        .where(and(eq(hooks.accountId, accountId), isNull(hooks.grantId), before ? lt(hooks.id, before) : undefined))
        .orderBy(desc(hooks.id))
        .limit(take),
    toHookResource,
  )
}

/**
 * The one answer for a subscription that is not the caller's, REST and MCP alike. Another
 * account's hook reads as missing: ids of other accounts are not confirmed to exist.
 */
export const noSuchHook = (hookId: string) => notFound(`No subscription ${hookId} on this account.`)

export async function getHook(db: Database, accountId: string, hookId: string): Promise<Hook> {
  if (!isId('hook', hookId)) throw noSuchHook(hookId)
  const [hook] = await db
    .select()
    .from(hooks)
    .where(and(eq(hooks.id, hookId), eq(hooks.accountId, accountId)))
  if (!hook) throw noSuchHook(hookId)
  return hook
}

export async function deleteHook(db: Database, accountId: string, hookId: string): Promise<void> {
  if (!isId('hook', hookId)) throw noSuchHook(hookId)
  const deleted = await deleteSubscriptionRows(db, and(eq(hooks.id, hookId), eq(hooks.accountId, accountId))!)
  if (deleted.length === 0) throw noSuchHook(hookId)
}

/**
 * Deletes the subscriptions `where` picks (their deliveries, attempts and queue rows cascade), taking
 * their rows in the order recording an attempt does (src/delivery/store.ts): the deliveries in flight
 * first, then the subscription. In the other order a recording that holds a delivery and reads the
 * subscription's row (the attempt's foreign key) waits for the delete, which waits for that delivery:
 * a deadlock, which PostgreSQL ends by failing one of the two.
 */
export async function deleteSubscriptionRows(db: Database, where: SQL): Promise<{ id: string }[]> {
  return db.transaction(async (tx) => {
    await tx.execute(sql`select deliveries.id from deliveries join hooks on hooks.id = deliveries.hook_id
      where ${where} and deliveries.leased_until is not null order by deliveries.id for update of deliveries`)
    return tx.delete(hooks).where(where).returning({ id: hooks.id })
  })
}

/** How long deliveries keep being signed with the secret a rotation replaced. */
export const PREVIOUS_SECRET_HOURS = 24

/**
 * A new signing secret (hmac) or key pair (ed25519) becomes the current one; the one it replaces
 * stays valid (deliveries are signed with both) for 24 h. Only two exist at a time: rotating
 * again within the 24 h drops the older previous one and keeps the then-current one as the
 * previous. One UPDATE, so concurrent rotations cannot lose a key between reading and writing
 * it; the scheme, read first, never changes. Answers the new secret for hmac, null for ed25519
 * (its new public key is on the subscription).
 */
export async function rotateHookSecret(deps: Pick<HookDeps, 'db' | 'secretBox'>, accountId: string, hookId: string): Promise<{ hook: Hook; secret: string | null }> {
  const { signatureScheme } = await getHook(deps.db, accountId, hookId)
  const key = await newSigningKey(signatureScheme as SignatureScheme)
  const [hook] = await deps.db
    .update(hooks)
    .set({
      secretCiphertext: await deps.secretBox.seal(key.signing),
      publicKey: key.publicKey,
      // In an UPDATE, a column on the right-hand side is the row's value before the update.
      previousSecretCiphertext: sql`${hooks.secretCiphertext}`,
      previousPublicKey: sql`${hooks.publicKey}`,
      previousSecretExpiresAt: sql`now() + make_interval(hours => ${PREVIOUS_SECRET_HOURS})`,
    })
    .where(and(eq(hooks.id, hookId), eq(hooks.accountId, accountId)))
    .returning()
  if (!hook) throw noSuchHook(hookId)
  return { hook, secret: key.publicKey === null ? key.signing : null }
}

/**
 * Makes a disabled hook active again and restarts its failure clock. Enabling an active hook
 * changes nothing, its failure clock included (calling enable must not put off the 5-day
 * disable of a hook that keeps failing). The worker claims only active hooks' deliveries, so
 * the ones left pending while the hook was disabled go out again from now on.
 */
export async function enableHook(db: Database, accountId: string, hookId: string): Promise<Hook> {
  if (!isId('hook', hookId)) throw noSuchHook(hookId)
  return changeOwnHook(db, accountId, hookId, {
    status: 'active',
    disabledReason: null,
    // The row's status before this update: only a disabled hook's clock restarts, and its circuit closes.
    failingSince: sql`case when ${hooks.status} = 'active' then ${hooks.failingSince} end`,
    ...closedCircuitUnlessActive,
  })
}

/** A subscription made active again starts with a closed circuit (src/delivery/circuit.ts); an active one keeps its own. */
const closedCircuitUnlessActive = {
  consecutiveFailures: sql`case when ${hooks.status} = 'active' then ${hooks.consecutiveFailures} else 0 end`,
  circuitOpenedAt: sql`case when ${hooks.status} = 'active' then ${hooks.circuitOpenedAt} end`,
  circuitProbeAt: sql`case when ${hooks.status} = 'active' then ${hooks.circuitProbeAt} end`,
}

/** A new target is a new receiver: its circuit starts closed. */
const closedCircuit = { consecutiveFailures: 0, circuitOpenedAt: null, circuitProbeAt: null }

/**
 * Changes the account's subscription, or 404. Whatever a change does to its queue (resumed,
 * re-enabled, a new target or rate limit), the claim works it out when the subscription is next
 * looked at: mark it due now, in the transaction of the change. After the subscription's row, as
 * the claim does too (src/delivery/store.ts): two transactions taking both never wait on each
 * other in a circle.
 */
async function changeOwnHook(db: Database, accountId: string, hookId: string, changes: PgUpdateSetSource<typeof hooks>): Promise<Hook> {
  const hook = await db.transaction(async (tx) => {
    const [updated] = await tx.update(hooks).set(changes).where(and(eq(hooks.id, hookId), eq(hooks.accountId, accountId))).returning()
    await tx.execute(markDue(sql`select id, account_id, ${targetOrigin(sql`target_url`)} from hooks where id = ${hookId} and account_id = ${accountId}`))
    return updated
  })
  if (!hook) throw noSuchHook(hookId)
  return hook
}

/**
 * Changes what the owner may change; the secret is kept. `paused` holds deliveries (they are
 * still recorded, src/messages/outbox.ts, and the claim leaves them be); `active` resumes a
 * paused subscription or re-enables a disabled one (as `enableHook`, its failure clock
 * restarts). A new target URL follows the same rules as at creation. A new filter applies to
 * events from the commit on; `filter: null` removes it, leaving it out keeps it.
 */
export async function updateHook(
  deps: Pick<HookDeps, 'db' | 'secretBox' | 'isForbiddenHost' | 'allowPrivateTargets'>,
  accountId: string,
  hookId: string,
  input: { target_url?: string; status?: 'active' | 'paused'; rate_limit_per_s?: number | null; filter?: HookFilter | null },
): Promise<Hook> {
  if (!isId('hook', hookId)) throw noSuchHook(hookId)
  // A filter's member is checked against the subscription's event, which no update changes; a target that is the one shown (`***` for its password) is the one stored, unchanged.
  const current = (input.filter !== undefined && input.filter !== null) || input.target_url?.includes('***') ? await getHook(deps.db, accountId, hookId) : undefined
  const newTarget = input.target_url === undefined || input.target_url === current?.targetUrl ? undefined : await withStoredSecret(deps.secretBox, input.target_url, current)
  const target = newTarget === undefined ? undefined : await sealedCredentials(deps.secretBox, checkTargetUrl(newTarget, deps))
  const targetUrl = target?.targetUrl
  const filterContacts = input.filter === undefined || input.filter === null ? input.filter : filterContactsOf(current!.event as EventType, input.filter)
  // The URL exactly as shown, and nothing else: nothing changes.
  if (target === undefined && input.rate_limit_per_s === undefined && filterContacts === undefined && input.status === undefined) return current ?? getHook(deps.db, accountId, hookId)
  try {
    return await changeOwnHook(deps.db, accountId, hookId, {
      ...(target === undefined ? {} : { ...target, ...closedCircuit }),
      ...(input.rate_limit_per_s === undefined ? {} : { rateLimitPerS: input.rate_limit_per_s }),
      ...(filterContacts === undefined ? {} : { filterContacts }),
      ...(input.status === undefined
        ? {}
        : {
            status: input.status,
            disabledReason: null,
            // The row's status before this update: a subscription that was not active starts a new failure clock.
            failingSince: sql`case when ${hooks.status} = 'active' then ${hooks.failingSince} end`,
            ...(targetUrl === undefined && input.status === 'active' ? closedCircuitUnlessActive : {}),
          }),
    })
  } catch (error) {
    if (isUniqueViolation(error)) throw new ApiError(409, 'conflict', `This account already has a subscription to this event for ${targetUrl}.`)
    throw error
  }
}
