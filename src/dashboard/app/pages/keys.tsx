import { useState } from 'preact/hooks'
import { api, idempotencyKey } from '../api.ts'
import { ConfirmButton, ErrorNotice, Notice, PageHeading, SecretOnce, Time, useAction, usePages } from '../components.tsx'
import { PagedList, RowsTable } from '../list.tsx'
import { settings } from '../settings.ts'
import type { ApiKey, CreatedApiKey, Page } from '../types.ts'

function KeyRow({ accountId, apiKey, onRevoked }: { accountId: string; apiKey: ApiKey; onRevoked(message: string): void }) {
  const revoke = useAction()
  return (
    <tr>
      <td data-label="Name">{apiKey.name ?? <span class="muted">unnamed</span>}</td>
      <td data-label="Key">
        <code>{apiKey.secret_prefix}…</code>
      </td>
      <td data-label="Created">
        <Time iso={apiKey.created_at} />
      </td>
      <td data-label="Last used">
        <Time iso={apiKey.last_used_at} />
      </td>
      <td data-label="Actions">
        <ConfirmButton
          label="Revoke"
          question={`Revoke ${apiKey.name ?? apiKey.secret_prefix}? Calls with it are refused at once.`}
          confirmLabel="Revoke key"
          busy={revoke.busy}
          onConfirm={() =>
            revoke.run(async () => {
              await api('DELETE', `/account/${accountId}/keys/${apiKey.id}`)
              onRevoked(`Revoked ${apiKey.name ?? apiKey.secret_prefix}.`)
            })
          }
        />
        <ErrorNotice error={revoke.error} action="Revoking" />
      </td>
    </tr>
  )
}

export function KeysPage({ accountId }: { accountId: string }) {
  const [version, setVersion] = useState(0)
  const keys = usePages(
    (cursor) => api<Page<ApiKey>>('GET', `/account/${accountId}/keys${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ''}`),
    [accountId, version],
  )
  const create = useAction()
  const [created, setCreated] = useState<{ secret: string; name: string | null } | null>(null)
  const [message, setMessage] = useState<string | null>(null)

  const submit = (event: SubmitEvent) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const name = String(new FormData(form).get('name') ?? '').trim()
    void create.run(async () => {
      const key = await api<CreatedApiKey>('POST', `/account/${accountId}/keys`, { name }, { 'idempotency-key': idempotencyKey() })
      setCreated({ secret: key.secret, name: key.name })
      setMessage(null)
      form.reset()
      setVersion((value) => value + 1)
    })
  }

  return (
    <>
      <PageHeading>API keys</PageHeading>
      <p>
        An API key acts for the whole account from your servers: pass it as <code>?key=</code>. Keep it out of browsers and apps; give those OAuth instead.
      </p>
      <form class="card inline-form" onSubmit={submit} aria-labelledby="new-key-title">
        <h2 id="new-key-title">Create a key</h2>
        <label for="key-name">Name</label>
        <input id="key-name" name="name" required maxLength={100} placeholder="e.g. production server" autoComplete="off" />
        <button type="submit" class="primary" disabled={create.busy}>
          Create key
        </button>
        <ErrorNotice error={create.error} action="Creating the key" />
      </form>
      {created && (
        <SecretOnce title={`API key ${created.name ?? ''} created`} secret={created.secret}>
          <p>
            Try it: <code class="wrap">curl '{new URL(`${settings.apiBase}/account`, location.origin).href}?key={created.secret}'</code>
          </p>
        </SecretOnce>
      )}
      {message && <Notice takeFocus>{message}</Notice>}
      <PagedList
        pages={keys}
        action="Loading the keys"
        empty={
          <p>
            No API keys. Create one above for your server, or with <code>bun run cli apikey create</code>.
          </p>
        }
      >
        <RowsTable
          id="keys"
          caption="Active API keys, newest first"
          columns={['Name', 'Key', 'Created', 'Last used']}
          actions
          items={keys.items}
          row={(apiKey) => (
            <KeyRow
              key={apiKey.id}
              accountId={accountId}
              apiKey={apiKey}
              onRevoked={(text) => {
                setMessage(text)
                setCreated(null)
                setVersion((value) => value + 1)
              }}
            />
          )}
        />
      </PagedList>
    </>
  )
}
