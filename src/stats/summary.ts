import type { HookStats } from './service.ts'

const SPANS: Record<HookStats['interval'], string> = { minute: 'minute', hour: 'hour', day: 'day' }

const plural = (count: number, one: string, many: string) => `${count.toLocaleString('en-US')} ${count === 1 ? one : many}`
const percent = (part: number, whole: number) => `${(Math.floor((part / whole) * 1000) / 10).toFixed(1)} %`

/** What a failure reason reads as in a sentence. */
const REASON_WORDS: Record<string, string> = {
  timeout: 'timed out',
  connection: 'could not connect',
  refused: 'refused by the address guard',
  redirect: 'redirected',
  http_4xx: 'answered 4xx',
  http_5xx: 'answered 5xx',
  unroutable: 'not routed by the broker',
  nacked: 'not taken by the broker',
  denied: 'denied by the broker',
  other: 'failed otherwise',
}

/**
 * A subscription's health in a few sentences, for an agent to repeat to a person ("is my
 * webhook healthy?"): its state, the range's attempts and success rate, the failures by reason
 * (most first), latency, what is pending, and the busiest failing bucket. Figures are the ones
 * the answer carries; nothing is judged that they do not show.
 */
export function describeHookHealth(hook: { status: string; disabled_reason?: string; circuit: { state: string; next_probe_at: string | null } }, stats: HookStats): string {
  const sentences: string[] = []
  const range = `From ${stats.since} to ${stats.until}`
  if (hook.status === 'disabled') sentences.push(`The subscription is disabled${hook.disabled_reason ? `: ${hook.disabled_reason.replace(/\.$/, '')}` : ''}.`)
  else if (hook.status === 'paused') sentences.push('The subscription is paused: deliveries wait until it is resumed.')
  if (hook.circuit.state !== 'closed') sentences.push(`Its circuit is ${hook.circuit.state.replace('_', '-')}: the receiver kept failing, and deliveries wait for a probe${hook.circuit.next_probe_at ? ` (next at ${hook.circuit.next_probe_at})` : ''}.`)
  const { attempts, succeeded, failed, failures, latency_ms } = stats.totals
  if (attempts === 0) sentences.push(`${range}: no delivery attempts.`)
  else {
    sentences.push(`${range}: ${plural(attempts, 'attempt', 'attempts')}, ${percent(succeeded, attempts)} succeeded (${succeeded.toLocaleString('en-US')}), ${failed.toLocaleString('en-US')} failed.`)
    const reasons = Object.entries(failures)
      .filter(([, count]) => count > 0)
      .sort((a, b) => b[1] - a[1])
      .map(([reason, count]) => `${count.toLocaleString('en-US')} ${REASON_WORDS[reason] ?? reason}`)
    if (reasons.length > 0) sentences.push(`Failures: ${reasons.join(', ')}.`)
    if (latency_ms) sentences.push(`Attempt duration: p50 ${latency_ms.p50} ms, p95 ${latency_ms.p95} ms, p99 ${latency_ms.p99} ms.`)
    const worst = stats.buckets.reduce<HookStats['buckets'][number] | null>((most, bucket) => (bucket.failed > (most?.failed ?? 0) ? bucket : most), null)
    if (worst) sentences.push(`Most failures in one ${SPANS[stats.interval]}: ${worst.failed.toLocaleString('en-US')} of ${worst.attempts.toLocaleString('en-US')} in the one starting ${worst.start}.`)
  }
  sentences.push(stats.pending === 0 ? 'No delivery is pending.' : `${plural(stats.pending, 'delivery is', 'deliveries are')} pending now.`)
  return sentences.join(' ')
}
