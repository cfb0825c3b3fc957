import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { Elysia } from 'elysia'
import { openapi } from '@elysiajs/openapi'
import { notFound } from '../lib/errors.ts'

// The reference page is served from the swagger-ui-dist package, so it works without the internet.
const UI_ASSETS: Record<string, string> = {
  'swagger-ui-bundle.js': 'application/javascript; charset=utf-8',
  'swagger-ui.css': 'text/css; charset=utf-8',
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
  <script>window.onload = () => { window.ui = SwaggerUIBundle({ url: '/v0/openapi.json', dom_id: '#reference' }) }</script>
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

/** OpenAPI 3.1 at `/v0/openapi.json` (generated from the routes' TypeBox schemas) and a reference page at `/v0/docs`. */
export function apiReference(options: { publicUrl: string }) {
  return new Elysia()
    .use(
      openapi({
        path: '/v0/docs',
        specPath: '/v0/openapi.json',
        // The plugin's own page resolves the spec relative to the site root; ours is below.
        provider: null,
        // staticFile: false, or the plugin drops every path with a dot (/.well-known/…).
        exclude: { staticFile: false, paths: [/^\/v0\/docs/, '/v0/openapi.json'] },
        documentation: {
          info: {
            title: 'Messaging Service API',
            version: '0',
            description:
              'Message outcomes, webhooks and authentication for a messaging account. Authenticate with `?key=<API key>` or `Authorization: Bearer <access token>`.',
          },
          servers: [{ url: options.publicUrl }],
          components: {
            securitySchemes: {
              apiKey: { type: 'apiKey', in: 'query', name: 'key', description: 'A secret API key (`sk_live_…`).' },
              bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'An OAuth 2.0 access token.' },
            },
          },
        },
      }),
    )
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
