import { describe, expect, test } from 'bun:test'
import * as oauth from 'oauth4webapi'
import { startTestServer } from '../support/server.ts'
import { SCOPES } from '../../src/auth/scopes.ts'
import {
  API_RESOURCE_METADATA_PATHS,
  AUTHORIZATION_SERVER_METADATA_PATHS,
  DISCOVERY_CACHE_CONTROL,
  MCP_RESOURCE_METADATA_PATHS,
} from '../../src/oauth/discovery.ts'

const server = await startTestServer()
const issuer = `${server.origin}/v0`

async function fetchDocument(path: string) {
  const response = await server.fetch(path)
  expect(response.status).toBe(200)
  expect(response.headers.get('content-type')).toStartWith('application/json')
  expect(response.headers.get('cache-control')).toBe(DISCOVERY_CACHE_CONTROL)
  expect(response.headers.get('access-control-allow-origin')).toBe('*')
  return response.json()
}

describe('authorization server metadata (RFC 8414)', () => {
  test('the {base_url} path, the path-insertion alias and the bare address serve one document', async () => {
    expect(AUTHORIZATION_SERVER_METADATA_PATHS).toEqual([
      '/v0/.well-known/oauth-authorization-server',
      '/.well-known/oauth-authorization-server/v0',
      '/.well-known/oauth-authorization-server',
    ])
    const [first, ...others] = await Promise.all(AUTHORIZATION_SERVER_METADATA_PATHS.map(fetchDocument))
    for (const other of others) expect(other).toEqual(first)
  })

  test('names the issuer, every endpoint and what the server supports', async () => {
    expect(await fetchDocument('/.well-known/oauth-authorization-server/v0')).toEqual({
      issuer,
      authorization_endpoint: `${issuer}/auth/authorize`,
      token_endpoint: `${issuer}/auth/token`,
      registration_endpoint: `${issuer}/auth/register`,
      revocation_endpoint: `${issuer}/auth/revoke`,
      jwks_uri: `${issuer}/.well-known/jwks.json`,
      scopes_supported: [...SCOPES],
      response_types_supported: ['code'],
      response_modes_supported: ['query'],
      grant_types_supported: ['authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:jwt-bearer'],
      token_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post', 'private_key_jwt'],
      token_endpoint_auth_signing_alg_values_supported: ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'],
      revocation_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post', 'private_key_jwt'],
      revocation_endpoint_auth_signing_alg_values_supported: ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'],
      code_challenge_methods_supported: ['S256'],
      authorization_response_iss_parameter_supported: true,
      dpop_signing_alg_values_supported: ['ES256', 'ES384', 'ES512', 'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'EdDSA'],
      client_id_metadata_document_supported: true,
      authorization_grant_profiles_supported: ['urn:ietf:params:oauth:grant-profile:id-jag'],
      service_documentation: `${issuer}/docs`,
    })
  })

  test('oauth4webapi discovers the issuer through RFC 8414 path insertion and accepts the document', async () => {
    const issuerUrl = new URL(issuer)
    const response = await oauth.discoveryRequest(issuerUrl, { algorithm: 'oauth2', [oauth.allowInsecureRequests]: true })
    // Path insertion: the well-known segment goes between the origin and the issuer's path.
    expect(new URL(response.url).pathname).toBe('/.well-known/oauth-authorization-server/v0')
    const metadata = await oauth.processDiscoveryResponse(issuerUrl, response)
    expect(metadata.issuer).toBe(issuer)
    expect(metadata.registration_endpoint).toBe(`${issuer}/auth/register`)
  })

  test('the registration endpoint it names works', async () => {
    const metadata = await fetchDocument('/.well-known/oauth-authorization-server')
    const response = await fetch(metadata.registration_endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ redirect_uris: ['http://127.0.0.1:9/callback'] }),
    })
    expect(response.status).toBe(201)
  })
})

