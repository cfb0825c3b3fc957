import { eq } from 'drizzle-orm'
import { Value } from '@sinclair/typebox/value'
import type { Database } from '../lib/db/client.ts'
import { oauthClients } from '../lib/db/schema.ts'
import { OAuthError, describeSchemaViolation } from '../lib/http/errors.ts'
import { BodyTooLarge, TargetRefused, describeNetworkError, fetchPinned, isTimeout, readLimited, type OutboundPolicy } from '../lib/security/outbound.ts'
import { ClientLookupError, asClient, storedColumns, validateClientMetadata, type ClientMetadata, type ClientRegistrationRequestBody, type OAuthClient } from './client-model.ts'
import { ClientRegistrationRequest } from './schemas.ts'

/**
 * OAuth Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document; the MCP
 * authorization spec's preferred registration; docs/oauth.md#client-id-metadata-documents): a
 * `client_id` that is an https URL with a path names a JSON document of RFC 7591 client
 * metadata. The service fetches it through the outbound guard (src/lib/security/outbound.ts, the same
 * as webhooks), validates it with the registration rules, and caches the verdict.
 */

export const METADATA_DOCUMENT_TIMEOUT_MS = 5_000
export const METADATA_DOCUMENT_MAX_BYTES = 10 * 1024
/** A document is kept as its Cache-Control max-age says, within these bounds; no max-age (or no-store, no-cache): the lower one. */
export const DOCUMENT_CACHE_MIN_SECONDS = 60
export const DOCUMENT_CACHE_MAX_SECONDS = 24 * 3600
/**
 * A document that could not be used is not fetched again for this long: a client retrying
 * (or an authorize page reloaded) does not cost a fetch each time, and a fixed document is
 * seen again within seconds.
 */
export const FAILED_DOCUMENT_CACHE_SECONDS = 10
const MAX_CACHED_DOCUMENTS = 10_000
const USER_AGENT = 'messaging-service-oauth/0.1'

/** The client ids this module answers for; every other client_id is a registration's (`cli_…`). */
export const isMetadataDocumentClientId = (clientId: string) => /^https:\/\//i.test(clientId)

/**
 * Why `clientId` cannot name a metadata document, or null. The draft's rules (https, a path,
 * no fragment, no userinfo, no `.`/`..` segments), and one of ours: the URL is written as URL
 * parsers write it back (lower-case host, no default port, nothing percent-encoded twice ways),
 * so one document is one client, and the string compared with the document's `client_id` is
 * the one fetched.
 */
export function clientIdUrlProblem(clientId: string): string | null {
  let url: URL
  try {
    url = new URL(clientId)
  } catch {
    return 'is not a URL'
  }
  if (url.protocol !== 'https:') return 'must use https'
  if (clientId.includes('#')) return 'must not contain a fragment (#)'
  if (url.username || url.password) return 'must not contain userinfo (user@host)'
  if (url.pathname === '/') return 'must have a path (https://host/path/to/client.json), not just /'
  if (url.href !== clientId) return `must be written as ${url.href} (its normal form: lower-case host, no default port, no . or .. segments)`
  return null
}

/** Seconds to keep a document, from its Cache-Control, clamped to `bounds` ([60 s, 24 h] for client metadata documents). */
export function documentCacheSeconds(cacheControl: string | null, bounds = { min: DOCUMENT_CACHE_MIN_SECONDS, max: DOCUMENT_CACHE_MAX_SECONDS }): number {
  const maxAge = cacheControl ? /(?:^|,)\s*max-age\s*=\s*"?(\d+)"?\s*(?:,|$)/i.exec(cacheControl) : null
  const seconds = maxAge && !/(?:^|,)\s*(?:no-store|no-cache)\s*(?:,|$)/i.test(cacheControl!) ? Number(maxAge[1]) : 0
  return Math.min(bounds.max, Math.max(bounds.min, seconds))
}

