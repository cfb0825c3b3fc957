import type { Static } from '@sinclair/typebox'
import type { AccountSchema } from '../../accounts/schemas.ts'
import type { CreatedHookSchema, DeliveryDetailSchema, DeliverySchema, HookSchema, RotatedHookSchema, TestResultSchema } from '../../hooks/schemas.ts'
import type { EventSchema } from '../../messages/schemas.ts'
import type { Page } from '../../lib/http/pagination.ts'
import type { ApiKeySchema, CreatedApiKeySchema } from '../../auth/api-key-schemas.ts'
import type { ConnectedAppSchema } from '../../oauth/schemas.ts'
import type { EventSubscriptionSchema } from '../../mcp/event-subscriptions.ts'
import type { AccountStatsSchema, HookStatsSchema } from '../../stats/schemas.ts'
import type { IdentityProviderSchema, SubjectLinkSchema } from '../../identity-providers/schemas.ts'

// The shapes the pages read are the API's own schemas: one definition, checked by the compiler here too.
export type Account = Static<typeof AccountSchema>
export type Hook = Static<typeof HookSchema>
export type CreatedHook = Static<typeof CreatedHookSchema>
export type RotatedHook = Static<typeof RotatedHookSchema>
export type Delivery = Static<typeof DeliverySchema>
export type DeliveryDetail = Static<typeof DeliveryDetailSchema>
export type TestResult = Static<typeof TestResultSchema>
export type Event = Static<typeof EventSchema>
export type ApiKey = Static<typeof ApiKeySchema>
export type CreatedApiKey = Static<typeof CreatedApiKeySchema>
export type ConnectedApp = Static<typeof ConnectedAppSchema>
export type EventSubscription = Static<typeof EventSubscriptionSchema>
export type HookStats = Static<typeof HookStatsSchema>
export type AccountStats = Static<typeof AccountStatsSchema>
export type StatsInterval = HookStats['interval']
export type IdentityProvider = Static<typeof IdentityProviderSchema>
export type SubjectLink = Static<typeof SubjectLinkSchema>
export type { Page }

export interface EventType {
  type: Hook['event']
  description: string
}
