import { useMemo } from 'preact/hooks'
import { api } from '../api.ts'
import { ChartCanvas, chartOptions, COLORS, type ChartSpec } from '../chart.tsx'
import { EmptyState, ErrorNotice, Notice, PageHeading, StatusBadge, Time, useLoad } from '../components.tsx'
import { ATTEMPT_COLUMNS, AttemptCells, axisLabel, Cell, deliveriesChart, describeFailures, formatCount, rangeOf, statsQuery, successRate, TableAlternative, type Range } from '../health.tsx'
import { RowsTable } from '../list.tsx'
import { hrefOf } from '../navigation.ts'
import type { AccountStats, Hook, Page } from '../types.ts'

/** The overview is always the last day, per hour: the question it answers is "how is it going now?". */
const DAY = rangeOf('24h')

/** Every subscription, page after page: an account holds at most HOOKS_PER_ACCOUNT (100 by default), so this is one call as a rule. */
async function allHooks(accountId: string): Promise<Hook[]> {
  const hooks: Hook[] = []
  let cursor: string | null = null
  do {
    const query = new URLSearchParams({ limit: '100' })
    if (cursor) query.set('cursor', cursor)
    const page: Page<Hook> = await api<Page<Hook>>('GET', `/account/${accountId}/hooks?${query}`)
    hooks.push(...page.data)
    cursor = page.next_cursor
  } while (cursor)
  return hooks
}

/**
 * Whether a subscription needs its owner: disabled by the service, its circuit open, or its last
 * attempts failing. These are the breaker's failures (no answer, 5xx, 429): a receiver answering
 * 4xx is up, and its failures show in the figures and on its own page rather than here.
 */
const needsAttention = (hook: Hook) => hook.status === 'disabled' || hook.circuit.state !== 'closed' || hook.circuit.consecutive_failures > 0

function Why({ hook }: { hook: Hook }) {
  const { circuit } = hook
  const inARow = `${formatCount(circuit.consecutive_failures)} failed ${circuit.consecutive_failures === 1 ? 'attempt' : 'attempts'} in a row`
  if (hook.status === 'disabled') return <span>Disabled by the service{hook.disabled_reason ? `: ${hook.disabled_reason.replace(/\.$/, '')}` : ''}.</span>
  if (circuit.state === 'open') {
    return (
      <span>
        Circuit open after {inARow}
        {circuit.next_probe_at && (
          <>
            ; next probe <Time iso={circuit.next_probe_at} />
          </>
        )}
        .
      </span>
    )
  }
  if (circuit.state === 'half_open') return <span>Circuit half open after {inARow}: a probe goes out now.</span>
  return <span>The last {inARow}.</span>
}

function messagesChart(buckets: AccountStats['buckets'], range: Range): ChartSpec {
  const line = (label: string, color: string, pick: (messages: AccountStats['totals']['messages']) => number) => ({
    type: 'line' as const,
    label,
    data: buckets.map((bucket) => pick(bucket.messages)),
    borderColor: color,
    backgroundColor: color,
    pointRadius: 3,
  })
  return {
    type: 'line',
    data: {
      labels: buckets.map((bucket) => axisLabel(bucket.start, range)),
      datasets: [
        line('Sent', COLORS.p50, (messages) => messages.sent),
        line('Delivered', COLORS.succeeded, (messages) => messages.delivered),
        line('Failed', COLORS.failed, (messages) => messages.failed),
        line('Received', COLORS.received, (messages) => messages.received),
      ],
    },
    options: chartOptions('Messages', false),
  }
}

function Figure({ label, children }: { label: string; children: string }) {
  return (
    <div>
      <dt>{label}</dt>
      <dd>{children}</dd>
    </div>
  )
}

function Messages({ stats, chart }: { stats: AccountStats; chart: ChartSpec }) {
  const { messages } = stats.totals
  return (
    <section aria-labelledby="messages-title">
      <h2 id="messages-title">Messages</h2>
      <dl class="figures" id="message-figures">
        <Figure label="Sent">{formatCount(messages.sent)}</Figure>
        <Figure label="Delivered">{formatCount(messages.delivered)}</Figure>
        <Figure label="Failed">{formatCount(messages.failed)}</Figure>
        <Figure label="Received">{formatCount(messages.received)}</Figure>
      </dl>
      <ChartCanvas
        id="chart-messages"
        spec={chart}
        label={`Messages per hour, last 24 hours, as lines: ${formatCount(messages.sent)} sent, ${formatCount(messages.delivered)} delivered, ${formatCount(messages.failed)} failed, ${formatCount(messages.received)} received. The table below has each hour's figures.`}
      />
      <TableAlternative
        id="messages-table"
        summary="Messages per hour as a table"
        caption="Messages per hour, last 24 hours; each row starts at the time shown, in your time zone"
        columns={['Start of the hour', 'Sent', 'Delivered', 'Failed', 'Received']}
        buckets={stats.buckets}
        cells={(bucket) => (
          <>
            <Cell label="Sent">{formatCount(bucket.messages.sent)}</Cell>
            <Cell label="Delivered">{formatCount(bucket.messages.delivered)}</Cell>
            <Cell label="Failed">{formatCount(bucket.messages.failed)}</Cell>
            <Cell label="Received">{formatCount(bucket.messages.received)}</Cell>
          </>
        )}
      />
    </section>
  )
}

