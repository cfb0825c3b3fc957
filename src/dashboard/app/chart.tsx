import { useEffect, useRef } from 'preact/hooks'
import { BarController, BarElement, CategoryScale, Chart, LinearScale, LineController, LineElement, PointElement, Tooltip, type ChartConfiguration } from 'chart.js'

// Only the parts the dashboard draws, so the bundle carries no other chart type. Chart.js sizes its
// canvas through the CSSOM (element.style), which the page's CSP allows: it injects no stylesheet
// and evaluates no code.
Chart.register(BarController, BarElement, LineController, LineElement, PointElement, CategoryScale, LinearScale, Tooltip)
Chart.defaults.font.family = 'system-ui, sans-serif'
Chart.defaults.color = '#4a5365'

/** The series' colours: the stylesheet's (dashboard.css), so a chart reads like the badges beside it. */
export const COLORS = {
  succeeded: '#1b6e3a',
  failed: '#b3261e',
  p50: '#3451b2',
  p99: '#8a5a00',
  received: '#6b3fa0',
} as const

export type ChartSpec = ChartConfiguration<'bar' | 'line', (number | null)[], string>

/**
 * One chart on a canvas. A canvas says nothing to a screen reader, so it is an image named by
 * `label` (what it shows, and its totals); the same figures are in a table beside it. The legend
 * is text on the page rather than pixels: it follows the reader's font size and can be selected.
 */
export function ChartCanvas({ id, label, spec }: { id: string; label: string; spec: ChartSpec }) {
  const canvas = useRef<HTMLCanvasElement>(null)
  useEffect(() => {
    const chart = new Chart(canvas.current!, spec)
    return () => chart.destroy()
  }, [spec])
  return (
    <figure class="chart">
      <div class="chart-box">
        <canvas id={id} ref={canvas} role="img" aria-label={label} />
      </div>
      <ul class="legend">
        {spec.data.datasets.map((dataset) => (
          <li key={dataset.label}>
            {/* A colour of the series, set through the CSSOM (the CSP allows no style attribute in markup). */}
            <span class="swatch" style={{ backgroundColor: String(dataset.backgroundColor) }} />
            {dataset.label}
          </li>
        ))}
      </ul>
    </figure>
  )
}

/** Options every chart shares: sized by its box (dashboard.css), drawn at once (a range change redraws it), counts from zero. */
export function chartOptions(yTitle: string, stacked: boolean): ChartSpec['options'] {
  return {
    responsive: true,
    maintainAspectRatio: false,
    animation: false,
    interaction: { mode: 'index', intersect: false },
    scales: {
      x: { stacked, ticks: { maxRotation: 0, autoSkipPadding: 12 }, grid: { display: false } },
      y: { stacked, beginAtZero: true, title: { display: true, text: yTitle }, ticks: { precision: 0 } },
    },
  }
}
