import { t } from 'elysia'
import { AccountParams } from '../lib/http/params.ts'
import { Type } from '@sinclair/typebox'
import { SCOPES } from '../auth/scopes.ts'

export const MAX_REDIRECT_URIS = 10
export const MAX_REDIRECT_URI_LENGTH = 2048
export const MAX_CLIENT_NAME_LENGTH = 256
export const MAX_SCOPE_LENGTH = 512

export const GRANT_TYPES = ['authorization_code', 'refresh_token'] as const
export const RESPONSE_TYPES = ['code'] as const

export const GrantType = t.Union([t.Literal('authorization_code'), t.Literal('refresh_token')])
export const ResponseType = t.Literal('code')
export const ApplicationType = t.Union([t.Literal('web'), t.Literal('native')], {
  description:
    '`native`: an app on the user\'s device (loopback or private-use-scheme redirect URIs, and claimed https URLs); `web`: https redirect URIs on a web host only. ' +
    'Default: `native` when any redirect URI is on the device, else `web`.',
})

const scopeDescription = `Space-separated scopes, each one of: ${SCOPES.join(', ')}.`

/**
 * RFC 7591 §2 client metadata. Unknown members (`logo_uri`, `client_uri`, `software_id`,
 * `contacts`, …) are allowed and ignored (§2: the server MAY ignore metadata it does not
 * understand; real MCP clients send them). Shapes and lengths are checked here; what a schema
 * cannot say (what a redirect URI may be, which scopes exist) is checked by
 * `validateClientMetadata` in client-model.ts.
 */
export const ClientRegistrationRequest = t.Object(
  {
    redirect_uris: t.Array(t.String({ minLength: 1 }), {
      minItems: 1,
      maxItems: MAX_REDIRECT_URIS,
      description:
        `Where the user may be sent back, each at most ${MAX_REDIRECT_URI_LENGTH} characters, no fragment, no userinfo: ` +
        'https; http only on a loopback host (127.0.0.1, [::1], localhost); or a private-use scheme such as `com.example.app:/cb` ' +
        '(never javascript, vbscript, data, blob, file, filesystem, jar, view-source, about, urn, intent, ws, wss, ftp, mailto, tel, sms, nor any scheme starting with chrome).',
    }),
    client_name: t.Optional(
      t.String({
        maxLength: MAX_CLIENT_NAME_LENGTH,
        description:
          'Shown to the user on the consent page: one line with a visible character; no control characters and no bidirectional formatting characters (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C).',
      }),
    ),
    scope: t.Optional(t.String({ minLength: 1, maxLength: MAX_SCOPE_LENGTH, description: scopeDescription })),
    grant_types: t.Optional(
      t.Array(GrantType, { minItems: 1, description: 'Default `["authorization_code", "refresh_token"]`.' }),
    ),
    response_types: t.Optional(t.Array(ResponseType, { minItems: 1, description: 'Default `["code"]`.' })),
    token_endpoint_auth_method: t.Optional(t.Literal('none', { description: 'Public clients only: `none` (the default).' })),
    application_type: t.Optional(ApplicationType),
  },
  { additionalProperties: true, title: 'ClientRegistrationRequest' },
)

/** RFC 7591 §3.2.1: the client id and every metadata value the server accepted. No member is ever null. */
export const ClientRegistrationResponse = t.Object(
  {
    client_id: t.String({ examples: ['cli_01jd3m9x2qk7r5v8w4y6z0abcd'] }),
    client_id_issued_at: Type.Integer({ description: 'Seconds since the Unix epoch.' }),
    redirect_uris: t.Array(t.String()),
    client_name: t.Optional(t.String()),
    scope: t.Optional(t.String()),
    grant_types: t.Array(GrantType),
    response_types: t.Array(ResponseType),
    token_endpoint_auth_method: t.Literal('none'),
    application_type: ApplicationType,
  },
  { title: 'ClientRegistrationResponse' },
)

export const OAuthErrorSchema = t.Object(
  { error: t.String({ examples: ['invalid_redirect_uri'] }), error_description: t.String() },
  { title: 'OAuthError' },
)

