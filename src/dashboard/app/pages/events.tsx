import { useState } from 'preact/hooks'
import { api } from '../api.ts'
import { PageHeading, Time, useLoad, usePages } from '../components.tsx'
import { PagedList, RowsTable } from '../list.tsx'
import type { Event, EventType, Page } from '../types.ts'

function describeMessage(event: Event): string {
  const message = event.data.message
  const party = message.direction === 'inbound' ? `from ${message.from ?? 'unknown'}` : `to ${message.to ?? 'unknown'}`
  return `Message ${party}: ${message.status}${message.error ? ` (${message.error})` : ''}`
}

export function EventsPage({ accountId }: { accountId: string }) {
  const [type, setType] = useState('')
  const eventTypes = useLoad(() => api<{ data: EventType[] }>('GET', '/event-types'), [])
  const events = usePages((cursor) => {
    const query = new URLSearchParams()
    if (type) query.set('type', type)
    if (cursor) query.set('cursor', cursor)
    return api<Page<Event>>('GET', `/account/${accountId}/events?${query}`)
  }, [accountId, type])

  return (
    <>
      <PageHeading>Events</PageHeading>
      <p>Everything that happened to your messages, newest first: what your webhooks were sent.</p>
      <div class="toolbar">
        <label for="event-type">Type</label>
        <select id="event-type" value={type} onChange={(event) => setType((event.currentTarget as HTMLSelectElement).value)}>
          <option value="">All types</option>
          {(eventTypes.data?.data ?? []).map((eventType) => (
            <option key={eventType.type} value={eventType.type}>
              {eventType.type}
            </option>
          ))}
        </select>
      </div>
      <PagedList
        pages={events}
        action="Loading the events"
        error={events.error ?? eventTypes.error}
        empty={<p>{type ? `No ${type} events yet.` : 'No events yet. Send a message (POST /v0/account/{id}/messages): its outcome appears here and goes to your webhooks.'}</p>}
      >
        <RowsTable
          id="events"
          caption="Events, newest first"
          columns={['When', 'Type', 'What', 'Event id']}
          items={events.items}
          row={(event) => (
            <tr key={event.id}>
              <td data-label="When">
                <Time iso={event.timestamp} />
              </td>
              <td data-label="Type">
                <code>{event.type}</code>
              </td>
              <td data-label="What">{describeMessage(event)}</td>
              <td data-label="Event id">
                <code>{event.id}</code>
              </td>
            </tr>
          )}
        />
      </PagedList>
    </>
  )
}
