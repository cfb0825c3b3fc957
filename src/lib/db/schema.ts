import { sql } from 'drizzle-orm'
import { type AnyPgColumn, bigint, boolean, customType, index, integer, jsonb, pgTable, primaryKey, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'

/** A 64-bit transaction id (PostgreSQL's xid8), read and written as its decimal text. */
const xid8 = customType<{ data: string }>({ dataType: () => 'xid8' })

const createdAt = () => timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow()

/**
 * An id, or a column that holds one: compared byte by byte (the C collation), whatever the
 * database's default. Keyset pages, events/poll positions and the delivery claim compare ids
 * with < and >; under a natural-language collation (ICU `en-US`, glibc `en_US`: the default of
 * many managed PostgreSQL services) punctuation sorts apart from letters and digits, so the
 * order of ids would depend on where the service runs (docs/architecture.md#ids).
 */
const idText = customType<{ data: string }>({ dataType: () => 'text collate "C"' })

/** The id of the row this one belongs to: deleting that row deletes this one. */
const ownerId = <Name extends string>(name: Name, owner: () => AnyPgColumn) => idText(name).notNull().references(owner, { onDelete: 'cascade' })

export const accounts = pgTable('accounts', {
  id: idText('id').primaryKey(),
  name: text('name').notNull(),
  createdAt: createdAt(),
})

export const users = pgTable(
  'users',
  {
    id: idText('id').primaryKey(),
    accountId: ownerId('account_id', () => accounts.id),
    /** Stored lower-cased: sign-in by email is case-insensitive. */
    email: text('email').notNull(),
    passwordHash: text('password_hash').notNull(),
    createdAt: createdAt(),
  },
  (table) => [uniqueIndex('users_email_key').on(table.email), index('users_account_id_idx').on(table.accountId)],
)

export const apiKeys = pgTable(
  'api_keys',
  {
    id: idText('id').primaryKey(),
    accountId: ownerId('account_id', () => accounts.id),
    name: text('name'),
    /** The first characters of the secret, shown in listings so a key can be recognised. */
    secretPrefix: text('secret_prefix').notNull(),
    /** SHA-256 of the whole secret; the secret itself is never stored. */
    secretHash: text('secret_hash').notNull(),
    createdAt: createdAt(),
    revokedAt: timestamp('revoked_at', { withTimezone: true, mode: 'date' }),
    /** The last authenticated call with it, written at most once a minute per instance (src/auth/usage.ts). */
    lastUsedAt: timestamp('last_used_at', { withTimezone: true, mode: 'date' }),
  },
  (table) => [uniqueIndex('api_keys_secret_hash_key').on(table.secretHash), index('api_keys_account_id_idx').on(table.accountId)],
)

/**
 * One row per change to something instances hold in memory (a revoked API key, a renamed
 * account), so that every instance evicts it within seconds (src/lib/cache/invalidation-feed.ts).
 * Rows older than the feed's look-back window are never read again.
 */
export const cacheInvalidations = pgTable(
  'cache_invalidations',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    kind: text('kind').notNull(),
    subjectId: idText('subject_id').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' })
      .notNull()
      .default(sql`clock_timestamp()`),
  },
  (table) => [index('cache_invalidations_created_at_idx').on(table.createdAt)],
)

/**
 * RFC 7591 registrations: public clients (`token_endpoint_auth_method: none`) and confidential
 * ones (`client_secret_basic`, `client_secret_post`, `private_key_jwt`; docs/oauth.md#confidential-clients).
 */
