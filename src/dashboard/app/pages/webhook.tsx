import { useState } from 'preact/hooks'
import { api, idempotencyKey } from '../api.ts'
import { ConfirmButton, ErrorNotice, Notice, PageHeading, SecretOnce, StatusBadge, Time, useAction, useLoad, usePages } from '../components.tsx'
import { PagedList } from '../list.tsx'
import { describeAttempt } from '../format.ts'
import { hrefOf, navigate } from '../navigation.ts'
import { contactsOf, filterFor, filteredContacts } from '../filter.ts'
import type { Delivery, DeliveryDetail, Hook, Page, RotatedHook, TestResult } from '../types.ts'
import { WebhookHealth } from './webhook-health.tsx'
import { SignatureSection, signatureName } from './webhook-signature.tsx'

const DELIVERY_STATES = ['pending', 'succeeded', 'failed', 'canceled'] as const

/** After a retry the attempt runs in the background: the page looks again until it has happened (at most ~15 s). */
async function waitForNextAttempt(path: string, attemptsBefore: number): Promise<DeliveryDetail> {
  let latest = await api<DeliveryDetail>('GET', path)
  for (let tries = 0; tries < 30 && latest.attempts <= attemptsBefore; tries++) {
    await new Promise((resolve) => setTimeout(resolve, 500))
    latest = await api<DeliveryDetail>('GET', path)
  }
  return latest
}

function Attempts({ detail }: { detail: DeliveryDetail }) {
  if (detail.attempt_log.length === 0) return <p class="muted">No attempt yet.</p>
  return (
    <ol class="attempts">
      {detail.attempt_log.map((attempt) => (
        <li key={attempt.id}>
          <p>
            <Time iso={attempt.at} />: {describeAttempt(attempt)}
          </p>
          {attempt.response_snippet && (
            <details>
              <summary>Response</summary>
              <pre>{attempt.response_snippet}</pre>
            </details>
          )}
        </li>
      ))}
    </ol>
  )
}

function DeliveryRow({ accountId, hookId, delivery }: { accountId: string; hookId: string; delivery: Delivery }) {
  const path = `/account/${accountId}/hooks/${hookId}/deliveries/${delivery.id}`
  const [detail, setDetail] = useState<DeliveryDetail | null>(null)
  const [shown, setShown] = useState(false)
  const [message, setMessage] = useState<string | null>(null)
  const action = useAction()
  const current = detail ?? delivery

  const toggle = () =>
    action.run(async () => {
      if (!shown && !detail) setDetail(await api<DeliveryDetail>('GET', path))
      setShown(!shown)
    })
  const retry = () =>
    action.run(async () => {
      setMessage('Sending again…')
      await api('POST', `${path}/retry`)
      const latest = await waitForNextAttempt(path, current.attempts)
      setDetail(latest)
      setShown(true)
      setMessage(latest.last_attempt ? `Sent again: ${describeAttempt(latest.last_attempt)}. Now ${latest.state}.` : 'Queued: it will be sent shortly.')
    })

  return (
    <li class="delivery" data-delivery-id={delivery.id}>
      <div class="delivery-summary">
        <div>
          <code>{delivery.event_type}</code> {delivery.test && <span class="badge">test</span>} <StatusBadge status={current.state} />
        </div>
        <div class="muted">
          Event <code>{delivery.event_id}</code> · created <Time iso={delivery.created_at} /> · {current.attempts} {current.attempts === 1 ? 'attempt' : 'attempts'}
          {current.next_attempt_at && (
            <>
              {' '}
              · next <Time iso={current.next_attempt_at} />
            </>
          )}
        </div>
        <div class="last-attempt">{current.last_attempt ? describeAttempt(current.last_attempt) : 'Not attempted yet'}</div>
        <div class="actions">
          <button type="button" aria-expanded={shown} onClick={toggle} disabled={action.busy}>
            {shown ? 'Hide attempts' : 'Attempts'}
          </button>
          <button type="button" onClick={retry} disabled={action.busy}>
            Retry
          </button>
        </div>
      </div>
      {message && <Notice>{message}</Notice>}
      <ErrorNotice error={action.error} />
      {shown && detail && <Attempts detail={detail} />}
    </li>
  )
}

