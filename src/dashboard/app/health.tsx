import type { ComponentChildren } from 'preact'
import { FAILURE_REASONS } from '../../stats/failure-reasons.ts'
import { chartOptions, COLORS, type ChartSpec } from './chart.tsx'
import { RowsTable } from './list.tsx'
import type { HookStats, StatsInterval } from './types.ts'

/**
 * The ranges the charts offer. The last 7 days are read per hour, not per day: a day's bucket
 * would flatten an outage of an hour into a small dent, and 168 buckets are still few enough to
 * draw and to read as a table (the API allows 1,440).
 */
export const RANGES = [
  { key: '1h', label: 'Last hour', interval: 'minute', spanMs: 3_600_000 },
  { key: '24h', label: 'Last 24 hours', interval: 'hour', spanMs: 86_400_000 },
  { key: '7d', label: 'Last 7 days', interval: 'hour', spanMs: 7 * 86_400_000 },
] as const satisfies readonly { key: string; label: string; interval: StatsInterval; spanMs: number }[]

export type Range = (typeof RANGES)[number]
export type RangeKey = Range['key']

export const rangeOf = (key: RangeKey): Range => RANGES.find((range) => range.key === key)!

const UNIT_MS: Record<StatsInterval, number> = { minute: 60_000, hour: 3_600_000, day: 86_400_000 }

/**
 * The stats query of a range ending now: `until` rounded up to the interval as the API would
 * round it, and `since` a whole span before, so the last hour is 60 minutes and not 61.
 */
export function statsQuery(range: Range, now: Date): string {
  const unit = UNIT_MS[range.interval]
  const until = Math.ceil(now.getTime() / unit) * unit
  return new URLSearchParams({ interval: range.interval, since: new Date(until - range.spanMs).toISOString(), until: new Date(until).toISOString() }).toString()
}

const numbers = new Intl.NumberFormat()
const percent = new Intl.NumberFormat(undefined, { style: 'percent', maximumFractionDigits: 1 })
export const formatCount = (value: number) => numbers.format(value)
/** Of the attempts made, the share that succeeded; none made is no rate at all, not 0 %. */
export const successRate = (figures: { attempts: number; succeeded: number }) => (figures.attempts === 0 ? 'no attempts' : percent.format(figures.succeeded / figures.attempts))

const time = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' })
const dayAndTime = new Intl.DateTimeFormat(undefined, { weekday: 'short', hour: '2-digit', minute: '2-digit' })
const fullTime = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' })

/** A bucket's start on the chart's axis: the time alone within a day, the weekday too across a week. */
export const axisLabel = (start: string, range: Range) => (range.spanMs > 86_400_000 ? dayAndTime : time).format(new Date(start))

/** A bucket's start in a table row, where each row must say its day. */
function BucketStart({ start }: { start: string }) {
  return <time dateTime={start}>{fullTime.format(new Date(start))}</time>
}

const REASON_WORDS: Record<(typeof FAILURE_REASONS)[number], string> = {
  timeout: 'timed out',
  connection: 'no connection',
  refused: 'address refused',
  redirect: 'redirected',
  http_4xx: 'HTTP 4xx',
  http_5xx: 'HTTP 5xx',
  unroutable: 'not routed',
  nacked: 'broker nack',
  denied: 'broker denied',
  other: 'other',
}

/** "3 HTTP 5xx, 1 timed out": the reasons that occurred, most first. */
export function describeFailures(failures: HookStats['totals']['failures']): string {
  return FAILURE_REASONS.filter((reason) => failures[reason] > 0)
    .sort((a, b) => failures[b] - failures[a])
    .map((reason) => `${formatCount(failures[reason])} ${REASON_WORDS[reason]}`)
    .join(', ')
}

export const perInterval = (interval: StatsInterval) => `per ${interval}`

