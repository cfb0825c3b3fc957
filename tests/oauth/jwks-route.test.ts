import { expect, test } from 'bun:test'
import { createRemoteJWKSet, decodeProtectedHeader, jwtVerify } from 'jose'
import { rotateSigningKey } from '../../src/oauth/signing-keys.ts'
import { json, startTestServer } from '../support/server.ts'

const server = await startTestServer()
const jwksPath = '/v0/.well-known/jwks.json'

const signAccessToken = (signer: typeof server.instance.signer) =>
  signer.sign({ account_id: 'acc_1', scope: 'account:read' }, { typ: 'at+jwt', subject: 'usr_1', audience: server.config.baseUrl, expiresInSeconds: 900 })

test('the JWKS is public, cacheable, readable from any origin, and holds public members only', async () => {
  const response = await server.fetch(jwksPath)
  expect(response.status).toBe(200)
  expect(response.headers.get('content-type')).toStartWith('application/json')
  expect(response.headers.get('cache-control')).toBe('public, max-age=300')
  expect(response.headers.get('access-control-allow-origin')).toBe('*')
  const body = await json(response)
  expect(body.keys.length).toBeGreaterThan(0)
  for (const key of body.keys) {
    expect(Object.keys(key).sort()).toEqual(['alg', 'crv', 'kid', 'kty', 'use', 'x', 'y'])
    expect(key).toMatchObject({ kty: 'EC', crv: 'P-256', alg: 'ES256', use: 'sig' })
  }
})

test('a JWKS client on the real URL verifies a token the service signed', async () => {
  const token = await signAccessToken(server.instance.signer)
  const keySet = createRemoteJWKSet(new URL(`${server.origin}${jwksPath}`))
  const { payload, protectedHeader } = await jwtVerify(token, keySet, {
    algorithms: ['ES256'],
    issuer: server.config.baseUrl,
    audience: server.config.baseUrl,
    typ: 'at+jwt',
  })
  expect(payload.sub).toBe('usr_1')
  expect(protectedHeader.kid).toBe(decodeProtectedHeader(token).kid)
})

test('after a rotation, another instance on the same database publishes and signs with the new key through the invalidation feed', async () => {
  const other = await startTestServer({ database: server.database })
  const before = await signAccessToken(other.instance.signer)
  const { kid, retiredKid } = await rotateSigningKey(server.database.handle.db, server.instance.secretBox)
  expect(retiredKid).toBe(decodeProtectedHeader(before).kid!)

  await other.instance.syncCaches()
  const deadline = Date.now() + 3_000
  while (!other.instance.signer.hasKey(kid) && Date.now() < deadline) await Bun.sleep(20)
  expect(decodeProtectedHeader(await signAccessToken(other.instance.signer)).kid).toBe(kid)

  const published = (await json(await other.fetch(jwksPath))).keys.map((key: { kid: string }) => key.kid)
  expect(published).toContain(kid)
  expect(published).toContain(retiredKid!)
  expect((await other.instance.signer.verify(before, { typ: 'at+jwt', audience: server.config.baseUrl })).sub).toBe('usr_1')
  await other.stop()
})
