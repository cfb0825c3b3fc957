import { useState } from 'preact/hooks'
import { api, idempotencyKey } from '../api.ts'
import { ConfirmButton, ErrorNotice, Notice, PageHeading, Time, useAction, usePages } from '../components.tsx'
import { PagedList, RowsTable } from '../list.tsx'
import type { IdentityProvider, Page, SubjectLink } from '../types.ts'

/** Client ids typed one per line, or separated by commas or spaces. */
const clientIdsOf = (text: string) => text.split(/[\s,]+/).filter(Boolean)

const MAPPING_IN_WORDS: Record<IdentityProvider['subject_mapping'], string> = {
  email: 'by email: the email in its assertion is the team member\'s sign-in email',
  subject: 'by subject: each subject is linked to a team member below',
}

/** A subject-mapping provider's links: who each of its subjects is here, linking and unlinking. */
function SubjectLinks({ accountId, provider, onChanged }: { accountId: string; provider: IdentityProvider; onChanged(message: string): void }) {
  const [version, setVersion] = useState(0)
  const base = `/account/${accountId}/identity-providers/${provider.id}/subjects`
  const links = usePages((cursor) => api<Page<SubjectLink>>('GET', `${base}${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ''}`), [base, version])
  const link = useAction()
  const unlink = useAction()
  const [attemptKey, setAttemptKey] = useState(idempotencyKey)
  const field = (name: string) => `${name}-${provider.id}`

  const submit = (event: SubmitEvent) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const values = new FormData(form)
    const subject = String(values.get('subject') ?? '').trim()
    const email = String(values.get('email') ?? '').trim()
    void link.run(async () => {
      await api<SubjectLink>('POST', base, { subject, email }, { 'idempotency-key': attemptKey })
      setAttemptKey(idempotencyKey())
      form.reset()
      setVersion((value) => value + 1)
      onChanged(`Linked ${subject} to ${email}.`)
    })
  }

  return (
    <section aria-labelledby={field('links-title')}>
      <h3 id={field('links-title')}>Linked subjects</h3>
      <PagedList pages={links} action="Loading the linked subjects" empty={<p>No subject is linked yet: its assertions name nobody until you link them.</p>}>
        <RowsTable
          caption={`Subjects of ${provider.issuer} and the team members they are`}
          columns={['Subject', 'Team member', 'Linked']}
          actions
          items={links.items}
          row={(item) => (
            <tr key={item.id} data-link-id={item.id}>
              <td data-label="Subject">
                <code class="wrap">{item.subject}</code>
              </td>
              <td data-label="Team member">{item.email}</td>
              <td data-label="Linked">
                <Time iso={item.created_at} />
              </td>
              <td>
                <ConfirmButton
                  label="Unlink"
                  question={`Unlink ${item.subject}? Agents lose the access they got for ${item.email} through this provider.`}
                  confirmLabel="Unlink"
                  busy={unlink.busy}
                  onConfirm={() =>
                    unlink.run(async () => {
                      await api('DELETE', `${base}/${item.id}`)
                      setVersion((value) => value + 1)
                      onChanged(`Unlinked ${item.subject}.`)
                    })
                  }
                />
              </td>
            </tr>
          )}
        />
      </PagedList>
      <ErrorNotice error={unlink.error} action="Unlinking" />
      <form class="inline-form" onSubmit={submit} aria-labelledby={field('link-title')}>
        <h4 id={field('link-title')}>Link a subject</h4>
        <label for={field('subject')}>Subject (the provider's user id)</label>
        <input id={field('subject')} name="subject" required maxLength={1024} autoComplete="off" spellcheck={false} placeholder="e.g. 00u8a9kq2zTr5vH3x697" />
        <label for={field('email')}>Team member's sign-in email</label>
        <input id={field('email')} name="email" type="email" required maxLength={320} autoComplete="off" />
        <button type="submit" disabled={link.busy}>
          Link
        </button>
        <ErrorNotice error={link.error} action="Linking" />
      </form>
    </section>
  )
}

function ProviderCard({ accountId, provider, onChanged }: { accountId: string; provider: IdentityProvider; onChanged(message: string, removed?: boolean): void }) {
  const remove = useAction()
  return (
    <li class="card provider" data-provider-id={provider.id}>
      <h2 class="url">{provider.issuer}</h2>
      <dl class="facts">
        <dt>Signing keys</dt>
        <dd class="url">{provider.jwks_uri}</dd>
        <dt>Agents it may connect</dt>
        <dd>
          <ul class="plain">
            {provider.allowed_client_ids.map((clientId) => (
              <li key={clientId}>
                <code class="wrap">{clientId}</code>
              </li>
            ))}
          </ul>
        </dd>
        <dt>Who is who</dt>
        <dd>{MAPPING_IN_WORDS[provider.subject_mapping]}</dd>
        <dt>Trusted since</dt>
        <dd>
          <Time iso={provider.created_at} />
        </dd>
      </dl>
      {provider.subject_mapping === 'subject' && <SubjectLinks accountId={accountId} provider={provider} onChanged={(message) => onChanged(message)} />}
      <ConfirmButton
        label="Stop trusting"
        question={`Stop trusting ${provider.issuer}? Its assertions are refused at once, and the agents it connected lose their access within seconds.`}
        confirmLabel="Stop trusting"
        busy={remove.busy}
        onConfirm={() =>
          remove.run(async () => {
            await api('DELETE', `/account/${accountId}/identity-providers/${provider.id}`)
            onChanged(`No longer trusting ${provider.issuer}.`, true)
          })
        }
      />
      <ErrorNotice error={remove.error} action="Removing the provider" />
    </li>
  )
}

