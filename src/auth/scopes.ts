/** What a credential may do. An API key acts for its account with every scope. */
export const SCOPES = ['account:read', 'hooks:read', 'hooks:write', 'messages:read', 'messages:send', 'keys:read', 'keys:write', 'grants:read', 'grants:write', 'identity_providers:read', 'identity_providers:write'] as const
export type Scope = (typeof SCOPES)[number]

/** Each scope in words, as the consent page and the OpenAPI document's oauth2 scheme show it. */
export const SCOPE_DESCRIPTIONS: Record<Scope, string> = {
  'account:read': "See your account's name and id",
  'hooks:read': 'See your webhook subscriptions and their delivery logs',
  'hooks:write': 'Create, change, pause, test and delete webhook subscriptions, and resend their deliveries',
  'messages:read': 'Read your messages and their status',
  'messages:send': 'Send messages on your behalf',
  'keys:read': 'See your API keys (names and prefixes, never the secrets)',
  'keys:write': 'Create and revoke API keys',
  'grants:read': 'See which apps and agents can access your account',
  'grants:write': "Cut off an app's or agent's access to your account",
  'identity_providers:read': 'See which enterprise identity providers your account trusts, and how their users map to yours',
  'identity_providers:write': "Trust or stop trusting an enterprise identity provider, and link its users to your account's",
}

export const isScope = (name: string): name is Scope => (SCOPES as readonly string[]).includes(name)

/** A scope parameter (RFC 6749 §3.3: names one space apart) as its names, each once, in the order given. */
export const splitScope = (scope: string): string[] => [...new Set(scope.split(' ').filter(Boolean))]
