import { t } from 'elysia'
import { AccountParams } from '../lib/http/params.ts'

export const MAX_ALLOWED_CLIENTS = 50
const URL_MAX_LENGTH = 2048

export const SubjectMapping = t.Union([t.Literal('email'), t.Literal('subject')], {
  description:
    'How an ID-JAG names a user of this account. `email`: its `email` claim is the sign-in email of one of the account\'s users. ' +
    '`subject`: its `sub` is linked to a user beforehand (`POST …/identity-providers/{identity_provider_id}/subjects`).',
})

export const IdentityProviderSchema = t.Object(
  {
    id: t.String({ examples: ['idp_01jd3m9x2qk7r5v8w4y6z0abcd'] }),
    issuer: t.String({ description: 'The `iss` of its ID-JAGs, compared character for character.', examples: ['https://acme.okta.com'] }),
    jwks_uri: t.String({ description: 'Where its signing keys are published (a JWK set).', examples: ['https://acme.okta.com/oauth2/v1/keys'] }),
    allowed_client_ids: t.Array(t.String(), {
      description: 'The OAuth clients of this service (their `client_id`) that may present its ID-JAGs; an ID-JAG for any other client is refused.',
      examples: [['cli_01jd3m9x2qk7r5v8w4y6z0efgh']],
    }),
    subject_mapping: SubjectMapping,
    created_at: t.String({ format: 'date-time' }),
  },
  { title: 'IdentityProvider' },
)

export const CreateIdentityProviderBody = t.Object(
  {
    issuer: t.String({
      minLength: 1,
      maxLength: URL_MAX_LENGTH,
      description: 'Its issuer identifier (RFC 8414): an https URL without query or fragment, kept exactly as written. One per account.',
      examples: ['https://acme.okta.com'],
    }),
    jwks_uri: t.String({
      minLength: 1,
      maxLength: URL_MAX_LENGTH,
      description: 'The https URL of its JWK set, fetched through the same guard as webhooks (no private addresses).',
      examples: ['https://acme.okta.com/oauth2/v1/keys'],
    }),
    allowed_client_ids: t.Array(t.String({ minLength: 1, maxLength: URL_MAX_LENGTH }), {
      minItems: 1,
      maxItems: MAX_ALLOWED_CLIENTS,
      description: `The agents allowed to act for its users: ${MAX_ALLOWED_CLIENTS} at most, each a registered confidential client (cli_…) of the JWT bearer grant (docs/oauth.md#enterprise-managed-authorization-cross-app-access).`,
      examples: [['cli_01jd3m9x2qk7r5v8w4y6z0efgh']],
    }),
    subject_mapping: SubjectMapping,
  },
  { additionalProperties: false, title: 'CreateIdentityProviderRequest' },
)

export const SubjectLinkSchema = t.Object(
  {
    id: t.String({ examples: ['sbj_01jd3m9x2qk7r5v8w4y6z0abcd'] }),
    subject: t.String({ description: 'The `sub` of the provider\'s ID-JAGs for this person.', examples: ['00u8a9kq2zTr5vH3x697'] }),
    user_id: t.String({ examples: ['usr_01jd3m9x2qk7r5v8w4y6z0abcd'] }),
    email: t.String({ description: 'The user\'s sign-in email.', examples: ['ada@example.com'] }),
    created_at: t.String({ format: 'date-time' }),
  },
  { title: 'SubjectLink' },
)

export const CreateSubjectLinkBody = t.Object(
  {
    subject: t.String({ minLength: 1, maxLength: 1024, description: 'The provider\'s subject identifier for the person (`sub`), exactly as its ID-JAGs carry it.', examples: ['00u8a9kq2zTr5vH3x697'] }),
    email: t.String({ minLength: 3, maxLength: 320, description: 'The sign-in email of the account\'s user it stands for.', examples: ['ada@example.com'] }),
  },
  { additionalProperties: false, title: 'CreateSubjectLinkRequest' },
)

export const IdentityProviderParams = t.Object({ ...AccountParams.properties, identity_provider_id: t.String({ maxLength: 64 }) })
export const SubjectLinkParams = t.Object({ ...IdentityProviderParams.properties, link_id: t.String({ maxLength: 64 }) })
