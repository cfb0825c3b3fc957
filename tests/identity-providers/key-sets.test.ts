import { afterAll, expect, test } from 'bun:test'
import { exportJWK, generateKeyPair, type JWK } from 'jose'
import {
  FAILED_FETCH_CACHE_MS,
  JWKS_CACHE_MS,
  JWKS_REFETCH_COOLDOWN_MS,
  NoMatchingProviderKey,
  ProviderKeysUnavailable,
  createProviderKeySets,
  fetchKeySet,
} from '../../src/identity-providers/key-sets.ts'

// An identity provider's JWK set, served on loopback; each test serves what it needs at a path of its own.
const served = new Map<string, () => Response>()
const fetches = new Map<string, number>()
const server = Bun.serve({
  port: 0,
  hostname: '127.0.0.1',
  fetch(request) {
    const path = new URL(request.url).pathname
    fetches.set(path, (fetches.get(path) ?? 0) + 1)
    return (served.get(path) ?? (() => new Response('not found', { status: 404 })))()
  },
})
afterAll(() => server.stop(true))
const urlOf = (path: string) => `http://127.0.0.1:${server.port}${path}`
const local = { allowPrivate: true }

async function publicJwk(kid: string): Promise<JWK> {
  const { publicKey } = await generateKeyPair('ES256', { extractable: true })
  return { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' }
}

function clock() {
  let now = 1_000_000
  return { now: () => now, advance: (ms: number) => (now += ms) }
}

test('a key is found by kid and alg; the set is fetched once while it is fresh', async () => {
  const keys = [await publicJwk('a'), await publicJwk('b')]
  served.set('/fresh', () => Response.json({ keys }))
  const time = clock()
  const sets = createProviderKeySets({ policy: local, now: time.now })
  expect((await sets.keyFor(urlOf('/fresh'), { alg: 'ES256', kid: 'b' })).type).toBe('public')
  await sets.keyFor(urlOf('/fresh'), { alg: 'ES256', kid: 'a' })
  expect(fetches.get('/fresh')).toBe(1)
  time.advance(JWKS_CACHE_MS)
  await sets.keyFor(urlOf('/fresh'), { alg: 'ES256', kid: 'a' })
  expect(fetches.get('/fresh')).toBe(2)
})

test('an unknown kid (a rotated key) fetches the set again, at most once per cooldown', async () => {
  const keys = [await publicJwk('old')]
  served.set('/rotating', () => Response.json({ keys }))
  const time = clock()
  const sets = createProviderKeySets({ policy: local, now: time.now })
  await sets.keyFor(urlOf('/rotating'), { alg: 'ES256', kid: 'old' })
  keys.push(await publicJwk('new'))
  // Within the cooldown a made-up or new kid costs no fetch.
  await expect(sets.keyFor(urlOf('/rotating'), { alg: 'ES256', kid: 'new' })).rejects.toBeInstanceOf(NoMatchingProviderKey)
  expect(fetches.get('/rotating')).toBe(1)
  time.advance(JWKS_REFETCH_COOLDOWN_MS)
  expect((await sets.keyFor(urlOf('/rotating'), { alg: 'ES256', kid: 'new' })).type).toBe('public')
  expect(fetches.get('/rotating')).toBe(2)
  const refused = sets.keyFor(urlOf('/rotating'), { alg: 'ES256', kid: 'never' })
  await expect(refused).rejects.toThrow(`has no key for kid "never" and alg "ES256"`)
  expect(fetches.get('/rotating')).toBe(2)
})

test('concurrent lookups share one fetch', async () => {
  served.set('/shared', () => Response.json({ keys: [] }))
  const sets = createProviderKeySets({ policy: local })
  await Promise.allSettled(Array.from({ length: 5 }, () => sets.keyFor(urlOf('/shared'), { alg: 'ES256', kid: 'x' })))
  expect(fetches.get('/shared')).toBe(1)
})

test('a set that cannot be fetched says why, and is not asked for again for a while', async () => {
  served.set('/down', () => new Response('busy', { status: 503 }))
  const time = clock()
  const sets = createProviderKeySets({ policy: local, now: time.now })
  const first = sets.keyFor(urlOf('/down'), { alg: 'ES256', kid: 'a' })
  await expect(first).rejects.toBeInstanceOf(ProviderKeysUnavailable)
  await expect(sets.keyFor(urlOf('/down'), { alg: 'ES256', kid: 'a' })).rejects.toThrow('answered HTTP 503, not 200')
  expect(fetches.get('/down')).toBe(1)
  time.advance(FAILED_FETCH_CACHE_MS)
  await expect(sets.keyFor(urlOf('/down'), { alg: 'ES256', kid: 'a' })).rejects.toBeInstanceOf(ProviderKeysUnavailable)
  expect(fetches.get('/down')).toBe(2)
})

test('what is not a usable public key set is refused with the reason', async () => {
  served.set('/not-json', () => new Response('<html>', { status: 200 }))
  served.set('/no-keys', () => Response.json({ issuer: 'x' }))
  served.set('/redirect', () => new Response(null, { status: 302, headers: { location: 'https://example.com/keys' } }))
  served.set('/huge', () => Response.json({ keys: [], padding: 'x'.repeat(70_000) }))
  const { privateKey } = await generateKeyPair('ES256', { extractable: true })
  const privateJwk = { ...(await exportJWK(privateKey)), kid: 'p', alg: 'ES256' }
  served.set('/private', () => Response.json({ keys: [privateJwk] }))
  await expect(fetchKeySet(urlOf('/not-json'), { policy: local })).rejects.toThrow('is not JSON')
  await expect(fetchKeySet(urlOf('/no-keys'), { policy: local })).rejects.toThrow('is not a JWK set')
  await expect(fetchKeySet(urlOf('/redirect'), { policy: local })).rejects.toThrow('answered HTTP 302, not 200 (redirects are not followed)')
  await expect(fetchKeySet(urlOf('/huge'), { policy: local })).rejects.toThrow('is larger than 65536 bytes')
  const sets = createProviderKeySets({ policy: local })
  await expect(sets.keyFor(urlOf('/private'), { alg: 'ES256', kid: 'p' })).rejects.toThrow('holds a key that cannot be used')
})

test('the outbound guard applies: a loopback set is refused unless private targets are allowed, and plain http to the internet always', async () => {
  served.set('/guarded', () => Response.json({ keys: [] }))
  const before = fetches.get('/guarded') ?? 0
  await expect(fetchKeySet(urlOf('/guarded'), { policy: { allowPrivate: false } })).rejects.toThrow('only https targets are allowed')
  await expect(fetchKeySet(urlOf('/guarded').replace('http:', 'https:'), { policy: { allowPrivate: false } })).rejects.toThrow('which is not a public address')
  await expect(fetchKeySet('http://93.184.215.14/keys', { policy: local })).rejects.toThrow('a connection without TLS is allowed only to loopback and private addresses')
  expect(fetches.get('/guarded') ?? 0).toBe(before)
})