export function IdentityProvidersPage({ accountId }: { accountId: string }) {
  const [version, setVersion] = useState(0)
  const [message, setMessage] = useState<{ text: string; takeFocus: boolean } | null>(null)
  const providers = usePages(
    (cursor) => api<Page<IdentityProvider>>('GET', `/account/${accountId}/identity-providers${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ''}`),
    [accountId, version],
  )
  const create = useAction()
  // One key per filled-in form: a double submit or a retry after a network error registers one provider.
  const [attemptKey, setAttemptKey] = useState(idempotencyKey)

  const submit = (event: SubmitEvent) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const values = new FormData(form)
    const body = {
      issuer: String(values.get('issuer') ?? '').trim(),
      jwks_uri: String(values.get('jwks_uri') ?? '').trim(),
      allowed_client_ids: clientIdsOf(String(values.get('allowed_client_ids') ?? '')),
      subject_mapping: String(values.get('subject_mapping')),
    }
    void create.run(async () => {
      const provider = await api<IdentityProvider>('POST', `/account/${accountId}/identity-providers`, body, { 'idempotency-key': attemptKey })
      setAttemptKey(idempotencyKey())
      form.reset()
      setMessage({ text: `Now trusting ${provider.issuer}.`, takeFocus: false })
      setVersion((value) => value + 1)
    })
  }

  return (
    <>
      <PageHeading>Identity providers</PageHeading>
      <p>
        Your company's identity provider (Okta, Microsoft Entra ID, …) can connect the AI agents your team uses without a consent screen: it gives an agent a signed
        assertion (an ID-JAG) for a team member, and the agent exchanges it here for access. You choose which providers to trust, which agents they may connect, and who
        each of their users is here. Agents connected this way appear under Connected apps.
      </p>
      <form class="card" onSubmit={submit} aria-labelledby="new-provider-title">
        <h2 id="new-provider-title">Trust a provider</h2>
        <label for="issuer">Issuer</label>
        <input id="issuer" name="issuer" type="url" inputMode="url" required maxLength={2048} placeholder="https://acme.okta.com" autoComplete="off" aria-describedby="issuer-help" />
        <p class="hint" id="issuer-help">
          Exactly as the provider writes it in its assertions (<code>iss</code>).
        </p>
        <label for="jwks_uri">Signing keys URL</label>
        <input id="jwks_uri" name="jwks_uri" type="url" inputMode="url" required maxLength={2048} placeholder="https://acme.okta.com/oauth2/v1/keys" autoComplete="off" />
        <label for="allowed_client_ids">Agents it may connect</label>
        <textarea id="allowed_client_ids" name="allowed_client_ids" rows={3} required autoComplete="off" spellcheck={false} aria-describedby="clients-help" />
        <p class="hint" id="clients-help">
          Their client ids here (<code>cli_…</code>: confidential clients that registered the JWT bearer grant), one per line.
        </p>
        <fieldset class="choices">
          <legend>Who is who</legend>
          <label class="choice">
            <input type="radio" name="subject_mapping" value="email" defaultChecked /> By email: the team member whose sign-in email the assertion carries
          </label>
          <label class="choice">
            <input type="radio" name="subject_mapping" value="subject" /> By subject: I link each of the provider's user ids to a team member
          </label>
        </fieldset>
        <ErrorNotice error={create.error} action="Registering the provider" />
        <div class="actions">
          <button type="submit" class="primary" disabled={create.busy}>
            {create.busy ? 'Saving…' : 'Trust provider'}
          </button>
        </div>
      </form>
      {message && <Notice takeFocus={message.takeFocus}>{message.text}</Notice>}
      <PagedList pages={providers} action="Loading the identity providers" empty={<p>No identity provider is trusted: agents connect only with a team member's consent.</p>}>
        <ul class="providers" id="providers">
          {providers.items.map((provider) => (
            <ProviderCard
              key={provider.id}
              accountId={accountId}
              provider={provider}
              onChanged={(text, removed = false) => {
                setMessage({ text, takeFocus: removed })
                if (removed) setVersion((value) => value + 1)
              }}
            />
          ))}
        </ul>
      </PagedList>
    </>
  )
}
