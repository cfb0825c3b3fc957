import { escapeHtml, htmlHead, scriptJson } from '../lib/http/html.ts'

/** What the page's script needs to know about this deployment; read from the page, never from a global. */
export interface DashboardSettings {
  /** The API's path on this origin (`/v0`, or below PUBLIC_URL's path). */
  apiBase: string
  clientId: string
  redirectUri: string
  /** RFC 8707 resource: the REST API only; the dashboard never needs an MCP audience. */
  resource: string
  scope: string
  assetPath: string
  assetVersion: string
}

/** The HTML the browser loads first: the stylesheet, the settings as a JSON data block, and the one script. */
export function renderDashboardShell(settings: DashboardSettings, nonce: string): string {
  const version = encodeURIComponent(settings.assetVersion)
  const head = htmlHead(
    'Dashboard · Messaging',
    `<link rel="icon" href="data:,">
<link rel="stylesheet" href="${escapeHtml(settings.assetPath)}/dashboard.css?v=${version}">
<script type="application/json" id="dashboard-settings">${scriptJson(settings)}</script>
<script type="module" nonce="${nonce}" src="${escapeHtml(settings.assetPath)}/dashboard.js?v=${version}"></script>`,
  )
  return `${head}
<body>
<div id="app"><main class="signin"><h1>Messaging dashboard</h1><p id="loading">Loading…</p><noscript><p>The dashboard needs JavaScript.</p></noscript></main></div>
</body>
</html>
`
}
