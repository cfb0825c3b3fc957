import type { ComponentChildren } from 'preact'
import { useCallback, useEffect, useRef, useState } from 'preact/hooks'
import { ApiProblem, SignedOut } from './api.ts'
import { formatTime } from './format.ts'

export function Time({ iso, empty = 'never' }: { iso: string | null | undefined; empty?: string }) {
  if (!iso) return <span class="muted">{empty}</span>
  return <time dateTime={iso}>{formatTime(iso)}</time>
}

/** The page's heading; it takes the focus when the page opens, so a screen reader announces where the user is. */
export function PageHeading({ children }: { children: ComponentChildren }) {
  const heading = useRef<HTMLHeadingElement>(null)
  useEffect(() => heading.current?.focus(), [])
  return (
    <h1 tabIndex={-1} ref={heading}>
      {children}
    </h1>
  )
}

/** A failure in words, with the request id to quote when asking for help. */
export function ErrorNotice({ error, action }: { error: unknown; action?: string }) {
  if (!error || error instanceof SignedOut) return null
  const problem = error instanceof ApiProblem ? error : null
  const message = error instanceof Error ? error.message : String(error)
  return (
    <div class="notice error" role="alert">
      <p>
        {action ? `${action} failed: ` : ''}
        {message}
      </p>
      {problem && problem.fieldErrors.length > 0 && (
        <ul>
          {problem.fieldErrors.map((field) => (
            <li key={field.path}>
              <code>{field.path}</code> {field.message}
            </li>
          ))}
        </ul>
      )}
      {problem?.requestId && (
        <p class="request-id">
          Request id: <code>{problem.requestId}</code>
        </p>
      )}
    </div>
  )
}

/**
 * What an action did, read out politely by screen readers. `takeFocus` when the action removed
 * what had the focus (a revoked key's row): the focus lands on what happened, not on the page's start.
 */
export function Notice({ children, takeFocus = false }: { children: ComponentChildren; takeFocus?: boolean }) {
  const notice = useRef<HTMLDivElement>(null)
  useEffect(() => {
    if (takeFocus) notice.current?.focus()
  }, [takeFocus, children])
  return (
    <div class="notice success" role="status" tabIndex={takeFocus ? -1 : undefined} ref={notice}>
      {children}
    </div>
  )
}

export interface Loaded<T> {
  data: T | undefined
  error: unknown
  loading: boolean
  reload(): Promise<void>
}

/** Loads what a page shows, again whenever `key` changes or `reload()` is called. */
export function useLoad<T>(load: () => Promise<T>, key: unknown[]): Loaded<T> {
  const [state, setState] = useState<{ data: T | undefined; error: unknown; loading: boolean }>({ data: undefined, error: null, loading: true })
  const latest = useRef(0)
  const reload = useCallback(async () => {
    const run = ++latest.current
    setState((previous) => ({ ...previous, loading: true }))
    try {
      const data = await load()
      if (run === latest.current) setState({ data, error: null, loading: false })
    } catch (error) {
      if (run === latest.current) setState((previous) => ({ ...previous, error, loading: false }))
    }
  }, key)
  useEffect(() => {
    void reload()
  }, [reload])
  return { ...state, reload }
}

/**
 * Runs one user action at a time: `busy` while it runs (its button is disabled), its failure kept
 * to show next to it. The action's own result is up to the caller.
 */
export function useAction() {
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<unknown>(null)
  const run = useCallback(async (action: () => Promise<void>) => {
    setBusy(true)
    setError(null)
    try {
      await action()
    } catch (failure) {
      setError(failure)
    } finally {
      setBusy(false)
    }
  }, [])
  return { busy, error, run, clearError: () => setError(null) }
}

/**
 * A destructive button that asks first, in place: the question takes the focus on Cancel, Escape
 * cancels, and focus returns to the button.
 */
