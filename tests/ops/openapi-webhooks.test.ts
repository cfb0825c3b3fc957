import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { Webhook } from 'standardwebhooks'
import { newEd25519KeyPair, signatureHeader } from '../../src/delivery/signing.ts'
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv'
import { EVENT_TYPES } from '../../src/messages/event-types.ts'
import { startTestServer } from '../support/server.ts'
import { startReceiver } from '../support/receiver.ts'

setDefaultTimeout(30_000)

type Json = Record<string, any>
type CatalogItem = { type: string; description: string; schema: Json; example: Json }

const receiver = startReceiver(() => new Response(null, { status: 204 }))
const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_CA_FILE: receiver.caFile } })
const owner = await server.createAccountWithKey()

const documentResponse = await server.fetch('/v0/openapi.json')
const document = (await documentResponse.json()) as Json
const catalog = ((await (await server.fetch(`/v0/event-types?key=${owner.secret}`)).json()) as { data: CatalogItem[] }).data

// Draft-07 rules; the event schemas use only keywords that 2020-12 shares with it.
const validator = new AjvJsonSchemaValidator()
const validates = (schema: Json, value: unknown) => validator.getValidator(schema)(value).valid

/** A local `$ref` (`#/components/schemas/…`) followed to what it names; anything else as it is. */
function resolve(node: Json): Json {
  if (typeof node.$ref !== 'string') return node
  expect(node.$ref).toStartWith('#/')
  let target: any = document
  for (const segment of node.$ref.slice(2).split('/')) target = target?.[segment.replaceAll('~1', '/').replaceAll('~0', '~')]
  expect(target).toBeObject()
  return target
}

const PATH_ITEM_FIELDS = ['$ref', 'summary', 'description', 'get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace', 'servers', 'parameters']
const webhookPost = (type: string) => document.webhooks[type].post as Json
const header = (type: string, name: string) => (webhookPost(type).parameters as Json[]).map(resolve).find((parameter) => parameter.in === 'header' && parameter.name === name)!

