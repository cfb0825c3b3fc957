import { Elysia, t } from 'elysia'
import type { Config } from '../lib/config.ts'
import { SCOPES } from '../auth/scopes.ts'
import { cors } from '../lib/http/cors.ts'
import { MCP_SCOPES } from '../mcp/scopes.ts'
import { DPOP_SIGNING_ALGS } from '../lib/security/dpop.ts'
import { AuthorizationServerMetadata, CLIENT_ASSERTION_ALGORITHMS, CLIENT_AUTHENTICATION_METHODS, ProtectedResourceMetadata } from './schemas.ts'
import { ID_JAG_GRANT_PROFILE, JWT_BEARER_GRANT_TYPE } from './grants/jwt-bearer.ts'

/**
 * Discovery documents (docs/api.md#discovery-documents) at their documented paths under `/v0` and at the RFC 8414 / RFC 9728
 * path-insertion addresses on the origin root, which is where standard clients look for an
 * issuer or resource with a path (`https://host/v0` → `https://host/.well-known/…/v0`).
 */
export const AUTHORIZATION_SERVER_METADATA_PATHS = [
  '/v0/.well-known/oauth-authorization-server',
  '/.well-known/oauth-authorization-server/v0',
  // Some agents ignore path insertion and fetch only the bare address.
  '/.well-known/oauth-authorization-server',
] as const
export const API_RESOURCE_METADATA_PATHS = ['/v0/.well-known/oauth-protected-resource', '/.well-known/oauth-protected-resource/v0'] as const
export const MCP_RESOURCE_METADATA_PATHS = ['/v0/.well-known/oauth-protected-resource/mcp', '/.well-known/oauth-protected-resource/v0/mcp'] as const

/** Short enough that a changed document reaches clients within minutes; long enough to spare repeated fetches. */
export const DISCOVERY_CACHE_CONTROL = 'public, max-age=300'

/** RFC 8414 metadata. The issuer is `{base_url}` exactly: clients compare it character for character. */
export function authorizationServerMetadata(baseUrl: string) {
  return {
    issuer: baseUrl,
    authorization_endpoint: `${baseUrl}/auth/authorize`,
    token_endpoint: `${baseUrl}/auth/token`,
    registration_endpoint: `${baseUrl}/auth/register`,
    revocation_endpoint: `${baseUrl}/auth/revoke`,
    jwks_uri: `${baseUrl}/.well-known/jwks.json`,
    scopes_supported: [...SCOPES],
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code', 'refresh_token', JWT_BEARER_GRANT_TYPE],
    // Every method at both endpoints, with the same client authentication (src/oauth/client-authentication.ts).
    token_endpoint_auth_methods_supported: [...CLIENT_AUTHENTICATION_METHODS],
    token_endpoint_auth_signing_alg_values_supported: [...CLIENT_ASSERTION_ALGORITHMS],
    revocation_endpoint_auth_methods_supported: [...CLIENT_AUTHENTICATION_METHODS],
    revocation_endpoint_auth_signing_alg_values_supported: [...CLIENT_ASSERTION_ALGORITHMS],
    code_challenge_methods_supported: ['S256'],
    authorization_response_iss_parameter_supported: true,
    // RFC 9449 §5.1: a token request with a proof gets a DPoP-bound token (docs/oauth.md#dpop).
    dpop_signing_alg_values_supported: [...DPOP_SIGNING_ALGS],
    // A client_id may be the https URL of a client ID metadata document (src/oauth/client-metadata-document.ts).
    client_id_metadata_document_supported: true,
    // draft-ietf-oauth-identity-assertion-authz-grant §7: ID-JAGs are accepted by the JWT bearer grant (src/oauth/grants/jwt-bearer.ts).
    authorization_grant_profiles_supported: [ID_JAG_GRANT_PROFILE],
    service_documentation: `${baseUrl}/docs`,
  }
}

/** RFC 8414 metadata with the client ID metadata document flag (draft-ietf-oauth-client-id-metadata-document §6). */
const AuthorizationServerMetadataWithDocuments = t.Object(
  {
    ...AuthorizationServerMetadata.properties,
    client_id_metadata_document_supported: t.Boolean({ description: 'A client_id may be the https URL of its client ID metadata document.' }),
    authorization_grant_profiles_supported: t.Array(t.String(), {
      description: 'Authorization grant profiles the token endpoint processes: `urn:ietf:params:oauth:grant-profile:id-jag` (ID-JAGs with the JWT bearer grant).',
    }),
  },
  { title: 'AuthorizationServerMetadata' },
)

/** RFC 9728 metadata of the REST API (`{base_url}`) or of the MCP endpoint (`{base_url}/mcp`). */
export function protectedResourceMetadata(baseUrl: string, resource: 'api' | 'mcp') {
  return {
    resource: resource === 'api' ? baseUrl : `${baseUrl}/mcp`,
    authorization_servers: [baseUrl],
    scopes_supported: resource === 'api' ? [...SCOPES] : [...MCP_SCOPES],
    bearer_methods_supported: ['header'],
    // RFC 9728 §2: DPoP-bound tokens are accepted with their proofs, Bearer tokens too.
    dpop_signing_alg_values_supported: [...DPOP_SIGNING_ALGS],
    dpop_bound_access_tokens_required: false,
    resource_name: resource === 'api' ? 'Messaging Service API' : 'Messaging Service MCP server',
    resource_documentation: `${baseUrl}/docs`,
  }
}

/** Absolute paths: mount at the app's root, outside the `/v0` group. Public, no credential. */
export function discoveryRoutes(deps: { config: Config }) {
  const documents = [
    { paths: AUTHORIZATION_SERVER_METADATA_PATHS, body: authorizationServerMetadata(deps.config.baseUrl), schema: AuthorizationServerMetadataWithDocuments, operationIds: ['getAuthorizationServerMetadata', 'getAuthorizationServerMetadataAtRoot', 'getAuthorizationServerMetadataBare'], summary: 'OAuth authorization server metadata (RFC 8414)' },
    { paths: API_RESOURCE_METADATA_PATHS, body: protectedResourceMetadata(deps.config.baseUrl, 'api'), schema: ProtectedResourceMetadata, operationIds: ['getApiResourceMetadata', 'getApiResourceMetadataAtRoot'], summary: 'Protected resource metadata of the REST API (RFC 9728)' },
    { paths: MCP_RESOURCE_METADATA_PATHS, body: protectedResourceMetadata(deps.config.baseUrl, 'mcp'), schema: ProtectedResourceMetadata, operationIds: ['getMcpResourceMetadata', 'getMcpResourceMetadataAtRoot'], summary: 'Protected resource metadata of the MCP endpoint (RFC 9728)' },
  ]
  const allPaths = documents.flatMap((document) => document.paths)
  const plugin = new Elysia({ tags: ['Discovery'] }).use(cors(Object.fromEntries(allPaths.map((path) => [path, ['GET']]))))
  for (const { paths, body, schema, summary, operationIds } of documents) {
    for (const [index, path] of paths.entries()) {
      plugin.get(
        path,
        ({ set }) => {
          set.headers['cache-control'] = DISCOVERY_CACHE_CONTROL
          return body
        },
        { response: { 200: schema }, detail: { operationId: operationIds[index], summary, security: [] } },
      )
    }
  }
  return plugin
}
