import { expect, test } from 'bun:test'
import { isBreakerFailure } from '../../src/delivery/circuit.ts'
import { classifyAnswer } from '../../src/delivery/flow-control.ts'
import type { AttemptResult } from '../../src/delivery/send.ts'

// What counts against a receiver (docs/webhooks.md#when-an-endpoint-keeps-failing), for every kind of destination.
const attempt = (ok: boolean, status: number | null, failure: AttemptResult['failure']) => ({ ok, status, failure, durationMs: 5 })

test.each([
  ['a 2xx', attempt(true, 204, null), false],
  ["a broker's confirmation (no status code)", attempt(true, null, null), false],
  ['a 404: the receiver is up', attempt(false, 404, 'http_4xx'), false],
  ['unroutable: the broker is up, the message has nowhere to go', attempt(false, null, 'unroutable'), false],
  ['denied: the broker is up and refuses the credentials', attempt(false, null, 'denied'), false],
  ['a 429', attempt(false, 429, 'http_4xx'), true],
  ['a 503', attempt(false, 503, 'http_5xx'), true],
  ["the broker's negative acknowledgement", attempt(false, null, 'nacked'), true],
  ['no connection', attempt(false, null, 'connection'), true],
  ['no answer in time', attempt(false, null, 'timeout'), true],
])('%s: a failure for the circuit breaker and flow control? %p', (_what, result, failure) => {
  expect(isBreakerFailure(result)).toBe(failure)
  expect(classifyAnswer(result, 5) === 'congested').toBe(failure)
})
