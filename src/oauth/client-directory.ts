import { eq } from 'drizzle-orm'
import type { Database } from '../lib/db/client.ts'
import { oauthClients } from '../lib/db/schema.ts'
import { isId } from '../lib/db/ids.ts'
import { TtlCache } from '../lib/cache/ttl-cache.ts'
import type { OutboundPolicy } from '../lib/security/outbound.ts'
import type { OAuthClient } from './client-model.ts'
import { createMetadataDocumentClients, isMetadataDocumentClientId } from './client-metadata-document.ts'
import { createClientKeySets, type ClientKeySets } from './client-keys.ts'

/**
 * Where the OAuth endpoints look clients up: `find` answers null for a client that does not
 * exist, and throws ClientLookupError for one that names itself but cannot be used; `keysOf`
 * gives a `private_key_jwt` client's public keys (client-keys.ts).
 */
export interface ClientDirectory extends ClientKeySets {
  find(clientId: string | undefined): Promise<OAuthClient | null>
  /**
   * Makes sure a client `find` returned has its row before something references it (an
   * authorization code, a grant): a metadata document's client gets its row when a user first
   * approves it. Registered clients have theirs already.
   */
  record(client: OAuthClient): Promise<void>
}

export interface ClientDirectoryOptions {
  /** How client ID metadata documents and `jwks_uri` key sets are fetched: WEBHOOK_ALLOW_PRIVATE_TARGETS and WEBHOOK_CA_FILE apply, as to webhooks. */
  outbound: OutboundPolicy
  /** How long a document may take, all in (5 s). */
  documentTimeoutMs?: number
  /** How long a key set may take, all in (5 s). */
  jwksTimeoutMs?: number
  now?: () => number
}

/**
 * The clients of a database: registrations (`cli_…`) and, for a client_id that is an https
 * URL, the client its metadata document describes. Registrations never change once made (there
 * is no update or delete), so one read once is good for the life of the process; unknown ids
 * are not remembered. Documents and `jwks_uri` key sets are cached as their Cache-Control says
 * (client-metadata-document.ts, client-keys.ts).
 */
export function createClientDirectory(db: Database, options: ClientDirectoryOptions): ClientDirectory {
  const clients = new TtlCache<OAuthClient>({ maxEntries: 10_000, ttlMs: 60 * 60_000 })
  const documents = createMetadataDocumentClients(db, { policy: options.outbound, timeoutMs: options.documentTimeoutMs, now: options.now })
  const keySets = createClientKeySets({ policy: options.outbound, timeoutMs: options.jwksTimeoutMs, now: options.now })
  return {
    keysOf: keySets.keysOf,
    async find(clientId) {
      if (!clientId) return null
      if (isMetadataDocumentClientId(clientId)) return documents.find(clientId)
      if (!isId('cli', clientId)) return null
      const cached = clients.get(clientId)
      if (cached) return cached
      const [client] = await db.select().from(oauthClients).where(eq(oauthClients.id, clientId))
      if (client) clients.set(clientId, client)
      return client ?? null
    },
    async record(client) {
      if (isMetadataDocumentClientId(client.id)) await documents.record(client)
    },
  }
}
