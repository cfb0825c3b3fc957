import { afterAll } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK } from 'jose'

/**
 * An enterprise identity provider the test runs itself: its JWK set served on a real port
 * (plain http on loopback, so the service needs WEBHOOK_ALLOW_PRIVATE_TARGETS=true as for any
 * local target), and ID-JAGs signed with its own keys. `rotate()` publishes a new key and signs
 * with it from then on; `jwksFetches` counts how often the service fetched the set.
 */
export interface TestIdentityProvider {
  issuer: string
  jwksUri: string
  readonly jwksFetches: number
  /** Signs `claims` as an ID-JAG (`typ: oauth-id-jag+jwt`) with the current key, or as told. */
  sign(claims: Record<string, unknown>, options?: { typ?: string | null; key?: 'current' | 'unpublished'; kid?: string }): Promise<string>
  /** An ID-JAG for `client_id` with every required claim, `overrides` replacing (or, when undefined, removing) some. */
  idJag(base: { audience: string; clientId: string; subject: string; email?: string; scope?: string; resource?: string }, overrides?: Record<string, unknown>): Promise<string>
  rotate(): Promise<void>
  stop(): void
}

interface SigningKey {
  kid: string
  privateKey: CryptoKey
  publicJwk: JWK
}

async function newKey(kid: string, alg: string): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true })
  return { kid, privateKey, publicJwk: { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' } }
}

export async function startTestIdentityProvider(options: { alg?: 'ES256' | 'RS256' | 'EdDSA' } = {}): Promise<TestIdentityProvider> {
  const alg = options.alg ?? 'ES256'
  const published: SigningKey[] = [await newKey('key-1', alg)]
  // Same kid as the published key, another private key: a signature that cannot verify.
  const impostor = await newKey('key-1', alg)
  let fetches = 0
  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    fetch(request) {
      if (new URL(request.url).pathname !== '/jwks') return new Response('not found', { status: 404 })
      fetches++
      return Response.json({ keys: published.map((key) => key.publicJwk) })
    },
  })
  const issuer = `http://127.0.0.1:${server.port}`
  const stop = () => void server.stop(true)
  afterAll(stop)

  const sign: TestIdentityProvider['sign'] = async (claims, signing = {}) => {
    const key = signing.key === 'unpublished' ? impostor : published[published.length - 1]!
    const typ = signing.typ === undefined ? 'oauth-id-jag+jwt' : signing.typ
    return new SignJWT(claims)
      .setProtectedHeader({ alg, kid: signing.kid ?? key.kid, ...(typ === null ? {} : { typ }) })
      .sign(key.privateKey)
  }

  return {
    issuer,
    jwksUri: `${issuer}/jwks`,
    get jwksFetches() {
      return fetches
    },
    sign,
    async idJag(base, overrides = {}) {
      const now = Math.floor(Date.now() / 1000)
      const claims: Record<string, unknown> = {
        iss: issuer,
        sub: base.subject,
        aud: base.audience,
        client_id: base.clientId,
        jti: randomBytes(12).toString('base64url'),
        iat: now,
        exp: now + 300,
        ...(base.email === undefined ? {} : { email: base.email }),
        ...(base.scope === undefined ? {} : { scope: base.scope }),
        ...(base.resource === undefined ? {} : { resource: base.resource }),
      }
      for (const [name, value] of Object.entries(overrides)) {
        if (value === undefined) delete claims[name]
        else claims[name] = value
      }
      return sign(claims)
    },
    async rotate() {
      published.push(await newKey(`key-${published.length + 1}`, alg))
    },
    stop,
  }
}
