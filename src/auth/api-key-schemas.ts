import { t } from 'elysia'
import { AccountParams } from '../lib/http/params.ts'
import { PersonName } from '../lib/http/text.ts'

export const ApiKeySchema = t.Object(
  {
    id: t.String({ examples: ['key_01jd3m9x2qk7r5v8w4y6z0abcd'] }),
    name: t.Union([t.String(), t.Null()]),
    secret_prefix: t.String({ description: 'The first characters of the secret, to recognise the key by; never the secret.' }),
    created_at: t.String({ format: 'date-time' }),
    last_used_at: t.Union([t.String({ format: 'date-time' }), t.Null()], {
      description: 'The last authenticated call with the key, to the minute; null when never used.',
    }),
  },
  { title: 'ApiKey' },
)

export const CreatedApiKeySchema = t.Composite(
  [ApiKeySchema, t.Object({ secret: t.String({ description: 'The key (sk_live_…). Shown once: store it now; only its hash is kept.' }) })],
  { title: 'CreatedApiKey' },
)

export const CreateApiKeyBody = t.Object(
  { name: PersonName({ minLength: 1, maxLength: 100, description: 'What the key is for: 1 to 100 characters on one line.' }) },
  { additionalProperties: false, title: 'CreateApiKeyRequest' },
)

export const ApiKeyParams = t.Object({ ...AccountParams.properties, key_id: t.String({ maxLength: 64 }) })
