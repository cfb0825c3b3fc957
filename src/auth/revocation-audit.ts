import type { Logger } from '../lib/runtime/logger.ts'
import { auditActor, type Caller } from './authenticator.ts'

export interface RevocationDeps {
  logger: Logger
  /** Applies the revocation on this instance at once (the other instances follow within seconds). */
  syncCaches(): Promise<void>
}

/**
 * What a DELETE that revoked a credential (an API key, a grant) does next: the audit line, then
 * this instance's caches, so that the very next request here is refused; the other instances
 * follow within 5 seconds (docs/api.md#revoke-an-api-key, docs/api.md#revoke-a-connected-app).
 */
export async function recordRevocation(deps: RevocationDeps, caller: Caller, audit: { action: string } & Record<string, string>): Promise<void> {
  deps.logger.info('audit', { audit: true, ...audit, ...auditActor(caller) })
  await deps.syncCaches()
}
