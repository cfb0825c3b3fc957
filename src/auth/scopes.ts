/** What a credential may do. An API key acts for its account with every scope. */
export const SCOPES = ['account:read', 'hooks:read', 'hooks:write', 'messages:read', 'messages:send'] as const
export type Scope = (typeof SCOPES)[number]

export const isScope = (name: string): name is Scope => (SCOPES as readonly string[]).includes(name)

/** A scope parameter (RFC 6749 §3.3: names one space apart) as its names, each once, in the order given. */
export const splitScope = (scope: string): string[] => [...new Set(scope.split(' ').filter(Boolean))]
