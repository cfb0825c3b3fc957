import type { ComponentChildren } from 'preact'
import { EmptyState, ErrorNotice, LoadMore } from './components.tsx'

/** What `usePages` gives that a list shows around its items. */
interface ListedPages {
  data: unknown
  error: unknown
  items: readonly unknown[]
  hasMore: boolean
  loadMore(): void
  loadingMore: boolean
  moreError: unknown
}

/**
 * A list of the API's cursor pages: why it failed to load, what to do when it is empty (said only
 * once the first page came back, not while it loads), the items, and "Load more". `error`, for a
 * page that loads more than the list, replaces the list's own.
 */
export function PagedList(props: { pages: ListedPages; action: string; error?: unknown; empty: ComponentChildren; children: ComponentChildren }) {
  const { pages } = props
  return (
    <>
      <ErrorNotice error={props.error ?? pages.error} action={props.action} />
      {pages.data && pages.items.length === 0 && <EmptyState>{props.empty}</EmptyState>}
      {props.children}
      <LoadMore pages={pages} />
    </>
  )
}

/**
 * A table of items, one row each; nothing when there are none. Below 40rem each cell shows its
 * `data-label` in place of the header (dashboard.css), so rows label their cells as `columns` do.
 * `actions` adds a last column for buttons, named for screen readers only.
 */
export function RowsTable<T>(props: { id?: string; class?: string; caption?: string; columns: string[]; actions?: boolean; items: readonly T[]; row(item: T): ComponentChildren }) {
  if (props.items.length === 0) return null
  return (
    <table class={props.class ? `rows ${props.class}` : 'rows'} id={props.id}>
      {props.caption && <caption class="visually-hidden">{props.caption}</caption>}
      <thead>
        <tr>
          {props.columns.map((column) => (
            <th key={column} scope="col">
              {column}
            </th>
          ))}
          {props.actions && (
            <th scope="col">
              <span class="visually-hidden">Actions</span>
            </th>
          )}
        </tr>
      </thead>
      <tbody>{props.items.map(props.row)}</tbody>
    </table>
  )
}
