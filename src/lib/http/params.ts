import { t } from 'elysia'

/** `{account_id}` in a path: the caller's own account (src/auth/plugin.ts `ownAccount`). */
export const AccountParams = t.Object({ account_id: t.String({ maxLength: 64 }) })

/** `{account_id}` and `{hook_id}`: one of the caller's subscriptions. */
export const HookParams = t.Object({ ...AccountParams.properties, hook_id: t.String({ maxLength: 64 }) })