export const oauthClients = pgTable('oauth_clients', {
  id: idText('id').primaryKey(),
  clientName: text('client_name'),
  redirectUris: text('redirect_uris').array().notNull(),
  grantTypes: text('grant_types').array().notNull(),
  responseTypes: text('response_types').array().notNull(),
  tokenEndpointAuthMethod: text('token_endpoint_auth_method').notNull(),
  applicationType: text('application_type').notNull(),
  /** The scope registered; requests without `scope` get this one. */
  scope: text('scope'),
  /** SHA-256 of the client secret (`client_secret_basic`, `client_secret_post`): the secret itself is shown once, at registration. */
  clientSecretHash: text('client_secret_hash'),
  /** `private_key_jwt`: the client's public keys (RFC 7591 `jwks`, public members only), or where it publishes them (`jwks_uri`). */
  jwks: jsonb('jwks'),
  jwksUri: text('jwks_uri'),
  createdAt: createdAt(),
})

/**
 * Token signing keys (ES256). The private JWK is stored encrypted with ENCRYPTION_KEY; a
 * retired key stops signing but stays published until every token it signed has expired.
 */
export const signingKeys = pgTable(
  'signing_keys',
  {
    kid: text('kid').primaryKey(),
    alg: text('alg').notNull(),
    publicJwk: jsonb('public_jwk').notNull(),
    privateJwkCiphertext: text('private_jwk_ciphertext').notNull(),
    createdAt: createdAt(),
    retiredAt: timestamp('retired_at', { withTimezone: true, mode: 'date' }),
  },
  // At most one key signs at a time, whatever the number of instances starting together.
  (table) => [uniqueIndex('signing_keys_one_active').on(sql`(true)`).where(sql`${table.retiredAt} is null`)],
)

/** A user's consent to a client: every token issued from one authorization belongs to one grant. */
export const grants = pgTable(
  'grants',
  {
    id: idText('id').primaryKey(),
    clientId: ownerId('client_id', () => oauthClients.id),
    userId: ownerId('user_id', () => users.id),
    accountId: ownerId('account_id', () => accounts.id),
    scope: text('scope').notNull(),
    audience: text('audience').array().notNull(),
    createdAt: createdAt(),
    revokedAt: timestamp('revoked_at', { withTimezone: true, mode: 'date' }),
    revokedReason: text('revoked_reason'),
    /** The last authenticated call with one of its access tokens, written at most once a minute per instance (src/auth/usage.ts). */
    lastUsedAt: timestamp('last_used_at', { withTimezone: true, mode: 'date' }),
    /**
     * Set on a grant made by an enterprise identity provider's ID-JAG (docs/oauth.md#enterprise-managed-authorization-cross-app-access):
     * removing the provider, or the user's subject link, revokes it. Its exchanges reuse it while it works.
     */
    identityProviderId: idText('identity_provider_id').references(() => identityProviders.id, { onDelete: 'set null' }),
  },
  (table) => [
    // The Connected apps list reads an account's grants.
    index('grants_user_id_idx').on(table.userId),
    index('grants_account_id_idx').on(table.accountId),
    // One working grant per provider, user and client: every ID-JAG exchange of an agent lands on it.
    uniqueIndex('grants_identity_provider_user_client_key')
      .on(table.identityProviderId, table.userId, table.clientId)
      .where(sql`${table.identityProviderId} is not null and ${table.revokedAt} is null`),
  ],
)

/**
 * Enterprise identity providers an account trusts to vouch for its users with ID-JAGs
 * (src/identity-providers/, docs/oauth.md#enterprise-managed-authorization-cross-app-access).
 */
export const identityProviders = pgTable(
  'identity_providers',
  {
    id: idText('id').primaryKey(),
    accountId: ownerId('account_id', () => accounts.id),
    /** Compared character for character with an ID-JAG's `iss`. */
    issuer: text('issuer').notNull(),
    jwksUri: text('jwks_uri').notNull(),
    /** Our OAuth clients (their `client_id`s) that may present this provider's ID-JAGs. */
    allowedClientIds: text('allowed_client_ids').array().notNull(),
    /** How an ID-JAG's subject becomes a user of the account: `email` (its `email` claim) or `subject` (a link in identity_provider_subjects). */
    subjectMapping: text('subject_mapping').notNull(),
    createdAt: createdAt(),
  },
  (table) => [
    uniqueIndex('identity_providers_account_issuer_key').on(table.accountId, table.issuer),
    // An ID-JAG names its issuer; every account that trusts it is a candidate.
    index('identity_providers_issuer_idx').on(table.issuer),
  ],
)

