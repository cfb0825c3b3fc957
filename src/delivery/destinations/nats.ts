import { connect, errors, headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node'
import { JetStreamApiError, jetstream, type JetStreamClient } from '@nats-io/jetstream'
import { CONNECT_TIMEOUT_MS, raceSignal, resolveHost, trustedWith } from '../../lib/security/outbound.ts'
import type { NatsDestination } from './targets.ts'
import { BrokerFailure, connectionPool, type BrokerMessage, type BrokerPolicy, type BrokerPool } from './broker.ts'

/**
 * NATS JetStream (the official client): docs/webhooks.md#destinations. One connection per
 * server and credentials, kept open and shared; a publish is delivered only on the stream's
 * PubAck. `Nats-Msg-Id` is the event id and the subscription id, so the stream's duplicate window
 * drops a re-send of the delivery (the PubAck then says `duplicate`, and the attempt counts as
 * delivered: the stream holds the event) but not the same event of another subscription.
 * The client does not reconnect by itself: a connection that closes is dropped, and the next
 * attempt connects again, through the outbound guard.
 */

interface Connection {
  nc: NatsConnection
  js: JetStreamClient
  /** Publishes waiting for their PubAck, by subject: failed at once on a permission error for it. */
  waiting: Map<string, Set<(failure: BrokerFailure) => void>>
}

function failureOf(error: unknown, subject: string): BrokerFailure {
  if (error instanceof BrokerFailure) return error
  if (error instanceof errors.AuthorizationError) return new BrokerFailure('denied', 'connecting: the server refused the credentials (authorization violation)')
  const cause = (error as { cause?: unknown } | null)?.cause
  // The publish itself rejects first, with a RequestError whose cause is the server's violation.
  const violation = error instanceof errors.PermissionViolationError ? error : cause instanceof errors.PermissionViolationError ? cause : undefined
  if (violation) return new BrokerFailure('denied', `permission denied to ${violation.operation} ${JSON.stringify(violation.subject)}`)
  // No stream captures the subject: nothing answers the publish (the client calls it "JetStream not enabled").
  if ((error as Error | null)?.name === 'JetStreamNotEnabled' || error instanceof errors.NoRespondersError || cause instanceof errors.NoRespondersError) {
    return new BrokerFailure('unroutable', `no stream captures subject ${JSON.stringify(subject)}`)
  }
  if (error instanceof JetStreamApiError) return new BrokerFailure('nacked', `the stream refused the message: ${error.message.slice(0, 200)}`)
  if (error instanceof errors.TimeoutError) return new BrokerFailure('timeout', 'publishing: no acknowledgement in time')
  return BrokerFailure.ofNetwork(error, 'publishing')
}

export function createNatsPool(policy: BrokerPolicy): BrokerPool<NatsDestination> {
  const open = async (destination: NatsDestination, signal: AbortSignal): Promise<Connection> => {
    const target = await raceSignal(resolveHost(destination.hostname, { allowPrivate: policy.allowPrivate, lookup: policy.lookup, plain: !destination.tls }), signal)
    const timeout = Math.min(policy.connectTimeoutMs ?? CONNECT_TIMEOUT_MS, policy.timeoutMs)
    let nc: NatsConnection
    try {
      nc = await connect({
        // Only the checked addresses, never the ones the server advertises for its cluster.
        servers: target.addresses.map((address) => (address.includes(':') ? `[${address}]:${destination.port}` : `${address}:${destination.port}`)),
        ignoreClusterUpdates: true,
        noRandomize: true,
        reconnect: false,
        timeout,
        name: 'messaging-service webhooks',
        ...(destination.user !== undefined ? { user: destination.user, pass: destination.pass } : {}),
        ...(destination.token !== undefined ? { token: destination.token } : {}),
        // TLS is verified against the name while the connection goes to the checked address.
        ...(destination.tls ? { tls: { ...(target.isAddressLiteral ? {} : { servername: target.hostname }), ...(policy.ca === undefined ? {} : { ca: trustedWith(policy.ca) }) } as object } : {}),
      })
    } catch (error) {
      throw failureOf(error, destination.subject)
    }
    const connection: Connection = { nc, js: jetstream(nc, { timeout: policy.timeoutMs }), waiting: new Map() }
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type !== 'error') continue
        const error = status.error
        if (!(error instanceof errors.PermissionViolationError)) continue
        // A denied publish fails its own subject's attempts; a denied subscription (the reply inbox) fails them all: no PubAck can arrive.
        const failing = error.operation === 'publish' ? [connection.waiting.get(error.subject) ?? new Set()] : [...connection.waiting.values()]
        for (const waiting of failing) for (const fail of waiting) fail(failureOf(error, error.subject))
      }
    })()
    return connection
  }

  const connections = connectionPool<NatsDestination, Connection>(policy, {
    key: (destination) => JSON.stringify([destination.tls, destination.hostname, destination.port, destination.user, destination.pass, destination.token]),
    open,
    whenClosed: (connection, forget) => void connection.nc.closed().then(forget),
    closable: (connection) => connection.waiting.size === 0,
    close: (connection) => connection.nc.close(),
  })

  return {
    async publish(destination, message, signal) {
      const connection = await connections.acquire(destination, signal)
      const headers = natsHeaders()
      for (const [name, value] of Object.entries(message.headers)) headers.set(name, value)
      headers.set('content-type', 'application/json')
      headers.set('webhook-event-type', message.type)
      const waiting = connection.waiting.get(destination.subject) ?? new Set()
      connection.waiting.set(destination.subject, waiting)
      let fail!: (failure: BrokerFailure) => void
      const denied = new Promise<never>((_, reject) => {
        fail = reject
      })
      waiting.add(fail)
      try {
        const ack = await raceSignal(
          Promise.race([connection.js.publish(destination.subject, message.body, { msgID: message.deduplicationId, headers, timeout: policy.timeoutMs }), denied]),
          signal,
        )
        return JSON.stringify({ stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate })
      } catch (error) {
        throw failureOf(error, destination.subject)
      } finally {
        waiting.delete(fail)
        if (waiting.size === 0) connection.waiting.delete(destination.subject)
        denied.catch(() => {})
      }
    },
    close: () => connections.close(),
  }
}
