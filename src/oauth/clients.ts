import { eq } from 'drizzle-orm'
import type { Static } from 'elysia'
import type { Database } from '../lib/db/client.ts'
import { oauthClients } from '../lib/db/schema.ts'
import { OAuthError } from '../lib/errors.ts'
import { isId, newId } from '../lib/ids.ts'
import { TtlCache } from '../lib/cache.ts'
import type { ClientRegistrationResponse } from './schemas.ts'

/** A registered OAuth client, as stored. */
export type OAuthClient = typeof oauthClients.$inferSelect

export type ClientRegistration = Static<typeof ClientRegistrationResponse>

/** The metadata a client is registered with, defaults applied: RFC 7591 §2 names. */
export type ClientMetadata = Omit<ClientRegistration, 'client_id' | 'client_id_issued_at'>

// Registrations never change once made (there is no update or delete), so a client read
// once is good for the life of the process; unknown ids are not remembered.
const clientsByDatabase = new WeakMap<Database, TtlCache<OAuthClient>>()

export async function findClient(db: Database, clientId: string | undefined): Promise<OAuthClient | null> {
  if (!clientId || !isId('cli', clientId)) return null
  let clients = clientsByDatabase.get(db)
  if (!clients) {
    clients = new TtlCache<OAuthClient>({ maxEntries: 10_000, ttlMs: 60 * 60_000 })
    clientsByDatabase.set(db, clients)
  }
  const cached = clients.get(clientId)
  if (cached) return cached
  const [client] = await db.select().from(oauthClients).where(eq(oauthClients.id, clientId))
  if (client) clients.set(clientId, client)
  return client ?? null
}

/** RFC 6749 §5.2: an unknown client at a token endpoint is 401 `invalid_client`; clients then register again. */
export const invalidClient = () =>
  new OAuthError(401, 'invalid_client', 'Unknown client_id: register the client again (POST /auth/register).')

export async function requireClient(db: Database, clientId: string | undefined): Promise<OAuthClient> {
  const client = await findClient(db, clientId)
  if (!client) throw invalidClient()
  return client
}

/** Stores a client; the RFC 7591 §3.2.1 body: its id, issue time and the metadata as registered. */
export async function storeClient(db: Database, metadata: ClientMetadata): Promise<ClientRegistration> {
  const [client] = await db
    .insert(oauthClients)
    .values({
      id: newId('cli'),
      clientName: metadata.client_name,
      redirectUris: metadata.redirect_uris,
      grantTypes: metadata.grant_types,
      responseTypes: metadata.response_types,
      tokenEndpointAuthMethod: metadata.token_endpoint_auth_method,
      applicationType: metadata.application_type,
      scope: metadata.scope,
    })
    .returning({ id: oauthClients.id, createdAt: oauthClients.createdAt })
  return { client_id: client!.id, client_id_issued_at: Math.floor(client!.createdAt.getTime() / 1000), ...metadata }
}
