import { expect, test } from 'bun:test'
import { startTestServer } from '../support/server.ts'
import { authorizeAndRedeem, flowFixture, postJson } from '../oauth/support.ts'

// Two instances behind one load balancer: one database, one PUBLIC_URL (so one issuer).
const PUBLIC_URL = 'https://api.example.test'
const first = await startTestServer({ env: { PUBLIC_URL } })
const second = await startTestServer({ database: first.database, env: { PUBLIC_URL } })

test('a grant revoked on one instance stops its access tokens on every instance within 5 seconds', async () => {
  const fixture = await flowFixture(first)
  const { tokens } = await authorizeAndRedeem(first, fixture)
  const call = (instance: typeof first) => instance.fetch('/v0/account', { headers: { authorization: `Bearer ${tokens.access_token}` } })
  // Both instances have verified and cached the token.
  expect((await call(first)).status).toBe(200)
  expect((await call(second)).status).toBe(200)

  const revokedAt = performance.now()
  expect((await postJson(first, '/v0/auth/revoke', { token: tokens.refresh_token, client_id: fixture.clientId })).status).toBe(200)
  expect((await call(first)).status).toBe(401)
  let refusedAfter = Number.POSITIVE_INFINITY
  while (performance.now() - revokedAt < 6_000) {
    const status = (await call(second)).status
    if (status === 401) {
      refusedAfter = performance.now() - revokedAt
      break
    }
    expect(status).toBe(200)
    await Bun.sleep(50)
  }
  expect(refusedAfter).toBeLessThan(5_000)
})

test('an instance started after the revocation refuses the token at once', async () => {
  const fixture = await flowFixture(first)
  const { tokens } = await authorizeAndRedeem(first, fixture)
  await postJson(first, '/v0/auth/revoke', { token: tokens.access_token, client_id: fixture.clientId })
  const late = await startTestServer({ database: first.database, env: { PUBLIC_URL } })
  expect((await late.fetch('/v0/account', { headers: { authorization: `Bearer ${tokens.access_token}` } })).status).toBe(401)
  await late.stop()
})