/** An identity provider's subject (`sub`) linked to a user of its account, for providers that map users by subject. */
export const identityProviderSubjects = pgTable(
  'identity_provider_subjects',
  {
    id: idText('id').primaryKey(),
    identityProviderId: ownerId('identity_provider_id', () => identityProviders.id),
    subject: text('subject').notNull(),
    userId: ownerId('user_id', () => users.id),
    createdAt: createdAt(),
  },
  (table) => [uniqueIndex('identity_provider_subjects_subject_key').on(table.identityProviderId, table.subject)],
)

/** Authorization codes (60 s, single use); stored as SHA-256. */
export const authorizationCodes = pgTable('authorization_codes', {
  codeHash: text('code_hash').primaryKey(),
  clientId: ownerId('client_id', () => oauthClients.id),
  userId: ownerId('user_id', () => users.id),
  accountId: idText('account_id').notNull(),
  redirectUri: text('redirect_uri').notNull(),
  codeChallenge: text('code_challenge').notNull(),
  scope: text('scope').notNull(),
  audience: text('audience').array().notNull(),
  expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
  redeemedAt: timestamp('redeemed_at', { withTimezone: true, mode: 'date' }),
  /** The grant its redemption created: revoked if the code is presented again. */
  grantId: idText('grant_id'),
  createdAt: createdAt(),
})

/**
 * Refresh tokens (opaque, stored as SHA-256), rotated on every use. A rotated token keeps its
 * successor's token response, encrypted, for OAUTH_REFRESH_GRACE_S so that concurrent refreshes
 * get the same pair; then it is erased (src/oauth/grants/refresh-token.ts), since it holds a
 * live refresh token.
 */
export const refreshTokens = pgTable(
  'refresh_tokens',
  {
    tokenHash: text('token_hash').primaryKey(),
    grantId: ownerId('grant_id', () => grants.id),
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
    rotatedAt: timestamp('rotated_at', { withTimezone: true, mode: 'date' }),
    successorCiphertext: text('successor_ciphertext'),
    /** The DPoP key (RFC 7638 thumbprint) a public client's refresh token is bound to (RFC 9449 §5); null: unbound. */
    dpopJkt: text('dpop_jkt'),
    createdAt: createdAt(),
  },
  (table) => [
    index('refresh_tokens_grant_id_idx').on(table.grantId),
    // The successors still kept: what the erasure sweep looks for, without scanning every token.
    index('refresh_tokens_sealed_successor_idx').on(table.rotatedAt).where(sql`${table.successorCiphertext} is not null`),
  ],
)

/** Fixed-window counters shared by every instance (src/lib/db/rate-limits.ts): sign-in failures, registrations per IP, failed MCP callback verifications per grant. */
export const rateLimits = pgTable('rate_limits', {
  key: text('key').primaryKey(),
  windowStartedAt: timestamp('window_started_at', { withTimezone: true, mode: 'date' }).notNull(),
  count: integer('count').notNull(),
})

/**
 * Token identifiers (`jti`) already accepted, kept until the token they came in expires, shared by
 * every instance (src/lib/security/jti-replay.ts): a client assertion, an ID-JAG or a DPoP proof
 * is accepted once, whichever instance sees it first.
 */
export const usedJtis = pgTable(
  'used_jtis',
  {
    /** Whose identifiers these are: a client's assertions, an identity provider's ID-JAGs, a DPoP key's proofs. */
    namespace: text('namespace').notNull(),
    jti: text('jti').notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
  },
  (table) => [primaryKey({ columns: [table.namespace, table.jti] }), index('used_jtis_expires_at_idx').on(table.expiresAt)],
)

/**
 * Webhook subscriptions: one event type to one HTTPS address. The signing secret must be read
 * back to sign deliveries, so it is sealed with ENCRYPTION_KEY, never stored in clear.
 */
