import { describe, expect, test } from 'bun:test'
import { carriesCredentials, parseDestination, redactedTarget, restoreHiddenSecret } from '../../../src/delivery/destinations/targets.ts'
import { checkCallbackUrl, checkTargetUrl } from '../../../src/hooks/service.ts'
import { isForbiddenHost } from '../../../src/lib/security/outbound.ts'
import { ApiError } from '../../../src/lib/http/errors.ts'

const production = { isForbiddenHost, allowPrivateTargets: false }
const local = { isForbiddenHost, allowPrivateTargets: true }
const refusal = (check: () => unknown): string => {
  try {
    check()
  } catch (error) {
    if (error instanceof ApiError) return error.options.errors![0]!.message
    throw error
  }
  throw new Error('accepted')
}

describe('parsing a broker target', () => {
  test('amqps:// with credentials, a percent-encoded vhost, exchange and routing key', () => {
    expect(parseDestination('amqps://app:p%40ss@mq.example.com/prod%2Feu?exchange=events&routing_key=sms.delivered')).toEqual({
      kind: 'rabbitmq',
      tls: true,
      hostname: 'mq.example.com',
      port: 5671,
      vhost: 'prod/eu',
      exchange: 'events',
      routingKey: 'sms.delivered',
      username: 'app',
      password: 'p@ss',
    })
  })

  test('no path is the default vhost "/", and no credentials are guest\'s, as the RabbitMQ URI spec says', () => {
    expect(parseDestination('amqp://10.0.0.5?exchange=events')).toMatchObject({ vhost: '/', port: 5672, username: 'guest', password: 'guest', routingKey: '' })
  })

  test('a NATS target: user and password, or a token alone', () => {
    expect(parseDestination('tls://svc:secret@nats.example.com?subject=acme.events')).toMatchObject({ kind: 'nats', tls: true, port: 4222, subject: 'acme.events', user: 'svc', pass: 'secret' })
    expect(parseDestination('nats://s3cr3t-token@10.0.0.9:4223?subject=a')).toMatchObject({ token: 's3cr3t-token', port: 4223 })
  })

  test.each([
    ['nats://10.0.0.9?subject=acme.*', 'without wildcards'],
    ['nats://10.0.0.9?subject=acme.>', 'without wildcards'],
    ['nats://10.0.0.9?subject=$JS.API.STREAM.DELETE.x', 'not starting with $'],
    ['nats://10.0.0.9?subject=a..b', 'tokens separated by dots'],
    ['nats://10.0.0.9/path?subject=a', 'has no path'],
    ['nats://10.0.0.9', 'names the subject'],
    ['nats://10.0.0.9?subject=a&stream=b', 'unknown parameter "stream"'],
    ['amqp://10.0.0.9?exchange=a&exchange=b', 'more than once'],
    ['amqp://:pw@10.0.0.9?exchange=a', 'a password needs a user name'],
    ['amqp://10.0.0.9?exchange=a#frag', 'fragment'],
    ['amqp://10.0.0.9/a/b?exchange=a', 'the vhost is one path segment'],
  ])('%s is refused: %s', (target, message) => {
    expect(refusal(() => checkTargetUrl(target, local))).toContain(message)
  })
})

describe('what everyone sees of a broker target', () => {
  test('a password, or a NATS token, is ***; the sealed URL is kept only when there is one', () => {
    expect(redactedTarget('amqps://app:p%40ss@mq.example.com/v?exchange=e')).toBe('amqps://app:***@mq.example.com/v?exchange=e')
    expect(redactedTarget('tls://tok@nats.example.com?subject=a')).toBe('tls://***@nats.example.com?subject=a')
    expect(carriesCredentials('amqps://mq.example.com?exchange=e')).toBe(false)
    expect(checkTargetUrl('amqps://app:pw@mq.example.com?exchange=e', production)).toEqual({
      targetUrl: 'amqps://app:***@mq.example.com/?exchange=e',
      credentials: 'amqps://app:pw@mq.example.com/?exchange=e',
    })
  })
})

describe('the address rules, as for https', () => {
  test('without TLS only to a local broker, and only with WEBHOOK_ALLOW_PRIVATE_TARGETS', () => {
    expect(refusal(() => checkTargetUrl('amqp://mq.example.com?exchange=e', local))).toBe('must use amqps:// (without TLS, only a loopback or private broker is reached)')
    expect(refusal(() => checkTargetUrl('amqp://mq.example.com?exchange=e', production))).toBe('must use amqps://')
    expect(refusal(() => checkTargetUrl('nats://nats.example.com?subject=a', production))).toBe('must use tls://')
    expect(refusal(() => checkTargetUrl('nats://127.0.0.1?subject=a', production))).toStartWith('must use tls:// (a connection without TLS to a local address needs WEBHOOK_ALLOW_PRIVATE_TARGETS=true')
    expect(refusal(() => checkTargetUrl('amqps://10.1.2.3?exchange=e', production))).toStartWith('must not point at a private, loopback or link-local address')
    expect(checkTargetUrl('amqp://127.0.0.1?exchange=e', local).targetUrl).toBe('amqp://127.0.0.1/?exchange=e')
  })

  test('other schemes name what is accepted; an agent\'s MCP callback must be https', () => {
    expect(refusal(() => checkTargetUrl('ftp://example.com/x', production))).toBe('must use https, or name a message broker (amqps://, tls://: docs/webhooks.md#destinations)')
    expect(refusal(() => checkCallbackUrl('amqps://mq.example.com?exchange=e', production))).toBe('must use https')
  })
})

describe('a changed URL that shows the stored password as ***', () => {
  const stored = 'amqps://app:s3cret@mq.example.com/prod?exchange=e&routing_key=a'
  test('to the same broker as the same user, the stored password comes back', () => {
    expect(restoreHiddenSecret('amqps://app:***@mq.example.com/prod?exchange=e&routing_key=b', stored)).toBe('amqps://app:s3cret@mq.example.com/prod?exchange=e&routing_key=b')
    expect(restoreHiddenSecret('tls://***@nats.example.com?subject=b', 'tls://tok3n@nats.example.com/?subject=a')).toBe('tls://tok3n@nats.example.com/?subject=b')
  })
  test.each([
    ['another host', 'amqps://app:***@mq.example.org/prod?exchange=e'],
    ['another port', 'amqps://app:***@mq.example.com:5999/prod?exchange=e'],
    ['another user', 'amqps://ops:***@mq.example.com/prod?exchange=e'],
    ['without TLS', 'amqp://app:***@mq.example.com/prod?exchange=e'],
  ])('to %s, it must be given again', (_what, raw) => {
    expect(() => restoreHiddenSecret(raw, stored)).toThrow('give the password itself')
  })
  test('nothing stored (a new subscription): refused; no *** at all: nothing to restore', () => {
    expect(() => restoreHiddenSecret('amqps://app:***@mq.example.com?exchange=e', null)).toThrow('give the password itself')
    expect(restoreHiddenSecret('amqps://app:new@mq.example.com?exchange=e', stored)).toBeNull()
    expect(restoreHiddenSecret('https://example.com/***', stored)).toBeNull()
  })
})