export function ConfirmButton(props: { label: string; question: string; confirmLabel: string; busy?: boolean; onConfirm(): void }) {
  const [asking, setAsking] = useState(false)
  const cancel = useRef<HTMLButtonElement>(null)
  const opener = useRef<HTMLButtonElement>(null)
  const wasAsking = useRef(false)
  useEffect(() => {
    if (asking) cancel.current?.focus()
    else if (wasAsking.current) opener.current?.focus()
    wasAsking.current = asking
  }, [asking])
  if (!asking) {
    return (
      <button type="button" class="danger-outline" ref={opener} disabled={props.busy} onClick={() => setAsking(true)}>
        {props.label}
      </button>
    )
  }
  return (
    <div class="confirm" role="group" aria-label={props.question} onKeyDown={(event) => event.key === 'Escape' && setAsking(false)}>
      <p>{props.question}</p>
      <button
        type="button"
        class="danger"
        onClick={() => {
          setAsking(false)
          props.onConfirm()
        }}
      >
        {props.confirmLabel}
      </button>
      <button type="button" ref={cancel} onClick={() => setAsking(false)}>
        Cancel
      </button>
    </div>
  )
}

export function CopyButton({ text, label }: { text: string; label: string }) {
  const [copied, setCopied] = useState<'no' | 'yes' | 'failed'>('no')
  return (
    <span>
      <button
        type="button"
        onClick={() =>
          navigator.clipboard.writeText(text).then(
            () => setCopied('yes'),
            () => setCopied('failed'),
          )
        }
      >
        {label}
      </button>
      <span role="status" class="muted">
        {copied === 'yes' ? ' Copied.' : copied === 'failed' ? ' Copying failed: select the text and copy it.' : ''}
      </span>
    </span>
  )
}

/** A secret shown once, at creation: it takes the focus, with a copy button and the warning. */
export function SecretOnce({ title, secret, children }: { title: string; secret: string; children?: ComponentChildren }) {
  const box = useRef<HTMLElement>(null)
  useEffect(() => box.current?.focus(), [secret])
  return (
    <section class="secret" aria-labelledby="secret-title" tabIndex={-1} ref={box}>
      <h2 id="secret-title">{title}</h2>
      <p>Copy it now: it is shown only this once.</p>
      <p>
        <code class="secret-value" id="secret-value">
          {secret}
        </code>
      </p>
      <CopyButton text={secret} label="Copy" />
      {children}
    </section>
  )
}

export function EmptyState({ children }: { children: ComponentChildren }) {
  return <div class="empty">{children}</div>
}

export function StatusBadge({ status }: { status: string }) {
  return <span class={`badge badge-${status}`}>{status}</span>
}

/** "Load more" for the API's cursor pages. */
export function usePages<T>(fetchPage: (cursor: string | null) => Promise<{ data: T[]; next_cursor: string | null }>, key: unknown[]) {
  const [extra, setExtra] = useState<{ items: T[]; cursor: string | null } | null>(null)
  const first = useLoad(async () => {
    setExtra(null)
    return fetchPage(null)
  }, key)
  const more = useAction()
  const items = [...(first.data?.data ?? []), ...(extra?.items ?? [])]
  const cursor = extra ? extra.cursor : (first.data?.next_cursor ?? null)
  const loadMore = () =>
    more.run(async () => {
      const page = await fetchPage(cursor)
      setExtra((previous) => ({ items: [...(previous?.items ?? []), ...page.data], cursor: page.next_cursor }))
    })
  return { ...first, items, hasMore: cursor !== null, loadMore, loadingMore: more.busy, moreError: more.error }
}

export function LoadMore({ pages }: { pages: { hasMore: boolean; loadMore(): void; loadingMore: boolean; moreError: unknown } }) {
  if (!pages.hasMore) return null
  return (
    <div class="load-more">
      <button type="button" onClick={pages.loadMore} disabled={pages.loadingMore}>
        {pages.loadingMore ? 'Loading…' : 'Load more'}
      </button>
      <ErrorNotice error={pages.moreError} action="Loading more" />
    </div>
  )
}