/** RFC 8414 §2 (and the RFC 9207 `iss` flag). */
export const AuthorizationServerMetadata = t.Object(
  {
    issuer: t.String(),
    authorization_endpoint: t.String(),
    token_endpoint: t.String(),
    registration_endpoint: t.String(),
    revocation_endpoint: t.String(),
    jwks_uri: t.String(),
    scopes_supported: t.Array(t.String()),
    response_types_supported: t.Array(t.String()),
    response_modes_supported: t.Array(t.String()),
    grant_types_supported: t.Array(t.String()),
    token_endpoint_auth_methods_supported: t.Array(t.String()),
    revocation_endpoint_auth_methods_supported: t.Array(t.String()),
    code_challenge_methods_supported: t.Array(t.String()),
    authorization_response_iss_parameter_supported: t.Boolean(),
    service_documentation: t.String(),
  },
  { title: 'AuthorizationServerMetadata' },
)

/** RFC 9728 §2. */
export const ProtectedResourceMetadata = t.Object(
  {
    resource: t.String(),
    authorization_servers: t.Array(t.String()),
    scopes_supported: t.Array(t.String()),
    bearer_methods_supported: t.Array(t.String()),
    resource_name: t.String(),
    resource_documentation: t.String(),
  },
  { title: 'ProtectedResourceMetadata' },
)

const Resource = t.Union([t.String({ maxLength: 2048 }), t.Array(t.String({ maxLength: 2048 }), { maxItems: 4 })], {
  description: 'RFC 8707: `{base_url}` and/or `{base_url}/mcp` (the parameter may be repeated); omitted means both.',
})

// A client ID metadata document's URL is the client_id: as long as any URL we accept.
const CLIENT_ID_MAX_LENGTH = 2048

const optionalParameter = (maxLength: number) => t.Optional(t.String({ maxLength }))

// Standard clients send extra parameters (RFC 8707 `resource`, an empty `client_secret`, …):
// they are accepted and ignored, as RFC 6749 §3.2 asks.
export const TokenRequestBody = t.Object(
  {
    grant_type: t.String({ maxLength: 64 }),
    client_id: optionalParameter(CLIENT_ID_MAX_LENGTH),
    code: optionalParameter(256),
    redirect_uri: optionalParameter(2048),
    code_verifier: optionalParameter(256),
    refresh_token: optionalParameter(256),
    scope: optionalParameter(512),
    assertion: t.Optional(t.String({ maxLength: 16 * 1024, description: 'The JWT bearer grant\'s ID-JAG (`oauth-id-jag+jwt`), from the enterprise identity provider.' })),
    resource: t.Optional(Resource),
  },
  { additionalProperties: true, title: 'TokenRequest' },
)

export const RefreshRequestBody = t.Object(
  {
    grant_type: t.Optional(t.Literal('refresh_token')),
    refresh_token: t.String({ maxLength: 256 }),
    client_id: t.String({ maxLength: CLIENT_ID_MAX_LENGTH }),
    scope: optionalParameter(512),
  },
  { additionalProperties: true, title: 'RefreshTokenRequest' },
)

export const RevokeRequestBody = t.Object(
  {
    token: t.String({ maxLength: 4096 }),
    token_type_hint: optionalParameter(64),
    client_id: t.String({ maxLength: CLIENT_ID_MAX_LENGTH }),
  },
  { additionalProperties: true, title: 'RevocationRequest' },
)

/** RFC 7009 §2.2: an empty object, whether or not a token was revoked. */
export const RevocationResult = t.Object({}, { title: 'RevocationResult' })

export const TokenResponseSchema = t.Object(
  {
    access_token: t.String({ description: 'An RFC 9068 JWT, valid for 15 minutes.' }),
    token_type: t.Literal('Bearer'),
    expires_in: Type.Integer(),
    refresh_token: t.Optional(t.String({ description: 'Opaque, 30 days, rotated on every use. Not issued by the JWT bearer grant (an ID-JAG is presented again instead).' })),
    scope: t.String(),
  },
  { title: 'TokenResponse' },
)

/** What the JWKS publishes for each signing key: RFC 7518 §6.2.1 public members only. */
export const PublicJwk = t.Object(
  {
    kty: t.Literal('EC'),
    crv: t.Literal('P-256'),
    x: t.String(),
    y: t.String(),
    kid: t.String(),
    alg: t.Literal('ES256'),
    use: t.Literal('sig'),
  },
  { title: 'PublicJwk' },
)

/** RFC 7517 §5: a JWK set. */
export const JwkSet = t.Object({ keys: t.Array(PublicJwk) }, { title: 'JwkSet' })

