import { t } from 'elysia'
import { PersonName } from '../lib/http/text.ts'

export const AccountSchema = t.Object(
  {
    id: t.String({ examples: ['acc_01jd3m9x2qk7r5v8w4y6z0abcd'] }),
    name: t.String(),
    created_at: t.String({ format: 'date-time' }),
  },
  { title: 'Account' },
)

export const AccountNameSchema = PersonName({
  minLength: 1,
  maxLength: 200,
  description: 'Display name: 1 to 200 characters on one line, not only white space.',
})

export const UpdateAccountBody = t.Object({ name: AccountNameSchema }, { additionalProperties: false, title: 'UpdateAccountRequest' })

// No white space and no control characters in any part.
export const EmailSchema = t.String({ maxLength: 254, pattern: '^[^\\s@\\u0000-\\u001f\\u007f]+@[^\\s@\\u0000-\\u001f\\u007f]+\\.[^\\s@\\u0000-\\u001f\\u007f]+$' })

export const PasswordSchema = t.String({ minLength: 10, maxLength: 1024, description: 'At least 10 characters.' })
