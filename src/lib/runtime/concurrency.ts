/** Runs a task now or, when `max` are already running, when one of them ends; tasks start in the order they came. */
export type ConcurrencyLimit = <T>(task: () => Promise<T>) => Promise<T>

export function createConcurrencyLimit(max: number): ConcurrencyLimit {
  let running = 0
  const waiting: (() => void)[] = []
  const release = () => {
    running--
    waiting.shift()?.()
  }
  return async <T>(task: () => Promise<T>): Promise<T> => {
    if (running >= max) await new Promise<void>((resolve) => waiting.push(resolve))
    running++
    try {
      return await task()
    } finally {
      release()
    }
  }
}
