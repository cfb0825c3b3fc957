import { createHash, randomBytes } from 'node:crypto'
import { expect } from 'bun:test'
import { createUser } from '../../src/accounts/service.ts'
import type { TestServer } from '../support/server.ts'

export const pkcePair = () => {
  const verifier = randomBytes(32).toString('base64url')
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') }
}

export const postJson = (server: TestServer, path: string, body: unknown, headers: Record<string, string> = {}) =>
  server.fetch(path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })

export const postForm = (server: TestServer, path: string, body: Record<string, string>) =>
  server.fetch(path, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(body).toString() })

export const REDIRECT_URI = 'http://127.0.0.1:8765/callback'

/** An account with a user, and a registered public client: the cast of every flow test. */
export async function flowFixture(server: TestServer, options: { scope?: string; clientId?: string } = {}) {
  const { accountId, secret: apiKey } = await server.createAccountWithKey('OAuth account')
  const email = `user-${randomBytes(4).toString('hex')}@example.com`
  const password = 'correct horse battery staple'
  const user = await createUser(server.database.handle.db, { accountId, email, password })
  // A client registered before, for files that need more fixtures than one address may register clients in an hour (20).
  if (options.clientId) return { accountId, apiKey, email, password, userId: user.id, clientId: options.clientId }
  const registration = await postJson(server, '/v0/auth/register', {
    client_name: 'Flow test client',
    redirect_uris: [REDIRECT_URI],
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    ...(options.scope ? { scope: options.scope } : {}),
  })
  expect(registration.status).toBe(201)
  const { client_id: clientId } = (await registration.json()) as { client_id: string }
  return { accountId, apiKey, email, password, userId: user.id, clientId }
}

export type Fixture = Awaited<ReturnType<typeof flowFixture>>

export async function signIn(server: TestServer, fixture: Fixture): Promise<string> {
  const response = await postJson(server, '/v0/auth/login', { email: fixture.email, password: fixture.password })
  expect(response.status).toBe(200)
  return ((await response.json()) as { id_token: string }).id_token
}

/** Step 2 of the documented flow (docs/api.md#oauth-and-discovery): the user allows the client, which gets a code. */
export async function authorizationCode(server: TestServer, fixture: Fixture, extra: Record<string, unknown> = {}) {
  const { verifier, challenge } = pkcePair()
  const authorized = await postJson(server, '/v0/auth/authorize', {
    client_id: fixture.clientId,
    redirect_uri: REDIRECT_URI,
    id_token: await signIn(server, fixture),
    code_challenge: challenge,
    code_challenge_method: 'S256',
    state: 'xyz',
    ...extra,
  })
  expect(authorized.status).toBe(200)
  const { code } = (await authorized.json()) as { code: string }
  return { code, verifier }
}

/** Steps 2 and 3 of the documented flow (docs/api.md#oauth-and-discovery): an authorization code, then tokens. */
export async function authorizeAndRedeem(server: TestServer, fixture: Fixture, extra: Record<string, unknown> = {}) {
  const { code, verifier } = await authorizationCode(server, fixture, extra)
  const tokens = await postJson(server, '/v0/auth/token', {
    grant_type: 'authorization_code',
    code,
    client_id: fixture.clientId,
    redirect_uri: REDIRECT_URI,
    code_verifier: verifier,
  })
  expect(tokens.status).toBe(200)
  return { code, verifier, tokens: (await tokens.json()) as { access_token: string; refresh_token: string; expires_in: number; scope: string } }
}
