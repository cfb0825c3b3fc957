#!/usr/bin/env bun
/**
 * Plain CPU and nothing else: keeps one core busy for <burst ms> at a time, <share> of the time
 * (its pauses vary by ±50 % so that it never falls into step with a load), for <seconds>.
 * bench/webhooks.ts --scenario storm --cpu-load runs it beside B instead of A's storm: what a
 * neighbour costs B when it touches neither the database nor the server (docs/performance.md,
 * issue 37, nineteenth pass).
 *
 *   bun bench/cpu-load.ts <share 0–1> <burst ms> <seconds>
 */
const [share, burstMs, seconds] = Bun.argv.slice(2).map(Number)
if (!(share! > 0 && share! <= 1 && Number.isInteger(burstMs) && burstMs! >= 1 && seconds! > 0 && seconds! <= 3600)) {
  console.error('usage: bun bench/cpu-load.ts <share 0–1> <burst ms, a whole number ≥ 1> <seconds, at most 3600>')
  process.exit(2)
}
const end = performance.now() + seconds! * 1000
while (performance.now() < end) {
  const burstEnds = performance.now() + burstMs!
  while (performance.now() < burstEnds);
  Bun.sleepSync(burstMs! * (1 / share! - 1) * (0.5 + Math.random()))
}
