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
