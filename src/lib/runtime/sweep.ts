import type { Logger } from './logger.ts'

/**
 * Runs `sweep` at once and then `intervalMs` after each run ends, until stopped. A run that
 * fails is logged (`failure` is the line) and the next one comes anyway.
 */
export function startPeriodicSweep(options: { sweep(): Promise<unknown>; intervalMs: number; logger: Logger; failure: string }): { stop(): Promise<void> } {
  let stopped = false
  let timer: ReturnType<typeof setTimeout> | undefined
  let running: Promise<void> = Promise.resolve()
  const run = async () => {
    try {
      await options.sweep()
    } catch (error) {
      options.logger.warn(options.failure, { error: String(error) })
    }
    if (!stopped) timer = setTimeout(() => (running = run()), options.intervalMs)
  }
  running = run()
  return {
    /** Resolves once a run under way has finished: the database can then be closed. */
    async stop() {
      stopped = true
      clearTimeout(timer)
      await running
    },
  }
}
