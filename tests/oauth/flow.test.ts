import { describe, expect, test } from 'bun:test'
import { SignJWT, decodeJwt, decodeProtectedHeader, generateKeyPair } from 'jose'
import { startTestServer } from '../support/server.ts'
import { eq } from 'drizzle-orm'
import { authorizationCodes, rateLimits, refreshTokens } from '../../src/lib/db/schema.ts'
import { sha256Hex } from '../../src/lib/security/crypto.ts'
import { REDIRECT_URI, authorizeAndRedeem, flowFixture, pkcePair, postForm, postJson, signIn } from './support.ts'

const server = await startTestServer({ env: { OAUTH_REFRESH_GRACE_S: '2' } })
const fixture = await flowFixture(server)
const bearer = (token: string) => ({ headers: { authorization: `Bearer ${token}` } })

describe('the documented flow with JSON bodies', () => {
  test('login → authorize → token → a bearer call → session', async () => {
    const { verifier, challenge } = pkcePair()
    const idToken = await signIn(server, fixture)
    const authorized = await postJson(server, '/v0/auth/authorize', {
      client_id: fixture.clientId,
      redirect_uri: REDIRECT_URI,
      id_token: idToken,
      code_challenge: challenge,
      code_challenge_method: 'S256',
      state: 'opaque-state',
    })
    expect(authorized.status).toBe(200)
    const body = await authorized.json()
    expect(body.iss).toBe(`${server.origin}/v0`)
    expect(body.state).toBe('opaque-state')
    const redirect = new URL(body.redirect_to)
    expect(`${redirect.origin}${redirect.pathname}`).toBe(REDIRECT_URI)
    expect(Object.fromEntries(redirect.searchParams)).toEqual({ code: body.code, state: 'opaque-state', iss: `${server.origin}/v0` })

    const tokenResponse = await postJson(server, '/v0/auth/token', {
      grant_type: 'authorization_code',
      code: body.code,
      client_id: fixture.clientId,
      redirect_uri: REDIRECT_URI,
      code_verifier: verifier,
    })
    expect(tokenResponse.status).toBe(200)
    expect(tokenResponse.headers.get('cache-control')).toBe('no-store')
    const tokens = await tokenResponse.json()
    expect(tokens).toEqual({
      access_token: expect.any(String),
      token_type: 'Bearer',
      expires_in: 900,
      refresh_token: expect.any(String),
      scope: 'account:read hooks:read hooks:write',
    })
    expect(decodeProtectedHeader(tokens.access_token)).toMatchObject({ typ: 'at+jwt', alg: 'ES256' })
    const claims = decodeJwt(tokens.access_token)
    expect([claims.iss, claims.sub, claims.client_id, claims.account_id]).toEqual([`${server.origin}/v0`, fixture.userId, fixture.clientId, fixture.accountId])
    expect(claims.aud).toEqual([`${server.origin}/v0`, `${server.origin}/v0/mcp`])

    const account = await server.fetch('/v0/account', bearer(tokens.access_token))
    expect(account.status).toBe(200)
    expect((await account.json()).id).toBe(fixture.accountId)

    const session = await server.fetch('/v0/auth/session', bearer(tokens.access_token))
    expect(session.status).toBe(200)
    expect(await session.json()).toEqual({
      active: true,
      sub: fixture.userId,
      account_id: fixture.accountId,
      client_id: fixture.clientId,
      scope: 'account:read hooks:read hooks:write',
      aud: [`${server.origin}/v0`, `${server.origin}/v0/mcp`],
      exp: claims.exp!,
    })
  })

  test('the token endpoint takes form-encoded bodies, as standard clients send them', async () => {
    const { verifier, challenge } = pkcePair()
    const authorized = await postJson(server, '/v0/auth/authorize', {
      client_id: fixture.clientId, redirect_uri: REDIRECT_URI, id_token: await signIn(server, fixture), code_challenge: challenge, code_challenge_method: 'S256',
    })
    const { code } = await authorized.json()
    const response = await postForm(server, '/v0/auth/token', { grant_type: 'authorization_code', code, client_id: fixture.clientId, redirect_uri: REDIRECT_URI, code_verifier: verifier })
    expect(response.status).toBe(200)
    const refreshed = await postForm(server, '/v0/auth/token', { grant_type: 'refresh_token', refresh_token: (await response.json()).refresh_token, client_id: fixture.clientId })
    expect(refreshed.status).toBe(200)
  })
})

