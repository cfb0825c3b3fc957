import { createHash } from 'node:crypto'
import { Elysia } from 'elysia'
import { OAUTH_CODES, PROBLEM_CODES, type ErrorCatalogEntry } from './error-catalog.ts'
import { ERROR_PAGE_PATH } from '../lib/http/errors.ts'
import { escapeHtml, htmlPageHeaders } from '../lib/http/html.ts'

const STYLE = `
  body { font: 16px/1.5 system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d2330; }
  main { max-width: 46rem; margin: 3rem auto; background: #fff; padding: 2rem; border-radius: 12px; box-shadow: 0 2px 12px #0002; }
  h1 { font-size: 1.5rem; margin: 0 0 1rem; }
  h2 { font-size: 1.2rem; margin: 2rem 0 .5rem; }
  h3 { font-size: 1rem; margin: 1.5rem 0 .25rem; }
  section { border-top: 1px solid #e3e6ec; padding-top: .25rem; }
  section:target { background: #fff8d6; }
  code { font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
  .status { color: #4a5365; font-weight: normal; }
  dt { font-weight: 600; margin-top: .5rem; }
  dd { margin: 0 0 0 1rem; }
  nav ul { columns: 2; padding-left: 1.25rem; }
`

/** The stylesheet's hash for the CSP: the page is the same for everyone, so no per-response nonce. */
const STYLE_HASH = `sha256-${createHash('sha256').update(STYLE).digest('base64')}`

const HEADERS = htmlPageHeaders('public, max-age=3600', [`style-src '${STYLE_HASH}'`])

function section(entry: ErrorCatalogEntry): string {
  const code = escapeHtml(entry.code)
  return `<section id="${code}">
  <h3><code>${code}</code> <span class="status">(${escapeHtml(entry.status)})</span>: ${escapeHtml(entry.title)}</h3>
  <dl>
    <dt>What happened</dt><dd>${escapeHtml(entry.happened)}</dd>
    <dt>What to do</dt><dd>${escapeHtml(entry.todo)}</dd>
  </dl>
</section>`
}

const index = (entries: readonly ErrorCatalogEntry[]) =>
  `<ul>${entries.map((entry) => `<li><a href="#${escapeHtml(entry.code)}"><code>${escapeHtml(entry.code)}</code></a></li>`).join('')}</ul>`

/** The page every problem body's `type` links to: one section per code, its id the code. */
export function renderErrorCodesPage(): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Error codes - messaging service</title>
<style>${STYLE}</style>
</head>
<body>
<main>
<h1>Error codes</h1>
<p>Every failure names a stable <code>code</code>: in a problem body (<code>application/problem+json</code>, whose <code>type</code> links to the code's section here) or, at the OAuth endpoints, as the <code>error</code> of <code>{ "error", "error_description" }</code>. Switch on the code, not on the text. Quote <code>request_id</code> (also the <code>X-Request-Id</code> header) when reporting a problem.</p>
<nav>
<p>API errors:</p>
${index(PROBLEM_CODES)}
<p>OAuth errors:</p>
${index(OAUTH_CODES)}
</nav>
<h2>API errors</h2>
${PROBLEM_CODES.map(section).join('\n')}
<h2>OAuth errors</h2>
${OAUTH_CODES.map(section).join('\n')}
</main>
</body>
</html>
`
}

/** GET /docs/errors: static, rendered once, cacheable by anyone. */
export function errorPageRoutes() {
  const html = renderErrorCodesPage()
  return new Elysia({ tags: ['Operations'] }).get(ERROR_PAGE_PATH, () => new Response(html, { headers: HEADERS }), {
    // A page for people, like the reference page: not an operation of the API document.
    detail: { hide: true },
  })
}
