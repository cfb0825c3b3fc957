import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { Elysia } from 'elysia'
import { notFound } from '../lib/http/errors.ts'

// The reference page is served from the swagger-ui-dist package, so it works without the internet.
const UI_ASSETS: Record<string, string> = {
  'swagger-ui-bundle.js': 'application/javascript; charset=utf-8',
  'swagger-ui.css': 'text/css; charset=utf-8',
  // Where the authorization server sends the browser back when the page's Authorize button runs the oauth2 flow.
  'oauth2-redirect.html': 'text/html; charset=utf-8',
  'oauth2-redirect.js': 'application/javascript; charset=utf-8',
}
const REFERENCE_PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Messaging Service API reference</title>
  <link rel="stylesheet" href="/v0/docs/assets/swagger-ui.css">
</head>
<body>
  <div id="reference"></div>
  <script src="/v0/docs/assets/swagger-ui-bundle.js"></script>
  <script>
    window.onload = () => {
      window.ui = SwaggerUIBundle({ url: '/v0/openapi.json', dom_id: '#reference', oauth2RedirectUrl: location.origin + '/v0/docs/assets/oauth2-redirect.html' })
      window.ui.initOAuth({ usePkceWithAuthorizationCodeGrant: true })
    }
  </script>
</body>
</html>
`

const assetCache = new Map<string, Promise<Uint8Array<ArrayBuffer>>>()

function loadAsset(name: string): Promise<Uint8Array<ArrayBuffer>> {
  let asset = assetCache.get(name)
  if (!asset) {
    asset = readFile(fileURLToPath(import.meta.resolve(`swagger-ui-dist/${name}`))).then((bytes) => new Uint8Array(bytes))
    assetCache.set(name, asset)
  }
  return asset
}

/**
 * The OpenAPI document at `/v0/openapi.json` (src/ops/openapi-document.ts, built once from the
 * whole app) and a reference page at `/v0/docs` that can run the OAuth flow.
 */
export function apiReference(options: { document: unknown }) {
  return new Elysia()
    .get('/v0/openapi.json', () => options.document, { detail: { hide: true } })
    .get(
      '/v0/docs',
      ({ set }) => {
        set.headers['content-type'] = 'text/html; charset=utf-8'
        return REFERENCE_PAGE
      },
      { detail: { hide: true } },
    )
    .get(
      '/v0/docs/assets/:file',
      async ({ params, set }) => {
        const contentType = UI_ASSETS[params.file]
        if (!contentType) throw notFound()
        set.headers['content-type'] = contentType
        set.headers['cache-control'] = 'public, max-age=86400'
        return new Response(await loadAsset(params.file))
      },
      { detail: { hide: true } },
    )
}