function Deliveries({ accountId, hook, refreshKey }: { accountId: string; hook: Hook; refreshKey: number }) {
  const [state, setState] = useState('')
  const [own, setOwn] = useState(0)
  const deliveries = usePages((cursor) => {
    const query = new URLSearchParams()
    if (state) query.set('state', state)
    if (cursor) query.set('cursor', cursor)
    return api<Page<Delivery>>('GET', `/account/${accountId}/hooks/${hook.id}/deliveries?${query}`)
  }, [accountId, hook.id, state, refreshKey, own])

  return (
    <section aria-labelledby="deliveries-title">
      <h2 id="deliveries-title">Deliveries</h2>
      <div class="toolbar">
        <label for="delivery-state">Show</label>
        <select id="delivery-state" value={state} onChange={(event) => setState((event.currentTarget as HTMLSelectElement).value)}>
          <option value="">All deliveries</option>
          {DELIVERY_STATES.map((value) => (
            <option key={value} value={value}>
              {value}
            </option>
          ))}
        </select>
        <button type="button" onClick={() => setOwn(own + 1)} disabled={deliveries.loading}>
          Refresh
        </button>
      </div>
      <PagedList
        pages={deliveries}
        action="Loading the deliveries"
        empty={<p>{state ? `No ${state} deliveries.` : 'No deliveries yet. Send a test event above, or send a message: its outcome is delivered here.'}</p>}
      >
        <ul class="deliveries" id="deliveries">
          {deliveries.items.map((delivery) => (
            <DeliveryRow key={delivery.id} accountId={accountId} hookId={hook.id} delivery={delivery} />
          ))}
        </ul>
      </PagedList>
      <Recover accountId={accountId} hookId={hook.id} onRecovered={() => setOwn(own + 1)} />
    </section>
  )
}

function Recover({ accountId, hookId, onRecovered }: { accountId: string; hookId: string; onRecovered(): void }) {
  const recover = useAction()
  const [message, setMessage] = useState<string | null>(null)
  const submit = (event: SubmitEvent) => {
    event.preventDefault()
    const since = new FormData(event.currentTarget as HTMLFormElement).get('since')
    void recover.run(async () => {
      const result = await api<{ requeued: number }>('POST', `/account/${accountId}/hooks/${hookId}/recover`, { since: new Date(String(since)).toISOString() })
      setMessage(result.requeued === 0 ? 'No failed deliveries since then.' : `${result.requeued} ${result.requeued === 1 ? 'delivery' : 'deliveries'} queued again.`)
      onRecovered()
    })
  }
  return (
    <form class="card" onSubmit={submit} aria-labelledby="recover-title">
      <h3 id="recover-title">Send failed deliveries again</h3>
      <p class="hint">After an outage on your side: every failed or canceled delivery created since this time is queued again.</p>
      <label for="since">Since</label>
      <input id="since" name="since" type="datetime-local" required step={1} />
      <div class="actions">
        <button type="submit" disabled={recover.busy}>
          Send again
        </button>
      </div>
      {message && <Notice>{message}</Notice>}
      <ErrorNotice error={recover.error} action="Recovering" />
    </form>
  )
}

