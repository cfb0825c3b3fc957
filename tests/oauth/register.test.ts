import { beforeEach, describe, expect, test } from 'bun:test'
import { eq, like } from 'drizzle-orm'
import { exportJWK, generateKeyPair, type JWK } from 'jose'
import { startTestServer } from '../support/server.ts'
import { oauthClients, rateLimits } from '../../src/lib/db/schema.ts'
import { sha256Hex } from '../../src/lib/security/crypto.ts'
import { isId } from '../../src/lib/db/ids.ts'
import { REGISTRATION_RATE_LIMIT } from '../../src/oauth/register.ts'
import { clientNameProblem, isOnDeviceRedirect, redirectUriProblem, validateClientMetadata } from '../../src/oauth/client-model.ts'

const server = await startTestServer()
const db = server.database.handle.db

// Every registration from this test client counts against one address's allowance.
beforeEach(async () => {
  await db.delete(rateLimits).where(like(rateLimits.key, 'register:ip:%'))
})

const register = (body: BodyInit, contentType = 'application/json') =>
  server.fetch('/v0/auth/register', { method: 'POST', body, headers: { 'content-type': contentType } })
const registerJson = (body: unknown) => register(JSON.stringify(body))

const LOOPBACK_CALLBACK = 'http://127.0.0.1:33418/callback'

async function expectOAuthError(response: Response, status: number, error: string) {
  expect(response.status).toBe(status)
  expect(response.headers.get('content-type')).toBe('application/json')
  expect(response.headers.get('cache-control')).toBe('no-store')
  const body = await response.json()
  expect(body).toEqual({ error, error_description: expect.any(String) })
  expect(body.error_description.length).toBeGreaterThan(0)
  return body as { error: string; error_description: string }
}

function expectNoNulls(value: unknown, path = ''): void {
  expect(value === null ? path : 'not null').toBe('not null')
  if (value && typeof value === 'object') for (const [key, inner] of Object.entries(value)) expectNoNulls(inner, `${path}/${key}`)
}

