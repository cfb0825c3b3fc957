/** Reads until `done` holds and answers the value that made it hold; past `timeoutMs`, fails naming `what` and the last value read. */
export async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 10_000, what = 'the condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (done(value)) return value
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms; last: ${JSON.stringify(value).slice(0, 2000)}`)
    await Bun.sleep(100)
  }
}