/**
 * RFC 6749 §4.1.1 (with PKCE and RFC 8707 `resource`): the parameters of GET /auth/authorize
 * that the service reads. Every other parameter (`prompt`, `nonce`, …) is ignored (RFC 6749
 * §3.1). All optional here: what is missing or wrong is reported on the error page or to the
 * client, never as a schema failure; `readAuthorizationQuery` applies this schema to the query.
 */
export const AuthorizeQuery = t.Object(
  {
    client_id: t.Optional(t.String({ maxLength: CLIENT_ID_MAX_LENGTH, description: 'A registered client (cli_…), or the https URL of its client ID metadata document.' })),
    redirect_uri: t.Optional(t.String({ maxLength: 2048, description: 'Exactly one the client registered (a loopback http URI may use any port).' })),
    response_type: t.Optional(t.String({ maxLength: 64, description: '`code`.' })),
    state: t.Optional(t.String({ maxLength: 4096, description: 'Returned untouched; at most 2048 characters.' })),
    code_challenge: t.Optional(t.String({ maxLength: 256, description: 'base64url SHA-256 of the code verifier: 43 characters.' })),
    code_challenge_method: t.Optional(t.String({ maxLength: 32, description: '`S256`.' })),
    scope: t.Optional(t.String({ maxLength: 512, description: scopeDescription })),
    resource: t.Optional(Resource),
  },
  { additionalProperties: true },
)

const REQUIRED_AUTHORIZE_PARAMETERS: ReadonlySet<string> = new Set(['client_id', 'redirect_uri', 'response_type', 'code_challenge', 'code_challenge_method'])

/**
 * The query of GET /auth/authorize as OpenAPI parameter objects. The route reads its query
 * itself (to see repeated parameters, which Elysia's parser folds into one), so the schema
 * reaches the OpenAPI document through `detail.parameters`.
 */
export const authorizeQueryParameters = Object.entries(AuthorizeQuery.properties).map(([name, schema]) => {
  const { description, ...rest } = schema as { description?: string } & Record<string, unknown>
  return {
    name,
    in: 'query' as const,
    required: REQUIRED_AUTHORIZE_PARAMETERS.has(name),
    description,
    // A repeated `resource` is an array in the query (form style, exploded: resource=a&resource=b).
    ...(name === 'resource' ? { style: 'form' as const, explode: true, schema: { type: 'array' as const, items: { type: 'string' as const, maxLength: 2048 }, maxItems: 4 } } : { schema: rest }),
  }
})

// Unknown members are ignored, as at GET (RFC 6749 §3.1): the consent page sends only these,
// other callers may send what their library adds.
export const AuthorizeBody = t.Object(
  {
    client_id: t.String({ maxLength: CLIENT_ID_MAX_LENGTH }),
    redirect_uri: t.String({ maxLength: 2048 }),
    id_token: t.String({ maxLength: 4096, description: "The signed-in user's id_token (POST /auth/login)." }),
    code_challenge: t.String({ maxLength: 256 }),
    code_challenge_method: t.String({ maxLength: 32 }),
    state: t.Optional(t.String({ maxLength: 2048 })),
    scope: t.Optional(t.String({ maxLength: 512 })),
    resource: t.Optional(Resource),
  },
  { additionalProperties: true, title: 'AuthorizationRequest' },
)

export const AuthorizeResult = t.Object({
  code: t.String(),
  state: t.Optional(t.String()),
  iss: t.String(),
  redirect_to: t.String({ description: 'redirect_uri with code, state and iss appended: where to send the browser.' }),
}, { title: 'AuthorizationResult' })

export const ConnectedAppSchema = t.Object(
  {
    id: t.String({ description: 'The grant: one user\'s consent to one client.', examples: ['grt_01jd3m9x2qk7r5v8w4y6z0abcd'] }),
    client_id: t.String(),
    client_name: t.Union([t.String(), t.Null()], { description: 'The name the client registered with; null if it gave none.' }),
    scope: t.String({ description: 'What it may do: scopes one space apart.' }),
    user_id: t.String({ description: 'The user who allowed it.' }),
    created_at: t.String({ format: 'date-time', description: 'When it was allowed.' }),
    last_used_at: t.Union([t.String({ format: 'date-time' }), t.Null()], {
      description: 'The last authenticated call with one of its access tokens, to the minute; null when never used.',
    }),
  },
  { title: 'ConnectedApp' },
)

export const GrantParams = t.Object({ ...AccountParams.properties, grant_id: t.String({ maxLength: 64 }) })
export const EventSubscriptionParams = t.Object({ ...GrantParams.properties, subscription_id: t.String({ maxLength: 64 }) })
