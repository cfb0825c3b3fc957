import { expect, test } from 'bun:test'
import * as oauth from 'oauth4webapi'
import { exportJWK, generateKeyPair } from 'jose'
import { startTestServer } from '../support/server.ts'
import { REDIRECT_URI, flowFixture, postJson, signIn } from './support.ts'

// The flow as a standard OAuth client library runs it: discovery by RFC 8414 path insertion and
// RFC 9728, dynamic registration, PKCE, a form-encoded code exchange, refresh, revocation, and
// RFC 9068 validation of the access token. Only the consent step is done by hand (no browser).
const server = await startTestServer()
const fixture = await flowFixture(server)
const insecure = { [oauth.allowInsecureRequests]: true }

test('oauth4webapi: discovery → registration → PKCE code flow → API call → refresh → revocation', async () => {
  const resource = new URL(`${server.origin}/v0`)
  const protectedResource = await oauth.processResourceDiscoveryResponse(resource, await oauth.resourceDiscoveryRequest(resource, insecure))
  expect(protectedResource.authorization_servers).toEqual([`${server.origin}/v0`])

  const issuer = new URL(protectedResource.authorization_servers![0]!)
  const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
  expect(as.issuer).toBe(issuer.href.replace(/\/$/, ''))

  const registered = await oauth.processDynamicClientRegistrationResponse(
    await oauth.dynamicClientRegistrationRequest(
      as,
      { client_name: 'oauth4webapi', redirect_uris: [REDIRECT_URI], token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'] },
      insecure,
    ),
  )
  const client: oauth.Client = { client_id: registered.client_id }
  const clientAuth = oauth.None()

  const verifier = oauth.generateRandomCodeVerifier()
  const state = oauth.generateRandomState()
  const authorizationUrl = new URL(as.authorization_endpoint!)
  for (const [name, value] of Object.entries({
    client_id: client.client_id,
    redirect_uri: REDIRECT_URI,
    response_type: 'code',
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    state,
    scope: 'account:read hooks:read',
  })) authorizationUrl.searchParams.set(name, value)
  const consentPage = await fetch(authorizationUrl)
  expect(consentPage.status).toBe(200)

  // What the consent page does when the user signs in and clicks Allow.
  const approved = await postJson(server, '/v0/auth/authorize', {
    ...Object.fromEntries(authorizationUrl.searchParams),
    response_type: undefined,
    id_token: await signIn(server, fixture),
  })
  expect(approved.status).toBe(200)
  const callback = new URL((await approved.json()).redirect_to)

  const parameters = oauth.validateAuthResponse(as, client, callback, state)
  const tokens = await oauth.processAuthorizationCodeResponse(
    as,
    client,
    await oauth.authorizationCodeGrantRequest(as, client, clientAuth, parameters, REDIRECT_URI, verifier, insecure),
  )
  expect(tokens.token_type).toBe('bearer')
  expect(tokens.scope).toBe('account:read hooks:read')

  const apiCall = new Request(`${server.origin}/v0/account`, { headers: { authorization: `Bearer ${tokens.access_token}` } })
  const claims = await oauth.validateJwtAccessToken(as, apiCall, `${server.origin}/v0`, insecure)
  expect(claims.client_id).toBe(client.client_id)
  expect(claims.sub).toBe(fixture.userId)
  expect((await fetch(apiCall)).status).toBe(200)

  const refreshed = await oauth.processRefreshTokenResponse(
    as,
    client,
    await oauth.refreshTokenGrantRequest(as, client, clientAuth, tokens.refresh_token!, insecure),
  )
  expect(refreshed.refresh_token).not.toBe(tokens.refresh_token)

  await oauth.processRevocationResponse(await oauth.revocationRequest(as, client, clientAuth, refreshed.refresh_token!, insecure))
  const afterRevocation = await fetch(`${server.origin}/v0/account`, { headers: { authorization: `Bearer ${refreshed.access_token}` } })
  expect(afterRevocation.status).toBe(401)
  expect(afterRevocation.headers.get('www-authenticate')).toContain('error="invalid_token"')

  // The library's own reading of the 401 challenge points back at the protected-resource metadata.
  const challenge = afterRevocation.headers.get('www-authenticate')!
  expect(challenge).toContain(`resource_metadata="${server.origin}/.well-known/oauth-protected-resource/v0"`)
})

test('oauth4webapi: prompt, nonce and other parameters the service does not use are ignored through the whole flow', async () => {
  const issuer = new URL(`${server.origin}/v0`)
  const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
  const registered = await oauth.processDynamicClientRegistrationResponse(
    await oauth.dynamicClientRegistrationRequest(as, { client_name: 'oauth4webapi, OpenID-minded', redirect_uris: [REDIRECT_URI], token_endpoint_auth_method: 'none' }, insecure),
  )
  const client: oauth.Client = { client_id: registered.client_id }
  const verifier = oauth.generateRandomCodeVerifier()
  const state = oauth.generateRandomState()
  const authorizationUrl = new URL(as.authorization_endpoint!)
  for (const [name, value] of Object.entries({
    client_id: client.client_id,
    redirect_uri: REDIRECT_URI,
    response_type: 'code',
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    state,
    scope: 'account:read',
    // What OpenID Connect libraries and agents add: none of it is the service's business.
    prompt: 'consent',
    nonce: oauth.generateRandomNonce(),
    max_age: '0',
    ui_locales: 'fr-CA fr en',
    login_hint: 'someone@example.com',
  })) authorizationUrl.searchParams.set(name, value)

  const consentPage = await fetch(authorizationUrl)
  expect(consentPage.status).toBe(200)
  const html = await consentPage.text()
  // What the page's Allow posts: the request as the page holds it, which keeps none of the extras.
  const pageRequest = JSON.parse(/<script type="application\/json" id="authorize-request">(.*?)<\/script>/s.exec(html)![1]!)
  expect(pageRequest).not.toHaveProperty('prompt')
  expect(pageRequest).not.toHaveProperty('nonce')
  // A caller that forwards the whole query to the POST is not refused for it either.
  const approved = await postJson(server, '/v0/auth/authorize', {
    ...Object.fromEntries(authorizationUrl.searchParams),
    response_type: undefined,
    id_token: await signIn(server, fixture),
  })
  expect(approved.status).toBe(200)
  const redirectTo = new URL((await approved.json()).redirect_to)
  expect([...redirectTo.searchParams.keys()].sort()).toEqual(['code', 'iss', 'state'])

  const parameters = oauth.validateAuthResponse(as, client, redirectTo, state)
  const tokens = await oauth.processAuthorizationCodeResponse(
    as,
    client,
    await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), parameters, REDIRECT_URI, verifier, insecure),
  )
  expect(tokens.scope).toBe('account:read')
  const account = await fetch(`${server.origin}/v0/account`, { headers: { authorization: `Bearer ${tokens.access_token}` } })
  expect(account.status).toBe(200)
})

