import { t } from 'elysia'
import { AccountParams } from '../lib/http/params.ts'
import { Type, type TLiteral } from '@sinclair/typebox'
import { SCOPES } from '../auth/scopes.ts'

export const MAX_REDIRECT_URIS = 10
export const MAX_REDIRECT_URI_LENGTH = 2048
export const MAX_CLIENT_NAME_LENGTH = 256
export const MAX_SCOPE_LENGTH = 512

/** One literal schema per value, as a tuple: a union of them is typed as the union of the values. */
const literals = <T extends readonly string[]>(values: T) => values.map((value) => t.Literal(value)) as unknown as { -readonly [K in keyof T]: TLiteral<T[K]> }

/** The grant types a registration gets when it names none. */
export const GRANT_TYPES = ['authorization_code', 'refresh_token'] as const
export const RESPONSE_TYPES = ['code'] as const
/** RFC 7523 §2.1: the JWT bearer grant (enterprise-managed authorization's ID-JAGs), for confidential clients only. */
export const JWT_BEARER_GRANT = 'urn:ietf:params:oauth:grant-type:jwt-bearer'

export const GrantType = t.Union([t.Literal('authorization_code'), t.Literal('refresh_token'), t.Literal(JWT_BEARER_GRANT)])
export const ResponseType = t.Literal('code')

/** How a client authenticates at the token and revocation endpoints (RFC 7591 §2, RFC 7523 §2.2; docs/oauth.md#confidential-clients). */
export const CLIENT_AUTHENTICATION_METHODS = ['none', 'client_secret_basic', 'client_secret_post', 'private_key_jwt'] as const
export const TokenEndpointAuthMethod = t.Union(
  literals(CLIENT_AUTHENTICATION_METHODS),
  {
    description:
      '`none` (the default): a public client, no secret. `client_secret_basic` / `client_secret_post`: a secret is issued, returned once in this response, ' +
      'sent in HTTP Basic or in the body. `private_key_jwt`: a JWT signed with a key of `jwks` or `jwks_uri` (RFC 7523 §2.2).',
  },
)

/** The signature algorithms a `private_key_jwt` assertion may use: asymmetric ones only (an HMAC would need a secret we hold). */
export const CLIENT_ASSERTION_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'] as const
const MAX_CLIENT_KEYS = 10

const base64url = (maxLength: number) => t.String({ minLength: 1, maxLength, pattern: '^[A-Za-z0-9_-]+$' })

/**
 * One public signing key of a `private_key_jwt` client (RFC 7517 §4, RFC 7518 §6). Other members
 * (`x5c`, `x5t`, …) are allowed and dropped; private key members (`d`, `p`, `q`, `dp`, `dq`,
 * `qi`, `oth`, `k`) are refused with a description that names them (client-jwks.ts).
 */
export const ClientJwk = t.Object(
  {
    kty: t.Union([t.Literal('RSA'), t.Literal('EC'), t.Literal('OKP')], { description: 'Asymmetric keys only: RSA (2048 to 8192 bits), EC (P-256, P-384, P-521) or OKP (Ed25519).' }),
    kid: t.Optional(t.String({ minLength: 1, maxLength: 256, description: 'Distinct within the set; assertions name it in their `kid` header.' })),
    use: t.Optional(t.Literal('sig')),
    key_ops: t.Optional(t.Array(t.String({ maxLength: 32 }), { maxItems: 8, description: 'If given, must include `verify`.' })),
    alg: t.Optional(t.Union(literals(CLIENT_ASSERTION_ALGORITHMS))),
    crv: t.Optional(t.Union([t.Literal('P-256'), t.Literal('P-384'), t.Literal('P-521'), t.Literal('Ed25519')])),
    x: t.Optional(base64url(100)),
    y: t.Optional(base64url(100)),
    n: t.Optional(base64url(1400)),
    e: t.Optional(base64url(12)),
  },
  { additionalProperties: true, title: 'ClientJwk' },
)