export const hooks = pgTable(
  'hooks',
  {
    id: idText('id').primaryKey(),
    accountId: ownerId('account_id', () => accounts.id),
    event: text('event').notNull(),
    /** As the owner sees it: a broker URL's password shown as `***` (docs/webhooks.md#destinations). */
    targetUrl: text('target_url').notNull(),
    /** A broker URL that carries credentials, sealed (src/lib/security/secret-box.ts): what the delivery worker connects with. */
    targetCredentialsCiphertext: text('target_credentials_ciphertext'),
    status: text('status').notNull().default('active'),
    disabledReason: text('disabled_reason'),
    /** docs/webhooks.md#signatures: `hmac` (a shared whsec_ secret) or `ed25519` (a key pair); never changes. */
    signatureScheme: text('signature_scheme').notNull().default('hmac'),
    /** The signing key, sealed: a whsec_ secret, or the whsk_ private key of an ed25519 subscription. */
    secretCiphertext: text('secret_ciphertext').notNull(),
    /** The signing key a rotation replaced: deliveries are signed with both until it expires. */
    previousSecretCiphertext: text('previous_secret_ciphertext'),
    previousSecretExpiresAt: timestamp('previous_secret_expires_at', { withTimezone: true, mode: 'date' }),
    /** An ed25519 subscription's whpk_ public key (public: stored as it is); null for hmac. */
    publicKey: text('public_key'),
    /** The public key of the private key in previous_secret_ciphertext, shown until it expires. */
    previousPublicKey: text('previous_public_key'),
    /** Start of the current run of failed attempts; null after any success. Five days of it disable the hook. */
    failingSince: timestamp('failing_since', { withTimezone: true, mode: 'date' }),
    /** docs/webhooks.md#how-fast-we-send-concurrency-and-fairness: at most this many attempts start in each clock second, across every process; null: no limit. */
    rateLimitPerS: integer('rate_limit_per_s'),
    /** The second the attempts counted in `rateWindowCount` started in. */
    rateWindowStartedAt: timestamp('rate_window_started_at', { withTimezone: true, mode: 'date' }),
    rateWindowCount: integer('rate_window_count').notNull().default(0),
    /** The receiver asked for a pause (429 or 503 with Retry-After): nothing is sent to it before this. */
    throttledUntil: timestamp('throttled_until', { withTimezone: true, mode: 'date' }),
    /** Contact numbers this subscription is narrowed to (docs/api.md#filters); null: every event of its type. */
    filterContacts: text('filter_contacts').array(),
    /** Failed attempts in a row (no answer, 5xx, 429) since the last success: the circuit breaker's count (src/delivery/circuit.ts). */
    consecutiveFailures: integer('consecutive_failures').notNull().default(0),
    /** When the circuit opened; null while it is closed. */
    circuitOpenedAt: timestamp('circuit_opened_at', { withTimezone: true, mode: 'date' }),
    /** While open: when the next probe may start. */
    circuitProbeAt: timestamp('circuit_probe_at', { withTimezone: true, mode: 'date' }),
    /**
     * Set on an agent's MCP event subscription (docs/mcp.md#events): the grant it acts for. Such a row is
     * delivered exactly as a REST subscription but is not one of the account's webhooks (GET …/hooks lists
     * none of them); its id is derived from (grant, callback URL, event, arguments), as the Events extension asks.
     */
    grantId: idText('grant_id').references(() => grants.id, { onDelete: 'cascade' }),
    /** An MCP event subscription's arguments, canonical JSON (its filter is in filter_contacts). */
    eventArguments: text('event_arguments'),
    /** An MCP event subscription's granted lifetime: nothing is delivered after it, and it is deleted. Null: no expiry. */
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }),
    createdAt: createdAt(),
  },
  (table) => [
    uniqueIndex('hooks_account_event_target_key').on(table.accountId, table.event, table.targetUrl).where(sql`${table.grantId} is null`),
    index('hooks_account_id_idx').on(table.accountId, table.id),
    index('hooks_grant_id_idx').on(table.grantId).where(sql`${table.grantId} is not null`),
  ],
)

