import { afterAll, describe, expect, test } from 'bun:test'
import { Elysia } from 'elysia'
import { startTestServer } from '../support/server.ts'
import { REDIRECT_URI, flowFixture, pkcePair, postJson, signIn } from './support.ts'
import { oauthClients } from '../../src/lib/db/schema.ts'
import { newId } from '../../src/lib/db/ids.ts'
import { createLogger } from '../../src/lib/runtime/logger.ts'
import { httpFoundation } from '../../src/lib/http/foundation.ts'
import { authorizeRoutes } from '../../src/oauth/authorize.ts'
import type { ClientDirectory } from '../../src/oauth/client-directory.ts'
import type { OAuthClient } from '../../src/oauth/client-model.ts'

const server = await startTestServer()
const issuer = `${server.origin}/v0`

async function registerClient(body: Record<string, unknown>): Promise<string> {
  const response = await postJson(server, '/v0/auth/register', body)
  expect(response.status).toBe(201)
  return (await response.json()).client_id
}

const clientId = await registerClient({ client_name: '<script>alert("x")</script> & Co', redirect_uris: [REDIRECT_URI] })

/** GET /v0/auth/authorize with the query exactly as given (a string keeps repeated parameters). */
const page = (params: Record<string, string> | string) =>
  server.fetch(`/v0/auth/authorize?${typeof params === 'string' ? params : new URLSearchParams(params)}`, { redirect: 'manual' })
const valid = (client = clientId, redirectUri = REDIRECT_URI) => ({
  client_id: client,
  redirect_uri: redirectUri,
  response_type: 'code',
  code_challenge: pkcePair().challenge,
  code_challenge_method: 'S256',
  state: 's1',
})

/** The POST /auth/authorize body the consent page will send (its embedded JSON). */
function authorizeRequestOf(html: string): Record<string, unknown> {
  const json = /<script type="application\/json" id="authorize-request">(.*?)<\/script>/s.exec(html)?.[1]
  expect(json).toBeDefined()
  return JSON.parse(json!)
}

/** An HTML error page: 400, the page's headers, never a redirect. */
async function expectErrorPage(response: Response): Promise<string> {
  expect(response.status).toBe(400)
  expect(response.headers.get('location')).toBeNull()
  expect(response.headers.get('content-type')).toBe('text/html; charset=utf-8')
  expect(response.headers.get('x-frame-options')).toBe('DENY')
  expect(response.headers.get('content-security-policy')).toContain("frame-ancestors 'none'")
  expect(response.headers.get('cache-control')).toBe('no-store')
  const html = await response.text()
  expect(html).toContain('This authorization request cannot go on')
  return html
}

test('a valid request shows the consent page: escaped client name, redirect host, scopes, unframeable', async () => {
  const response = await page(valid())
  expect(response.status).toBe(200)
  expect(response.headers.get('x-frame-options')).toBe('DENY')
  expect(response.headers.get('content-security-policy')).toContain("frame-ancestors 'none'")
  expect(response.headers.get('cache-control')).toBe('no-store')
  const html = await response.text()
  expect(html).not.toContain('<script>alert')
  expect(html).toContain('&#60;script&#62;alert(&#34;x&#34;)&#60;/script&#62; &#38; Co')
  expect(html).toContain('127.0.0.1:8765')
  expect(html).toContain('Create, change, pause, test and delete webhook subscriptions, and resend their deliveries')
  expect(html).toContain("post('login'")
  expect(html).toContain('error=access_denied')
})

test('the same request with a loopback redirect on another port is accepted (RFC 8252)', async () => {
  expect((await page({ ...valid(), redirect_uri: 'http://127.0.0.1:9999/callback' })).status).toBe(200)
})

test('an unknown client or an unregistered redirect shows an error page and never redirects', async () => {
  for (const params of [
    { ...valid(), client_id: 'cli_00000000000000000000000000' },
    { ...valid(), redirect_uri: 'https://attacker.example/cb' },
    { ...valid(), redirect_uri: 'http://127.0.0.1:8765/callback/../steal' },
  ]) {
    await expectErrorPage(await page(params))
  }
})

