const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' })

/** A timestamp in the reader's time zone; the ISO form stays in the element's datetime. */
export const formatTime = (iso: string) => dateTime.format(new Date(iso))

export function describeAttempt(attempt: { status_code: number | null; duration_ms: number; error: string | null }): string {
  const answer = attempt.status_code === null ? 'No response' : `HTTP ${attempt.status_code}`
  // A non-2xx answer's error is its status again: say it once.
  const error = attempt.error && attempt.error !== answer ? `: ${attempt.error}` : ''
  return `${answer} in ${attempt.duration_ms} ms${error}`
}
