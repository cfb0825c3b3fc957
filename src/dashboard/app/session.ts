import { settings } from './settings.ts'

// The dashboard is a public OAuth client of this service (PKCE, RFC 7636). Its tokens live in this
// module's memory only: never in localStorage or sessionStorage, so a script injected into the
// page later, or another tab, finds none; reloading the page signs in again (the consent page).
// Only the PKCE verifier and state cross the redirect, in sessionStorage, and are erased on return.

interface Tokens {
  accessToken: string
  refreshToken: string | undefined
  /** Milliseconds since the epoch. */
  expiresAt: number
}

const PENDING_SIGN_IN = 'dashboard.pending-sign-in'
/** Renew an access token this long before it expires, so no call races its expiry. */
const RENEW_EARLY_MS = 30_000

let tokens: Tokens | null = null
let renewing: Promise<boolean> | null = null

const base64url = (bytes: ArrayBuffer | Uint8Array) =>
  btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')

const randomString = () => base64url(crypto.getRandomValues(new Uint8Array(32)))

/** Sends the browser to the consent page; `returnTo` is the dashboard location to come back to. */
export async function startSignIn(returnTo: string): Promise<void> {
  const verifier = randomString()
  const state = randomString()
  const challenge = base64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)))
  sessionStorage.setItem(PENDING_SIGN_IN, JSON.stringify({ verifier, state, returnTo }))
  const url = new URL(`${settings.apiBase}/auth/authorize`, location.origin)
  url.search = new URLSearchParams({
    response_type: 'code',
    client_id: settings.clientId,
    redirect_uri: settings.redirectUri,
    scope: settings.scope,
    resource: settings.resource,
    code_challenge: challenge,
    code_challenge_method: 'S256',
    state,
  }).toString()
  location.assign(url.href)
}

export type SignInOutcome = { kind: 'none' } | { kind: 'signed-in'; returnTo: string } | { kind: 'failed'; message: string }

async function tokenRequest(parameters: Record<string, string>): Promise<{ ok: true } | { ok: false; error: string; description: string }> {
  const response = await fetch(`${settings.apiBase}/auth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ client_id: settings.clientId, ...parameters }),
  })
  const body = await response.json().catch(() => ({}))
  if (!response.ok || typeof body.access_token !== 'string') {
    return { ok: false, error: body.error ?? 'server_error', description: body.error_description ?? `The token endpoint answered ${response.status}.` }
  }
  tokens = { accessToken: body.access_token, refreshToken: body.refresh_token, expiresAt: Date.now() + Number(body.expires_in ?? 900) * 1000 }
  return { ok: true }
}

/**
 * Finishes a sign-in when the authorization server has just sent the browser back here: checks
 * state and issuer (RFC 9207), redeems the code, and takes the code out of the address bar.
 */
export async function completeSignIn(): Promise<SignInOutcome> {
  const query = new URLSearchParams(location.search)
  if (!query.has('code') && !query.has('error')) return { kind: 'none' }
  const pending = JSON.parse(sessionStorage.getItem(PENDING_SIGN_IN) ?? 'null') as { verifier: string; state: string; returnTo: string } | null
  sessionStorage.removeItem(PENDING_SIGN_IN)
  history.replaceState(null, '', `${location.pathname}${pending?.returnTo ?? ''}`)
  if (!pending || query.get('state') !== pending.state) return { kind: 'failed', message: 'That sign-in was not started from this page. Sign in again.' }
  if (query.get('iss') !== settings.resource) return { kind: 'failed', message: 'The answer did not come from this service. Sign in again.' }
  const error = query.get('error')
  if (error === 'access_denied') return { kind: 'failed', message: 'Sign-in was canceled.' }
  if (error) return { kind: 'failed', message: query.get('error_description') ?? `Sign-in failed (${error}).` }
  const result = await tokenRequest({ grant_type: 'authorization_code', code: query.get('code')!, redirect_uri: settings.redirectUri, code_verifier: pending.verifier })
  if (!result.ok) return { kind: 'failed', message: `Sign-in failed: ${result.description}` }
  return { kind: 'signed-in', returnTo: pending.returnTo }
}

/** Trades the refresh token for new tokens (it rotates); false when the session is over. */
export function renewSession(): Promise<boolean> {
  renewing ??= (async () => {
    const refreshToken = tokens?.refreshToken
    if (!refreshToken) return false
    const result = await tokenRequest({ grant_type: 'refresh_token', refresh_token: refreshToken })
    if (!result.ok) tokens = null
    return result.ok
  })().finally(() => {
    renewing = null
  })
  return renewing
}

/** A current access token, renewed first when it is about to expire; null when signed out. */
export async function currentAccessToken(): Promise<string | null> {
  if (tokens && tokens.expiresAt - Date.now() < RENEW_EARLY_MS) await renewSession()
  return tokens?.accessToken ?? null
}

/**
 * The grant this session's tokens belong to (the access token's `grant_id` claim), to mark it
 * on the Connected apps page. Read for display only: the API verifies the token, not this page.
 */
export function currentGrantId(): string | null {
  const payload = tokens?.accessToken.split('.')[1]
  if (!payload) return null
  try {
    const claims = JSON.parse(atob(payload.replace(/-/g, '+').replace(/_/g, '/')))
    return typeof claims.grant_id === 'string' ? claims.grant_id : null
  } catch {
    return null
  }
}

/** Revokes the session's grant (RFC 7009) and forgets the tokens. */
export async function signOut(): Promise<void> {
  const token = tokens?.refreshToken ?? tokens?.accessToken
  tokens = null
  if (!token) return
  await fetch(`${settings.apiBase}/auth/revoke`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ token, client_id: settings.clientId }),
  }).catch(() => undefined)
}

/** Forgets the tokens without revoking them: the grant was revoked elsewhere (the Connected apps page). */
export function forgetSession(): void {
  tokens = null
}