describe('parameters (RFC 6749 §3.1)', () => {
  test('unknown parameters (prompt, nonce, anything) are ignored: the consent page, and they are not passed on', async () => {
    const response = await page({ ...valid(), prompt: 'consent', nonce: 'n-0S6_WzA2Mj', max_age: '0', claims: '{"x":1}', foo: 'bar' })
    expect(response.status).toBe(200)
    const request = authorizeRequestOf(await response.text())
    expect(Object.keys(request).sort()).toEqual(['client_id', 'code_challenge', 'code_challenge_method', 'redirect_uri', 'resource', 'scope', 'state'])
  })

  test('a known parameter sent without a value is treated as omitted', async () => {
    const response = await page({ ...valid(), state: '', scope: '', resource: '' })
    expect(response.status).toBe(200)
    const request = authorizeRequestOf(await response.text())
    expect(request.state).toBeUndefined()
    expect(request.scope).toBe('account:read hooks:read hooks:write')
    expect(request.resource).toEqual([issuer, `${issuer}/mcp`])
  })

  test('a repeated state is an error page naming it, never a redirect', async () => {
    const html = await expectErrorPage(await page(`${new URLSearchParams(valid())}&state=s2`))
    expect(html).toContain('The state parameter is sent more than once')
    expect(html).not.toContain('id="return"')
  })

  test('any other repeated parameter, known or not, is an error page', async () => {
    for (const name of ['client_id', 'redirect_uri', 'response_type', 'code_challenge', 'code_challenge_method', 'scope', 'prompt']) {
      // The same value twice: a repetition is refused even where both copies agree.
      const params = new URLSearchParams({ ...valid(), scope: 'account:read', prompt: 'login' })
      params.append(name, params.get(name)!)
      const html = await expectErrorPage(await page(params.toString()))
      expect(html).toContain(`The ${name} parameter is sent more than once`)
    }
  })

  test('a repeated empty parameter is still repeated', async () => {
    await expectErrorPage(await page(`${new URLSearchParams(valid())}&nonce=&nonce=`))
  })

  test('resource may be repeated (RFC 8707), up to 4 times', async () => {
    const twice = await page(`${new URLSearchParams(valid())}&resource=${encodeURIComponent(issuer)}&resource=${encodeURIComponent(`${issuer}/mcp`)}`)
    expect(twice.status).toBe(200)
    expect(authorizeRequestOf(await twice.text()).resource).toEqual([issuer, `${issuer}/mcp`])
    const once = await page({ ...valid(), resource: `${issuer}/mcp` })
    expect(authorizeRequestOf(await once.text()).resource).toEqual([`${issuer}/mcp`])
    const fiveTimes = `${new URLSearchParams(valid())}${`&resource=${encodeURIComponent(issuer)}`.repeat(5)}`
    expect(await expectErrorPage(await page(fiveTimes))).toContain('The resource parameter may be sent at most 4 times')
  })

  test('a known parameter over its length is an error page (not a JSON body)', async () => {
    expect(await expectErrorPage(await page({ ...valid(), client_id: 'c'.repeat(2049) }))).toContain('The client_id parameter must be at most 2048 characters')
    expect(await expectErrorPage(await page({ ...valid(), state: 's'.repeat(4097) }))).toContain('The state parameter must be at most 4096 characters')
  })

  test('a parameter name shown on the page is cut short and escaped', async () => {
    const name = `<b>${'x'.repeat(100)}`
    const html = await expectErrorPage(await page(`${new URLSearchParams(valid())}&${encodeURIComponent(name)}=1&${encodeURIComponent(name)}=2`))
    expect(html).toContain(`The &#60;b&#62;${'x'.repeat(61)}… parameter is sent more than once`)
    expect(html).not.toContain('<b>')
  })
})

describe('errors for a redirect URI on the device go back to the client', () => {
  const errors = [
    [{ code_challenge_method: 'plain' }, 'invalid_request'],
    [{ response_type: 'token' }, 'unsupported_response_type'],
    [{ scope: 'admin' }, 'invalid_scope'],
    [{ resource: 'https://elsewhere.example' }, 'invalid_target'],
  ] as const

  test('loopback: a 302 with error, error_description, state and iss', async () => {
    for (const [change, error] of errors) {
      const response = await page({ ...valid(), ...change })
      expect(response.status).toBe(302)
      expect(response.headers.get('cache-control')).toBe('no-store')
      const location = new URL(response.headers.get('location')!)
      expect(`${location.origin}${location.pathname}`).toBe(REDIRECT_URI)
      expect(location.searchParams.get('error')).toBe(error)
      expect(location.searchParams.get('error_description')!.length).toBeGreaterThan(0)
      expect(location.searchParams.get('state')).toBe('s1')
      expect(location.searchParams.get('iss')).toBe(issuer)
    }
  })

  test('a private-use scheme, and https on a loopback host: a 302 too', async () => {
    const app = await registerClient({ redirect_uris: ['com.example.app:/cb', 'https://localhost:8443/cb'] })
    for (const redirectUri of ['com.example.app:/cb', 'https://localhost:8443/cb']) {
      const response = await page({ ...valid(app, redirectUri), response_type: 'token' })
      expect(response.status).toBe(302)
      const location = response.headers.get('location')!
      expect(location.startsWith(`${redirectUri}?`)).toBe(true)
      const query = new URL(location).searchParams
      expect([query.get('error'), query.get('state'), query.get('iss')]).toEqual(['unsupported_response_type', 's1', issuer])
    }
  })
})

