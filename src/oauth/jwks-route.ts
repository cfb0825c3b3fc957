import { Elysia } from 'elysia'
import { JwkSet } from './schemas.ts'
import type { TokenSigner } from './signing-keys.ts'


/**
 * The public keys that verify the service's tokens (RFC 7517 key set). A public document: no
 * credential, any origin may read it. Served as `application/json` rather than the registered
 * `application/jwk-set+json`, which some JWKS clients refuse. Five minutes of caching: a
 * consumer meeting a new kid refetches (as JWKS clients do), and a retired key stays published
 * for a day, far longer than any cached copy lives.
 */
export function jwksRoutes(deps: { signer: TokenSigner }) {
  return new Elysia({ tags: ['OAuth'] }).get(
    '/.well-known/jwks.json',
    async ({ set }) => {
      set.headers['content-type'] = 'application/json'
      set.headers['cache-control'] = 'public, max-age=300'
      set.headers['access-control-allow-origin'] = '*'
      return deps.signer.jwks()
    },
    {
      response: { 200: JwkSet },
      detail: { operationId: 'getJwks', summary: 'The public keys that verify access tokens and id_tokens' },
    },
  )
}
