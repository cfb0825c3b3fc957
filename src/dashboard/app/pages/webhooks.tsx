import { api } from '../api.ts'
import { Notice, PageHeading, StatusBadge, Time, usePages } from '../components.tsx'
import { PagedList, RowsTable } from '../list.tsx'
import { hrefOf } from '../navigation.ts'
import type { Hook, Page } from '../types.ts'

export function WebhooksPage({ accountId, flash }: { accountId: string; flash: string | null }) {
  const hooks = usePages(
    (cursor) => api<Page<Hook>>('GET', `/account/${accountId}/hooks${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ''}`),
    [accountId],
  )
  return (
    <>
      <div class="page-title">
        <PageHeading>Webhooks</PageHeading>
        <a class="button primary" href={hrefOf({ page: 'new-webhook' })}>
          New webhook
        </a>
      </div>
      {flash && <Notice takeFocus>{flash}</Notice>}
      <PagedList
        pages={hooks}
        action="Loading the webhooks"
        empty={
          <>
            <p>No webhooks yet. A webhook sends your server a signed POST when a message is delivered, fails, or a contact writes back.</p>
            <p>
              <a href={hrefOf({ page: 'new-webhook' })}>Create your first webhook</a>, or try one with <code>bun run cli listen</code> on your machine.
            </p>
          </>
        }
      >
        <RowsTable
          id="webhooks"
          caption="Your webhook subscriptions, newest first"
          columns={['Endpoint', 'Event', 'Status', 'Created']}
          items={hooks.items}
          row={(hook) => (
            <tr key={hook.id}>
              <td data-label="Endpoint">
                <a class="url" href={hrefOf({ page: 'webhook', hookId: hook.id })}>
                  {hook.target_url}
                </a>
              </td>
              <td data-label="Event">
                <code>{hook.event}</code>
              </td>
              <td data-label="Status">
                <StatusBadge status={hook.status} />
              </td>
              <td data-label="Created">
                <Time iso={hook.created_at} />
              </td>
            </tr>
          )}
        />
      </PagedList>
    </>
  )
}