describe('errors for a web redirect URI are a page, not a redirect (RFC 9700 §4.11.2)', () => {
  test('the open-redirector attempt: anyone registers a web URI and sends a broken request; the browser stays here', async () => {
    const phish = await registerClient({ client_name: 'Totally legit', redirect_uris: ['https://evil.example/phish'] })
    const html = await expectErrorPage(await page({ client_id: phish, redirect_uri: 'https://evil.example/phish', response_type: 'x', state: 'abc' }))
    expect(html).toContain('response_type must be code.')
    expect(html).toContain('<code id="error-code">unsupported_response_type</code>')
    // A link the user may follow, which says where it goes and carries the error for the client.
    expect(html).toContain('<span class="host" id="return-host">evil.example</span>')
    const href = /<a class="button" id="return" href="([^"]*)">Return to evil\.example<\/a>/.exec(html)?.[1]
    expect(href).toBeDefined()
    const link = new URL(href!.replaceAll('&#38;', '&'))
    expect(`${link.origin}${link.pathname}`).toBe('https://evil.example/phish')
    expect(Object.fromEntries(link.searchParams)).toEqual({ error: 'unsupported_response_type', error_description: 'response_type must be code.', state: 'abc', iss: issuer })
  })

  test('every redirectable error, for a web client and for a native client on its claimed https URL', async () => {
    const web = await registerClient({ redirect_uris: ['https://app.example.com/cb'] })
    const native = await registerClient({ redirect_uris: ['https://app.example.com/native', 'http://127.0.0.1/cb'], application_type: 'native' })
    for (const [client, redirectUri] of [[web, 'https://app.example.com/cb'], [native, 'https://app.example.com/native']] as const) {
      const changes: Record<string, string>[] = [{ code_challenge_method: 'plain' }, { response_type: 'token' }, { scope: 'admin' }, { resource: 'https://elsewhere.example' }, { code_challenge: 'short' }]
      for (const change of changes) {
        const html = await expectErrorPage(await page({ ...valid(client, redirectUri), ...change }))
        expect(html).toContain('id="return-host">app.example.com<')
      }
    }
  })

  test('Deny on the consent page still goes to a web redirect URI: the user chose it', async () => {
    const web = await registerClient({ redirect_uris: ['https://app.example.com/cb'] })
    const response = await page(valid(web, 'https://app.example.com/cb'))
    expect(response.status).toBe(200)
    expect(await response.text()).toContain(`href="https://app.example.com/cb?error=access_denied&#38;state=s1&#38;iss=${encodeURIComponent(issuer)}"`)
  })
})

describe('what the consent page says about the client', () => {
  test('every redirect URI on the device (loopback, private-use scheme): "This app runs on your device"', async () => {
    const local = await registerClient({ redirect_uris: [REDIRECT_URI, 'cursor://anysphere.cursor-mcp/oauth/callback'] })
    const html = await (await page(valid(local))).text()
    expect(html).toContain('<p id="runs-on-device">This app runs on your device.</p>')
  })

  test('a client with any web redirect URI does not say so, even for its loopback one', async () => {
    const web = await registerClient({ redirect_uris: ['https://app.example.com/cb'] })
    const mixed = await registerClient({ redirect_uris: [REDIRECT_URI, 'https://app.example.com/cb'] })
    for (const [client, redirectUri] of [[web, 'https://app.example.com/cb'], [mixed, REDIRECT_URI]] as const) {
      const response = await page(valid(client, redirectUri))
      expect(response.status).toBe(200)
      const html = await response.text()
      expect(html).not.toContain('runs-on-device')
      expect(html).not.toContain('client-source')
    }
  })
})

test('a client stored before application_type was enforced (web, with a loopback redirect) still completes the flow', async () => {
  const fixture = await flowFixture(server)
  const legacy = newId('cli')
  await server.database.handle.db.insert(oauthClients).values({
    id: legacy,
    clientName: 'Old client',
    redirectUris: [REDIRECT_URI],
    grantTypes: ['authorization_code', 'refresh_token'],
    responseTypes: ['code'],
    tokenEndpointAuthMethod: 'none',
    applicationType: 'web',
  })
  expect((await page(valid(legacy))).status).toBe(200)
  const { verifier, challenge } = pkcePair()
  const authorized = await postJson(server, '/v0/auth/authorize', {
    client_id: legacy, redirect_uri: REDIRECT_URI, code_challenge: challenge, code_challenge_method: 'S256', id_token: await signIn(server, fixture),
  })
  expect(authorized.status).toBe(200)
  const { code } = await authorized.json()
  const tokens = await postJson(server, '/v0/auth/token', { grant_type: 'authorization_code', code, client_id: legacy, redirect_uri: REDIRECT_URI, code_verifier: verifier })
  expect(tokens.status).toBe(200)
})

