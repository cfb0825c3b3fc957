import { settings } from './settings.ts'
import { currentAccessToken, forgetSession, renewSession } from './session.ts'

/** A failed call, as the API described it (problem+json): what the page shows, with the request id to quote. */
export class ApiProblem extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly requestId: string | null,
    readonly fieldErrors: { path: string; message: string }[] = [],
  ) {
    super(message)
  }
}

/** The session ended (its grant was revoked, or the refresh token expired): the page asks to sign in again. */
export class SignedOut extends Error {}

let onSignedOut: () => void = () => undefined
export const whenSignedOut = (handler: () => void) => {
  onSignedOut = handler
}

async function problemOf(response: Response): Promise<ApiProblem> {
  const requestId = response.headers.get('x-request-id')
  const body = await response.json().catch(() => null)
  if (body && typeof body.detail === 'string') {
    return new ApiProblem(response.status, body.code ?? 'error', body.detail, body.request_id ?? requestId, Array.isArray(body.errors) ? body.errors : [])
  }
  return new ApiProblem(response.status, 'error', `The service answered ${response.status}.`, requestId)
}

async function send(method: string, path: string, body: unknown, headers: Record<string, string>): Promise<Response> {
  const token = await currentAccessToken()
  if (!token) throw new SignedOut()
  return fetch(`${settings.apiBase}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
}

/**
 * One call to the public API with the session's bearer token. A 401 renews the session once and
 * tries again; if that fails too the session is over. Failures throw ApiProblem.
 */
export async function api<T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> {
  let response = await send(method, path, body, headers)
  if (response.status === 401) {
    if (!(await renewSession())) {
      forgetSession()
      onSignedOut()
      throw new SignedOut()
    }
    response = await send(method, path, body, headers)
  }
  if (!response.ok) throw await problemOf(response)
  if (response.status === 204) return undefined as T
  return (await response.json()) as T
}

/** A fresh Idempotency-Key for one user action: a retried click never creates twice. */
export const idempotencyKey = () => crypto.randomUUID()