function Deliveries({ stats, chart }: { stats: AccountStats; chart: ChartSpec }) {
  const { totals } = stats
  const failures = describeFailures(totals.failures)
  return (
    <section aria-labelledby="deliveries-title">
      <h2 id="deliveries-title">Webhook deliveries</h2>
      <dl class="figures" id="webhook-figures">
        <Figure label="Attempts">{formatCount(totals.attempts)}</Figure>
        <Figure label="Success rate">{successRate(totals)}</Figure>
        <Figure label="Succeeded">{formatCount(totals.succeeded)}</Figure>
        <Figure label="Failed">{formatCount(totals.failed)}</Figure>
        <Figure label="Waiting now">{formatCount(stats.pending)}</Figure>
        <Figure label="Latency p50 / p99">{totals.latency_ms ? `${formatCount(totals.latency_ms.p50)} / ${formatCount(totals.latency_ms.p99)} ms` : 'none'}</Figure>
      </dl>
      {failures && <p id="failure-reasons">Failed attempts: {failures}.</p>}
      <ChartCanvas
        id="chart-attempts"
        spec={chart}
        label={`Webhook attempts per hour, last 24 hours, as bars: ${formatCount(totals.succeeded)} succeeded and ${formatCount(totals.failed)} failed. The table below has each hour's figures.`}
      />
      <TableAlternative
        id="attempts-table"
        summary="Webhook attempts per hour as a table"
        caption="Webhook attempts per hour, last 24 hours; each row starts at the time shown, in your time zone"
        columns={['Start of the hour', ...ATTEMPT_COLUMNS]}
        buckets={stats.buckets}
        cells={(bucket) => <AttemptCells bucket={bucket} />}
      />
    </section>
  )
}

function Attention({ hooks }: { hooks: Hook[] }) {
  const failing = hooks.filter(needsAttention)
  return (
    <section aria-labelledby="attention-title">
      <h2 id="attention-title">Subscriptions that need attention</h2>
      {hooks.length === 0 ? (
        <EmptyState>
          <p>
            No webhooks yet. <a href={hrefOf({ page: 'new-webhook' })}>Create one</a> to be told when a message is delivered, fails, or a contact writes back.
          </p>
        </EmptyState>
      ) : failing.length === 0 ? (
        <Notice>None: no subscription is disabled, has an open circuit, or failed its last attempt.</Notice>
      ) : (
        <RowsTable
          id="attention"
          caption="Subscriptions that are failing, disabled or have an open circuit"
          columns={['Endpoint', 'Event', 'Status', 'Why']}
          items={failing}
          row={(hook) => (
            <tr key={hook.id}>
              <td data-label="Endpoint">
                <a class="url" href={hrefOf({ page: 'webhook', hookId: hook.id })}>
                  {hook.target_url}
                </a>
              </td>
              <td data-label="Event" class="nowrap">
                <code>{hook.event}</code>
              </td>
              <td data-label="Status" class="nowrap">
                <StatusBadge status={hook.status} />
              </td>
              <td data-label="Why">
                <Why hook={hook} />
              </td>
            </tr>
          )}
        />
      )}
    </section>
  )
}

export function OverviewPage({ accountId }: { accountId: string }) {
  const stats = useLoad(() => api<AccountStats>('GET', `/account/${accountId}/stats?${statsQuery(DAY, new Date())}`), [accountId])
  const hooks = useLoad(() => allHooks(accountId), [accountId])
  const data = stats.data
  const charts = useMemo(() => (data ? { messages: messagesChart(data.buckets, DAY), deliveries: deliveriesChart(data.buckets, DAY) } : null), [data])

  return (
    <>
      <PageHeading>Overview</PageHeading>
      <p>The last 24 hours, per hour, in your time zone.</p>
      <ErrorNotice error={stats.error} action="Loading the figures" />
      {!data && !stats.error && <p>Loading…</p>}
      {data && charts && (
        <>
          <Messages stats={data} chart={charts.messages} />
          <Deliveries stats={data} chart={charts.deliveries} />
        </>
      )}
      <ErrorNotice error={hooks.error} action="Loading the webhooks" />
      {hooks.data && <Attention hooks={hooks.data} />}
    </>
  )
}
