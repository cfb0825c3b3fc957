import { Elysia } from 'elysia'
import { notFound } from '../lib/http/errors.ts'
import { pageOf } from '../lib/http/pagination.ts'
import { authPlugin, ownAccount, type AuthPluginDeps } from '../auth/plugin.ts'
import { AccountParams } from '../lib/http/params.ts'
import { EventSchema, EventsQuery, InboundMessageBody, MessageParams, MessageSchema, SendMessageBody } from './schemas.ts'
import { acceptMessage, dispatchMessage, findMessage, listEvents, receiveInboundMessage, toMessageResource, type MessageDeps } from './service.ts'


export function messageRoutes(deps: MessageDeps & AuthPluginDeps) {
  return new Elysia({ tags: ['Messages'] })
    .use(authPlugin(deps))
    .post(
      '/account/:account_id/messages',
      async ({ caller, params, body, set }) => {
        const message = await acceptMessage(deps, ownAccount(caller, params.account_id), body)
        // The carrier works after the answer; a process stopped in between is caught up at the next start.
        void dispatchMessage(deps, message).catch((error) => deps.logger.error('dispatching a message failed', { message_id: message.id, error: String(error) }))
        set.status = 202
        return toMessageResource(message)
      },
      {
        auth: { scope: 'messages:send' },
        params: AccountParams,
        body: SendMessageBody,
        response: { 202: MessageSchema },
        detail: { operationId: 'sendMessage', summary: 'Send a message (the sandbox carrier decides its outcome)' },
      },
    )
    .get(
      '/account/:account_id/messages/:message_id',
      async ({ caller, params }) => {
        const message = await findMessage(deps.db, ownAccount(caller, params.account_id), params.message_id)
        if (!message) throw notFound('No such message.')
        return toMessageResource(message)
      },
      {
        auth: { scope: 'messages:read' },
        params: MessageParams,
        response: { 200: MessageSchema },
        detail: { operationId: 'getMessage', summary: 'Read a message and its status' },
      },
    )
    .post(
      '/account/:account_id/sandbox/inbound',
      async ({ caller, params, body, set }) => {
        const message = await receiveInboundMessage(deps, ownAccount(caller, params.account_id), body)
        set.status = 201
        return toMessageResource(message)
      },
      {
        auth: { scope: 'messages:send' },
        params: AccountParams,
        body: InboundMessageBody,
        response: { 201: MessageSchema },
        detail: { operationId: 'simulateInboundMessage', summary: 'Sandbox: simulate a contact writing back' },
      },
    )
    .get(
      '/account/:account_id/events',
      ({ caller, params, query }) => listEvents(deps.db, ownAccount(caller, params.account_id), query),
      {
        auth: { scope: 'messages:read' },
        params: AccountParams,
        query: EventsQuery,
        response: { 200: pageOf(EventSchema) },
        detail: { operationId: 'listEvents', summary: 'List events, newest first (filter by type and since) for reconciliation' },
      },
    )
}
