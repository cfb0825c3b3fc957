/** SPEC §4. An API key acts for its account with every scope. */
export const SCOPES = ['account:read', 'hooks:read', 'hooks:write', 'messages:read', 'messages:send'] as const
export type Scope = (typeof SCOPES)[number]