describe('the OpenAPI document describes the webhooks the service sends', () => {
  test('`webhooks` holds exactly the event types GET /event-types lists, each a Path Item with one post', () => {
    expect(documentResponse.status).toBe(200)
    expect(document.openapi).toStartWith('3.1')
    expect(catalog.length).toBe(EVENT_TYPES.length)
    expect(Object.keys(document.webhooks).sort()).toEqual(catalog.map((item) => item.type).sort())
    expect(Object.keys(document.webhooks).sort()).toEqual([...EVENT_TYPES].sort())
    for (const pathItem of Object.values(document.webhooks) as Json[]) {
      for (const field of Object.keys(pathItem)) expect(PATH_ITEM_FIELDS).toContain(field)
      expect(Object.keys(pathItem)).toEqual(['post'])
      expect(pathItem.post.responses).toBeObject()
    }
    // operationIds are unique across paths and webhooks alike.
    const operations = [...Object.values(document.paths), ...Object.values(document.webhooks)].flatMap((pathItem: any) => Object.values(pathItem) as Json[])
    const operationIds = operations.map((operation) => operation.operationId).filter(Boolean)
    expect(new Set(operationIds).size).toBe(operationIds.length)
  })

  test("each post's body is the catalogue's schema and example, and the example validates against it", () => {
    for (const item of catalog) {
      const post = webhookPost(item.type)
      expect(post.summary).toBe(item.description)
      expect(post.description).toContain(item.description)
      expect(post.requestBody.required).toBe(true)
      expect(Object.keys(post.requestBody.content)).toEqual(['application/json'])
      const media = post.requestBody.content['application/json']
      const schema = resolve(media.schema)
      expect(schema).toEqual(item.schema)
      expect(media.example).toEqual(item.example)
      expect(validates(schema, media.example)).toBe(true)
      // The validator discriminates: another type, or a missing field, is refused.
      const otherType = EVENT_TYPES.find((type) => type !== item.type)!
      expect(validates(schema, { ...media.example, type: otherType })).toBe(false)
      const { data: _data, ...withoutData } = media.example
      expect(validates(schema, withoutData)).toBe(false)
    }
  })

  test('each post names the three Standard Webhooks headers and what an answer means', async () => {
    const pair = await newEd25519KeyPair()
    const secret = `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`
    const other = `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`
    for (const type of EVENT_TYPES) {
      const post = webhookPost(type)
      const headers = (post.parameters as Json[]).map(resolve).filter((parameter) => parameter.in === 'header')
      expect(headers.map((parameter) => parameter.name).sort()).toEqual(['webhook-id', 'webhook-signature', 'webhook-timestamp'])
      for (const parameter of headers) {
        expect(parameter.required).toBe(true)
        expect(parameter.description.length).toBeGreaterThan(20)
      }
      expect(header(type, 'webhook-id').description).toContain('event id')
      expect(header(type, 'webhook-timestamp').schema).toEqual({ type: 'integer' })

      // The signature's schema takes what the standardwebhooks package signs: one, or several during a rotation.
      const signature = header(type, 'webhook-signature').schema
      const at = new Date()
      const body = JSON.stringify(post.requestBody.content['application/json'].example)
      const one = new Webhook(secret).sign('evt_01jd3m9x2qk7r5v8w4y6z0tvwx', at, body)
      expect(validates(signature, one)).toBe(true)
      expect(validates(signature, `${one} ${new Webhook(other).sign('evt_01jd3m9x2qk7r5v8w4y6z0tvwx', at, body)}`)).toBe(true)
      for (const wrong of ['', 'v1,', one.replace('v1,', 'v2,'), `${one} `, one.replace(',', ' ')]) expect(validates(signature, wrong)).toBe(false)
      // And what an ed25519 subscription's deliveries carry (docs/webhooks.md#signatures).
      const timestamp = Math.floor(at.getTime() / 1000)
      const v1a = await signatureHeader({ scheme: 'ed25519', current: pair.privateKey, previous: pair.privateKey }, 'evt_01jd3m9x2qk7r5v8w4y6z0tvwx', timestamp, body)
      expect(validates(signature, v1a)).toBe(true)
      expect(validates(signature, v1a.replaceAll('v1a,', 'v1b,'))).toBe(false)

      expect(Object.keys(post.responses).sort()).toEqual(['2XX', 'default'])
      expect(post.responses['2XX'].description).toMatch(/^Delivered/)
      const failure = post.responses.default.description as string
      for (const rule of ['3xx', '4xx', '5xx', 'timeout', 'retried', 'WEBHOOK_RETRY_SCHEDULE', 'Retry-After', '410 Gone disables the subscription', 'docs/webhooks.md']) expect(failure).toContain(rule)
      expect(failure).not.toMatch(/https?:\/\//)
    }
  })

  test('a real delivery of each type matches its webhook: body schema and headers', async () => {
    const call = (path: string, body: unknown) =>
      server.fetch(`/v0/account/${owner.accountId}${path}?key=${owner.secret}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    for (const event of EVENT_TYPES) expect((await call('/hooks', { event, target_url: `${receiver.origin}/${event}` })).status).toBe(201)
    expect((await call('/messages', { to: '+14155550123', body: 'delivered' })).status).toBe(202)
    expect((await call('/messages', { to: '+14155550000', body: 'failed' })).status).toBe(202)
    expect((await call('/sandbox/inbound', { from: '+14155550123', body: 'inbound' })).status).toBe(201)
    await receiver.waitFor((received) => EVENT_TYPES.every((type) => received.some((request) => request.path === `/${type}`)))

    for (const type of EVENT_TYPES) {
      const delivery = receiver.received.find((request) => request.path === `/${type}`)!
      const body = JSON.parse(delivery.body)
      expect(body.type).toBe(type)
      expect(validates(resolve(webhookPost(type).requestBody.content['application/json'].schema), body)).toBe(true)
      expect(delivery.headers['webhook-id']).toBe(body.id)
      expect(validates(header(type, 'webhook-id').schema, delivery.headers['webhook-id'])).toBe(true)
      expect(delivery.headers['webhook-timestamp']).toMatch(/^[0-9]+$/)
      expect(validates(header(type, 'webhook-timestamp').schema, Number(delivery.headers['webhook-timestamp']))).toBe(true)
      expect(validates(header(type, 'webhook-signature').schema, delivery.headers['webhook-signature'])).toBe(true)
    }
  })
})
