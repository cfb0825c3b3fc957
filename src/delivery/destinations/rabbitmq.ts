import { connect, type ChannelModel, type ConfirmChannel, type Message } from 'amqplib'
import { CONNECT_TIMEOUT_MS, raceSignal, resolveHost, trustedWith } from '../../lib/security/outbound.ts'
import type { RabbitMqDestination } from './targets.ts'
import { BrokerFailure, connectionPool, type BrokerMessage, type BrokerPool, type BrokerPolicy } from './broker.ts'

/**
 * RabbitMQ (AMQP 0-9-1, amqplib): docs/webhooks.md#destinations. One connection per broker,
 * vhost and user, kept open and shared by every subscription that names them; one confirm
 * channel per exchange on it, so that a missing exchange (which closes its channel) fails only
 * its own subscriptions. A publish is `mandatory` and waits for the publisher confirm: delivered
 * only when the broker confirms it and did not return it as unroutable (RabbitMQ returns, then
 * confirms, an unroutable message: docs/webhooks.md#destinations).
 */

interface PublishChannel {
  channel: ConfirmChannel
  /** Messages the broker returned and whose confirm has not come yet, by messageKey. */
  returned: Map<string, number>
  /** Publishes waiting for their confirm: failed at once if the channel closes. */
  waiting: Set<(failure: BrokerFailure) => void>
  /** Why the channel closed, once it has: what its unconfirmed publishes failed of. */
  closed?: BrokerFailure
}

interface Connection {
  model: ChannelModel
  channels: Map<string, Promise<PublishChannel>>
}

