import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Server } from 'bun'
import { Webhook } from 'standardwebhooks'
import { parseRetryAfter, sendWebhook } from '../../src/delivery/send.ts'
import { newEd25519KeyPair } from '../../src/delivery/signing.ts'
import { makeCertificates } from '../../fixtures/tls.ts'

interface Hit {
  path: string
  headers: Record<string, string>
  body: string
}

const TIMEOUT_MS = 400
const secret = () => `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(24))).toString('base64')}`
let dir: string
let ca: string
let receiver: Server<undefined>
let hits: Hit[] = []
const hitsOn = (path: string) => hits.filter((hit) => hit.path === path)
const at = (path: string, host = '127.0.0.1') => `https://${host}:${receiver.port}${path}`
const options = () => ({ timeoutMs: TIMEOUT_MS, allowPrivate: true, ca })

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'webhook-tls-'))
  const certificates = makeCertificates(dir)
  ca = certificates.ca
  receiver = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    tls: { key: certificates.key, cert: certificates.cert },
    async fetch(request) {
      const path = new URL(request.url).pathname
      hits.push({ path, headers: Object.fromEntries(request.headers), body: await request.text() })
      switch (path) {
        case '/fail':
          return new Response('broken', { status: 500 })
        case '/redirect':
          return new Response(null, { status: 302, headers: { location: at('/redirect-target') } })
        case '/slow':
          await Bun.sleep(TIMEOUT_MS * 5)
          return new Response('too late')
        case '/busy':
          return new Response('slow down', { status: 429, headers: { 'retry-after': '7' } })
        case '/big':
          return new Response('a'.repeat(10_000))
        case '/big-multibyte':
          return new Response('€'.repeat(3_000))
        default:
          return new Response('thanks', { status: 200 })
      }
    },
  })
})

afterAll(() => {
  receiver.stop(true)
  rmSync(dir, { recursive: true, force: true })
})

const event = (url: string, secrets = [secret()]) => ({
  url,
  id: 'evt_01JTEST',
  body: JSON.stringify({ id: 'evt_01JTEST', type: 'message.delivered' }),
  keys: { scheme: 'hmac' as const, current: secrets[0]!, previous: secrets[1] },
  secrets,
})

test('a delivery carries the Standard Webhooks headers and its signature verifies', async () => {
  hits = []
  const request = event(at('/hook?tenant=1'))
  const sentAt = new Date()
  const result = await sendWebhook(request, { ...options(), now: () => sentAt })
  expect(result).toMatchObject({ ok: true, status: 200, error: null, failure: null, responseSnippet: 'thanks', retryAfterSeconds: null })
  const [hit] = hitsOn('/hook')
  expect(hit?.body).toBe(request.body)
  expect(hit?.headers).toMatchObject({
    'webhook-id': 'evt_01JTEST',
    'webhook-timestamp': String(Math.floor(sentAt.getTime() / 1000)),
    'content-type': 'application/json',
    'user-agent': expect.stringContaining('messaging-service'),
  })
  expect(new Webhook(request.secrets[0]!).verify(hit!.body, hit!.headers)).toEqual(JSON.parse(request.body))
})

test('during secret rotation the attempt is signed with every secret, and each verifies', async () => {
  hits = []
  const request = event(at('/hook'), [secret(), secret()])
  expect((await sendWebhook(request, options())).ok).toBe(true)
  const [hit] = hitsOn('/hook')
  expect(hit!.headers['webhook-signature']!.split(' ')).toHaveLength(2)
  for (const each of request.secrets) expect(() => new Webhook(each).verify(hit!.body, hit!.headers)).not.toThrow()
  expect(() => new Webhook(secret()).verify(hit!.body, hit!.headers)).toThrow()
})

test('an ed25519 subscription\'s attempt carries one v1a signature of id.timestamp.body, which its public key verifies', async () => {
  hits = []
  const pair = await newEd25519KeyPair()
  const request = { ...event(at('/hook')), keys: { scheme: 'ed25519' as const, current: pair.privateKey } }
  expect((await sendWebhook(request, options())).ok).toBe(true)
  const [hit] = hitsOn('/hook')
  const [version, signature, ...more] = hit!.headers['webhook-signature']!.split(/[ ,]/)
  expect([version, more]).toEqual(['v1a', []])
  const key = await crypto.subtle.importKey('raw', Buffer.from(pair.publicKey.slice('whpk_'.length), 'base64'), 'Ed25519', false, ['verify'])
  const signed = new TextEncoder().encode(`${hit!.headers['webhook-id']}.${hit!.headers['webhook-timestamp']}.${hit!.body}`)
  expect(await crypto.subtle.verify('Ed25519', key, Buffer.from(signature!, 'base64'), signed)).toBe(true)
})

test('an attempt whose key cannot sign fails before anything is sent', async () => {
  hits = []
  const request = { ...event(at('/hook')), keys: { scheme: 'ed25519' as const, current: secret() } }
  expect(await sendWebhook(request, options())).toMatchObject({ ok: false, status: null, error: 'the attempt could not be signed', failure: 'other' })
  expect(hitsOn('/hook')).toEqual([])
})

