import { describe, expect, test } from 'bun:test'
import { Webhook } from 'standardwebhooks'
import { newEd25519KeyPair, signatureHeader } from '../../src/delivery/signing.ts'

const id = 'evt_01jd3m9x2qk7r5v8w4y6z0tvwx'
const body = JSON.stringify({ id, type: 'message.delivered', data: { text: 'héllo' } })
const now = Math.floor(Date.now() / 1000)
const hmacSecret = () => `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`

/** A receiver's check, written from the Standard Webhooks rules alone: Web Crypto, the whpk_ key, `id.timestamp.body`. */
async function verifiesV1a(publicKey: string, signature: string, signed = `${id}.${now}.${body}`): Promise<boolean> {
  expect(publicKey).toMatch(/^whpk_[A-Za-z0-9+/]{43}=$/)
  const key = await crypto.subtle.importKey('raw', Buffer.from(publicKey.slice('whpk_'.length), 'base64'), 'Ed25519', false, ['verify'])
  expect(signature).toMatch(/^v1a,[A-Za-z0-9+/]{86}==$/)
  return crypto.subtle.verify('Ed25519', key, Buffer.from(signature.slice('v1a,'.length), 'base64'), new TextEncoder().encode(signed))
}

describe('newEd25519KeyPair', () => {
  test('whpk_ is the base64 of the 32-byte public key, whsk_ of the 32-byte private key and the public key; each pair is new', async () => {
    const pair = await newEd25519KeyPair()
    expect(pair.publicKey).toMatch(/^whpk_[A-Za-z0-9+/]{43}=$/)
    expect(pair.privateKey).toMatch(/^whsk_[A-Za-z0-9+/]{86}==$/)
    const secret = Buffer.from(pair.privateKey.slice('whsk_'.length), 'base64')
    expect(secret.subarray(32).toString('base64')).toBe(pair.publicKey.slice('whpk_'.length))
    expect((await newEd25519KeyPair()).publicKey).not.toBe(pair.publicKey)
  })
})

describe('signatureHeader', () => {
  test('ed25519: v1a and the Ed25519 signature of id.timestamp.body, which the public key verifies', async () => {
    const pair = await newEd25519KeyPair()
    const header = await signatureHeader({ scheme: 'ed25519', current: pair.privateKey }, id, now, body)
    expect(header.split(' ')).toHaveLength(1)
    expect(await verifiesV1a(pair.publicKey, header)).toBe(true)
    // Bound to each part of the signed content, and to the key.
    expect(await verifiesV1a(pair.publicKey, header, `${id}.${now + 1}.${body}`)).toBe(false)
    expect(await verifiesV1a(pair.publicKey, header, `${id}.${now}.${body} `)).toBe(false)
    expect(await verifiesV1a((await newEd25519KeyPair()).publicKey, header)).toBe(false)
    // Signing again with the cached key gives the same signature (Ed25519 is deterministic, RFC 8032).
    expect(await signatureHeader({ scheme: 'ed25519', current: pair.privateKey }, id, now, body)).toBe(header)
  })

  test('ed25519 during a rotation: two signatures, space-separated, current first; each verifies with its own public key', async () => {
    const [current, previous] = [await newEd25519KeyPair(), await newEd25519KeyPair()]
    const [first, second, ...rest] = (await signatureHeader({ scheme: 'ed25519', current: current.privateKey, previous: previous.privateKey }, id, now, body)).split(' ')
    expect(rest).toEqual([])
    expect(await verifiesV1a(current.publicKey, first!)).toBe(true)
    expect(await verifiesV1a(previous.publicKey, second!)).toBe(true)
    expect(await verifiesV1a(previous.publicKey, first!)).toBe(false)
  })

  test('hmac: the v1 signatures the standardwebhooks package verifies, one per secret', async () => {
    const [current, previous] = [hmacSecret(), hmacSecret()]
    const headers = (signature: string) => ({ 'webhook-id': id, 'webhook-timestamp': String(now), 'webhook-signature': signature })
    const one = await signatureHeader({ scheme: 'hmac', current }, id, now, body)
    expect(one).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/)
    expect(new Webhook(current).verify(body, headers(one))).toEqual(JSON.parse(body))
    const both = await signatureHeader({ scheme: 'hmac', current, previous }, id, now, body)
    expect(both.split(' ')).toHaveLength(2)
    for (const secret of [current, previous]) expect(new Webhook(secret).verify(body, headers(both))).toEqual(JSON.parse(body))
    expect(() => new Webhook(hmacSecret()).verify(body, headers(both))).toThrow()
  })

  test('a key that is not a whsk_ Ed25519 key is refused, not signed with', async () => {
    const pair = await newEd25519KeyPair()
    for (const wrong of [hmacSecret(), pair.publicKey, pair.privateKey.slice(0, 50), 'whsk_']) {
      await expect(signatureHeader({ scheme: 'ed25519', current: wrong }, id, now, body)).rejects.toThrow('an ed25519 signing key must be whsk_')
    }
  })
})