describe('codes', () => {
  test('a code redeemed twice fails, and the tokens of the first redemption stop working', async () => {
    const { code, verifier, tokens } = await authorizeAndRedeem(server, fixture)
    expect((await server.fetch('/v0/account', bearer(tokens.access_token))).status).toBe(200)
    const replay = await postJson(server, '/v0/auth/token', { grant_type: 'authorization_code', code, client_id: fixture.clientId, redirect_uri: REDIRECT_URI, code_verifier: verifier })
    expect(replay.status).toBe(400)
    expect((await replay.json()).error).toBe('invalid_grant')
    await server.instance.syncCaches()
    const after = await server.fetch('/v0/account', bearer(tokens.access_token))
    expect(after.status).toBe(401)
    expect(after.headers.get('www-authenticate')).toContain('error="invalid_token"')
    const refresh = await postJson(server, '/v0/auth/token/refresh', { refresh_token: tokens.refresh_token, client_id: fixture.clientId })
    expect((await refresh.json()).error).toBe('invalid_grant')
  })

  const redeemWith = async (change: Record<string, string | undefined>) => {
    const { verifier, challenge } = pkcePair()
    const authorized = await postJson(server, '/v0/auth/authorize', {
      client_id: fixture.clientId, redirect_uri: REDIRECT_URI, id_token: await signIn(server, fixture), code_challenge: challenge, code_challenge_method: 'S256',
    })
    const { code } = await authorized.json()
    return postJson(server, '/v0/auth/token', { grant_type: 'authorization_code', code, client_id: fixture.clientId, redirect_uri: REDIRECT_URI, code_verifier: verifier, ...change })
  }

  test('a wrong or missing PKCE verifier fails with invalid_grant', async () => {
    for (const code_verifier of [pkcePair().verifier, undefined, 'short']) {
      const response = await redeemWith({ code_verifier })
      expect(response.status).toBe(400)
      expect((await response.json()).error).toBe('invalid_grant')
    }
  })

  test('an expired code (past its 60 s) fails with invalid_grant', async () => {
    const { verifier, challenge } = pkcePair()
    const authorized = await postJson(server, '/v0/auth/authorize', {
      client_id: fixture.clientId, redirect_uri: REDIRECT_URI, id_token: await signIn(server, fixture), code_challenge: challenge, code_challenge_method: 'S256',
    })
    const { code } = await authorized.json()
    const [stored] = await server.database.handle.db.select().from(authorizationCodes).where(eq(authorizationCodes.codeHash, sha256Hex(code)))
    expect(stored!.expiresAt.getTime() - stored!.createdAt.getTime()).toBeLessThanOrEqual(61_000)
    await server.database.handle.db
      .update(authorizationCodes)
      .set({ expiresAt: new Date(Date.now() - 1_000) })
      .where(eq(authorizationCodes.codeHash, sha256Hex(code)))
    const response = await postJson(server, '/v0/auth/token', { grant_type: 'authorization_code', code, client_id: fixture.clientId, redirect_uri: REDIRECT_URI, code_verifier: verifier })
    expect(response.status).toBe(400)
    expect(await response.json()).toEqual({ error: 'invalid_grant', error_description: 'The authorization code has expired.' })
  })

  test('oversized and junk codes are refused without a server error', async () => {
    for (const code of ['x'.repeat(10_000), '', "'; drop table grants; --", '\u0000']) {
      const response = await postJson(server, '/v0/auth/token', { grant_type: 'authorization_code', code, client_id: fixture.clientId, redirect_uri: REDIRECT_URI, code_verifier: pkcePair().verifier })
      expect(response.status).toBe(400)
    }
  })

  test('another redirect_uri at the token endpoint fails', async () => {
    const response = await redeemWith({ redirect_uri: 'http://127.0.0.1:8765/other' })
    expect((await response.json()).error).toBe('invalid_grant')
  })

  test('an unknown client_id is 401 invalid_client', async () => {
    const response = await redeemWith({ client_id: 'cli_00000000000000000000000000' })
    expect(response.status).toBe(401)
    expect((await response.json()).error).toBe('invalid_client')
  })

  test('PKCE plain and a missing challenge are refused at authorize', async () => {
    for (const change of [{ code_challenge_method: 'plain' }, { code_challenge: 'too-short' }]) {
      const response = await postJson(server, '/v0/auth/authorize', {
        client_id: fixture.clientId, redirect_uri: REDIRECT_URI, id_token: await signIn(server, fixture), code_challenge: pkcePair().challenge, code_challenge_method: 'S256', ...change,
      })
      expect(response.status).toBe(400)
      expect((await response.json()).error).toBe('invalid_request')
    }
  })

  test('an id_token that is not ours, or an access token in its place, is refused', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture)
    for (const idToken of ['not.a.jwt', tokens.access_token]) {
      const response = await postJson(server, '/v0/auth/authorize', {
        client_id: fixture.clientId, redirect_uri: REDIRECT_URI, id_token: idToken, code_challenge: pkcePair().challenge, code_challenge_method: 'S256',
      })
      expect(response.status).toBe(401)
      expect((await response.json()).error).toBe('access_denied')
    }
  })

  test('an id_token is never accepted as an access token', async () => {
    const idToken = await signIn(server, fixture)
    expect((await server.fetch('/v0/account', bearer(idToken))).status).toBe(401)
  })
})

