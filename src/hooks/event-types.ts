/** The events a subscription can bind to (docs/api.md#event-types). */
export const EVENT_TYPES = ['message.delivered', 'message.failed', 'message.inbound'] as const
export type EventType = (typeof EVENT_TYPES)[number]

export const EVENT_DESCRIPTIONS: Record<EventType, string> = {
  'message.delivered': 'A message reached its recipient.',
  'message.failed': 'A message could not be delivered.',
  'message.inbound': 'A contact wrote back.',
}