/** The broker closed a channel or connection with an AMQP reply code: what it means for the attempt. */
function failureOfReply(error: unknown, where: string): BrokerFailure {
  const message = error instanceof Error ? error.message : String(error)
  const code = Number((error as { code?: unknown } | null)?.code ?? /\b(\d{3}) \(/.exec(message)?.[1])
  // The broker's own words ("NOT_FOUND - no exchange 'x' in vhost '/'") name what is missing; they hold no secret.
  if (code === 404) return new BrokerFailure('unroutable', `${where}: ${/NOT_FOUND - [^"]*/.exec(message)?.[0] ?? 'not found (404)'}`)
  if (code === 403 || /ACCESS[-_]REFUSED/.test(message)) return new BrokerFailure('denied', `${where}: access refused (403): the user or its permissions`)
  // A vhost that does not exist, or one the user may not use: the broker closes the connection instead of opening it (530), which amqplib reports without the code.
  if (code === 530 || /NOT[-_]ALLOWED|Expected ConnectionOpenOk; got <ConnectionClose/.test(message)) return new BrokerFailure('denied', `${where}: the broker refused the vhost (it does not exist, or the user has no access to it)`)
  return BrokerFailure.ofNetwork(error, where)
}

/** Same message, same exchange, same routing key: a return and the publish it answers. */
const messageKey = (messageId: string, exchange: string, routingKey: string) => `${messageId}\u0000${exchange}\u0000${routingKey}`

export function createRabbitMqPool(policy: BrokerPolicy): BrokerPool<RabbitMqDestination> {
  const open = async (destination: RabbitMqDestination, signal: AbortSignal): Promise<Connection> => {
    const target = await raceSignal(resolveHost(destination.hostname, { allowPrivate: policy.allowPrivate, lookup: policy.lookup, plain: !destination.tls }), signal)
    let lastError: unknown
    for (const address of target.addresses) {
      try {
        const model = await connect(
          { protocol: destination.tls ? 'amqps' : 'amqp', hostname: address, port: destination.port, username: destination.username, password: destination.password, vhost: destination.vhost, heartbeat: 30 },
          {
            // The connection goes to the checked address; TLS is verified against the name.
            ...(target.isAddressLiteral ? {} : { servername: target.hostname }),
            ...(policy.ca === undefined ? {} : { ca: trustedWith(policy.ca) }),
            timeout: Math.min(policy.connectTimeoutMs ?? CONNECT_TIMEOUT_MS, policy.timeoutMs),
            noDelay: true,
            clientProperties: { connection_name: 'messaging-service webhooks' },
          },
        )
        return { model, channels: new Map() }
      } catch (error) {
        lastError = error
        const code = (error as { code?: unknown }).code
        if (code !== 'ECONNREFUSED' && code !== 'EHOSTUNREACH' && code !== 'ENETUNREACH') break
      }
    }
    throw failureOfReply(lastError, 'connecting')
  }

  const connections = connectionPool<RabbitMqDestination, Connection>(policy, {
    key: (destination) => JSON.stringify([destination.tls, destination.hostname, destination.port, destination.vhost, destination.username, destination.password]),
    open,
    whenClosed(connection, forget) {
      // A broker restart, a lost network, a heartbeat missed: the next attempt connects again.
      connection.model.on('close', forget)
      connection.model.on('error', forget)
    },
    close: (connection) => connection.model.close(),
  })

  const openChannel = async (connection: Connection, exchange: string): Promise<PublishChannel> => {
    const channel = await connection.model.createConfirmChannel()
    const publishChannel: PublishChannel = { channel, returned: new Map(), waiting: new Set() }
    channel.on('return', (message: Message) => {
      const key = messageKey(String(message.properties.messageId), message.fields.exchange, message.fields.routingKey)
      publishChannel.returned.set(key, (publishChannel.returned.get(key) ?? 0) + 1)
    })
    channel.on('error', (error: unknown) => {
      publishChannel.closed = failureOfReply(error, 'publishing')
    })
    channel.on('close', () => {
      connection.channels.delete(exchange)
      publishChannel.closed ??= new BrokerFailure('connection', 'the connection to the broker closed before it confirmed the message')
      for (const fail of publishChannel.waiting) fail(publishChannel.closed)
      publishChannel.waiting.clear()
    })
    // The default exchange always exists; another is checked once per channel, so a missing one fails with its name.
    if (exchange !== '') {
      try {
        await channel.checkExchange(exchange)
      } catch (error) {
        throw failureOfReply(error, `exchange '${exchange}'`)
      }
    }
    return publishChannel
  }

  const channelFor = (connection: Connection, exchange: string): Promise<PublishChannel> => {
    let entry = connection.channels.get(exchange)
    if (!entry) {
      entry = openChannel(connection, exchange)
      connection.channels.set(exchange, entry)
      entry.catch(() => connection.channels.delete(exchange))
    }
    return entry
  }

  const publish = (target: PublishChannel, destination: RabbitMqDestination, message: BrokerMessage, signal: AbortSignal) =>
    new Promise<void>((resolve, reject) => {
      const key = messageKey(message.id, destination.exchange, destination.routingKey)
      const settle = (failure: BrokerFailure | null) => {
        target.waiting.delete(onClosed)
        signal.removeEventListener('abort', onAbort)
        if (failure) reject(failure)
        else resolve()
      }
      const onClosed = (failure: BrokerFailure) => settle(failure)
      const onAbort = () => settle(new BrokerFailure('timeout', `the broker did not confirm within ${policy.timeoutMs} ms`))
      target.waiting.add(onClosed)
      if (signal.aborted) return onAbort()
      signal.addEventListener('abort', onAbort, { once: true })
      try {
        target.channel.publish(
          destination.exchange,
          destination.routingKey,
          Buffer.from(message.body),
          {
            mandatory: true,
            persistent: true,
            contentType: 'application/json',
            messageId: message.id,
            timestamp: Math.floor(message.now.getTime() / 1000),
            type: message.type,
            appId: 'messaging-service',
            headers: message.headers,
          },
          (error: unknown) => {
            const returned = target.returned.get(key) ?? 0
            if (returned > 0) {
              if (returned === 1) target.returned.delete(key)
              else target.returned.set(key, returned - 1)
            }
            if (!target.waiting.has(onClosed)) return
            // amqplib answers every unconfirmed publish with an error when the channel closes, before the channel's own 'close' listeners run.
            if (error && (error as Error).message !== 'message nacked') settle(target.closed ?? new BrokerFailure('connection', 'the connection to the broker closed before it confirmed the message'))
            else if (error) settle(new BrokerFailure('nacked', 'the broker refused the message (negative acknowledgement)'))
            else if (returned > 0) settle(new BrokerFailure('unroutable', `unroutable: no queue is bound to exchange '${destination.exchange}' with routing key '${destination.routingKey}'`))
            else settle(null)
          },
        )
      } catch (error) {
        // A channel that closed meanwhile refuses the publish at once.
        settle(target.closed ?? BrokerFailure.ofNetwork(error, 'publishing'))
      }
    })

  return {
    async publish(destination, message, signal) {
      const connection = await connections.acquire(destination, signal)
      const channel = await raceSignal(channelFor(connection, destination.exchange), signal)
      await publish(channel, destination, message, signal)
      return ''
    },
    close: () => connections.close(),
  }
}
