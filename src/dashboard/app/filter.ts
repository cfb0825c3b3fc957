import { FILTER_KEYS } from '../../messages/event-types.ts'
import type { Hook } from './types.ts'

/** The numbers typed in a filter field, one per line or separated by commas; the API checks each. */
const contactsIn = (text: string) =>
  text
    .split(/[,\n]/)
    .map((part) => part.trim())
    .filter((part) => part !== '')

/** The filter a field's text stands for, under the key the event type takes (docs/api.md#filters); null when it is empty. */
export function filterFor(event: Hook['event'], text: string): Hook['filter'] {
  const contacts = contactsIn(text)
  if (contacts.length === 0) return null
  return FILTER_KEYS[event] === 'to' ? { to: contacts } : { from: contacts }
}

export const contactsOf = (filter: Hook['filter']): string[] => filter?.to ?? filter?.from ?? []

/** Who a filter of this event type names, for labels: the message's recipient or its sender. */
export const filteredContacts = (event: Hook['event']) => (FILTER_KEYS[event] === 'to' ? 'recipients' : 'senders')