/**
 * The code flow, refresh and revocation as oauth4webapi runs them for a confidential client
 * (docs/oauth.md#confidential-clients): the library registers the client, then authenticates
 * every token and revocation request with `clientAuth(registration)`.
 */
async function confidentialFlow(metadata: Record<string, unknown>, clientAuth: (registered: oauth.OmitSymbolProperties<oauth.Client>) => oauth.ClientAuth) {
  const issuer = new URL(`${server.origin}/v0`)
  const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
  expect(as.token_endpoint_auth_methods_supported).toContain(String(metadata.token_endpoint_auth_method))
  const registered = await oauth.processDynamicClientRegistrationResponse(
    await oauth.dynamicClientRegistrationRequest(as, { client_name: 'oauth4webapi, confidential', redirect_uris: [REDIRECT_URI], ...metadata }, insecure),
  )
  const client: oauth.Client = { client_id: registered.client_id }
  const authenticate = clientAuth(registered)

  const verifier = oauth.generateRandomCodeVerifier()
  const state = oauth.generateRandomState()
  const approved = await postJson(server, '/v0/auth/authorize', {
    client_id: client.client_id,
    redirect_uri: REDIRECT_URI,
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    state,
    scope: 'account:read',
    id_token: await signIn(server, fixture),
  })
  expect(approved.status).toBe(200)
  const parameters = oauth.validateAuthResponse(as, client, new URL((await approved.json()).redirect_to), state)
  const tokens = await oauth.processAuthorizationCodeResponse(
    as,
    client,
    await oauth.authorizationCodeGrantRequest(as, client, authenticate, parameters, REDIRECT_URI, verifier, insecure),
  )
  expect(tokens.scope).toBe('account:read')
  expect((await fetch(`${server.origin}/v0/account`, { headers: { authorization: `Bearer ${tokens.access_token}` } })).status).toBe(200)

  const refreshed = await oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, authenticate, tokens.refresh_token!, insecure))
  expect(refreshed.refresh_token).not.toBe(tokens.refresh_token)
  await oauth.processRevocationResponse(await oauth.revocationRequest(as, client, authenticate, refreshed.refresh_token!, insecure))
  expect((await fetch(`${server.origin}/v0/account`, { headers: { authorization: `Bearer ${refreshed.access_token}` } })).status).toBe(401)
  return registered
}

test('oauth4webapi with ClientSecretBasic: the secret from registration in HTTP Basic at the token and revocation endpoints', async () => {
  const registered = await confidentialFlow({ token_endpoint_auth_method: 'client_secret_basic' }, (registration) => oauth.ClientSecretBasic(String(registration.client_secret)))
  expect(registered.client_secret_expires_at).toBe(0)
})

test('oauth4webapi with ClientSecretPost', async () => {
  await confidentialFlow({ token_endpoint_auth_method: 'client_secret_post' }, (registration) => oauth.ClientSecretPost(String(registration.client_secret)))
})

test('oauth4webapi with PrivateKeyJwt: assertions signed with the key whose public half was registered', async () => {
  const { publicKey, privateKey } = await generateKeyPair('ES256', { extractable: true })
  const kid = 'oauth4webapi-key'
  await confidentialFlow(
    { token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [{ ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' }] } },
    () => oauth.PrivateKeyJwt({ key: privateKey, kid }),
  )
})
