import { Elysia, t } from 'elysia'
import type { TokenSigner } from './signing-keys.ts'

const PublicJwk = t.Object({
  kty: t.Literal('EC'),
  crv: t.Literal('P-256'),
  x: t.String(),
  y: t.String(),
  kid: t.String(),
  alg: t.Literal('ES256'),
  use: t.Literal('sig'),
})

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
      response: { 200: t.Object({ keys: t.Array(PublicJwk) }) },
      detail: { summary: 'The public keys that verify access tokens and id_tokens' },
    },
  )
}
