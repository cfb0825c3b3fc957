/** Runs a task now or, when `max` are already running, when one of them ends; tasks start in the order they came. */
export type ConcurrencyLimit = <T>(task: () => Promise<T>) => Promise<T>

export function createConcurrencyLimit(max: number): ConcurrencyLimit {
  let running = 0
  const waiting: (() => void)[] = []
  // A task that ends hands its place to the first waiting one, so a task arriving meanwhile cannot take it.
  const release = () => {
    const next = waiting.shift()
    if (next) next()
    else running--
  }
  return async <T>(task: () => Promise<T>): Promise<T> => {
    if (running < max) running++
    else await new Promise<void>((resolve) => waiting.push(resolve))
    try {
      return await task()
    } finally {
      release()
    }
  }
}
