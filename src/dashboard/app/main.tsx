import { render } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import { api, whenSignedOut } from './api.ts'
import { ErrorNotice } from './components.tsx'
import { hrefOf, parseRoute, takeFlash, type Route } from './navigation.ts'
import { completeSignIn, signOut, startSignIn } from './session.ts'
import { settings } from './settings.ts'
import type { Account } from './types.ts'
import { AppsPage } from './pages/apps.tsx'
import { EventsPage } from './pages/events.tsx'
import { IdentityProvidersPage } from './pages/identity-providers.tsx'
import { KeysPage } from './pages/keys.tsx'
import { NewWebhookPage } from './pages/new-webhook.tsx'
import { OverviewPage } from './pages/overview.tsx'
import { WebhookPage } from './pages/webhook.tsx'
import { WebhooksPage } from './pages/webhooks.tsx'

type Phase = { kind: 'starting' } | { kind: 'signed-out'; message: string | null } | { kind: 'failed'; error: unknown } | { kind: 'ready'; account: Account }

const SECTIONS: { route: Route; label: string }[] = [
  { route: { page: 'overview' }, label: 'Overview' },
  { route: { page: 'webhooks' }, label: 'Webhooks' },
  { route: { page: 'keys' }, label: 'API keys' },
  { route: { page: 'apps' }, label: 'Connected apps' },
  { route: { page: 'identity-providers' }, label: 'Identity providers' },
  { route: { page: 'events' }, label: 'Events' },
]

const sectionOf = (route: Route): Route['page'] => (route.page === 'new-webhook' || route.page === 'webhook' ? 'webhooks' : route.page)

function CurrentPage({ route, accountId }: { route: Route; accountId: string }) {
  const flash = takeFlash()
  switch (route.page) {
    case 'overview':
      return <OverviewPage accountId={accountId} />
    case 'webhooks':
      return <WebhooksPage accountId={accountId} flash={flash} />
    case 'new-webhook':
      return <NewWebhookPage accountId={accountId} />
    case 'webhook':
      return <WebhookPage accountId={accountId} hookId={route.hookId} flash={flash} />
    case 'keys':
      return <KeysPage accountId={accountId} />
    case 'apps':
      return <AppsPage accountId={accountId} />
    case 'identity-providers':
      return <IdentityProvidersPage accountId={accountId} />
    case 'events':
      return <EventsPage accountId={accountId} />
  }
}

function SignInPage({ message }: { message: string | null }) {
  return (
    <main class="signin" id="main">
      <h1>Messaging dashboard</h1>
      {message && (
        <p role="status" id="signin-message">
          {message}
        </p>
      )}
      <p>Manage your webhooks, API keys, connected apps and identity providers.</p>
      <button type="button" class="primary" onClick={() => void startSignIn(location.hash)}>
        Sign in
      </button>
    </main>
  )
}

function Dashboard({ account, onSignOut }: { account: Account; onSignOut(): void }) {
  const [route, setRoute] = useState(() => parseRoute(location.hash))
  useEffect(() => {
    const follow = () => setRoute(parseRoute(location.hash))
    addEventListener('hashchange', follow)
    return () => removeEventListener('hashchange', follow)
  }, [])
  const section = sectionOf(route)
  return (
    <>
      <a
        class="skip-link"
        href="#main"
        onClick={(event) => {
          // The fragment holds the page's route: focus the content without changing it.
          event.preventDefault()
          document.getElementById('main')?.focus()
        }}
      >
        Skip to content
      </a>
      <header class="topbar">
        <span class="brand">Messaging</span>
        <span class="account" id="account-name">
          {account.name}
        </span>
        <button type="button" onClick={onSignOut}>
          Sign out
        </button>
      </header>
      <nav aria-label="Dashboard">
        <ul>
          {SECTIONS.map((item) => (
            <li key={item.label}>
              <a href={hrefOf(item.route)} aria-current={section === item.route.page ? 'page' : undefined}>
                {item.label}
              </a>
            </li>
          ))}
        </ul>
      </nav>
      <main id="main" tabIndex={-1}>
        <CurrentPage key={location.hash} route={route} accountId={account.id} />
      </main>
    </>
  )
}

function App() {
  const [phase, setPhase] = useState<Phase>({ kind: 'starting' })
  useEffect(() => {
    whenSignedOut(() => setPhase({ kind: 'signed-out', message: 'Your session has ended (signed out, or its access was revoked). Sign in again.' }))
    void (async () => {
      const outcome = await completeSignIn()
      if (outcome.kind === 'failed') return setPhase({ kind: 'signed-out', message: outcome.message })
      // Not signed in and not coming back from signing in: straight to the sign-in page.
      if (outcome.kind === 'none') return startSignIn(location.hash)
      try {
        setPhase({ kind: 'ready', account: await api<Account>('GET', '/account') })
      } catch (error) {
        setPhase({ kind: 'failed', error })
      }
    })()
  }, [])

  if (phase.kind === 'ready') {
    return (
      <Dashboard
        account={phase.account}
        onSignOut={() => {
          void signOut().then(() => setPhase({ kind: 'signed-out', message: 'You are signed out.' }))
        }}
      />
    )
  }
  if (phase.kind === 'signed-out') return <SignInPage message={phase.message} />
  if (phase.kind === 'failed') {
    return (
      <main class="signin" id="main">
        <h1>Messaging dashboard</h1>
        <ErrorNotice error={phase.error} action="Opening the dashboard" />
        <button type="button" onClick={() => location.reload()}>
          Try again
        </button>
      </main>
    )
  }
  return (
    <main class="signin" id="main">
      <h1>Messaging dashboard</h1>
      <p role="status">Signing in…</p>
    </main>
  )
}

// Signing in returns to PUBLIC_URL's origin, and a session's tokens and PKCE verifier belong to
// one origin: opened under another name (127.0.0.1 for localhost), go to the configured one first.
const home = new URL(settings.redirectUri)
if (location.origin !== home.origin) {
  location.replace(`${home.href}${location.hash}`)
} else {
  // The server's placeholder ("Loading…") goes: Preact renders into an empty container.
  const root = document.getElementById('app')!
  root.replaceChildren()
  render(<App />, root)
}
