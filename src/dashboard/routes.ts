import { randomBytes } from 'node:crypto'
import { Elysia } from 'elysia'
import { ApiError } from '../lib/http/errors.ts'
import { htmlPageHeaders } from '../lib/http/html.ts'
import type { Logger } from '../lib/runtime/logger.ts'
import { DashboardUnavailable, dashboardAssets, type DashboardAssets } from './assets.ts'
import { DASHBOARD_CLIENT_ID, DASHBOARD_SCOPES, dashboardRedirectUri } from './client.ts'
import { renderDashboardShell, type DashboardSettings } from './shell.ts'

export interface DashboardRoutesDeps {
  publicUrl: string
  baseUrl: string
  logger: Logger
}

/** No third-party origin anywhere: scripts only with this response's nonce, styles only from our own stylesheet, calls only to our own API. */
const shellHeaders = (nonce: string) => htmlPageHeaders('no-store', [`script-src 'nonce-${nonce}'`, "style-src 'self'", "img-src 'self' data:", "connect-src 'self'"])

/** The versioned asset URLs never change content; any other version is refused rather than served stale. */
function assetHeaders(contentType: string, versioned: boolean): Record<string, string> {
  return {
    'content-type': contentType,
    'cache-control': versioned ? 'public, max-age=31536000, immutable' : 'no-cache',
    'x-content-type-options': 'nosniff',
  }
}

/** The page at `{PUBLIC_URL}/dashboard` and its two assets: everything it does is a call to the public API. */
export function dashboardRoutes(deps: DashboardRoutesDeps) {
  const publicPath = new URL(deps.publicUrl).pathname.replace(/\/$/, '')
  const settings: Omit<DashboardSettings, 'assetVersion'> = {
    apiBase: new URL(deps.baseUrl).pathname,
    clientId: DASHBOARD_CLIENT_ID,
    redirectUri: dashboardRedirectUri(deps.publicUrl),
    resource: deps.baseUrl,
    scope: DASHBOARD_SCOPES.join(' '),
    assetPath: `${publicPath}/dashboard/assets`,
  }

  async function assets(): Promise<DashboardAssets> {
    try {
      return await dashboardAssets()
    } catch (error) {
      if (!(error instanceof DashboardUnavailable)) deps.logger.error('bundling the dashboard failed', { error: String(error) })
      throw new ApiError(503, 'dashboard_unavailable', error instanceof DashboardUnavailable ? error.message : 'The dashboard could not be built; the service log says why.')
    }
  }

  const shell = async () => {
    const { version } = await assets()
    const nonce = randomBytes(16).toString('base64')
    return new Response(renderDashboardShell({ ...settings, assetVersion: version }, nonce), { headers: shellHeaders(nonce) })
  }

  const asset = (kind: 'script' | 'stylesheet', contentType: string) => async ({ query }: { query: { v?: string } }) => {
    const built = await assets()
    return new Response(built[kind], { headers: assetHeaders(contentType, query.v === built.version) })
  }

  return new Elysia({ detail: { hide: true } })
    .get('/dashboard', shell, { detail: { hide: true } })
    .get('/dashboard/', shell, { detail: { hide: true } })
    .get('/dashboard/assets/dashboard.js', asset('script', 'text/javascript; charset=utf-8'), { detail: { hide: true } })
    .get('/dashboard/assets/dashboard.css', asset('stylesheet', 'text/css; charset=utf-8'), { detail: { hide: true } })
}
