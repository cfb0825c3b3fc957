/** The dashboard's places, in the URL's fragment: the server serves one page, and a reload comes back to the same place. */
export type Route =
  | { page: 'overview' }
  | { page: 'webhooks' }
  | { page: 'new-webhook' }
  | { page: 'webhook'; hookId: string }
  | { page: 'keys' }
  | { page: 'apps' }
  | { page: 'identity-providers' }
  | { page: 'events' }

export function parseRoute(hash: string): Route {
  const parts = hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent)
  if (parts[0] === 'webhooks' && parts[1] === 'new') return { page: 'new-webhook' }
  if (parts[0] === 'webhooks' && parts[1]) return { page: 'webhook', hookId: parts[1] }
  if (parts[0] === 'webhooks') return { page: 'webhooks' }
  if (parts[0] === 'keys') return { page: 'keys' }
  if (parts[0] === 'apps') return { page: 'apps' }
  if (parts[0] === 'identity-providers') return { page: 'identity-providers' }
  if (parts[0] === 'events') return { page: 'events' }
  // The page after signing in, and where an unknown place lands.
  return { page: 'overview' }
}

export const hrefOf = (route: Route): string => {
  if (route.page === 'new-webhook') return '#/webhooks/new'
  if (route.page === 'webhook') return `#/webhooks/${encodeURIComponent(route.hookId)}`
  return `#/${route.page}`
}

let flash: string | null = null

/** Goes to `route`, with a message the next page shows once (what the last action did). */
export function navigate(route: Route, message?: string): void {
  flash = message ?? null
  location.hash = hrefOf(route)
}

export function takeFlash(): string | null {
  const message = flash
  flash = null
  return message
}
