/**
 * Why an attempt failed, in the words of the health figures (docs/api.md#health-over-time): no
 * answer in time, no connection (refused, reset, a name that does not resolve, TLS), an address
 * the outbound guard refused, a redirect (never followed), a 4xx or 5xx answer, or anything else
 * (an invalid URL). A message broker's own (docs/webhooks.md#destinations): nothing took the
 * message (no queue bound, no exchange, no stream), the broker would not take it (a negative
 * acknowledgement), or the broker refused the credentials or the permission.
 * Each attempt's reason is decided where it is made (src/delivery/send.ts, src/delivery/destinations/).
 */
export const FAILURE_REASONS = ['timeout', 'connection', 'refused', 'redirect', 'http_4xx', 'http_5xx', 'unroutable', 'nacked', 'denied', 'other'] as const
export type FailureReason = (typeof FAILURE_REASONS)[number]
