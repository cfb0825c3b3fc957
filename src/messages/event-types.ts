/** The events a subscription can bind to (docs/api.md#event-types). */
export const EVENT_TYPES = ['message.delivered', 'message.failed', 'message.inbound'] as const
export type EventType = (typeof EVENT_TYPES)[number]

export const EVENT_DESCRIPTIONS: Record<EventType, string> = {
  'message.delivered': 'A message reached its recipient.',
  'message.failed': 'A message could not be delivered.',
  'message.inbound': 'A contact wrote back.',
}

/**
 * The member of a subscription's filter for each type (docs/api.md#filters): the contact's number
 * as the event's message names it, `to` for an outbound message's outcome, `from` for a contact
 * writing in.
 */
export const FILTER_KEYS = { 'message.delivered': 'to', 'message.failed': 'to', 'message.inbound': 'from' } as const satisfies Record<EventType, 'to' | 'from'>
export type FilterKey = (typeof FILTER_KEYS)[EventType]