describe('redirectUriProblem', () => {
  const accepted = [
    'https://app.example.com/oauth/callback',
    'https://app.example.com/cb?tenant=7',
    'http://127.0.0.1:33418/callback',
    'http://127.0.0.1/callback',
    'http://localhost:6274/oauth/callback',
    'http://LOCALHOST:6274/cb',
    'http://[::1]:8080/cb',
    'cursor://anysphere.cursor-mcp/oauth/callback',
    'com.example.app:/cb',
    'vscode://vscode.github-authentication/did-authenticate',
    'myapp://callback',
  ]
  for (const uri of accepted) test(`accepts ${uri}`, () => expect(redirectUriProblem(uri)).toBeNull())

  const refused: [string, string, RegExp][] = [
    ['javascript:', 'javascript:alert(document.cookie)', /javascript/],
    ['javascript: in capitals', 'JAVASCRIPT:alert(1)', /javascript/],
    ['data:', 'data:text/html,<script>alert(1)</script>', /characters|data/],
    ['data: without markup', 'data:text/plain,hello', /data/],
    ['file:', 'file:///etc/passwd', /file/],
    ['vbscript:', 'vbscript:msgbox(1)', /vbscript/],
    ['blob:', 'blob:https://app.example.com/0b5e', /blob/],
    ['about:', 'about:blank', /about/],
    ['chrome:', 'chrome://settings/passwords', /chrome/],
    ['chrome-extension:', 'chrome-extension://abcdefghijklmnop/cb.html', /chrome-extension/],
    ['chrome-untrusted:', 'chrome-untrusted://terminal/cb', /chrome-untrusted/],
    ['intent:', 'intent://scan/cb', /intent/],
    ['jar:', 'jar:https://app.example.com/app.jar!/cb', /jar/],
    ['view-source:', 'view-source:https://app.example.com/cb', /view-source/],
    ['ws:', 'ws://127.0.0.1:8080/cb', /ws/],
    ['wss:', 'wss://app.example.com/cb', /wss/],
    ['ftp:', 'ftp://ftp.example.com/cb', /ftp/],
    ['urn: (no out-of-band flow)', 'urn:ietf:wg:oauth:2.0:oob', /urn/],
    ['filesystem:', 'filesystem:https://app.example.com/temporary/cb', /filesystem/],
    ['a fragment', 'https://app.example.com/cb#token', /fragment/],
    ['an empty fragment', 'https://app.example.com/cb#', /fragment/],
    ['userinfo', 'https://trusted.example.com@evil.example/cb', /userinfo/],
    ['userinfo on a loopback address', 'http://user:pass@127.0.0.1/cb', /userinfo/],
    ['userinfo in a private-use URI', 'cursor://me@anysphere.cursor-mcp/cb', /userinfo/],
    ['http on a public host', 'http://app.example.com/cb', /loopback/],
    ['http on a host that starts like localhost', 'http://localhost.evil.example/cb', /loopback/],
    ['http on 127.0.0.1 spelt another way', 'http://127.1/cb', /loopback/],
    ['http on a hex loopback address', 'http://0x7f000001/cb', /loopback/],
    ['http on a private address', 'http://192.168.1.10/cb', /loopback/],
    ['https without //', 'https:app.example.com/cb', /https:\/\//],
    ['a relative URI', '/callback', /absolute/],
    ['a bare host', 'app.example.com/callback', /absolute/],
    ['white space', 'https://app.example.com/a b', /characters/],
    ['a tab the parser would drop', 'https://app.example.com/\tcb', /characters/],
    ['a backslash the parser would read as /', 'https://app.example.com\\@evil.example/', /characters/],
    ['raw non-ASCII', 'https://exämple.com/cb', /characters/],
    ['a scheme and nothing else', 'myapp:', /nothing after/],
    ['2049 characters', `https://app.example.com/${'a'.repeat(2049 - 'https://app.example.com/'.length)}`, /2048/],
  ]
  for (const [name, uri, reason] of refused) test(`refuses ${name}`, () => expect(redirectUriProblem(uri)).toMatch(reason))

  test('2048 characters are fine', () => {
    expect(redirectUriProblem(`https://app.example.com/${'a'.repeat(2048 - 'https://app.example.com/'.length)}`)).toBeNull()
  })
})

describe('isOnDeviceRedirect', () => {
  const onDevice = ['http://127.0.0.1:33418/callback', 'http://localhost/cb', 'http://[::1]:8080/cb', 'https://localhost:8443/cb', 'com.example.app:/cb', 'cursor://anysphere.cursor-mcp/oauth/callback']
  const notOnDevice = ['https://app.example.com/cb', 'http://app.example.com/cb', 'https://127.0.0.1.example.com/cb', 'intent://scan/cb', 'chrome-extension://abc/cb', 'javascript:alert(1)', 'not a uri']
  for (const uri of onDevice) test(`${uri} is on the device`, () => expect(isOnDeviceRedirect(uri)).toBe(true))
  for (const uri of notOnDevice) test(`${uri} is not`, () => expect(isOnDeviceRedirect(uri)).toBe(false))
})

describe('clientNameProblem', () => {
  const accepted = ['My agent', 'Claude Code (messaging)', 'تطبيق الرسائل', 'אפליקציה', '日本語のアプリ', 'Family 👨‍👩‍👧 app', 'A\u00a0B']
  for (const name of accepted) test(`accepts ${JSON.stringify(name)}`, () => expect(clientNameProblem(name)).toBeNull())

  const bidi = ['\u202a', '\u202b', '\u202c', '\u202d', '\u202e', '\u2066', '\u2067', '\u2068', '\u2069', '\u200e', '\u200f', '\u061c']
  for (const char of bidi) {
    const code = char.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')
    test(`refuses the bidirectional formatting character U+${code}`, () => {
      expect(clientNameProblem(`Good app ${char}ppa live`)).toBe(
        `must not contain bidirectional formatting characters (U+${code} at position 9), which can make the name read differently from what it is`,
      )
    })
  }
  const controls: [string, string][] = [
    ['NUL', '\u0000'], ['a bell', '\u0007'], ['an escape', '\u001b'], ['a line feed', '\n'], ['a tab', '\t'], ['DEL', '\u007f'],
    ['the C1 next-line', '\u0085'], ['the C1 CSI', '\u009b'], ['a line separator', '\u2028'], ['a paragraph separator', '\u2029'],
  ]
  for (const [name, char] of controls) {
    test(`refuses ${name}`, () => expect(clientNameProblem(`App${char}`)).toMatch(/^must not contain control characters \(U\+[0-9A-F]{4} at position 3\)$/))
  }
  test('refuses a name with nothing visible', () => {
    expect(clientNameProblem('   ')).toBe('must contain a visible character')
    expect(clientNameProblem('')).toBe('must contain a visible character')
  })
})

describe('validateClientMetadata', () => {
  test('applies the RFC 7591 defaults and adds nothing else; a loopback client is native', () => {
    expect(validateClientMetadata({ redirect_uris: [LOOPBACK_CALLBACK] })).toEqual({
      redirect_uris: [LOOPBACK_CALLBACK],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      application_type: 'native',
    })
  })

  test('drops duplicates and normalises the scope to single spaces', () => {
    const metadata = validateClientMetadata({
      redirect_uris: [LOOPBACK_CALLBACK, LOOPBACK_CALLBACK],
      grant_types: ['authorization_code', 'authorization_code'],
      scope: '  hooks:read  hooks:write hooks:read ',
    })
    expect(metadata.redirect_uris).toEqual([LOOPBACK_CALLBACK])
    expect(metadata.grant_types).toEqual(['authorization_code'])
    expect(metadata.scope).toBe('hooks:read hooks:write')
  })

  test('names the offending redirect URI by its index', () => {
    expect(() => validateClientMetadata({ redirect_uris: [LOOPBACK_CALLBACK, 'javascript:alert(1)'] })).toThrow(/redirect_uris\/1/)
  })

  test('refuses unknown scopes, a blank scope and refresh_token without authorization_code', () => {
    expect(() => validateClientMetadata({ redirect_uris: [LOOPBACK_CALLBACK], scope: 'hooks:read admin' })).toThrow(/unknown scope/)
    expect(() => validateClientMetadata({ redirect_uris: [LOOPBACK_CALLBACK], scope: '   ' })).toThrow(/at least one/)
    expect(() => validateClientMetadata({ redirect_uris: [LOOPBACK_CALLBACK], grant_types: ['refresh_token'] })).toThrow(/authorization_code/)
  })
})

describe('POST /v0/auth/register accepts', () => {
  // Bodies as real MCP clients send them, extra metadata included.
  // [name, body, the application_type registered]
  const clients: [string, Record<string, unknown>, 'web' | 'native'][] = [
    [
      'Claude Code',
      {
        client_name: 'Claude Code (messaging)',
        redirect_uris: ['http://localhost:54212/callback'],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
      },
      'native',
    ],
    [
      'Cursor',
      {
        client_name: 'Cursor',
        redirect_uris: ['cursor://anysphere.cursor-mcp/oauth/callback'],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
      },
      'native',
    ],
    [
      'the MCP Inspector, with every optional metadata field',
      {
        client_name: 'MCP Inspector',
        redirect_uris: ['http://localhost:6274/oauth/callback', 'http://localhost:6274/oauth/callback/debug'],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
        client_uri: 'https://github.com/modelcontextprotocol/inspector',
        logo_uri: 'https://example.com/logo.png',
        tos_uri: 'https://example.com/tos',
        policy_uri: 'https://example.com/privacy',
        contacts: ['ops@example.com'],
        software_id: '2f1c0b6e-inspector',
        software_version: '0.16.2',
        jwks_uri: null,
        scope: 'hooks:read hooks:write',
      },
      'native',
    ],
    [
      // VS Code's registration, as its source sends it: claimed https URLs next to loopback ones, as native.
      'VS Code: native, with https and loopback redirect URIs',
      {
        client_name: 'Visual Studio Code',
        client_uri: 'https://code.visualstudio.com',
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        redirect_uris: ['https://insiders.vscode.dev/redirect', 'https://vscode.dev/redirect', 'http://127.0.0.1/', 'http://127.0.0.1:33418/'],
        token_endpoint_auth_method: 'none',
        application_type: 'native',
      },
      'native',
    ],
    ['a native app on a private-use scheme', { redirect_uris: ['com.example.app:/cb'], application_type: 'native' }, 'native'],
    ['a web app, application_type given', { redirect_uris: ['https://app.example.com/cb'], application_type: 'web' }, 'web'],
    ['a web app, application_type derived', { redirect_uris: ['https://app.example.com/cb'] }, 'web'],
    ['a native app on a loopback host, application_type derived', { redirect_uris: ['http://[::1]:8080/cb'] }, 'native'],
    ['a native app on a private-use scheme, application_type derived', { redirect_uris: ['cursor://anysphere.cursor-mcp/oauth/callback'] }, 'native'],
    ['https on a loopback host, application_type derived', { redirect_uris: ['https://localhost:8443/cb'] }, 'native'],
    ['a mix of web and loopback redirect URIs, application_type derived', { redirect_uris: ['https://app.example.com/cb', 'http://localhost:3000/cb'] }, 'native'],
    ['a native app with only a claimed https URL (RFC 8252 §7.2)', { redirect_uris: ['https://app.example.com/native-cb'], application_type: 'native' }, 'native'],
  ]

  for (const [name, body, applicationType] of clients) {
    test(name, async () => {
      const response = await registerJson(body)
      expect(response.status).toBe(201)
      expect(response.headers.get('cache-control')).toBe('no-store')
      expect(response.headers.get('content-type')).toStartWith('application/json')
      const registration = await response.json()
      expectNoNulls(registration)
      expect(isId('cli', registration.client_id)).toBe(true)
      expect(Math.abs(registration.client_id_issued_at - Date.now() / 1000)).toBeLessThan(60)
      expect(Number.isInteger(registration.client_id_issued_at)).toBe(true)
      const expected: Record<string, unknown> = {
        client_id: registration.client_id,
        client_id_issued_at: registration.client_id_issued_at,
        redirect_uris: body.redirect_uris,
        grant_types: body.grant_types ?? ['authorization_code', 'refresh_token'],
        response_types: body.response_types ?? ['code'],
        token_endpoint_auth_method: 'none',
        application_type: applicationType,
      }
      if (body.client_name !== undefined) expected.client_name = body.client_name
      if (body.scope !== undefined) expected.scope = body.scope
      // Exactly these members: unknown metadata is neither echoed nor stored.
      expect(registration).toEqual(expected)

      const [stored] = await db.select().from(oauthClients).where(eq(oauthClients.id, registration.client_id))
      expect(stored).toMatchObject({
        clientName: (body.client_name as string | undefined) ?? null,
        redirectUris: body.redirect_uris as string[],
        grantTypes: registration.grant_types,
        responseTypes: registration.response_types,
        tokenEndpointAuthMethod: 'none',
        applicationType: registration.application_type,
        scope: (body.scope as string | undefined) ?? null,
      })
    })
  }

  test('the minimal body: only redirect_uris, defaults echoed, no client_name or scope member', async () => {
    const registration = await (await registerJson({ redirect_uris: ['https://app.example.com/cb'] })).json()
    expect(Object.keys(registration).sort()).toEqual(
      ['application_type', 'client_id', 'client_id_issued_at', 'grant_types', 'redirect_uris', 'response_types', 'token_endpoint_auth_method'].sort(),
    )
  })

  test('a client name with markup and SQL is stored as plain text', async () => {
    const client_name = "<script>alert(1)</script>'; drop table oauth_clients; -- 🦀"
    const registration = await (await registerJson({ redirect_uris: [LOOPBACK_CALLBACK], client_name })).json()
    expect(registration.client_name).toBe(client_name)
    const [stored] = await db.select().from(oauthClients).where(eq(oauthClients.id, registration.client_id))
    expect(stored!.clientName).toBe(client_name)
  })

  test('each registration gets its own client_id', async () => {
    const first = await (await registerJson({ redirect_uris: [LOOPBACK_CALLBACK] })).json()
    const second = await (await registerJson({ redirect_uris: [LOOPBACK_CALLBACK] })).json()
    expect(first.client_id).not.toBe(second.client_id)
  })
})

describe('POST /v0/auth/register refuses', () => {
  const valid = { redirect_uris: [LOOPBACK_CALLBACK] }
  const refused: [string, unknown, string][] = [
    ['redirect_uris missing', { client_name: 'x' }, 'invalid_client_metadata'],
    ['redirect_uris empty', { redirect_uris: [] }, 'invalid_client_metadata'],
    ['redirect_uris a string, not an array', { redirect_uris: LOOPBACK_CALLBACK }, 'invalid_client_metadata'],
    ['redirect_uris null', { redirect_uris: null }, 'invalid_client_metadata'],
    ['a redirect URI that is a number', { redirect_uris: [42] }, 'invalid_client_metadata'],
    ['an empty redirect URI', { redirect_uris: [''] }, 'invalid_client_metadata'],
    ['11 redirect URIs', { redirect_uris: Array.from({ length: 11 }, (_, i) => `https://app.example.com/cb/${i}`) }, 'invalid_client_metadata'],
    ['a javascript: redirect URI', { redirect_uris: ['javascript:alert(1)'] }, 'invalid_redirect_uri'],
    ['a data: redirect URI', { redirect_uris: ['data:text/plain,hi'] }, 'invalid_redirect_uri'],
    ['a file: redirect URI', { redirect_uris: ['file:///etc/passwd'] }, 'invalid_redirect_uri'],
    ['a redirect URI with a fragment', { redirect_uris: ['https://app.example.com/cb#x'] }, 'invalid_redirect_uri'],
    ['a redirect URI with userinfo', { redirect_uris: ['https://user@app.example.com/cb'] }, 'invalid_redirect_uri'],
    ['an http redirect URI on a public host', { redirect_uris: ['http://app.example.com/cb'] }, 'invalid_redirect_uri'],
    ['a relative redirect URI', { redirect_uris: ['/callback'] }, 'invalid_redirect_uri'],
    ['a redirect URI of 2049 characters', { redirect_uris: [`https://a.example/${'a'.repeat(2031)}`] }, 'invalid_redirect_uri'],
    ['one bad redirect URI among good ones', { redirect_uris: [LOOPBACK_CALLBACK, 'javascript:alert(1)'] }, 'invalid_redirect_uri'],
    ...[
      'vbscript:msgbox(1)', 'about:blank', 'blob:https://app.example.com/0b5e', 'chrome://settings', 'chrome-extension://abcdefghijklmnop/cb.html',
      'intent://scan/cb', 'jar:https://app.example.com/app.jar!/cb', 'view-source:https://app.example.com/cb', 'ws://127.0.0.1:8080/cb',
      'wss://app.example.com/cb', 'ftp://ftp.example.com/cb', 'urn:ietf:wg:oauth:2.0:oob',
    ].map((uri): [string, unknown, string] => [`a ${uri.split(':')[0]}: redirect URI`, { redirect_uris: [uri] }, 'invalid_redirect_uri']),
    ['client_name of 257 characters', { ...valid, client_name: 'x'.repeat(257) }, 'invalid_client_metadata'],
    ['client_name a number', { ...valid, client_name: 7 }, 'invalid_client_metadata'],
    ['client_name null', { ...valid, client_name: null }, 'invalid_client_metadata'],
    ['client_name with a right-to-left override', { ...valid, client_name: 'Acme \u202eexe.nigol' }, 'invalid_client_metadata'],
    ['client_name with a first-strong isolate', { ...valid, client_name: 'Acme \u2068Bank\u2069' }, 'invalid_client_metadata'],
    ['client_name with an escape sequence', { ...valid, client_name: '\u001b[31mAcme' }, 'invalid_client_metadata'],
    ['client_name with a C1 control', { ...valid, client_name: 'Acme\u009b31m' }, 'invalid_client_metadata'],
    ['client_name with a line break', { ...valid, client_name: 'Acme\nSign in to your bank' }, 'invalid_client_metadata'],
    ['client_name of white space only', { ...valid, client_name: '   ' }, 'invalid_client_metadata'],
    ['application_type web with a loopback redirect URI', { redirect_uris: [LOOPBACK_CALLBACK], application_type: 'web' }, 'invalid_client_metadata'],
    ['application_type web with https on a loopback host', { redirect_uris: ['https://localhost:8443/cb'], application_type: 'web' }, 'invalid_client_metadata'],
    ['application_type web with a private-use redirect URI', { redirect_uris: ['com.example.app:/cb'], application_type: 'web' }, 'invalid_client_metadata'],
    ['application_type web with one loopback URI among web ones', { redirect_uris: ['https://app.example.com/cb', LOOPBACK_CALLBACK], application_type: 'web' }, 'invalid_client_metadata'],
    ['scope of 513 characters', { ...valid, scope: `hooks:read ${' '.repeat(502)}` }, 'invalid_client_metadata'],
    ['an unknown scope', { ...valid, scope: 'hooks:read admin' }, 'invalid_client_metadata'],
    ['scopes separated by commas', { ...valid, scope: 'hooks:read,hooks:write' }, 'invalid_client_metadata'],
    ['an empty scope', { ...valid, scope: '' }, 'invalid_client_metadata'],
    ['scope an array', { ...valid, scope: ['hooks:read'] }, 'invalid_client_metadata'],
    ['grant_types with password', { ...valid, grant_types: ['authorization_code', 'password'] }, 'invalid_client_metadata'],
    ['grant_types with implicit', { ...valid, grant_types: ['implicit'] }, 'invalid_client_metadata'],
    ['grant_types with client_credentials', { ...valid, grant_types: ['client_credentials'] }, 'invalid_client_metadata'],
    ['grant_types empty', { ...valid, grant_types: [] }, 'invalid_client_metadata'],
    ['grant_types a string', { ...valid, grant_types: 'authorization_code' }, 'invalid_client_metadata'],
    ['grant_types without authorization_code', { ...valid, grant_types: ['refresh_token'] }, 'invalid_client_metadata'],
    ['response_types token', { ...valid, response_types: ['token'] }, 'invalid_client_metadata'],
    ['response_types code id_token', { ...valid, response_types: ['code id_token'] }, 'invalid_client_metadata'],
    ['token_endpoint_auth_method client_secret_jwt (a shared secret as a signing key)', { ...valid, token_endpoint_auth_method: 'client_secret_jwt' }, 'invalid_client_metadata'],
    ['token_endpoint_auth_method private_key_jwt', { ...valid, token_endpoint_auth_method: 'private_key_jwt' }, 'invalid_client_metadata'],
    ['application_type service', { ...valid, application_type: 'service' }, 'invalid_client_metadata'],
    ['a JSON array instead of an object', [valid], 'invalid_client_metadata'],
    ['JSON null', null, 'invalid_client_metadata'],
    ['a JSON string', 'redirect_uris', 'invalid_client_metadata'],
  ]
  for (const [name, body, error] of refused) {
    test(`${name}: 400 ${error}`, async () => {
      await expectOAuthError(await registerJson(body), 400, error)
    })
  }

  test('nothing is stored for a refused registration', async () => {
    const before = (await db.select({ id: oauthClients.id }).from(oauthClients)).length
    await registerJson({ redirect_uris: ['javascript:alert(1)'], client_name: 'refused' })
    await registerJson({ redirect_uris: [LOOPBACK_CALLBACK], client_name: 'refused', scope: 'admin' })
    expect((await db.select({ id: oauthClients.id }).from(oauthClients)).length).toBe(before)
  })

  test('a client name with a bidirectional override: the description names the field and the character', async () => {
    const { error_description } = await expectOAuthError(await registerJson({ ...valid, client_name: 'Acme \u202eexe.nigol' }), 400, 'invalid_client_metadata')
    expect(error_description).toBe(
      'client_name must not contain bidirectional formatting characters (U+202E at position 5), which can make the name read differently from what it is.',
    )
  })

  test('application_type web with a loopback redirect: the description names the rule and the URI', async () => {
    const { error_description } = await expectOAuthError(
      await registerJson({ redirect_uris: ['https://app.example.com/cb', LOOPBACK_CALLBACK], application_type: 'web' }),
      400,
      'invalid_client_metadata',
    )
    expect(error_description).toContain('application_type: web clients may use only https redirect URIs on a web host')
    expect(error_description).toContain(`redirect_uris/1 (${LOOPBACK_CALLBACK})`)
    expect(error_description).toContain('only native clients may use (OpenID Connect Registration 1.0 §2)')
  })

  test('the description names the field', async () => {
    expect((await expectOAuthError(await registerJson({ ...valid, client_name: 'x'.repeat(257) }), 400, 'invalid_client_metadata')).error_description).toContain('client_name')
    expect((await expectOAuthError(await registerJson({ redirect_uris: [LOOPBACK_CALLBACK, 'http://evil.example/'] }), 400, 'invalid_redirect_uri')).error_description).toContain('redirect_uris/1')
  })

  test('malformed JSON: 400 invalid_request, an OAuth error body and not problem+json', async () => {
    await expectOAuthError(await register('{"redirect_uris": ['), 400, 'invalid_request')
    await expectOAuthError(await register(''), 400, 'invalid_request')
  })

  test('a wrong content type: 415 invalid_request, an OAuth error body', async () => {
    await expectOAuthError(await register(`redirect_uris=${encodeURIComponent(LOOPBACK_CALLBACK)}`, 'application/x-www-form-urlencoded'), 415, 'invalid_request')
    await expectOAuthError(await register(JSON.stringify(valid), 'text/plain'), 415, 'invalid_request')
  })

  test('a body over 1 MB sent without a declared length: 413 as an OAuth error body', async () => {
    const chunks = (async function* () {
      for (let i = 0; i < 32; i++) yield new TextEncoder().encode('x'.repeat(64 * 1024))
    })()
    await expectOAuthError(await register(chunks as unknown as BodyInit), 413, 'invalid_request')
  })

  test('bytes that are not UTF-8 never cause a 5xx', async () => {
    const response = await register(new Uint8Array([0x7b, 0x22, 0x72, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]))
    expect(response.status).toBe(400)
  })
})

describe('confidential clients (docs/oauth.md#confidential-clients)', () => {
  const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer'
  const publicJwk = async (alg: 'ES256' | 'RS256' | 'EdDSA' = 'ES256'): Promise<JWK> => {
    const { publicKey } = await generateKeyPair(alg, { extractable: true })
    return { ...(await exportJWK(publicKey)), kid: `key-${alg}`, alg }
  }
  // jose will not make a key this weak; Web Crypto will.
  const weakRsaJwk = async () => {
    const pair = await crypto.subtle.generateKey({ name: 'RSASSA-PKCS1-v1_5', modulusLength: 1024, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' }, true, ['sign', 'verify'])
    return exportJWK(pair.publicKey)
  }
  const privateJwk = async () => exportJWK((await generateKeyPair('ES256', { extractable: true })).privateKey)
  const storedRow = async (clientId: string) => (await db.select().from(oauthClients).where(eq(oauthClients.id, clientId)))[0]!

  for (const method of ['client_secret_basic', 'client_secret_post'] as const) {
    test(`${method}: the secret is in the 201 body once, with client_secret_expires_at 0; the row holds its SHA-256 only`, async () => {
      const response = await registerJson({ redirect_uris: [LOOPBACK_CALLBACK], token_endpoint_auth_method: method })
      expect(response.status).toBe(201)
      expect(response.headers.get('cache-control')).toBe('no-store')
      const registration = await response.json()
      expectNoNulls(registration)
      expect(registration).toMatchObject({ token_endpoint_auth_method: method, client_secret_expires_at: 0, grant_types: ['authorization_code', 'refresh_token'] })
      expect(registration.client_secret).toMatch(/^cs_[A-Za-z0-9_-]{43}$/)
      const row = await storedRow(registration.client_id)
      expect(row.tokenEndpointAuthMethod).toBe(method)
      expect(row.clientSecretHash).toBe(sha256Hex(registration.client_secret))
      expect(JSON.stringify(row)).not.toContain(registration.client_secret)
      expect(JSON.stringify(row)).not.toContain(registration.client_secret.slice(3, 20))
      const again = await (await registerJson({ redirect_uris: [LOOPBACK_CALLBACK], token_endpoint_auth_method: method })).json()
      expect(again.client_secret).not.toBe(registration.client_secret)
    })
  }

  test('private_key_jwt with jwks: the public members are kept and echoed, others dropped; no secret', async () => {
    const jwk = await publicJwk('ES256')
    const response = await registerJson({ redirect_uris: [LOOPBACK_CALLBACK], token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [{ ...jwk, use: 'sig', x5t: 'dGh1bWJwcmludA', ext: true }] } })
    expect(response.status).toBe(201)
    const registration = await response.json()
    expect(registration.client_secret).toBeUndefined()
    expect(registration.client_secret_expires_at).toBeUndefined()
    expect(registration.jwks).toEqual({ keys: [{ kty: 'EC', crv: 'P-256', x: jwk.x, y: jwk.y, kid: 'key-ES256', alg: 'ES256', use: 'sig' }] })
    const row = await storedRow(registration.client_id)
    expect(row.jwks).toEqual(registration.jwks)
    expect(row).toMatchObject({ tokenEndpointAuthMethod: 'private_key_jwt', clientSecretHash: null, jwksUri: null })
  })

  test('private_key_jwt with RSA and Ed25519 keys, and with a jwks_uri', async () => {
    const keys = [await publicJwk('RS256'), { ...(await publicJwk('EdDSA')), kid: 'ed' }]
    expect((await registerJson({ redirect_uris: [LOOPBACK_CALLBACK], token_endpoint_auth_method: 'private_key_jwt', jwks: { keys } })).status).toBe(201)
    const byUri = await registerJson({ redirect_uris: [LOOPBACK_CALLBACK], token_endpoint_auth_method: 'private_key_jwt', jwks_uri: 'https://keys.example.com/agent/jwks.json' })
    expect(byUri.status).toBe(201)
    const registration = await byUri.json()
    expect(registration.jwks_uri).toBe('https://keys.example.com/agent/jwks.json')
    expect(registration.jwks).toBeUndefined()
    expect((await storedRow(registration.client_id)).jwksUri).toBe('https://keys.example.com/agent/jwks.json')
  })

  test("the JWT bearer grant alone, no redirect URIs: the MCP SDK's CrossAppAccessProvider metadata, as it sends it", async () => {
    const response = await registerJson({ client_name: 'cross-app-access-client', redirect_uris: [], grant_types: [JWT_BEARER], token_endpoint_auth_method: 'client_secret_basic' })
    expect(response.status).toBe(201)
    const registration = await response.json()
    expect(registration).toMatchObject({ redirect_uris: [], grant_types: [JWT_BEARER], response_types: [], token_endpoint_auth_method: 'client_secret_basic', application_type: 'web' })
    expect(registration.client_secret).toStartWith('cs_')
    const withCode = await (await registerJson({ redirect_uris: [LOOPBACK_CALLBACK], grant_types: ['authorization_code', 'refresh_token', JWT_BEARER], token_endpoint_auth_method: 'client_secret_post' })).json()
    expect(withCode.grant_types).toEqual(['authorization_code', 'refresh_token', JWT_BEARER])
    expect(withCode.response_types).toEqual(['code'])
  })

  test('a JWT-bearer-only client has no page at the authorize endpoint', async () => {
    const registration = await (await registerJson({ redirect_uris: [LOOPBACK_CALLBACK], grant_types: [JWT_BEARER], token_endpoint_auth_method: 'client_secret_basic' })).json()
    const query = new URLSearchParams({ client_id: registration.client_id, redirect_uri: LOOPBACK_CALLBACK, response_type: 'code', code_challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM', code_challenge_method: 'S256' })
    const page = await server.fetch(`/v0/auth/authorize?${query}`, { redirect: 'manual' })
    expect(page.status).toBe(400)
    expect(await page.text()).toContain('grant_types do not include authorization_code')
  })

  const valid = { redirect_uris: [LOOPBACK_CALLBACK] }
  const pkj = { ...valid, token_endpoint_auth_method: 'private_key_jwt' }
  const refused: [string, () => Promise<unknown>, string][] = [
    ['private_key_jwt without keys', async () => pkj, 'exactly one of jwks'],
    ['private_key_jwt with both jwks and jwks_uri', async () => ({ ...pkj, jwks: { keys: [await publicJwk()] }, jwks_uri: 'https://keys.example.com/jwks.json' }), 'exactly one of jwks'],
    ['a private EC key (d) in jwks', async () => ({ ...pkj, jwks: { keys: [await privateJwk()] } }), 'jwks/keys/0 holds the private key member "d"'],
    ['an RSA private member (p) in jwks', async () => ({ ...pkj, jwks: { keys: [{ ...(await publicJwk('RS256')), p: 'AQAB' }] } }), 'private key member "p"'],
    ['a symmetric key (kty oct)', async () => ({ ...pkj, jwks: { keys: [{ kty: 'oct', k: 'c2VjcmV0' }] } }), 'jwks/keys/0/kty'],
    ['a 1024-bit RSA key', async () => ({ ...pkj, jwks: { keys: [await weakRsaJwk()] } }), '1024-bit RSA key'],
    ['an EC key with an RSA alg', async () => ({ ...pkj, jwks: { keys: [{ ...(await publicJwk('ES256')), alg: 'RS256' }] } }), 'has alg RS256, which does not go with crv P-256'],
    ['an RSA key with an EC alg', async () => ({ ...pkj, jwks: { keys: [{ ...(await publicJwk('RS256')), alg: 'ES256' }] } }), 'has alg ES256, which is not an RSA algorithm'],
    ['a P-256 key declared ES384', async () => ({ ...pkj, jwks: { keys: [{ ...(await publicJwk('ES256')), alg: 'ES384' }] } }), 'does not go with crv P-256'],
    ['an HS256 alg on a key', async () => ({ ...pkj, jwks: { keys: [{ ...(await publicJwk('ES256')), alg: 'HS256' }] } }), 'jwks/keys/0/alg'],
    ['a key for encryption (use enc)', async () => ({ ...pkj, jwks: { keys: [{ ...(await publicJwk()), use: 'enc' }] } }), 'jwks/keys/0/use'],
    ['key_ops without verify', async () => ({ ...pkj, jwks: { keys: [{ ...(await publicJwk()), key_ops: ['encrypt'] }] } }), 'key_ops must include verify'],
    ['two keys with one kid', async () => ({ ...pkj, jwks: { keys: [await publicJwk(), await publicJwk()] } }), 'kid "key-ES256" of another key'],
    ['an EC point that is not on its curve', async () => ({ ...pkj, jwks: { keys: [{ ...(await publicJwk()), y: (await publicJwk()).x }] } }), 'jwks/keys/0 is not a valid EC public key'],
    [`${11} keys`, async () => ({ ...pkj, jwks: { keys: await Promise.all(Array.from({ length: 11 }, async (_, i) => ({ ...(await publicJwk()), kid: `k${i}` }))) } }), 'jwks/keys'],
    ['an empty key set', async () => ({ ...pkj, jwks: { keys: [] } }), 'jwks/keys'],
    ['jwks for a client_secret_basic client', async () => ({ ...valid, token_endpoint_auth_method: 'client_secret_basic', jwks: { keys: [await publicJwk()] } }), 'go with token_endpoint_auth_method private_key_jwt'],
    ['jwks_uri over http', async () => ({ ...pkj, jwks_uri: 'http://keys.example.com/jwks.json' }), 'jwks_uri must use https'],
    ['jwks_uri on a loopback address', async () => ({ ...pkj, jwks_uri: 'https://127.0.0.1/jwks.json' }), 'jwks_uri names 127.0.0.1, which is not a public address'],
    ['jwks_uri on localhost', async () => ({ ...pkj, jwks_uri: 'https://localhost:8443/jwks.json' }), 'not a public address'],
    ['jwks_uri on a private address', async () => ({ ...pkj, jwks_uri: 'https://10.1.2.3/jwks.json' }), 'not a public address'],
    ['jwks_uri on the cloud metadata address', async () => ({ ...pkj, jwks_uri: 'https://169.254.169.254/latest/jwks' }), 'not a public address'],
    ['jwks_uri on an IPv6 unique-local address', async () => ({ ...pkj, jwks_uri: 'https://[fd00::1]/jwks.json' }), 'not a public address'],
    ['jwks_uri with userinfo', async () => ({ ...pkj, jwks_uri: 'https://me@keys.example.com/jwks.json' }), 'userinfo'],
    ['jwks_uri that is not a URL', async () => ({ ...pkj, jwks_uri: 'keys' }), 'not an absolute URL'],
    ['the JWT bearer grant for a public client', async () => ({ ...valid, grant_types: ['authorization_code', JWT_BEARER] }), 'is for confidential clients'],
    ['the code response type without the authorization_code grant', async () => ({ ...valid, grant_types: [JWT_BEARER], response_types: ['code'], token_endpoint_auth_method: 'client_secret_post' }), 'leave response_types out'],
    ['the authorization_code grant without redirect URIs', async () => ({ redirect_uris: [], token_endpoint_auth_method: 'client_secret_post' }), 'needs at least one redirect URI'],
  ]
  for (const [name, body, description] of refused) {
    test(`refused: ${name}`, async () => {
      const { error_description } = await expectOAuthError(await registerJson(await body()), 400, 'invalid_client_metadata')
      expect(error_description).toContain(description)
    })
  }

  test('jwks and jwks_uri sent as null by a public client are read as absent, and not echoed', async () => {
    const registration = await (await registerJson({ ...valid, jwks_uri: null, jwks: null })).json()
    expect(registration.token_endpoint_auth_method).toBe('none')
    expect(registration).not.toHaveProperty('jwks_uri')
    expect(registration).not.toHaveProperty('jwks')
  })
})

describe('POST /v0/auth/register is rate-limited per client address', () => {
  test(`the registration after ${REGISTRATION_RATE_LIMIT.limit} in an hour: 429 slow_down with Retry-After`, async () => {
    for (let i = 0; i < REGISTRATION_RATE_LIMIT.limit; i++) {
      expect((await registerJson({ redirect_uris: [LOOPBACK_CALLBACK] })).status).toBe(201)
    }
    const response = await registerJson({ redirect_uris: [LOOPBACK_CALLBACK] })
    await expectOAuthError(response, 429, 'slow_down')
    const retryAfter = Number(response.headers.get('retry-after'))
    expect(retryAfter).toBeGreaterThan(REGISTRATION_RATE_LIMIT.windowSeconds - 60)
    expect(retryAfter).toBeLessThanOrEqual(REGISTRATION_RATE_LIMIT.windowSeconds)
    expect(response.headers.get('access-control-allow-origin')).toBe('*')
  })

  test('refused registrations do not use up the allowance', async () => {
    for (let i = 0; i < REGISTRATION_RATE_LIMIT.limit + 5; i++) {
      await expectOAuthError(await registerJson({ redirect_uris: ['javascript:alert(1)'] }), 400, 'invalid_redirect_uri')
    }
    expect((await registerJson({ redirect_uris: [LOOPBACK_CALLBACK] })).status).toBe(201)
  })
})
