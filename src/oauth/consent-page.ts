import { SCOPE_DESCRIPTIONS, type Scope } from '../auth/scopes.ts'
import { escapeHtml, htmlHead, scriptJson } from '../lib/http/html.ts'


export interface ConsentPageInput {
  nonce: string
  clientName: string
  /** Set for a client whose id is the URL of its client ID metadata document: that URL's host. */
  metadataDocumentHost?: string
  /** Every redirect URI of the client is on the user's device (loopback or private-use scheme). */
  runsOnDevice: boolean
  redirectHost: string
  scopes: Scope[]
  /** The POST /auth/authorize body, less the id_token the page obtains by signing in. */
  authorizeRequest: Record<string, unknown>
  denyUrl: string
  /** This service's own dashboard (src/dashboard/client.ts): the page is a sign-in page, with the same facts. */
  firstParty?: boolean
}

const STYLE = `
  body { font: 16px/1.5 system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d2330; }
  main { max-width: 26rem; margin: 4rem auto; background: #fff; padding: 2rem; border-radius: 12px; box-shadow: 0 2px 12px #0002; }
  h1 { font-size: 1.25rem; margin: 0 0 1rem; }
  label { display: block; margin: .75rem 0 .25rem; font-weight: 600; }
  input { width: 100%; box-sizing: border-box; padding: .5rem; font: inherit; border: 1px solid #b8bfcc; border-radius: 6px; }
  ul { padding-left: 1.25rem; }
  .actions { display: flex; gap: .75rem; margin-top: 1.5rem; }
  button, a.button { flex: 1; padding: .6rem; font: inherit; border-radius: 6px; border: 1px solid #3451b2; text-align: center; text-decoration: none; cursor: pointer; }
  button[type=submit] { background: #3451b2; color: #fff; }
  a.button { color: #3451b2; background: #fff; }
  .error { color: #b3261e; min-height: 1.5rem; }
  .host { font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
  .note { color: #4a5365; font-size: .9rem; margin-top: -.5rem; }
`

/**
 * What the page can say about who the client is, beyond the name it gave itself: where its
 * metadata came from (a client ID metadata document's host, which that site vouches for) and
 * whether it runs on this device (every redirect URI is a loopback or private-use one).
 */
function clientFacts(input: ConsentPageInput): string {
  let facts = ''
  if (input.metadataDocumentHost !== undefined) {
    facts += `  <p class="note" id="client-source">(client metadata from <span class="host">${escapeHtml(input.metadataDocumentHost)}</span>)</p>\n`
  }
  if (input.runsOnDevice) facts += '  <p id="runs-on-device">This app runs on your device.</p>\n'
  return facts
}

/** The page a user sees at GET /auth/authorize: who asks, for what, sign in, Allow or Deny. */
export function renderConsentPage(input: ConsentPageInput): string {
  const scopeItems = input.scopes.map((scope) => `<li>${escapeHtml(SCOPE_DESCRIPTIONS[scope])}</li>`).join('')
  const name = escapeHtml(input.clientName)
  const heading = input.firstParty ? `Sign in to the <strong id="client-name">${name}</strong>` : `<strong id="client-name">${name}</strong> wants to access your messaging account`
  const title = input.firstParty ? `Sign in to the ${input.clientName}` : `Authorize ${input.clientName}`
  return `${htmlHead(title, `<style nonce="${input.nonce}">${STYLE}</style>`)}
<body>
<main>
  <h1>${heading}</h1>
${clientFacts(input)}  <p>${input.firstParty ? 'Once you sign in, it can:' : 'It will be able to:'}</p>
  <ul id="scopes">${scopeItems}</ul>
  <p>After you decide, you will be sent to <span class="host" id="redirect-host">${escapeHtml(input.redirectHost)}</span>.</p>
  <form id="consent">
    <label for="email">Email</label>
    <input id="email" name="email" type="email" autocomplete="username" required>
    <label for="password">Password</label>
    <input id="password" name="password" type="password" autocomplete="current-password" required>
    <p class="error" id="error" role="alert"></p>
    <div class="actions">
      <a class="button" id="deny" href="${escapeHtml(input.denyUrl)}">${input.firstParty ? 'Cancel' : 'Deny'}</a>
      <button type="submit" id="allow">${input.firstParty ? 'Sign in' : 'Allow'}</button>
    </div>
  </form>
</main>
<script type="application/json" id="authorize-request">${scriptJson(input.authorizeRequest)}</script>
<script nonce="${input.nonce}">
  const request = JSON.parse(document.getElementById('authorize-request').textContent)
  const form = document.getElementById('consent')
  const error = document.getElementById('error')
  // Relative to this page (/v0/auth/authorize): always its own origin, whatever PUBLIC_URL says.
  const post = (path, body) => fetch(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  form.addEventListener('submit', async (event) => {
    event.preventDefault()
    error.textContent = ''
    document.getElementById('allow').disabled = true
    try {
      const login = await post('login', { email: form.email.value, password: form.password.value })
      const signedIn = await login.json()
      if (!login.ok) throw new Error(signedIn.detail || 'Sign-in failed.')
      const authorized = await post('authorize', { ...request, id_token: signedIn.id_token })
      const result = await authorized.json()
      if (!authorized.ok) throw new Error(result.error_description || 'Authorization failed.')
      window.location.assign(result.redirect_to)
    } catch (failure) {
      error.textContent = failure.message
      document.getElementById('allow').disabled = false
    }
  })
</script>
</body>
</html>`
}

export interface ErrorPageInput {
  nonce: string
  /** What went wrong, in words. */
  message: string
  /** The OAuth error code the client would get (RFC 6749 §4.1.2.1), when there is one. */
  error?: string
  /** A link back to the client carrying the error (its redirect URI with error, state and iss), for the user to follow or not. */
  returnTo?: { href: string; destination: string }
}

/**
 * The page for a request that cannot go on. With `returnTo`, the error was meant for the client
 * but its redirect URI is on the web: the page explains, and the user chooses whether to follow
 * the link there (RFC 9700 §4.11.2), which names where it goes.
 */
export function renderErrorPage(input: ErrorPageInput): string {
  const code = input.error === undefined ? '' : `<p>Error code: <code id="error-code">${escapeHtml(input.error)}</code></p>`
  const next = input.returnTo
    ? `<p>The application that sent you here can be told what went wrong at <span class="host" id="return-host">${escapeHtml(input.returnTo.destination)}</span>. ` +
      'Follow the link only if you meant to use that application.</p>\n' +
      `<div class="actions"><a class="button" id="return" href="${escapeHtml(input.returnTo.href)}">Return to ${escapeHtml(input.returnTo.destination)}</a></div>`
    : '<p>Return to the application and try again, or contact its developer.</p>'
  return `${htmlHead('Authorization error', `<style nonce="${input.nonce}">${STYLE}</style>`)}
<body><main><h1>This authorization request cannot go on</h1><p class="error" id="error">${escapeHtml(input.message)}</p>
${code}
${next}</main></body>
</html>`
}
