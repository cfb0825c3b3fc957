import { useState } from 'preact/hooks'
import { api } from '../api.ts'
import { EmptyState, ErrorNotice, LoadMore, PageHeading, Time, useLoad, usePages } from '../components.tsx'
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
      <ErrorNotice error={events.error ?? eventTypes.error} action="Loading the events" />
      {events.data && events.items.length === 0 && (
        <EmptyState>
          <p>{type ? `No ${type} events yet.` : 'No events yet. Send a message (POST /v0/account/{id}/messages): its outcome appears here and goes to your webhooks.'}</p>
        </EmptyState>
      )}
      {events.items.length > 0 && (
        <table class="rows" id="events">
          <caption class="visually-hidden">Events, newest first</caption>
          <thead>
            <tr>
              <th scope="col">When</th>
              <th scope="col">Type</th>
              <th scope="col">What</th>
              <th scope="col">Event id</th>
            </tr>
          </thead>
          <tbody>
            {events.items.map((event) => (
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
            ))}
          </tbody>
        </table>
      )}
      <LoadMore pages={events} />
    </>
  )
}
