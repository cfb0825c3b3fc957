import { sql } from 'drizzle-orm'
import type { Database } from '../lib/db/client.ts'
import { oauthClients } from '../lib/db/schema.ts'
import type { Scope } from '../auth/scopes.ts'

/**
 * The dashboard is a first-party public client of our own authorization server: it signs in
 * through the same consent page and PKCE code flow as every agent, and holds its tokens in the
 * page's memory. Its id is fixed (a valid `cli_` id) so every instance agrees on it.
 */
export const DASHBOARD_CLIENT_ID = 'cli_0000000000000000000dashbrd'
export const DASHBOARD_CLIENT_NAME = 'Messaging dashboard'

/** What the dashboard's pages call: never `messages:send`, which no page uses. */
export const DASHBOARD_SCOPES: readonly Scope[] = [
  'account:read',
  'hooks:read',
  'hooks:write',
  'messages:read',
  'keys:read',
  'keys:write',
  'grants:read',
  'grants:write',
  'identity_providers:read',
  'identity_providers:write',
]

/** `{PUBLIC_URL}/dashboard`: the page the authorization server sends the browser back to. */
export const dashboardRedirectUri = (publicUrl: string) => `${publicUrl}/dashboard`

/**
 * Makes the dashboard's registration match this configuration: created on first start, and its
 * redirect URI and scope brought up to date when PUBLIC_URL or the scopes change. Instances
 * starting together write the same row.
 */
export async function ensureDashboardClient(db: Database, publicUrl: string): Promise<void> {
  const registration = {
    clientName: DASHBOARD_CLIENT_NAME,
    redirectUris: [dashboardRedirectUri(publicUrl)],
    grantTypes: ['authorization_code', 'refresh_token'],
    responseTypes: ['code'],
    tokenEndpointAuthMethod: 'none',
    applicationType: 'web',
    scope: DASHBOARD_SCOPES.join(' '),
  }
  await db
    .insert(oauthClients)
    .values({ id: DASHBOARD_CLIENT_ID, ...registration })
    .onConflictDoUpdate({
      target: oauthClients.id,
      set: registration,
      // Nothing is written when nothing changed: the usual start touches no row.
      setWhere: sql`(${oauthClients.redirectUris}, ${oauthClients.scope}, ${oauthClients.clientName}) is distinct from (excluded.redirect_uris, excluded.scope, excluded.client_name)`,
    })
}