describe('protected resource metadata (RFC 9728)', () => {
  test('the REST API: resource {base_url}, at the {base_url} path and the path-insertion alias', async () => {
    const documents = await Promise.all(API_RESOURCE_METADATA_PATHS.map(fetchDocument))
    expect(API_RESOURCE_METADATA_PATHS).toEqual(['/v0/.well-known/oauth-protected-resource', '/.well-known/oauth-protected-resource/v0'])
    for (const document of documents) {
      expect(document).toEqual({
        resource: issuer,
        authorization_servers: [issuer],
        scopes_supported: [...SCOPES],
        bearer_methods_supported: ['header'],
        dpop_signing_alg_values_supported: ['ES256', 'ES384', 'ES512', 'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'EdDSA'],
        dpop_bound_access_tokens_required: false,
        resource_name: 'Messaging Service API',
        resource_documentation: `${issuer}/docs`,
      })
    }
  })

  test('MCP: resource {base_url}/mcp and only the webhook and message-event scopes, at the {base_url} path and the alias', async () => {
    expect(MCP_RESOURCE_METADATA_PATHS).toEqual(['/v0/.well-known/oauth-protected-resource/mcp', '/.well-known/oauth-protected-resource/v0/mcp'])
    for (const document of await Promise.all(MCP_RESOURCE_METADATA_PATHS.map(fetchDocument))) {
      expect(document).toEqual({
        resource: `${issuer}/mcp`,
        authorization_servers: [issuer],
        scopes_supported: ['hooks:read', 'hooks:write', 'messages:read'],
        bearer_methods_supported: ['header'],
        dpop_signing_alg_values_supported: ['ES256', 'ES384', 'ES512', 'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'EdDSA'],
        dpop_bound_access_tokens_required: false,
        resource_name: 'Messaging Service MCP server',
        resource_documentation: `${issuer}/docs`,
      })
    }
  })

  test('the 401 challenge of the REST API points at a document whose resource is {base_url}', async () => {
    const challenge = (await server.fetch('/v0/account')).headers.get('www-authenticate')!
    const url = /resource_metadata="([^"]+)"/.exec(challenge)![1]!
    expect((await (await fetch(url)).json()).resource).toBe(issuer)
  })
})

describe('every discovery document', () => {
  const allPaths = [...AUTHORIZATION_SERVER_METADATA_PATHS, ...API_RESOURCE_METADATA_PATHS, ...MCP_RESOURCE_METADATA_PATHS]

  test('names the same issuer, character for character', async () => {
    for (const path of allPaths) {
      const document = await fetchDocument(path)
      expect(document.issuer ?? document.authorization_servers[0]).toBe(issuer)
    }
  })

  test('needs no credential, and a bad one sent anyway does not turn it into a 401', async () => {
    for (const path of allPaths) {
      expect((await server.fetch(path, { headers: { authorization: 'Bearer not-a-token' } })).status).toBe(200)
      expect((await server.fetch(`${path}?key=sk_live_nope`)).status).toBe(200)
    }
  })

  test('HEAD answers like GET without a body', async () => {
    const response = await server.fetch('/.well-known/oauth-authorization-server/v0', { method: 'HEAD' })
    expect(response.status).toBe(200)
    expect(await response.text()).toBe('')
  })
})

describe('PUBLIC_URL decides every URL', () => {
  test('behind a proxy the documents name the public origin, not the listening one', async () => {
    const proxied = await startTestServer({ env: { PUBLIC_URL: 'https://api.example.com' } })
    const metadata = await (await proxied.fetch('/.well-known/oauth-authorization-server/v0')).json()
    expect(metadata.issuer).toBe('https://api.example.com/v0')
    expect(metadata.token_endpoint).toBe('https://api.example.com/v0/auth/token')
    expect((await (await proxied.fetch('/.well-known/oauth-protected-resource/v0/mcp')).json()).resource).toBe('https://api.example.com/v0/mcp')
    await proxied.stop()
  })
})