/**
 * docs/api.md#idempotency: the first response to a POST with an Idempotency-Key, replayed for 24 h. The
 * response is sealed (it may hold a secret shown once, like a webhook signing secret).
 */
export const idempotencyKeys = pgTable(
  'idempotency_keys',
  {
    accountId: ownerId('account_id', () => accounts.id),
    key: text('key').notNull(),
    requestHash: text('request_hash').notNull(),
    /** Null while the first request is still running. */
    responseStatus: integer('response_status'),
    responseCiphertext: text('response_ciphertext'),
    createdAt: createdAt(),
  },
  (table) => [primaryKey({ columns: [table.accountId, table.key] }), index('idempotency_keys_created_at_idx').on(table.createdAt)],
)

/** Messages sent through the API and replies from contacts (docs/api.md#messages-and-events). */
export const messages = pgTable(
  'messages',
  {
    id: idText('id').primaryKey(),
    accountId: ownerId('account_id', () => accounts.id),
    direction: text('direction').notNull(),
    /** The other party: the recipient of an outbound message, the sender of an inbound one. */
    contact: text('contact').notNull(),
    body: text('body').notNull(),
    status: text('status').notNull(),
    error: text('error'),
    createdAt: createdAt(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    /** The W3C traceparent of the span that accepted it, when traces are on: its dispatch continues that trace, in whichever process (docs/operations.md#traces). */
    traceContext: text('trace_context'),
    /**
     * While in the future, a live process is dispatching this queued message (its settlement may wait in its account's
     * lane behind a wide fan-out), and no other process's catch-up takes it: set when the catch-up takes it, renewed
     * while it waits, before it lapses (src/messages/service.ts, renewDispatchLeases).
     */
    dispatchLeaseUntil: timestamp('dispatch_lease_until', { withTimezone: true, mode: 'date' }),
  },
  (table) => [index('messages_account_id_idx').on(table.accountId, table.id), index('messages_queued_idx').on(table.createdAt).where(sql`${table.status} = 'queued'`)],
)

/**
 * Every event, as the exact JSON body its deliveries send (built once, so every retry and
 * every subscriber gets the same bytes). Also the reconciliation log of GET /events.
 */
export const events = pgTable(
  'events',
  {
    id: idText('id').primaryKey(),
    accountId: ownerId('account_id', () => accounts.id),
    type: text('type').notNull(),
    payload: text('payload').notNull(),
    /** An example sent by POST …/hooks/{hook_id}/test: its delivery is shown in the log, never in GET /events. */
    test: boolean('test').notNull().default(false),
    /** The message's contact (`to` of delivered and failed, `from` of inbound): what filters match, read by events/poll without the payload. */
    contact: text('contact'),
    /**
     * The transaction that wrote it. MCP `events/poll` reads the log in this order up to the oldest
     * transaction still running, so an event that commits late is never passed over (src/mcp/event-poll.ts).
     */
    xact: xid8('xact').notNull().default(sql`pg_current_xact_id()`),
    /** The W3C traceparent of the span that wrote it, when traces are on: every delivery attempt is a span of that trace, however much later (docs/operations.md#traces). */
    traceContext: text('trace_context'),
    createdAt: createdAt(),
  },
  (table) => [
    index('events_account_id_idx').on(table.accountId, table.id),
    // events/poll reads positions and contacts from the index alone, and only the payloads it answers (src/mcp/event-poll.ts).
    index('events_poll_idx').on(table.accountId, table.type, table.xact, table.id, table.contact).where(sql`not ${table.test}`),
  ],
)

/** The outbox: one row per (event, subscription), written in the event's transaction. */
export const deliveries = pgTable(
  'deliveries',
  {
    id: idText('id').primaryKey(),
    eventId: ownerId('event_id', () => events.id),
    // Deleting a subscription deletes its pending deliveries: they are cancelled.
    hookId: ownerId('hook_id', () => hooks.id),
    /** pending, delivered, failed, or canceled (its subscription was disabled while it waited: POST …/recover sends it again). */
    status: text('status').notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    leasedUntil: timestamp('leased_until', { withTimezone: true, mode: 'date' }),
    createdAt: createdAt(),
  },
  (table) => [
    // The claim walks the subscriptions with pending deliveries and reads the head of each one's queue (src/delivery/store.ts).
    index('deliveries_pending_idx').on(table.hookId, table.nextAttemptAt).where(sql`${table.status} = 'pending'`),
    index('deliveries_hook_id_idx').on(table.hookId, table.id),
    // Deleting an expired event (src/delivery/retention.ts) finds its deliveries by this.
    index('deliveries_event_id_idx').on(table.eventId),
    // The claim counts each subscription's deliveries in flight: only leased rows are indexed.
    index('deliveries_leased_idx').on(table.hookId).where(sql`${table.leasedUntil} is not null`),
    // GET …/deliveries?state=failed (or canceled) reads only those: 1 % of a long history, found without walking the rest.
    index('deliveries_failed_idx').on(table.hookId, table.id).where(sql`${table.status} in ('failed', 'canceled')`),
  ],
)

/**
 * The delivery queue's index of subscriptions: one row per subscription that may have work, with
 * the time its next delivery may be claimed. The claim reads due subscriptions from here, so its
 * cost follows the work it takes, not the number of subscriptions or the history of deliveries
 * (src/delivery/store.ts, docs/architecture.md#webhook-delivery).
 */
export const hookQueues = pgTable(
  'hook_queues',
  {
    hookId: idText('hook_id')
      .primaryKey()
      .references(() => hooks.id, { onDelete: 'cascade' }),
    /**
     * The subscription's account (a subscription never changes account, so the copy never goes stale): the claim
     * passes over a due row whose account has no room without reading its subscription (src/delivery/store.ts).
     */
    accountId: idText('account_id').notNull(),
    /**
     * Where its deliveries go: the target's scheme, host and port (src/delivery/queue.ts, `targetOrigin`), kept by
     * every writer that marks it due (a new target is marked due in its own transaction). The claim bounds the
     * attempts in flight to an origin that has not answered lately without reading the subscription
     * (docs/webhooks.md#when-an-endpoint-keeps-failing).
     */
    origin: text('origin').notNull(),
    /** Writers that add claimable work only ever bring it earlier; only the claim moves it later. Null: nothing to send. */
    dueAt: timestamp('due_at', { withTimezone: true, mode: 'date' }),
  },
  (table) => [index('hook_queues_due_idx').on(table.dueAt).where(sql`${table.dueAt} is not null`)],
)

/**
 * An event whose deliveries are not all written yet: a wide fan-out is written a chunk of
 * subscriptions at a time, each chunk a statement that commits on its own, in subscription id
 * order after `afterHookId` (src/messages/fan-out.ts). The row goes with its last chunk; one left
 * behind by a stopped process is resumed by the catch-up. Its event is always committed with it.
 */
export const fanOuts = pgTable(
  'fan_outs',
  {
    eventId: idText('event_id')
      .primaryKey()
      .references(() => events.id, { onDelete: 'cascade' }),
    accountId: idText('account_id').notNull(),
    /** The last subscription a chunk wrote the event's delivery for. */
    afterHookId: idText('after_hook_id').notNull(),
    /** When the last chunk was written: a fan-out that has not moved for a while is resumed by the catch-up. */
    movedAt: timestamp('moved_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (table) => [index('fan_outs_moved_at_idx').on(table.movedAt)],
)

/** Every attempt of every delivery (GET …/deliveries/{delivery_id}). */
export const deliveryAttempts = pgTable(
  'delivery_attempts',
  {
    id: idText('id').primaryKey(),
    deliveryId: ownerId('delivery_id', () => deliveries.id),
    hookId: ownerId('hook_id', () => hooks.id),
    eventId: idText('event_id').notNull(),
    attemptedAt: timestamp('attempted_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    statusCode: integer('status_code'),
    durationMs: integer('duration_ms').notNull(),
    error: text('error'),
    /** The first 4 KB of the receiver's answer. */
    responseSnippet: text('response_snippet').notNull(),
  },
  (table) => [
    index('delivery_attempts_hook_id_idx').on(table.hookId, table.id),
    // A delivery's attempts in order (GET …/deliveries/{id}, its last attempt in lists); deleting an expired delivery finds them by it too.
    index('delivery_attempts_delivery_id_idx').on(table.deliveryId, table.id),
  ],
)

/**
 * A closed bucket's latency percentiles, stored once it can no longer change so that a read of a
 * thousand buckets need not fetch their histograms; null while open, and set back to null by a
 * late commit into it (src/stats/closing.ts).
 */
const closedPercentiles = () => ({
  p50Ms: integer('p50_ms'),
  p95Ms: integer('p95_ms'),
  p99Ms: integer('p99_ms'),
})

/**
 * Rollups of delivery attempts per subscription, per minute, hour and day (UTC), written in the
 * statement that records the attempts (src/stats/rollups.ts), so that they commit with the attempt
 * log or not at all. GET …/hooks/{hook_id}/stats reads at most 1,440 of them (docs/api.md#health-over-time).
 */
export const hookStats = pgTable(
  'hook_stats',
  {
    hookId: ownerId('hook_id', () => hooks.id),
    /** minute, hour or day. */
    unit: text('unit').notNull(),
    /** The bucket's first instant, UTC. */
    bucket: timestamp('bucket', { withTimezone: true, mode: 'date' }).notNull(),
    attempts: integer('attempts').notNull(),
    succeeded: integer('succeeded').notNull(),
    /** Failed attempts by reason: { "timeout": 3, "http_5xx": 1 } (src/delivery/send.ts, FailureReason). */
    failures: jsonb('failures').notNull(),
    /** Attempt durations as a histogram: { "<bucket index>": count } (src/stats/histogram.ts). */
    latency: jsonb('latency').notNull(),
    ...closedPercentiles(),
  },
  (table) => [
    primaryKey({ columns: [table.hookId, table.unit, table.bucket] }),
    // Retention deletes the buckets older than the attempt log it keeps (src/delivery/retention.ts).
    index('hook_stats_bucket_idx').on(table.bucket),
  ],
)

/**
 * The same per account, all its subscriptions together, with its messages and events
 * (src/stats/rollups.ts). Each kind of writer has rows of its own (`kind`): recording attempts,
 * accepting messages and storing events each rewrite their row many times a second, and would
 * otherwise wait on each other's row locks. Once the bucket has closed nobody does, and its rows
 * become one (src/stats/closing.ts).
 */
export const accountStats = pgTable(
  'account_stats',
  {
    accountId: ownerId('account_id', () => accounts.id),
    unit: text('unit').notNull(),
    bucket: timestamp('bucket', { withTimezone: true, mode: 'date' }).notNull(),
    /** attempts, messages or events: which statement writes the row; closed: all three, merged once the bucket closed (src/stats/closing.ts). */
    kind: text('kind').notNull(),
    attempts: integer('attempts').notNull().default(0),
    succeeded: integer('succeeded').notNull().default(0),
    failures: jsonb('failures').notNull().default({}),
    latency: jsonb('latency').notNull().default({}),
    ...closedPercentiles(),
    /** Outbound messages accepted (POST …/messages). */
    messagesSent: integer('messages_sent').notNull().default(0),
    /** Events stored by type: { "message.delivered": 12 } (test events are not counted). */
    events: jsonb('events').notNull().default({}),
  },
  (table) => [primaryKey({ columns: [table.accountId, table.unit, table.bucket, table.kind] }), index('account_stats_bucket_idx').on(table.bucket)],
)