/** RFC 7517 §5: a client's public keys, inline at registration or published at its `jwks_uri`. */
export const ClientJwks = t.Object(
  { keys: t.Array(ClientJwk, { minItems: 1, maxItems: MAX_CLIENT_KEYS }) },
  { additionalProperties: true, title: 'ClientJwks' },
)

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
    redirect_uris: t.Optional(t.Array(t.String({ minLength: 1 }), {
      maxItems: MAX_REDIRECT_URIS,
      description:
        `Required with the authorization_code grant (1 to ${MAX_REDIRECT_URIS}). Where the user may be sent back, each at most ${MAX_REDIRECT_URI_LENGTH} characters, no fragment, no userinfo: ` +
        'https; http only on a loopback host (127.0.0.1, [::1], localhost); or a private-use scheme such as `com.example.app:/cb` ' +
        '(never javascript, vbscript, data, blob, file, filesystem, jar, view-source, about, urn, intent, ws, wss, ftp, mailto, tel, sms, nor any scheme starting with chrome).',
    })),
    client_name: t.Optional(
      t.String({
        maxLength: MAX_CLIENT_NAME_LENGTH,
        description:
          'Shown to the user on the consent page: one line with a visible character; no control characters and no bidirectional formatting characters (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C).',
      }),
    ),
    scope: t.Optional(t.String({ minLength: 1, maxLength: MAX_SCOPE_LENGTH, description: scopeDescription })),
    grant_types: t.Optional(
      t.Array(GrantType, {
        minItems: 1,
        description:
          `Default \`["authorization_code", "refresh_token"]\`. Must include \`authorization_code\`, except for a confidential client that registers \`${JWT_BEARER_GRANT}\` (enterprise-managed authorization), which only confidential clients may.`,
      }),
    ),
    response_types: t.Optional(t.Array(ResponseType, { description: 'Default `["code"]` with the authorization_code grant, else `[]`.' })),
    token_endpoint_auth_method: t.Optional(TokenEndpointAuthMethod),
    application_type: t.Optional(ApplicationType),
    // null is read as absent: real clients (the MCP Inspector) send "jwks_uri": null.
    jwks: t.Optional(t.Union([ClientJwks, t.Null()], { description: '`private_key_jwt` only, and exactly one of `jwks` and `jwks_uri`: the public keys its assertions are signed with.' })),
    jwks_uri: t.Optional(
      t.Union([t.String({ minLength: 1, maxLength: MAX_REDIRECT_URI_LENGTH }), t.Null()], {
        description: '`private_key_jwt` only: an https URL (a public address) where the client publishes its keys; fetched within 5 s and 16 KB, kept as its Cache-Control says (1 minute to 1 hour).',
      }),
    ),
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
    token_endpoint_auth_method: TokenEndpointAuthMethod,
    application_type: ApplicationType,
    client_secret: t.Optional(t.String({ description: '`client_secret_basic` and `client_secret_post` only. Shown this once: only its hash is stored.' })),
    client_secret_expires_at: t.Optional(Type.Integer({ description: 'With `client_secret`: 0, the secret does not expire.' })),
    jwks: t.Optional(ClientJwks),
    jwks_uri: t.Optional(t.String()),
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
    token_endpoint_auth_signing_alg_values_supported: t.Array(t.String()),
    revocation_endpoint_auth_methods_supported: t.Array(t.String()),
    revocation_endpoint_auth_signing_alg_values_supported: t.Array(t.String()),
    code_challenge_methods_supported: t.Array(t.String()),
    authorization_response_iss_parameter_supported: t.Boolean(),
    dpop_signing_alg_values_supported: t.Array(t.String(), { description: 'RFC 9449 §5.1: the algorithms a DPoP proof may be signed with.' }),
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
    dpop_signing_alg_values_supported: t.Array(t.String(), { description: 'RFC 9728 §2: the algorithms a DPoP proof may be signed with.' }),
    dpop_bound_access_tokens_required: t.Boolean({ description: 'RFC 9728 §2: false, Bearer tokens are accepted too.' }),
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

/**
 * How a client proves who it is in a token or revocation request's body (RFC 6749 §2.3.1,
 * RFC 7523 §2.2); `client_secret_basic` sends its id and secret in `Authorization: Basic`
 * instead. An empty `client_secret`, which some public clients send, counts as none.
 */
export const ClientAuthentication = t.Object({
  client_id: optionalParameter(CLIENT_ID_MAX_LENGTH),
  client_secret: t.Optional(t.String({ maxLength: 256, description: '`client_secret_post` clients.' })),
  client_assertion: t.Optional(t.String({ maxLength: 8192, description: '`private_key_jwt` clients: a JWT signed with one of the keys they registered (RFC 7523 §3).' })),
  client_assertion_type: t.Optional(t.String({ maxLength: 128, description: 'With client_assertion: `urn:ietf:params:oauth:client-assertion-type:jwt-bearer`.' })),
})

// Standard clients send extra parameters (RFC 8707 `resource`, …): they are accepted and
// ignored, as RFC 6749 §3.2 asks.
export const TokenRequestBody = t.Object(
  {
    grant_type: t.String({ maxLength: 64 }),
    ...ClientAuthentication.properties,
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
    ...ClientAuthentication.properties,
    scope: optionalParameter(512),
  },
  { additionalProperties: true, title: 'RefreshTokenRequest' },
)

export const RevokeRequestBody = t.Object(
  {
    token: t.String({ maxLength: 4096 }),
    token_type_hint: optionalParameter(64),
    ...ClientAuthentication.properties,
  },
  { additionalProperties: true, title: 'RevocationRequest' },
)

/** RFC 7009 §2.2: an empty object, whether or not a token was revoked. */
export const RevocationResult = t.Object({}, { title: 'RevocationResult' })

export const TokenResponseSchema = t.Object(
  {
    access_token: t.String({ description: 'An RFC 9068 JWT, valid for 15 minutes.' }),
    token_type: t.Union([t.Literal('Bearer'), t.Literal('DPoP')], {
      description: '`DPoP` when the request carried a DPoP proof: the access token is bound to its key (RFC 9449 §5) and is sent as `Authorization: DPoP` with a proof.',
    }),
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
