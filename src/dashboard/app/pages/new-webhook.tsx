import { useState } from 'preact/hooks'
import { api, idempotencyKey } from '../api.ts'
import { ErrorNotice, PageHeading, SecretOnce, useAction, useLoad } from '../components.tsx'
import { hrefOf } from '../navigation.ts'
import { filterFor, filteredContacts } from '../filter.ts'
import type { CreatedHook, EventType, Hook } from '../types.ts'
import { PublicKey } from './webhook-signature.tsx'

export function NewWebhookPage({ accountId }: { accountId: string }) {
  const eventTypes = useLoad(() => api<{ data: EventType[] }>('GET', '/event-types'), [])
  const create = useAction()
  const [created, setCreated] = useState<CreatedHook | null>(null)
  // One key per filled-in form: a double submit or a retry after a network error creates one webhook.
  const [attemptKey, setAttemptKey] = useState(idempotencyKey)
  // The filter's label follows the event chosen: its key is the recipient for outcomes, the sender for inbound messages.
  const [picked, setPicked] = useState<Hook['event'] | null>(null)
  const chosenEvent = picked ?? eventTypes.data?.data[0]?.type ?? 'message.delivered'
  // An ed25519 webhook takes no secret of the owner's: the field goes while it is chosen.
  const [scheme, setScheme] = useState<Hook['signature']>('hmac')

  const submit = (event: SubmitEvent) => {
    event.preventDefault()
    const form = new FormData(event.currentTarget as HTMLFormElement)
    const secret = scheme === 'hmac' ? String(form.get('secret') ?? '').trim() : ''
    const type = String(form.get('event')) as Hook['event']
    const filter = filterFor(type, String(form.get('filter') ?? ''))
    void create.run(async () => {
      const hook = await api<CreatedHook>(
        'POST',
        `/account/${accountId}/hooks`,
        {
          event: type,
          target_url: String(form.get('target_url') ?? '').trim(),
          ...(scheme === 'ed25519' ? { signature: scheme } : {}),
          ...(secret ? { secret } : {}),
          ...(filter ? { filter } : {}),
        },
        { 'idempotency-key': attemptKey },
      )
      setCreated(hook)
      setAttemptKey(idempotencyKey())
    })
  }

  if (created) {
    return (
      <>
        <PageHeading>Webhook created</PageHeading>
        {created.secret ? (
          <SecretOnce title="Signing secret" secret={created.secret}>
            <p>
              Your server verifies each delivery's <code>webhook-signature</code> with it (Standard Webhooks).
            </p>
          </SecretOnce>
        ) : (
          created.public_key && (
            <section class="card" aria-labelledby="public-key-title">
              <h2 id="public-key-title">Public key</h2>
              <PublicKey id="public-key" label="Public key" value={created.public_key} />
              <p>
                Your server verifies each delivery's <code>webhook-signature</code> (<code>v1a</code>, Ed25519) with it. It is public and stays on
                the webhook's page: the private key that signs never leaves the service.
              </p>
            </section>
          )
        )}
        <p>
          <a class="button primary" href={hrefOf({ page: 'webhook', hookId: created.id })}>
            Open the webhook
          </a>{' '}
          <a href={hrefOf({ page: 'webhooks' })}>Back to webhooks</a>
        </p>
      </>
    )
  }

  return (
    <>
      <PageHeading>New webhook</PageHeading>
      <form class="card" onSubmit={submit} aria-describedby="new-webhook-help">
        <p id="new-webhook-help">We send a signed POST to your endpoint each time the event happens, and retry until it answers 2xx.</p>
        <label for="event">Event</label>
        <select id="event" name="event" required onChange={(change) => setPicked((change.currentTarget as HTMLSelectElement).value as Hook['event'])}>
          {(eventTypes.data?.data ?? []).map((type) => (
            <option key={type.type} value={type.type}>
              {type.type}: {type.description}
            </option>
          ))}
        </select>
        <ErrorNotice error={eventTypes.error} action="Loading the event types" />
        <label for="target_url">Endpoint or broker URL</label>
        <input id="target_url" name="target_url" type="url" inputMode="url" required maxLength={2048} placeholder="https://example.com/webhooks" autoComplete="off" aria-describedby="target-help" />
        <p class="hint" id="target-help">
          {"An https endpoint, a RabbitMQ exchange (amqps://user:password@host/vhost?exchange=…&routing_key=…) or a NATS JetStream subject (tls://user:password@host?subject=…). A broker's password is kept sealed and shown as ***."}
        </p>
        <label for="filter">Only these {filteredContacts(chosenEvent)} (optional)</label>
        <textarea id="filter" name="filter" rows={3} autoComplete="off" spellcheck={false} placeholder="+14155550123, +14155550124" aria-describedby="filter-help" />
        <p class="hint" id="filter-help">
          Up to 10 numbers in E.164 form, separated by commas or line breaks. Empty: every event of this type.
        </p>
        <fieldset class="choices" aria-describedby="signature-help">
          <legend>Signature</legend>
          <label class="choice">
            <input type="radio" name="signature" value="hmac" checked={scheme === 'hmac'} onChange={() => setScheme('hmac')} /> HMAC-SHA256: your server
            verifies with a shared secret
          </label>
          <label class="choice">
            <input type="radio" name="signature" value="ed25519" checked={scheme === 'ed25519'} onChange={() => setScheme('ed25519')} /> Ed25519: your server
            verifies with a public key; only the service holds the key that signs
          </label>
        </fieldset>
        <p class="hint" id="signature-help">
          Both are Standard Webhooks signatures (<code>v1</code> and <code>v1a</code>) of the same headers and body.
        </p>
        {scheme === 'hmac' && (
          <details>
            <summary>Use a signing secret of your own (optional)</summary>
            <label for="secret">Signing secret</label>
            <input id="secret" name="secret" type="text" maxLength={100} placeholder="whsec_…" autoComplete="off" spellcheck={false} aria-describedby="secret-help" />
            <p class="hint" id="secret-help">
              Leave empty for a new one. A secret you already use lets one receiver verify several subscriptions.
            </p>
          </details>
        )}
        <ErrorNotice error={create.error} action="Creating the webhook" />
        <div class="actions">
          <button type="submit" class="primary" disabled={create.busy}>
            {create.busy ? 'Creating…' : 'Create webhook'}
          </button>
          <a href={hrefOf({ page: 'webhooks' })}>Cancel</a>
        </div>
      </form>
    </>
  )
}