const describeDuration = (ms: number) => (ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`)
const describeSize = (bytes: number) => (bytes % 1024 === 0 ? `${bytes / 1024} KB` : `${bytes} bytes`)
const quoted = (value: unknown) => {
  const text = JSON.stringify(value) ?? String(value)
  return text.length > 200 ? `${text.slice(0, 200)}…` : text
}

export interface FetchDocumentOptions {
  policy: OutboundPolicy
  timeoutMs?: number
  maxBytes?: number
}

/**
 * GETs a JSON document someone else publishes (a client metadata document, a client's JWKS)
 * through the outbound guard, within `timeoutMs` all in (the lookup, connecting, TLS, the
 * answer and its body) and `maxBytes`. Throws ClientLookupError, its message starting with
 * `at` and saying what is wrong in words the client's developer can act on.
 */
export async function fetchJsonDocument(
  url: string,
  options: { at: string; policy: OutboundPolicy; timeoutMs: number; maxBytes: number; redirectAdvice: string },
): Promise<{ document: unknown; cacheControl: string | null }> {
  const { at, timeoutMs, maxBytes } = options
  const signal = AbortSignal.timeout(timeoutMs)
  const networkFailure = (error: unknown) => {
    if (error instanceof ClientLookupError) return error
    if (error instanceof TargetRefused) return new ClientLookupError(`${at} cannot be fetched: ${error.message}.`)
    if (isTimeout(error)) return new ClientLookupError(`${at} did not answer within ${describeDuration(timeoutMs)}.`)
    return new ClientLookupError(`${at} could not be fetched (${describeNetworkError(error, timeoutMs)}).`)
  }

  let response: Response
  try {
    response = await fetchPinned(new URL(url), { method: 'GET', headers: { accept: 'application/json', 'user-agent': USER_AGENT } }, options.policy, signal)
  } catch (error) {
    throw networkFailure(error)
  }
  if (response.status !== 200) {
    await response.body?.cancel().catch(() => {})
    if (response.status >= 300 && response.status < 400) {
      const location = response.headers.get('location')
      throw new ClientLookupError(`${at} answered HTTP ${response.status}${location ? ` (a redirect to ${location.slice(0, 200)})` : ''}; redirects are not followed: ${options.redirectAdvice}.`)
    }
    throw new ClientLookupError(`${at} answered HTTP ${response.status}, not 200.`)
  }
  let bytes: Uint8Array
  try {
    bytes = await readLimited(response, maxBytes)
  } catch (error) {
    if (error instanceof BodyTooLarge) throw new ClientLookupError(`${at} is larger than ${describeSize(maxBytes)}.`)
    throw networkFailure(error)
  }
  try {
    return { document: JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)), cacheControl: response.headers.get('cache-control') }
  } catch (error) {
    throw new ClientLookupError(`${at} is not JSON (${error instanceof SyntaxError ? error.message.slice(0, 200) : 'not UTF-8'}).`)
  }
}

/**
 * Fetches and validates the document `url` names (a client id clientIdUrlProblem accepted).
 * Throws ClientLookupError with what is wrong.
 */
export async function fetchMetadataDocument(url: string, options: FetchDocumentOptions): Promise<{ metadata: ClientMetadata; maxAgeSeconds: number }> {
  const { document, cacheControl } = await fetchJsonDocument(url, {
    at: `The client metadata document at ${url}`,
    policy: options.policy,
    timeoutMs: options.timeoutMs ?? METADATA_DOCUMENT_TIMEOUT_MS,
    maxBytes: options.maxBytes ?? METADATA_DOCUMENT_MAX_BYTES,
    redirectAdvice: 'serve the document at its client_id URL itself',
  })
  return { metadata: validateMetadataDocument(url, document), maxAgeSeconds: documentCacheSeconds(cacheControl) }
}

/**
 * The draft's rules and the registration rules (src/oauth/client-model.ts, the same functions
 * POST /auth/register runs) applied to a fetched document; its metadata with the registration
 * defaults, or ClientLookupError.
 */
export function validateMetadataDocument(url: string, document: unknown): ClientMetadata {
  const at = `The client metadata document at ${url}`
  if (typeof document !== 'object' || document === null || Array.isArray(document)) throw new ClientLookupError(`${at} is not a JSON object.`)
  const fields = document as Record<string, unknown>
  if (fields.client_id === undefined) throw new ClientLookupError(`${at} has no client_id; it must say client_id ${quoted(url)}, its own URL.`)
  if (fields.client_id !== url) throw new ClientLookupError(`${at} says client_id ${quoted(fields.client_id)}, not its own URL.`)
  if (fields.client_secret !== undefined || fields.client_secret_expires_at !== undefined) {
    throw new ClientLookupError(`${at} contains a client secret; a metadata document describes a public client and holds no secret.`)
  }
  const method = fields.token_endpoint_auth_method
  if (method !== undefined && method !== 'none') {
    throw new ClientLookupError(
      `${at} asks for token_endpoint_auth_method ${quoted(method)}; a metadata document describes a public client (confidential clients register with POST /auth/register): leave it out or say "none".`,
    )
  }
  if (fields.redirect_uris === undefined) throw new ClientLookupError(`${at} has no redirect_uris.`)
  // A document is written once for every server its client talks to: it may list grants this one
  // does not offer (VS Code's lists device_code, claude.ai's jwt-bearer). Those are ignored, as
  // other authorization servers do; authorization_code must still be there.
  if (Array.isArray(fields.grant_types)) {
    const offered = fields.grant_types.filter((grant) => grant === 'authorization_code' || grant === 'refresh_token')
    fields.grant_types = offered.length > 0 ? offered : fields.grant_types
  }
  const violation = Value.Errors(ClientRegistrationRequest, fields).First()
  if (violation) {
    const field = violation.path.replace(/^\//, '') || 'document'
    throw new ClientLookupError(`${at} is not valid client metadata: ${field}: ${describeSchemaViolation(violation)}.`)
  }
  try {
    return validateClientMetadata(fields as ClientRegistrationRequestBody)
  } catch (error) {
    if (error instanceof OAuthError) throw new ClientLookupError(`${at} is not valid client metadata: ${error.description}`)
    throw error
  }
}

export interface MetadataDocumentClientsOptions {
  /** WEBHOOK_ALLOW_PRIVATE_TARGETS and WEBHOOK_CA_FILE: the same rules as webhook deliveries. */
  policy: OutboundPolicy
  timeoutMs?: number
  maxBytes?: number
  now?: () => number
}

type Verdict = { client: OAuthClient; expiresAt: number } | { error: string; expiresAt: number }

/**
 * The document clients of one process: each document fetched at most once per cache lifetime
 * (concurrent lookups share one fetch), its verdict, good or bad, kept in memory. Other
 * instances fetch for themselves: nothing here is needed for correctness.
 *
 * A document client has a row in oauth_clients (keyed by its URL) from the first time a user
 * approves it, because grants and authorization codes reference clients by foreign key; the row
 * is refreshed whenever the document is fetched again. Looking a document up writes nothing new:
 * an unauthenticated GET /auth/authorize cannot fill the table.
 */
export function createMetadataDocumentClients(db: Database, options: MetadataDocumentClientsOptions) {
  const now = options.now ?? Date.now
  const verdicts = new Map<string, Verdict>()
  const loading = new Map<string, Promise<Verdict>>()

  async function load(url: string): Promise<Verdict> {
    let verdict: Verdict
    try {
      const { metadata, maxAgeSeconds } = await fetchMetadataDocument(url, options)
      const client = asClient(url, metadata, new Date(now()))
      // The row, if a user approved this client before, follows the document.
      const [stored] = await db.update(oauthClients).set(storedColumns(client)).where(eq(oauthClients.id, url)).returning({ createdAt: oauthClients.createdAt })
      if (stored) client.createdAt = stored.createdAt
      verdict = { client, expiresAt: now() + maxAgeSeconds * 1000 }
    } catch (error) {
      if (!(error instanceof ClientLookupError)) throw error
      verdict = { error: error.message, expiresAt: now() + FAILED_DOCUMENT_CACHE_SECONDS * 1000 }
    }
    verdicts.delete(url)
    if (verdicts.size >= MAX_CACHED_DOCUMENTS) verdicts.delete(verdicts.keys().next().value!)
    verdicts.set(url, verdict)
    return verdict
  }

  return {
    /** The client the document at `url` describes, or ClientLookupError saying why there is none. */
    async find(url: string): Promise<OAuthClient> {
      const problem = clientIdUrlProblem(url)
      if (problem) throw new ClientLookupError(`The client_id ${quoted(url)} is read as a client metadata document URL, and it ${problem}.`)
      let verdict = verdicts.get(url)
      if (!verdict || verdict.expiresAt <= now()) {
        let pending = loading.get(url)
        if (!pending) {
          pending = load(url).finally(() => loading.delete(url))
          loading.set(url, pending)
        }
        verdict = await pending
      }
      if ('error' in verdict) throw new ClientLookupError(verdict.error)
      return verdict.client
    },

    /** Writes (or refreshes) the client's row, before an authorization code references it. */
    async record(client: OAuthClient): Promise<void> {
      await db
        .insert(oauthClients)
        .values({ id: client.id, ...storedColumns(client) })
        .onConflictDoUpdate({ target: oauthClients.id, set: storedColumns(client) })
    },
  }
}
