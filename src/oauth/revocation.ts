import { Elysia } from 'elysia'
import { and, eq, isNull, sql } from 'drizzle-orm'
import type { DatabaseTransaction } from '../lib/db/client.ts'
import { grants, refreshTokens } from '../lib/db/schema.ts'
import { OAuthError } from '../lib/http/errors.ts'
import { sha256Hex } from '../lib/security/crypto.ts'
import { recordInvalidation } from '../lib/cache/invalidation-feed.ts'
import { endGrantEventSubscriptions } from '../mcp/event-subscriptions.ts'
import { cors } from '../lib/http/cors.ts'
import { readClientCredentials, verifyClientCredentials, type ClientAuthenticationParameters } from './client-authentication.ts'
import { isMetadataDocumentClientId } from './client-metadata-document.ts'
import { OAuthErrorSchema, RevocationResult, RevokeRequestBody } from './schemas.ts'
import type { AccessTokenClaims, TokenDeps } from './tokens.ts'
import { oauthWireFormat } from './wire-format.ts'

/**
 * Revokes a grant and every token issued from it, on every instance (through the invalidation
 * feed), and ends its agent's MCP event subscriptions in the same transaction: the delivery claim
 * reads the database, so no instance sends them anything more (docs/mcp.md#events).
 */
export async function revokeGrant(db: DatabaseTransaction, grantId: string, reason: string): Promise<void> {
  const revoked = await db
    .update(grants)
    .set({ revokedAt: sql`now()`, revokedReason: reason })
    .where(and(eq(grants.id, grantId), isNull(grants.revokedAt)))
    .returning({ id: grants.id })
  if (revoked.length === 0) return
  await endGrantEventSubscriptions(db, grantId)
  await recordInvalidation(db, 'grant', grantId)
}

/**
 * RFC 7009 §2.1: the client of a revocation request, authenticated as at the token endpoint
 * (src/oauth/client-authentication.ts). A metadata document's client is not looked up: it is
 * public, its tokens are bound to its URL, and a document that is down or changed must not keep
 * them alive (RFC 7009 asks nothing more of a public client).
 */
export async function revokingClientId(deps: TokenDeps, headers: Headers, body: ClientAuthenticationParameters): Promise<string> {
  const credentials = readClientCredentials(headers, body)
  if (credentials.method === 'none' && credentials.clientId && isMetadataDocumentClientId(credentials.clientId)) return credentials.clientId
  return (await verifyClientCredentials(deps, credentials)).id
}

/**
 * RFC 7009: revokes the grant of a refresh or access token that belongs to the calling client.
 * Unknown, expired or foreign tokens are not an error (§2.2): the answer does not tell them apart.
 */
export async function revokeToken(deps: TokenDeps, clientId: string, token: string | undefined): Promise<void> {
  if (!token || token.length > 4096) throw new OAuthError(400, 'invalid_request', 'token is required.')
  const [refresh] = await deps.db
    .select({ grantId: grants.id, clientId: grants.clientId })
    .from(refreshTokens)
    .innerJoin(grants, eq(grants.id, refreshTokens.grantId))
    .where(eq(refreshTokens.tokenHash, sha256Hex(token)))
  if (refresh) {
    if (refresh.clientId === clientId) await deps.db.transaction((tx) => revokeGrant(tx, refresh.grantId, 'revoked by the client'))
    return
  }
  for (const audience of [deps.baseUrl, `${deps.baseUrl}/mcp`]) {
    try {
      const claims = (await deps.signer.verify(token, { typ: 'at+jwt', audience })) as unknown as AccessTokenClaims
      if (claims.client_id === clientId && typeof claims.grant_id === 'string') {
        const grantId = claims.grant_id
        await deps.db.transaction((tx) => revokeGrant(tx, grantId, 'revoked by the client'))
      }
      return
    } catch {
      // Not an access token for this audience (or not valid at all): nothing to revoke.
    }
  }
}

/** `POST /auth/revoke` (RFC 7009), mounted under `/v0`: JSON or form bodies, OAuth error bodies, CORS. */
export function revocationRoutes(deps: TokenDeps) {
  return new Elysia({ tags: ['OAuth'] })
    .use(cors({ '/auth/revoke': ['POST'] }))
    .use(oauthWireFormat({ forms: true }))
    .post(
      '/auth/revoke',
      async ({ body, request, set }) => {
        set.headers['cache-control'] = 'no-store'
        await revokeToken(deps, await revokingClientId(deps, request.headers, body), body.token)
        await deps.syncCaches()
        return {}
      },
      {
        // Named parsers only name the media types in the OpenAPI document: oauthWireFormat's reader answers first.
        parse: ['json', 'urlencoded'],
        body: RevokeRequestBody,
        response: { 200: RevocationResult, 400: OAuthErrorSchema, 401: OAuthErrorSchema },
        detail: {
          operationId: 'revokeToken',
          summary: "Revoke a refresh or access token's grant (RFC 7009)",
          description:
            'An unknown, expired or already revoked token is not an error (RFC 7009 §2.2): the answer is 200 `{}` either way. ' +
            'The client authenticates as at the token endpoint (its registered `token_endpoint_auth_method`); a failed authentication is 401 `invalid_client`.',
        },
      },
    )
}