function EditForm({ accountId, hook, onSaved }: { accountId: string; hook: Hook; onSaved(hook: Hook): void }) {
  const save = useAction()
  const [saved, setSaved] = useState(false)
  const submit = (event: SubmitEvent) => {
    event.preventDefault()
    const form = new FormData(event.currentTarget as HTMLFormElement)
    const limit = String(form.get('rate_limit_per_s') ?? '').trim()
    void save.run(async () => {
      setSaved(false)
      const target = String(form.get('target_url') ?? '').trim()
      const updated = await api<Hook>('PATCH', `/account/${accountId}/hooks/${hook.id}`, {
        // Unchanged, a broker URL still reads *** for its password: leave it out, and the stored one stays.
        ...(target === hook.target_url ? {} : { target_url: target }),
        rate_limit_per_s: limit === '' ? null : Number(limit),
        filter: filterFor(hook.event, String(form.get('filter') ?? '')),
      })
      setSaved(true)
      onSaved(updated)
    })
  }
  return (
    <form class="card" onSubmit={submit} aria-labelledby="edit-title">
      <h2 id="edit-title">Settings</h2>
      <label for="edit-target-url">Endpoint or broker URL</label>
      <input id="edit-target-url" name="target_url" type="url" required maxLength={2048} value={hook.target_url} autoComplete="off" />
      <label for="edit-rate-limit">Rate limit (deliveries per second)</label>
      <input id="edit-rate-limit" name="rate_limit_per_s" type="number" min={1} max={10000} step={1} value={hook.rate_limit_per_s ?? ''} aria-describedby="rate-limit-help" />
      <p class="hint" id="rate-limit-help">
        Empty: as fast as your endpoint answers well.
      </p>
      <label for="edit-filter">Only these {filteredContacts(hook.event)}</label>
      <textarea id="edit-filter" name="filter" rows={3} autoComplete="off" spellcheck={false} value={contactsOf(hook.filter).join('\n')} aria-describedby="filter-help" />
      <p class="hint" id="filter-help">
        Up to 10 numbers in E.164 form, separated by commas or line breaks. Empty: every event of this type.
      </p>
      <div class="actions">
        <button type="submit" class="primary" disabled={save.busy}>
          Save
        </button>
      </div>
      {saved && <Notice>Saved. The signing {hook.signature === 'ed25519' ? 'key' : 'secret'} is unchanged.</Notice>}
      <ErrorNotice error={save.error} action="Saving" />
    </form>
  )
}

