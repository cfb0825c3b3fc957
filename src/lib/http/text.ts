import { t } from 'elysia'

// C0 control characters and DEL: what a person never types into a name, and what terminals and
// log viewers interpret (escape sequences, bells, backspaces).
const NO_CONTROL = '[^\\u0000-\\u001f\\u007f]'
// Free text may hold tabs and line breaks, nothing else of the kind.
const NO_CONTROL_BUT_LAYOUT = '[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f]'

/** A name a person types on one line: no control characters, not only white space. */
export const PersonName = (options: { minLength?: number; maxLength: number; description?: string }) =>
  t.String({ ...options, pattern: `^(?=.*\\S)${NO_CONTROL}*$` })

/** Text a person writes (a message): line breaks and tabs allowed, other control characters not. */
export const PersonText = (options: { minLength?: number; maxLength: number; description?: string }) =>
  t.String({ ...options, pattern: `^${NO_CONTROL_BUT_LAYOUT}*$` })

