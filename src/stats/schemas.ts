import { t } from 'elysia'
import { Type } from '@sinclair/typebox'
import { ApiKeyParam } from '../lib/http/pagination.ts'
import { FAILURE_REASONS } from './failure-reasons.ts'
import { STAT_UNITS } from './rollups.ts'

/** The most buckets one answer holds: a day at minutes, two months at hours, four years at days. */
export const MAX_BUCKETS = 1440

/** since, until, interval: the range of a health answer (src/stats/service.ts statsRange). */
export const StatsRangeParams = {
  since: t.Optional(t.String({ format: 'date-time', description: 'The first instant counted, rounded down to the interval (UTC). Default: 24 hours before `until` rounded up.' })),
  until: t.Optional(t.String({ format: 'date-time', description: 'The end of the range (excluded), rounded up to the interval (UTC). Default: now.' })),
  // Not t.UnionEnum: it carries a default (its first value), which would fill in a missing interval.
  interval: t.Optional(
    t.Union(
      STAT_UNITS.map((unit) => t.Literal(unit)),
      { description: `One bucket per minute, hour or day (UTC); at most ${MAX_BUCKETS} buckets in the range. Default: hour.` },
    ),
  ),
}

export const StatsQuery = t.Object({ ...StatsRangeParams, ...ApiKeyParam }, { additionalProperties: false })

const count = (description: string) => Type.Integer({ minimum: 0, description })

const FailuresSchema = t.Object(
  Object.fromEntries(FAILURE_REASONS.map((reason) => [reason, Type.Integer({ minimum: 0 })])) as Record<(typeof FAILURE_REASONS)[number], ReturnType<typeof Type.Integer>>,
  {
    additionalProperties: Type.Integer({ minimum: 0 }),
    title: 'Failures',
    description:
      'Failed attempts by reason: `timeout` (no answer in time), `connection` (refused, reset, DNS, TLS), `refused` (the address is not allowed: docs/security.md), `redirect` (3xx, never followed), `http_4xx`, `http_5xx`, `other`; and for message brokers (docs/webhooks.md#destinations) `unroutable` (no queue, exchange or stream took it), `nacked` (the broker would not take it) and `denied` (credentials or permission refused).',
  },
)

const LatencySchema = t.Union(
  [
    t.Object(
      { p50: Type.Integer({ minimum: 0 }), p95: Type.Integer({ minimum: 0 }), p99: Type.Integer({ minimum: 0 }) },
      { description: 'Attempt durations in ms by nearest rank, read from a histogram: within 2.5 % of the exact figure.' },
    ),
    t.Null(),
  ],
  { description: 'Null when no attempt was made.' },
)

const deliveryFigures = {
  attempts: count('Delivery attempts made (a retry is an attempt of its own).'),
  succeeded: count('Attempts answered with a 2xx in time: deliveries delivered.'),
  failed: count('Attempts that failed; `failures` says why.'),
  failures: FailuresSchema,
  latency_ms: LatencySchema,
}

const MessageFiguresSchema = t.Object(
  {
    sent: count('Outbound messages accepted (POST …/messages).'),
    delivered: count('Messages the carrier delivered (message.delivered events).'),
    failed: count('Messages the carrier could not deliver (message.failed events).'),
    received: count('Inbound messages (message.inbound events).'),
  },
  { title: 'MessageFigures' },
)

const EventCountsSchema = t.Record(t.String(), Type.Integer({ minimum: 0 }), { title: 'EventCounts', description: 'Events stored, by type (test events are not counted).' })

const HookStatsBucketSchema = t.Object({ start: t.String({ format: 'date-time' }), ...deliveryFigures }, { title: 'HookStatsBucket' })
const AccountStatsBucketSchema = t.Object(
  { start: t.String({ format: 'date-time' }), ...deliveryFigures, messages: MessageFiguresSchema, events: EventCountsSchema },
  { title: 'AccountStatsBucket' },
)

const range = {
  interval: t.UnionEnum(STAT_UNITS),
  since: t.String({ format: 'date-time', description: 'The first bucket’s start.' }),
  until: t.String({ format: 'date-time', description: 'The last bucket’s end.' }),
  pending: count('Deliveries pending now (waiting for their first attempt or a retry): a figure of now, not of the range.'),
}

const example = (extra: Record<string, unknown>, more: Record<string, unknown> = {}) => {
  const figures = {
    attempts: 1250,
    succeeded: 1236,
    failed: 14,
    failures: { timeout: 9, connection: 0, refused: 0, redirect: 0, http_4xx: 0, http_5xx: 5, unroutable: 0, nacked: 0, denied: 0, other: 0 },
    latency_ms: { p50: 42, p95: 180, p99: 950 },
    ...more,
  }
  return {
    interval: 'hour',
    since: '2026-11-25T14:00:00.000Z',
    until: '2026-11-26T14:00:00.000Z',
    pending: 3,
    ...extra,
    totals: figures,
    buckets: [{ start: '2026-11-25T14:00:00.000Z', ...figures }],
  }
}

export const HookStatsSchema = t.Object(
  { hook_id: t.String(), ...range, totals: t.Object(deliveryFigures), buckets: t.Array(HookStatsBucketSchema) },
  { title: 'HookStats', examples: [example({ hook_id: 'hook_01jd3m9x2qk7r5v8w4y6z0abcd' })] },
)

export const AccountStatsSchema = t.Object(
  {
    account_id: t.String(),
    ...range,
    totals: t.Object({ ...deliveryFigures, messages: MessageFiguresSchema, events: EventCountsSchema }),
    buckets: t.Array(AccountStatsBucketSchema),
  },
  { title: 'AccountStats', examples: [
      example(
        { account_id: 'acc_01jd3m9x2qk7r5v8w4y6z0abcd' },
        { messages: { sent: 1250, delivered: 1236, failed: 14, received: 31 }, events: { 'message.delivered': 1236, 'message.failed': 14, 'message.inbound': 31 } },
      ),
    ],
  },
)
