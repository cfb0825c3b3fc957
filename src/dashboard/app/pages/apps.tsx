import { useState } from 'preact/hooks'
import { SCOPE_DESCRIPTIONS, isScope } from '../../../auth/scopes.ts'
import { api } from '../api.ts'
import { ConfirmButton, ErrorNotice, Notice, PageHeading, StatusBadge, Time, useAction, useLoad, usePages } from '../components.tsx'
import { PagedList, RowsTable } from '../list.tsx'
import { settings } from '../settings.ts'
import { currentGrantId } from '../session.ts'
import type { ConnectedApp, EventSubscription, Page } from '../types.ts'

const scopeInWords = (scope: string) => (isScope(scope) ? SCOPE_DESCRIPTIONS[scope] : scope)

/** The arguments of an agent's event subscription in words: its filter (docs/api.md#filters), or every event. */
function argumentsInWords(args: Record<string, unknown>): string {
  const [key, numbers] = Object.entries(args)[0] ?? []
  return Array.isArray(numbers) ? `${key === 'from' ? 'from' : 'to'} ${numbers.join(', ')}` : 'every event'
}

/** An agent's MCP event subscriptions (docs/mcp.md#events), each endable; nothing when it holds none. */
function EventSubscriptions({ accountId, grantId, onEnded }: { accountId: string; grantId: string; onEnded(message: string): void }) {
  const subscriptions = useLoad(() => api<{ data: EventSubscription[] }>('GET', `/account/${accountId}/grants/${grantId}/event-subscriptions`), [accountId, grantId])
  const end = useAction()
  if (subscriptions.error) return <ErrorNotice error={subscriptions.error} action="Loading its event subscriptions" />
  const items = subscriptions.data?.data ?? []
  if (items.length === 0) return null
  return (
    <>
      <p>It is told of these events:</p>
      <RowsTable
        class="event-subscriptions"
        columns={['Event', 'Which', 'Sent to', 'State', 'Ends']}
        actions
        items={items}
        row={(subscription) => (
          <tr key={subscription.id} data-subscription-id={subscription.id}>
            <td data-label="Event" class="nowrap">{subscription.event}</td>
            <td data-label="Which">{argumentsInWords(subscription.arguments)}</td>
            <td data-label="Sent to" class="url">{subscription.callback_url}</td>
            <td data-label="State" class="nowrap">
              <StatusBadge status={subscription.status} />
              {subscription.circuit !== 'closed' && ` circuit ${subscription.circuit.replace('_', '-')}`}
            </td>
            <td data-label="Ends"><Time iso={subscription.expires_at} /></td>
            <td class="nowrap">
              <ConfirmButton
                label="End"
                question={`Stop telling it of ${subscription.event}? It can subscribe again while it has access.`}
                confirmLabel="End subscription"
                busy={end.busy}
                onConfirm={() =>
                  end.run(async () => {
                    await api('DELETE', `/account/${accountId}/grants/${grantId}/event-subscriptions/${subscription.id}`)
                    await subscriptions.reload()
                    onEnded(`Ended its ${subscription.event} subscription.`)
                  })
                }
              />
            </td>
          </tr>
        )}
      />
      <ErrorNotice error={end.error} action="Ending the subscription" />
    </>
  )
}

function GrantCard({ accountId, grant, onRevoked, onEnded }: { accountId: string; grant: ConnectedApp; onRevoked(message: string): void; onEnded(message: string): void }) {
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
      <EventSubscriptions accountId={accountId} grantId={grant.id} onEnded={onEnded} />
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
      <PagedList
        pages={grants}
        action="Loading the connected apps"
        empty={<p>No app or agent has access. When one asks (an MCP client, an app using OAuth), you approve it on the consent page and it appears here.</p>}
      >
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
              onEnded={setMessage}
            />
          ))}
        </ul>
      </PagedList>
    </>
  )
}