test('a client stored under older rules with a redirect URI now refused (intent:): errors are a page without a link', async () => {
  const legacy = newId('cli')
  await server.database.handle.db.insert(oauthClients).values({
    id: legacy,
    redirectUris: ['intent://callback/cb'],
    grantTypes: ['authorization_code'],
    responseTypes: ['code'],
    tokenEndpointAuthMethod: 'none',
    applicationType: 'native',
  })
  const html = await expectErrorPage(await page({ ...valid(legacy, 'intent://callback/cb'), response_type: 'token' }))
  expect(html).toContain('<code id="error-code">unsupported_response_type</code>')
  expect(html).not.toContain('id="return"')
  expect(html).toContain('Return to the application and try again')
})

test('POST /auth/authorize ignores unknown members too', async () => {
  const fixture = await flowFixture(server)
  const response = await postJson(server, '/v0/auth/authorize', {
    client_id: fixture.clientId, redirect_uri: REDIRECT_URI, code_challenge: pkcePair().challenge, code_challenge_method: 'S256',
    id_token: await signIn(server, fixture), state: 'p', prompt: 'consent', nonce: 'abc', response_type: 'code', extra: { nested: true },
  })
  expect(response.status).toBe(200)
  expect((await response.json()).state).toBe('p')
})

describe('a client ID metadata document client', () => {
  // The authorize routes over a real socket, with a directory that answers for a metadata
  // document's URL as src/oauth/client-directory.ts does (the client's id is the URL), so this test
  // does not depend on fetching a document.
  const documentUrl = 'https://client.example.com/oauth/<client>.json'
  let origin = ''
  const documentClient = (redirectUris: string[], clientName: string | null): OAuthClient => ({
    id: documentUrl,
    clientName,
    redirectUris,
    grantTypes: ['authorization_code', 'refresh_token'],
    responseTypes: ['code'],
    tokenEndpointAuthMethod: 'none',
    applicationType: 'native',
    scope: null,
    clientSecretHash: null,
    jwks: null,
    jwksUri: null,
    createdAt: new Date(),
  })
  let current = documentClient([REDIRECT_URI], 'Doc <Agent>')
  const directory = {
    find: async (id: string | undefined) => (id?.startsWith('https://') ? { ...current, id } : null),
    record: async () => {},
  } as unknown as ClientDirectory
  const app = new Elysia().use(httpFoundation(createLogger('error', () => {}), { publicUrl: server.origin })).group('/v0', (v0) =>
    v0.use(
      authorizeRoutes({
        db: server.database.handle.db,
        clients: directory,
        signer: server.instance.signer,
        secretBox: server.instance.secretBox,
        get baseUrl() {
          return `${origin}/v0`
        },
        refreshGraceSeconds: 30,
        syncCaches: server.instance.syncCaches,
      }),
    ),
  )
  const listener = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: (request) => app.handle(request) })
  origin = `http://127.0.0.1:${listener.port}`
  const consent = (redirectUri = REDIRECT_URI, id = documentUrl) =>
    fetch(`${origin}/v0/auth/authorize?${new URLSearchParams({ ...valid(id, redirectUri) })}`, { redirect: 'manual' })

  test('the page names the host of the document, escaped, next to the name it gives', async () => {
    const response = await consent()
    expect(response.status).toBe(200)
    const html = await response.text()
    expect(html).toContain('<strong id="client-name">Doc &#60;Agent&#62;</strong>')
    expect(html).toContain('<p class="note" id="client-source">(client metadata from <span class="host">client.example.com</span>)</p>')
    expect(html).toContain('<p id="runs-on-device">This app runs on your device.</p>')
  })

  test('a document client on the web: its host, and no "runs on your device"', async () => {
    current = documentClient(['https://agent.example.org/cb'], null)
    const response = await consent('https://agent.example.org/cb')
    expect(response.status).toBe(200)
    const html = await response.text()
    expect(html).toContain(`<strong id="client-name">https://client.example.com/oauth/&#60;client&#62;.json</strong>`)
    expect(html).toContain('(client metadata from <span class="host">client.example.com</span>)')
    expect(html).not.toContain('runs-on-device')
  })

  test('a host holding characters that mean something in HTML (URL parsers allow & and ") is escaped', async () => {
    const html = await (await consent('https://agent.example.org/cb', 'https://we"ird&co.example/doc.json')).text()
    expect(html).toContain('(client metadata from <span class="host">we&#34;ird&#38;co.example</span>)')
  })
  afterAll(() => listener.stop(true))
})
