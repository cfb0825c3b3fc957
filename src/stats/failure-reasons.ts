/**
 * Why an attempt failed, in the words of the health figures (docs/api.md#health-over-time): no
 * answer in time, no connection (refused, reset, a name that does not resolve, TLS), an address
 * the outbound guard refused, a redirect (never followed), a 4xx or 5xx answer, or anything else
 * (an invalid URL).
 * Each attempt's reason is decided where it is made (src/delivery/send.ts).
 */
export const FAILURE_REASONS = ['timeout', 'connection', 'refused', 'redirect', 'http_4xx', 'http_5xx', 'other'] as const
export type FailureReason = (typeof FAILURE_REASONS)[number]
