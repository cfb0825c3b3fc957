import { Elysia, t } from 'elysia'
import { Type } from '@sinclair/typebox'
import { authPlugin, type AuthPluginDeps } from '../auth/plugin.ts'

export const SessionSchema = t.Object({
  active: t.Literal(true),
  sub: t.String({ description: 'The user the token acts for.' }),
  account_id: t.String(),
  client_id: t.String(),
  scope: t.String(),
  aud: t.Array(t.String()),
  exp: Type.Integer({ description: 'Expiry, seconds since the epoch.' }),
}, { title: 'Session' })

/** GET /auth/session: is this bearer token valid, and whose is it. Tokens for either resource are accepted. */
export function sessionRoutes(deps: AuthPluginDeps) {
  return new Elysia({ tags: ['OAuth'] })
    .use(authPlugin(deps))
    .get(
      '/auth/session',
      ({ caller, set }) => {
        set.headers['cache-control'] = 'no-store'
        const credential = caller.credential
        if (credential.kind !== 'access_token') throw new Error('the auth macro admitted a non-bearer caller to /auth/session')
        return {
          active: true as const,
          sub: credential.userId,
          account_id: caller.accountId,
          client_id: credential.clientId,
          scope: caller.scopes.join(' '),
          aud: credential.audience,
          exp: credential.exp,
        }
      },
      {
        auth: { scope: null, accepts: 'bearer', audiences: [deps.baseUrl, `${deps.baseUrl}/mcp`] },
        response: { 200: SessionSchema },
        detail: { operationId: 'getSession', summary: 'Confirm a bearer token is valid and say whose it is' },
      },
    )
}