describe('refresh tokens', () => {
  test('rotation: each use returns a new pair; a replay inside the grace window returns the same pair', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture)
    const refresh = () => postJson(server, '/v0/auth/token/refresh', { refresh_token: tokens.refresh_token, client_id: fixture.clientId })
    const [first, second] = await Promise.all([refresh(), refresh()])
    const [a, b] = [await first.json(), await second.json()]
    expect(first.status).toBe(200)
    expect(second.status).toBe(200)
    expect(a.refresh_token).not.toBe(tokens.refresh_token)
    expect(b.refresh_token).toBe(a.refresh_token)
    expect(b.access_token).toBe(a.access_token)
    expect((await server.fetch('/v0/account', bearer(a.access_token))).status).toBe(200)
  })

  test('ten concurrent refreshes of one token all get the same pair, and only one successor exists', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture)
    const responses = await Promise.all(
      Array.from({ length: 10 }, () => postJson(server, '/v0/auth/token/refresh', { refresh_token: tokens.refresh_token, client_id: fixture.clientId })),
    )
    expect(responses.map((response) => response.status)).toEqual(Array(10).fill(200))
    const pairs = await Promise.all(responses.map((response) => response.json()))
    expect(new Set(pairs.map((pair) => pair.refresh_token)).size).toBe(1)
    expect(new Set(pairs.map((pair) => pair.access_token)).size).toBe(1)
    const grantId = decodeJwt(pairs[0].access_token).grant_id as string
    const rows = await server.database.handle.db.select().from(refreshTokens).where(eq(refreshTokens.grantId, grantId))
    expect(rows).toHaveLength(2)
    expect(rows.filter((row) => row.rotatedAt === null)).toHaveLength(1)
  })

  test('a replay after the grace window revokes the whole grant', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture)
    const first = await (await postJson(server, '/v0/auth/token/refresh', { refresh_token: tokens.refresh_token, client_id: fixture.clientId })).json()
    await Bun.sleep(2_100)
    const replay = await postJson(server, '/v0/auth/token/refresh', { refresh_token: tokens.refresh_token, client_id: fixture.clientId })
    expect(replay.status).toBe(400)
    expect((await replay.json()).error).toBe('invalid_grant')
    await server.instance.syncCaches()
    expect((await server.fetch('/v0/account', bearer(first.access_token))).status).toBe(401)
    const successor = await postJson(server, '/v0/auth/token/refresh', { refresh_token: first.refresh_token, client_id: fixture.clientId })
    expect((await successor.json()).error).toBe('invalid_grant')
  })

  test("another client's refresh token, junk and empty tokens are invalid_grant", async () => {
    const other = await flowFixture(server)
    const { tokens } = await authorizeAndRedeem(server, fixture)
    for (const [refresh_token, client_id] of [[tokens.refresh_token, other.clientId], ['rt_junk', fixture.clientId], ["' or 1=1 --", fixture.clientId]]) {
      const response = await postJson(server, '/v0/auth/token/refresh', { refresh_token, client_id })
      expect(response.status).toBe(400)
      expect((await response.json()).error).toBe('invalid_grant')
    }
  })

  test('refresh can narrow the scope, never widen it', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture, { scope: 'account:read hooks:read' })
    const wider = await postJson(server, '/v0/auth/token/refresh', { refresh_token: tokens.refresh_token, client_id: fixture.clientId, scope: 'hooks:write' })
    expect((await wider.json()).error).toBe('invalid_scope')
    const narrower = await postJson(server, '/v0/auth/token/refresh', { refresh_token: tokens.refresh_token, client_id: fixture.clientId, scope: 'account:read' })
    expect((await narrower.json()).scope).toBe('account:read')
  })
})