/** Succeeded and failed attempts per bucket, stacked: the height is the attempts made. */
export function deliveriesChart(buckets: HookStats['buckets'], range: Range): ChartSpec {
  return {
    type: 'bar',
    data: {
      labels: buckets.map((bucket) => axisLabel(bucket.start, range)),
      datasets: [
        { label: 'Succeeded', data: buckets.map((bucket) => bucket.succeeded), backgroundColor: COLORS.succeeded },
        { label: 'Failed', data: buckets.map((bucket) => bucket.failed), backgroundColor: COLORS.failed },
      ],
    },
    options: chartOptions('Attempts', true),
  }
}

/** p50 and p99 per bucket; a bucket without attempts is a gap in the line, not a zero. */
export function latencyChart(buckets: HookStats['buckets'], range: Range): ChartSpec {
  const line = (label: string, color: string, pick: (latency: NonNullable<HookStats['totals']['latency_ms']>) => number) => ({
    type: 'line' as const,
    label,
    data: buckets.map((bucket) => (bucket.latency_ms ? pick(bucket.latency_ms) : null)),
    borderColor: color,
    backgroundColor: color,
    pointRadius: 3,
    spanGaps: false,
  })
  return {
    type: 'line',
    data: {
      labels: buckets.map((bucket) => axisLabel(bucket.start, range)),
      datasets: [line('p50', COLORS.p50, (latency) => latency.p50), line('p99', COLORS.p99, (latency) => latency.p99)],
    },
    options: chartOptions('Milliseconds', false),
  }
}

/** The choice of range: one group of radio buttons, so arrow keys move through it and a screen reader names the group. */
export function RangePicker({ name, value, onChange }: { name: string; value: RangeKey; onChange(key: RangeKey): void }) {
  return (
    <fieldset class="range-picker">
      <legend>Range</legend>
      {RANGES.map((range) => (
        <label key={range.key}>
          <input type="radio" name={name} value={range.key} checked={value === range.key} onChange={() => onChange(range.key)} />
          <span>{range.label}</span>
        </label>
      ))}
    </fieldset>
  )
}

/**
 * The charts' figures as a table, for screen readers and for anyone who wants the numbers: behind
 * a disclosure, since a week per hour is 168 rows.
 */
export function TableAlternative<T extends { start: string }>(props: {
  id: string
  summary: string
  caption: string
  columns: string[]
  buckets: readonly T[]
  cells(bucket: T): ComponentChildren
}) {
  return (
    <details class="table-alternative">
      <summary>{props.summary}</summary>
      <RowsTable
        id={props.id}
        class="figures-table"
        caption={props.caption}
        columns={props.columns}
        items={props.buckets}
        row={(bucket) => (
          <tr key={bucket.start}>
            <th scope="row" data-label={props.columns[0]}>
              <BucketStart start={bucket.start} />
            </th>
            {props.cells(bucket)}
          </tr>
        )}
      />
    </details>
  )
}

/** A number cell of a figures table, labelled for the narrow layout (dashboard.css). */
export function Cell({ label, children }: { label: string; children: ComponentChildren }) {
  return (
    <td data-label={label} class="number">
      {children}
    </td>
  )
}

/** The cells of one bucket's attempts, the same columns on the overview and a subscription's page. */
export function AttemptCells({ bucket }: { bucket: HookStats['buckets'][number] }) {
  return (
    <>
      <Cell label="Attempts">{formatCount(bucket.attempts)}</Cell>
      <Cell label="Succeeded">{formatCount(bucket.succeeded)}</Cell>
      <Cell label="Failed">{formatCount(bucket.failed)}</Cell>
      <Cell label="p50 (ms)">{bucket.latency_ms ? formatCount(bucket.latency_ms.p50) : 'none'}</Cell>
      <Cell label="p99 (ms)">{bucket.latency_ms ? formatCount(bucket.latency_ms.p99) : 'none'}</Cell>
    </>
  )
}

export const ATTEMPT_COLUMNS = ['Attempts', 'Succeeded', 'Failed', 'p50 (ms)', 'p99 (ms)']
