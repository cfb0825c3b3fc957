import { useMemo, useState } from 'preact/hooks'
import { api } from '../api.ts'
import { ChartCanvas } from '../chart.tsx'
import { ErrorNotice, useLoad } from '../components.tsx'
import { ATTEMPT_COLUMNS, AttemptCells, deliveriesChart, describeFailures, formatCount, latencyChart, perInterval, RangePicker, rangeOf, statsQuery, successRate, TableAlternative, type RangeKey } from '../health.tsx'
import type { HookStats } from '../types.ts'

const milliseconds = (value: number) => `${formatCount(value)} ms`

function summaryOf(stats: HookStats, rangeLabel: string): string {
  const { totals } = stats
  const failures = describeFailures(totals.failures)
  const waiting = `${formatCount(stats.pending)} ${stats.pending === 1 ? 'delivery' : 'deliveries'} waiting now.`
  if (!totals.latency_ms) return `${rangeLabel}: no attempts. ${waiting}`
  return [
    `${rangeLabel}: ${formatCount(totals.attempts)} attempts, ${formatCount(totals.succeeded)} succeeded (${successRate(totals)}), ${formatCount(totals.failed)} failed${failures ? ` (${failures})` : ''}.`,
    `Latency p50 ${milliseconds(totals.latency_ms.p50)}, p95 ${milliseconds(totals.latency_ms.p95)}, p99 ${milliseconds(totals.latency_ms.p99)}.`,
    waiting,
  ].join(' ')
}

const latencyWords = (latency: HookStats['totals']['latency_ms']) =>
  latency ? `p50 ${milliseconds(latency.p50)} and p99 ${milliseconds(latency.p99)} over the range` : 'no attempts in the range'

/**
 * A subscription's health over a chosen range: attempts that succeeded and failed, and latency,
 * per bucket, as charts and as a table. `refreshKey` reads it again when the page made an
 * attempt (a test event).
 */
export function WebhookHealth({ accountId, hookId, refreshKey }: { accountId: string; hookId: string; refreshKey: number }) {
  const [rangeKey, setRangeKey] = useState<RangeKey>('24h')
  const [own, setOwn] = useState(0)
  // The figures keep the range they were read for: while the next range loads, the words and
  // the axis still describe the figures on screen.
  const stats = useLoad(async () => {
    const range = rangeOf(rangeKey)
    return { range, stats: await api<HookStats>('GET', `/account/${accountId}/hooks/${hookId}/stats?${statsQuery(range, new Date())}`) }
  }, [accountId, hookId, rangeKey, refreshKey, own])
  const shown = stats.data?.range
  const data = stats.data?.stats
  const charts = useMemo(() => (data && shown ? { deliveries: deliveriesChart(data.buckets, shown), latency: latencyChart(data.buckets, shown) } : null), [stats.data])
  const per = data ? perInterval(data.interval) : ''

  return (
    <section aria-labelledby="health-title" class="card health" aria-busy={stats.loading}>
      <h2 id="health-title">Health</h2>
      <div class="toolbar">
        <RangePicker name="webhook-range" value={rangeKey} onChange={setRangeKey} />
        <button type="button" onClick={() => setOwn(own + 1)} disabled={stats.loading}>
          Refresh figures
        </button>
      </div>
      <ErrorNotice error={stats.error} action="Loading the figures" />
      {!data && !stats.error && <p>Loading…</p>}
      {data && shown && charts && (
        <>
          <p id="health-summary" aria-live="polite">
            {summaryOf(data, shown.label)}
          </p>
          <h3>Attempts {per}</h3>
          <ChartCanvas
            id="chart-attempts"
            spec={charts.deliveries}
            label={`Attempts ${per}, ${shown.label.toLowerCase()}, as bars: ${formatCount(data.totals.succeeded)} succeeded and ${formatCount(data.totals.failed)} failed. The table below has each ${data.interval}'s figures.`}
          />
          <h3>Latency {per}</h3>
          <ChartCanvas
            id="chart-latency"
            spec={charts.latency}
            label={`Latency ${per}, ${shown.label.toLowerCase()}, as lines: ${latencyWords(data.totals.latency_ms)}. The table below has each ${data.interval}'s figures.`}
          />
          <TableAlternative
            id="health-table"
            summary={`Attempts and latency ${per} as a table`}
            caption={`Attempts and latency ${per}, ${shown.label.toLowerCase()}; each row starts at the time shown, in your time zone`}
            columns={[`Start of the ${data.interval}`, ...ATTEMPT_COLUMNS]}
            buckets={data.buckets}
            cells={(bucket) => <AttemptCells bucket={bucket} />}
          />
        </>
      )}
    </section>
  )
}