export function WebhookPage({ accountId, hookId, flash }: { accountId: string; hookId: string; flash: string | null }) {
  const path = `/account/${accountId}/hooks/${hookId}`
  const loaded = useLoad(() => api<Hook>('GET', path), [path])
  const [hook, setHook] = useState<Hook | null>(null)
  const [message, setMessage] = useState<string | null>(flash)
  const [testResult, setTestResult] = useState<TestResult | null>(null)
  const [rotated, setRotated] = useState<RotatedHook | null>(null)
  const [deliveriesKey, setDeliveriesKey] = useState(0)
  const action = useAction()
  const current = hook ?? loaded.data

  if (!current) {
    return (
      <>
        <PageHeading>Webhook</PageHeading>
        <ErrorNotice error={loaded.error} action="Loading the webhook" />
        {loaded.error ? <a href={hrefOf({ page: 'webhooks' })}>Back to webhooks</a> : <p>Loading…</p>}
      </>
    )
  }

  const update = (body: Record<string, unknown>, done: string) =>
    action.run(async () => {
      setHook(await api<Hook>('PATCH', path, body))
      setMessage(done)
    })
  const sendTest = () =>
    action.run(async () => {
      setTestResult(null)
      setTestResult(await api<TestResult>('POST', `${path}/test`))
      setDeliveriesKey((key) => key + 1)
    })
  const rotate = () =>
    action.run(async () => {
      const result = await api<RotatedHook>('POST', `${path}/secret/rotate`, undefined, { 'idempotency-key': idempotencyKey() })
      setRotated(result)
      setHook(result)
    })
  const enable = () =>
    action.run(async () => {
      setHook(await api<Hook>('POST', `${path}/enable`))
      setMessage('Re-enabled: deliveries are sent again.')
    })
  const remove = () =>
    action.run(async () => {
      await api('DELETE', path)
      navigate({ page: 'webhooks' }, `Deleted the webhook to ${current.target_url}.`)
    })

  return (
    <>
      <p class="breadcrumb">
        <a href={hrefOf({ page: 'webhooks' })}>Webhooks</a>
      </p>
      <PageHeading>
        <span class="url">{current.target_url}</span>
      </PageHeading>
      <dl class="facts">
        <dt>Event</dt>
        <dd>
          <code>{current.event}</code>
        </dd>
        <dt>Status</dt>
        <dd>
          <StatusBadge status={current.status} /> {current.disabled_reason && <span>{current.disabled_reason}</span>}
        </dd>
        <dt>Filter</dt>
        <dd id="filter-fact">{current.filter ? `only ${filteredContacts(current.event)} ${contactsOf(current.filter).join(', ')}` : `none: every ${current.event} event`}</dd>
        <dt>Rate limit</dt>
        <dd>{current.rate_limit_per_s === null ? 'none' : `${current.rate_limit_per_s} per second`}</dd>
        <dt>Circuit</dt>
        <dd>
          <CircuitState circuit={current.circuit} />
        </dd>
        <dt>Signature</dt>
        <dd id="signature-fact">{signatureName(current.signature)}</dd>
        <dt>Created</dt>
        <dd>
          <Time iso={current.created_at} />
        </dd>
        <dt>Id</dt>
        <dd>
          <code>{current.id}</code>
        </dd>
      </dl>
      {message && <Notice>{message}</Notice>}
      <div class="actions" role="group" aria-label="Webhook actions">
        <button type="button" class="primary" onClick={sendTest} disabled={action.busy}>
          Send test event
        </button>
        {current.status === 'active' && (
          <button type="button" onClick={() => update({ status: 'paused' }, 'Paused: deliveries are recorded and sent when you resume.')} disabled={action.busy}>
            Pause
          </button>
        )}
        {current.status === 'paused' && (
          <button type="button" onClick={() => update({ status: 'active' }, 'Resumed: waiting deliveries are being sent.')} disabled={action.busy}>
            Resume
          </button>
        )}
        {current.status === 'disabled' && (
          <button type="button" onClick={enable} disabled={action.busy}>
            Re-enable
          </button>
        )}
        <ConfirmButton
          label={current.signature === 'ed25519' ? 'Rotate key' : 'Rotate secret'}
          question={
            current.signature === 'ed25519'
              ? 'Replace the signing key pair? The old key keeps signing for 24 hours; give your server the new public key.'
              : 'Replace the signing secret? The old one keeps signing for 24 hours.'
          }
          confirmLabel="Rotate"
          busy={action.busy}
          onConfirm={rotate}
        />
        <ConfirmButton
          label="Delete"
          question="Delete this webhook? Its waiting deliveries are canceled."
          confirmLabel="Delete webhook"
          busy={action.busy}
          onConfirm={remove}
        />
      </div>
      <ErrorNotice error={action.error} />
      {testResult && (
        <div class={`notice ${testResult.error ? 'error' : 'success'}`} role="status" id="test-result">
          <p>
            Test event sent. {describeAttempt(testResult)}.
          </p>
        </div>
      )}
      {rotated?.secret && rotated.previous_secret_expires_at && (
        <SecretOnce title="New signing secret" secret={rotated.secret}>
          <p>
            The previous secret also signs deliveries until <Time iso={rotated.previous_secret_expires_at} />.
          </p>
        </SecretOnce>
      )}
      {rotated?.signature === 'ed25519' && rotated.previous_public_key_expires_at && (
        <Notice>
          New key pair made: deliveries are signed with it and, until <Time iso={rotated.previous_public_key_expires_at} />, with the previous key too. Give
          your server the new public key below.
        </Notice>
      )}
      <SignatureSection hook={current} />
      <WebhookHealth accountId={accountId} hookId={current.id} refreshKey={deliveriesKey} />
      <EditForm accountId={accountId} hook={current} onSaved={setHook} />
      <Deliveries accountId={accountId} hook={current} refreshKey={deliveriesKey} />
    </>
  )
}

/** docs/webhooks.md#when-an-endpoint-keeps-failing, in a sentence. */
function CircuitState({ circuit }: { circuit: Hook['circuit'] }) {
  if (circuit.state === 'closed') {
    return <span>closed{circuit.consecutive_failures > 0 ? ` (${circuit.consecutive_failures} failed in a row)` : ''}</span>
  }
  return (
    <span>
      <strong>{circuit.state === 'open' ? 'open' : 'half open'}</strong>: the receiver failed {circuit.consecutive_failures} times in a row
      {circuit.opened_at && (
        <>
          {' '}
          (since <Time iso={circuit.opened_at} />)
        </>
      )}
      ; deliveries wait, and one goes out as a probe
      {circuit.state === 'open' && circuit.next_probe_at ? (
        <>
          {' '}
          at <Time iso={circuit.next_probe_at} />
        </>
      ) : (
        ' now'
      )}
      .
    </span>
  )
}
