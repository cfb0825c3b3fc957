import { useState } from 'preact/hooks'
import { SCOPE_DESCRIPTIONS, isScope } from '../../../auth/scopes.ts'
import { api } from '../api.ts'
import { ConfirmButton, EmptyState, ErrorNotice, LoadMore, Notice, PageHeading, Time, useAction, usePages } from '../components.tsx'
import { settings } from '../settings.ts'
import { currentGrantId } from '../session.ts'
import type { ConnectedApp, Page } from '../types.ts'

const scopeInWords = (scope: string) => (isScope(scope) ? SCOPE_DESCRIPTIONS[scope] : scope)

function GrantCard({ accountId, grant, onRevoked }: { accountId: string; grant: ConnectedApp; onRevoked(message: string): void }) {
  const revoke = useAction()
  const name = grant.client_name ?? grant.client_id
  const isDashboard = grant.client_id === settings.clientId
  const isThisSession = grant.id === currentGrantId()
  return (
    <li class="card grant" data-grant-id={grant.id}>
      <h2>
        {name} {isThisSession ? <span class="badge">this session</span> : isDashboard && <span class="badge">another session</span>}
      </h2>
      <p class="muted">
        Connected <Time iso={grant.created_at} /> · last used <Time iso={grant.last_used_at} />
      </p>
      <p>It can:</p>
      <ul>
        {grant.scope.split(' ').filter(Boolean).map((scope) => (
          <li key={scope}>{scopeInWords(scope)}</li>
        ))}
      </ul>
      <ConfirmButton
        label="Revoke access"
        question={isThisSession ? 'Revoke this session? You will be signed out.' : isDashboard ? 'Sign out that dashboard session?' : `Cut off ${name}? Its tokens stop working within seconds.`}
        confirmLabel="Revoke"
        busy={revoke.busy}
        onConfirm={() =>
          revoke.run(async () => {
            await api('DELETE', `/account/${accountId}/grants/${grant.id}`)
            onRevoked(`Revoked the access of ${name}.`)
          })
        }
      />
      <ErrorNotice error={revoke.error} action="Revoking" />
    </li>
  )
}

export function AppsPage({ accountId }: { accountId: string }) {
  const [version, setVersion] = useState(0)
  const [message, setMessage] = useState<string | null>(null)
  const grants = usePages(
    (cursor) => api<Page<ConnectedApp>>('GET', `/account/${accountId}/grants${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ''}`),
    [accountId, version],
  )
  return (
    <>
      <PageHeading>Connected apps</PageHeading>
      <p>Apps and AI agents you or your team allowed to act on this account through OAuth, including sessions of this dashboard.</p>
      {message && <Notice takeFocus>{message}</Notice>}
      <ErrorNotice error={grants.error} action="Loading the connected apps" />
      {grants.data && grants.items.length === 0 && (
        <EmptyState>
          <p>No app or agent has access. When one asks (an MCP client, an app using OAuth), you approve it on the consent page and it appears here.</p>
        </EmptyState>
      )}
      <ul class="grants" id="grants">
        {grants.items.map((grant) => (
          <GrantCard
            key={grant.id}
            accountId={accountId}
            grant={grant}
            onRevoked={(text) => {
              setMessage(text)
              setVersion((value) => value + 1)
            }}
          />
        ))}
      </ul>
      <LoadMore pages={grants} />
    </>
  )
}
