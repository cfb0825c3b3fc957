/** Text safe inside HTML content and attribute values. */
export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (char) => `&#${char.charCodeAt(0)};`)
}

/** JSON that is safe inside <script>: no "</script>", no HTML comment openers. */
export const scriptJson = (value: unknown) => JSON.stringify(value).replace(/</g, '\\u003c').replace(/>/g, '\\u003e').replace(/&/g, '\\u0026')

/**
 * The start of the pages on the sign-in path (the dashboard shell, the consent and authorization
 * error pages), through `</head>`; `elements` are the page's own (stylesheet, scripts). No Referer
 * from them, beside the Referrer-Policy header: their URLs carry OAuth state and codes (RFC 9700 §4.2).
 */
export function htmlHead(title: string, elements: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${escapeHtml(title)}</title>
${elements}
</head>`
}

/**
 * The headers of a page the service renders: never sniffed, never framed (RFC 9700 §4.16), never
 * a Referer (RFC 9700 §4.2: the consent and dashboard URLs carry state and codes), and a CSP that
 * loads nothing but `sources`, submits no form and sets no base URL.
 */
export function htmlPageHeaders(cacheControl: string, sources: string[]): Record<string, string> {
  return {
    'content-type': 'text/html; charset=utf-8',
    'cache-control': cacheControl,
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
    'content-security-policy': ["default-src 'none'", ...sources, "form-action 'none'", "base-uri 'none'", "frame-ancestors 'none'"].join('; '),
  }
}