test('a name is connected to by its checked address, and TLS verifies the name', async () => {
  hits = []
  const pinnedTo = (...addresses: string[]) => ({ ...options(), lookup: async () => addresses })
  // 127.0.0.2 is loopback but nothing listens there: a connection made by Bun's own resolution
  // of localhost would succeed, so this failure shows the checked address is the one used.
  expect(await sendWebhook(event(at('/hook', 'localhost')), pinnedTo('127.0.0.2'))).toMatchObject({ ok: false, status: null, error: 'connection failed: ECONNREFUSED', failure: 'connection' })
  expect(hitsOn('/hook')).toHaveLength(0)
  // A refused address falls through to the next checked one.
  expect(await sendWebhook(event(at('/hook', 'localhost')), pinnedTo('127.0.0.2', '127.0.0.1'))).toMatchObject({ ok: true, status: 200 })
  // A name that resolves to nothing is a connection that could not be made, not the guard's refusal.
  expect(await sendWebhook(event(at('/hook', 'localhost')), pinnedTo())).toMatchObject({ ok: false, status: null, failure: 'connection' })
  expect(hitsOn('/hook')[0]?.headers.host).toBe(`localhost:${receiver.port}`)
})

test('a 500 is a failure with its status and body', async () => {
  expect(await sendWebhook(event(at('/fail')), options())).toMatchObject({ ok: false, status: 500, error: 'HTTP 500', failure: 'http_5xx', responseSnippet: 'broken' })
})

test('a redirect is a failure and is not followed', async () => {
  hits = []
  const result = await sendWebhook(event(at('/redirect')), options())
  expect(result).toMatchObject({ ok: false, status: 302, failure: 'redirect' })
  expect(result.error).toStartWith('redirect 302 not followed')
  expect(hitsOn('/redirect')).toHaveLength(1)
  expect(hitsOn('/redirect-target')).toHaveLength(0)
})

test('a receiver slower than the timeout fails with a timeout, about when the timeout ends', async () => {
  const started = performance.now()
  const result = await sendWebhook(event(at('/slow')), options())
  const elapsed = performance.now() - started
  expect(result).toMatchObject({ ok: false, status: null, error: `timed out after ${TIMEOUT_MS} ms`, failure: 'timeout' })
  expect(elapsed).toBeGreaterThanOrEqual(TIMEOUT_MS - 20)
  expect(elapsed).toBeLessThan(TIMEOUT_MS + 500)
})

test('Retry-After on a 429 is reported in seconds', async () => {
  expect(await sendWebhook(event(at('/busy')), options())).toMatchObject({ ok: false, status: 429, retryAfterSeconds: 7, failure: 'http_4xx' })
})

test('Retry-After is read as seconds or as an HTTP date', () => {
  const now = new Date('2026-01-01T00:00:00Z')
  expect(parseRetryAfter('120', now)).toBe(120)
  expect(parseRetryAfter('Thu, 01 Jan 2026 00:02:00 GMT', now)).toBe(120)
  expect(parseRetryAfter('Wed, 31 Dec 2025 23:00:00 GMT', now)).toBe(0)
  expect(parseRetryAfter('soon', now)).toBeNull()
  expect(parseRetryAfter('-5', now)).toBeNull()
  expect(parseRetryAfter(null, now)).toBeNull()
})

test('the response snippet keeps the first 4096 bytes, never half a character', async () => {
  expect((await sendWebhook(event(at('/big')), options())).responseSnippet).toBe('a'.repeat(4096))
  const multibyte = (await sendWebhook(event(at('/big-multibyte')), options())).responseSnippet
  expect(multibyte).toBe('€'.repeat(1365))
  expect(Buffer.byteLength(multibyte)).toBeLessThanOrEqual(4096)
})

test('a certificate from a CA that is not trusted fails the attempt', async () => {
  hits = []
  const result = await sendWebhook(event(at('/hook')), { timeoutMs: TIMEOUT_MS, allowPrivate: true })
  expect(result).toMatchObject({ ok: false, status: null, failure: 'connection' })
  expect(result.error).toStartWith('connection failed:')
  expect(hitsOn('/hook')).toHaveLength(0)
})

test('without allowPrivate a loopback receiver is refused before any connection', async () => {
  hits = []
  for (const host of ['127.0.0.1', 'localhost']) {
    const result = await sendWebhook(event(at('/hook', host)), { ...options(), allowPrivate: false })
    expect(result).toMatchObject({ ok: false, status: null, responseSnippet: '', failure: 'refused' })
    expect(result.error).toStartWith('refused (forbidden_address)')
  }
  expect((await sendWebhook(event(at('/hook').replace('https:', 'http:')), { ...options(), allowPrivate: false })).error).toStartWith('refused (scheme)')
  expect(hits).toHaveLength(0)
})

test('a host that accepts no connection is given up on at the connect timeout, long before the request timeout', async () => {
  // A listener whose accept queue is full: the kernel drops further SYNs, as a black-holed host does.
  const listener = Bun.spawn(
    [
      'python3',
      '-c',
      `import socket, time
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(0)
print(s.getsockname()[1], flush=True)
held = []
for _ in range(4):
    c = socket.socket(); c.setblocking(False)
    try: c.connect(('127.0.0.1', s.getsockname()[1]))
    except BlockingIOError: pass
    held.append(c)
time.sleep(30)`,
    ],
    { stdout: 'pipe' },
  )
  try {
    const { value } = await listener.stdout.getReader().read()
    const port = Number(new TextDecoder().decode(value).trim())
    await Bun.sleep(200)
    const slowOptions = { ...options(), timeoutMs: 10_000, connectTimeoutMs: 600 }
    const started = performance.now()
    const result = await sendWebhook(event(`http://127.0.0.1:${port}/hook`), slowOptions)
    const elapsed = performance.now() - started
    expect(result).toMatchObject({ ok: false, status: null, error: 'connect timed out after 600 ms', failure: 'connection' })
    expect(elapsed).toBeGreaterThanOrEqual(580)
    expect(elapsed).toBeLessThan(2_000)
    // A receiver that accepts is unaffected by the bound.
    expect((await sendWebhook(event(at('/hook')), slowOptions)).ok).toBe(true)
  } finally {
    listener.kill()
  }
})