describe('revocation and scopes', () => {
  test('revoking a refresh token revokes its access tokens (RFC 7009)', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture)
    expect((await server.fetch('/v0/account', bearer(tokens.access_token))).status).toBe(200)
    const revoked = await postForm(server, '/v0/auth/revoke', { token: tokens.refresh_token, client_id: fixture.clientId })
    expect(revoked.status).toBe(200)
    expect((await server.fetch('/v0/account', bearer(tokens.access_token))).status).toBe(401)
  })

  test('revoking an access token revokes its grant; unknown tokens are still 200', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture)
    expect((await postJson(server, '/v0/auth/revoke', { token: tokens.access_token, client_id: fixture.clientId })).status).toBe(200)
    expect((await server.fetch('/v0/account', bearer(tokens.access_token))).status).toBe(401)
    expect((await postJson(server, '/v0/auth/revoke', { token: 'nothing-we-issued', client_id: fixture.clientId })).status).toBe(200)
  })

  test('a token without account:read gets 403 insufficient_scope naming it', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture, { scope: 'hooks:read' })
    const response = await server.fetch('/v0/account', bearer(tokens.access_token))
    expect(response.status).toBe(403)
    expect(response.headers.get('www-authenticate')).toBe(
      `Bearer error="insufficient_scope", scope="account:read", resource_metadata="${server.origin}/.well-known/oauth-protected-resource/v0", error_description="This endpoint needs the account:read scope"`,
    )
    expect((await response.json()).code).toBe('insufficient_scope')
  })

  test('a token narrowed to the MCP resource is refused by the REST API, accepted by /auth/session', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture, { resource: `${server.origin}/v0/mcp` })
    expect(decodeJwt(tokens.access_token).aud).toBe(`${server.origin}/v0/mcp`)
    expect((await server.fetch('/v0/account', bearer(tokens.access_token))).status).toBe(401)
    expect((await server.fetch('/v0/auth/session', bearer(tokens.access_token))).status).toBe(200)
  })

  test('/auth/session takes bearer tokens only', async () => {
    const response = await server.fetch(`/v0/auth/session?key=${fixture.apiKey}`)
    expect(response.status).toBe(401)
  })

  test('PATCH /account takes an API key only', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture)
    const response = await server.fetch('/v0/account', { method: 'PATCH', headers: { authorization: `Bearer ${tokens.access_token}`, 'content-type': 'application/json' }, body: '{"name":"x"}' })
    expect(response.status).toBe(403)
  })
})

describe('forged bearer tokens at the API', () => {
  test('alg none, a tampered payload, a foreign key, a wrong typ and junk all get 401 invalid_token', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture)
    const [header, payload, signature] = tokens.access_token.split('.') as [string, string, string]
    const claims = decodeJwt(tokens.access_token)
    const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
    const { privateKey } = await generateKeyPair('ES256')
    const foreign = await new SignJWT({ ...claims }).setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: decodeProtectedHeader(tokens.access_token).kid }).sign(privateKey)
    const forgeries = [
      `${encode({ alg: 'none', typ: 'at+jwt' })}.${payload}.`,
      `${header}.${encode({ ...claims, account_id: 'acc_00000000000000000000000000' })}.${signature}`,
      `${header}.${payload}.${signature.slice(0, -4)}AAAA`,
      foreign,
      `${encode({ alg: 'ES256', typ: 'JWT', kid: decodeProtectedHeader(tokens.access_token).kid })}.${payload}.${signature}`,
      'a'.repeat(5_000),
      'not a token, with spaces!',
    ]
    for (const forged of forgeries) {
      const response = await server.fetch('/v0/account', bearer(forged))
      expect(response.status).toBe(401)
      expect(response.headers.get('www-authenticate')).toContain('error="invalid_token"')
    }
    expect((await server.fetch('/v0/account', bearer(tokens.access_token))).status).toBe(200)
  })
})

describe('sign-in', () => {
  test('wrong passwords are refused the same way as unknown emails, then throttled with Retry-After', async () => {
    const throttled = await flowFixture(server)
    const attempt = (email: string) => postJson(server, '/v0/auth/login', { email, password: 'wrong password' })
    const unknown = await attempt('nobody@example.com')
    expect(unknown.status).toBe(401)
    const unknownBody = await unknown.json()
    for (let i = 0; i < 5; i++) {
      const response = await attempt(throttled.email)
      expect(response.status).toBe(401)
      expect((await response.json()).detail).toBe(unknownBody.detail)
    }
    const blocked = await postJson(server, '/v0/auth/login', { email: throttled.email, password: throttled.password })
    expect(blocked.status).toBe(429)
    expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0)
  })

  test('failures are also counted per client IP, the address the runtime saw', async () => {
    await postJson(server, '/v0/auth/login', { email: 'nobody@example.com', password: 'wrong password' })
    const keys = (await server.database.handle.db.select({ key: rateLimits.key }).from(rateLimits)).map((row) => row.key)
    expect(keys).toContain('sign-in:ip:127.0.0.1')
    expect(keys).not.toContain('sign-in:ip:unknown')
  })
})
