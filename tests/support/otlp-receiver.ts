import { afterAll } from 'bun:test'

/**
 * An OTLP/HTTP trace receiver, as a collector (or Tempo, Jaeger, Honeycomb) would be: it takes
 * `POST /v1/traces` in protobuf (`application/x-protobuf`) or JSON and keeps every span it was
 * sent, decoded from the wire. The protobuf decoder reads the fields of
 * opentelemetry/proto/trace/v1/trace.proto the tests look at; nothing is taken from the exporter's
 * own code, so a span that did not reach the wire as OTLP is not seen.
 */
export interface ReceivedSpan {
  traceId: string
  spanId: string
  parentSpanId: string
  name: string
  /** 1 internal, 2 server, 3 client (SpanKind + 1 on the wire). */
  kind: number
  attributes: Record<string, string | number | boolean>
  /** 0 unset, 1 ok, 2 error. */
  status: { code: number; message: string }
  service: string
  /** How it came: `application/x-protobuf` or `application/json`. */
  contentType: string
}

export const SPAN_KIND = { internal: 1, server: 2, client: 3 } as const

type Field = { number: number; wire: number; value: bigint | Uint8Array }

function* fields(bytes: Uint8Array): Generator<Field> {
  let at = 0
  const varint = (): bigint => {
    let result = 0n
    for (let shift = 0n; ; shift += 7n) {
      const byte = bytes[at++]!
      result |= BigInt(byte & 0x7f) << shift
      if (byte < 0x80) return result
    }
  }
  while (at < bytes.length) {
    const key = Number(varint())
    const number = key >>> 3
    const wire = key & 7
    if (wire === 0) yield { number, wire, value: varint() }
    else if (wire === 1) yield { number, wire, value: bytes.slice(at, (at += 8)) }
    else if (wire === 5) yield { number, wire, value: bytes.slice(at, (at += 4)) }
    else if (wire === 2) {
      const length = Number(varint())
      yield { number, wire, value: bytes.slice(at, (at += length)) }
    } else throw new Error(`unsupported protobuf wire type ${wire}`)
  }
}

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex')
const utf8 = (bytes: Uint8Array) => new TextDecoder().decode(bytes)

function anyValue(bytes: Uint8Array): string | number | boolean {
  for (const field of fields(bytes)) {
    if (field.number === 1) return utf8(field.value as Uint8Array)
    if (field.number === 2) return field.value === 1n
    if (field.number === 3) return Number(BigInt.asIntN(64, field.value as bigint))
    if (field.number === 4) return new DataView((field.value as Uint8Array).buffer).getFloat64(0, true)
  }
  return ''
}

function keyValues(list: Uint8Array[]): Record<string, string | number | boolean> {
  const attributes: Record<string, string | number | boolean> = {}
  for (const bytes of list) {
    let key = ''
    let value: string | number | boolean = ''
    for (const field of fields(bytes)) {
      if (field.number === 1) key = utf8(field.value as Uint8Array)
      if (field.number === 2) value = anyValue(field.value as Uint8Array)
    }
    attributes[key] = value
  }
  return attributes
}

const children = (bytes: Uint8Array, number: number) => [...fields(bytes)].filter((field) => field.number === number).map((field) => field.value as Uint8Array)

function decodeProtobuf(body: Uint8Array): Omit<ReceivedSpan, 'contentType'>[] {
  const spans: Omit<ReceivedSpan, 'contentType'>[] = []
  for (const resourceSpans of children(body, 1)) {
    const resource = children(resourceSpans, 1)[0]
    const service = String(keyValues(resource ? children(resource, 1) : [])['service.name'] ?? '')
    for (const scopeSpans of children(resourceSpans, 2)) {
      for (const span of children(scopeSpans, 2)) {
        const decoded = { traceId: '', spanId: '', parentSpanId: '', name: '', kind: 0, attributes: {}, status: { code: 0, message: '' }, service }
        for (const field of fields(span)) {
          if (field.number === 1) decoded.traceId = hex(field.value as Uint8Array)
          if (field.number === 2) decoded.spanId = hex(field.value as Uint8Array)
          if (field.number === 4) decoded.parentSpanId = hex(field.value as Uint8Array)
          if (field.number === 5) decoded.name = utf8(field.value as Uint8Array)
          if (field.number === 6) decoded.kind = Number(field.value)
          if (field.number === 15) {
            for (const status of fields(field.value as Uint8Array)) {
              if (status.number === 2) decoded.status.message = utf8(status.value as Uint8Array)
              if (status.number === 3) decoded.status.code = Number(status.value)
            }
          }
        }
        decoded.attributes = keyValues(children(span, 9))
        spans.push(decoded)
      }
    }
  }
  return spans
}

type JsonValue = { stringValue?: string; boolValue?: boolean; intValue?: string | number; doubleValue?: number }
type JsonKeyValue = { key: string; value: JsonValue }
const jsonValue = (value: JsonValue): string | number | boolean =>
  value.stringValue ?? value.boolValue ?? (value.intValue !== undefined ? Number(value.intValue) : undefined) ?? value.doubleValue ?? ''
const jsonAttributes = (list: JsonKeyValue[] = []) => Object.fromEntries(list.map((entry) => [entry.key, jsonValue(entry.value)]))

function decodeJson(body: string): Omit<ReceivedSpan, 'contentType'>[] {
  const request = JSON.parse(body) as {
    resourceSpans: { resource?: { attributes?: JsonKeyValue[] }; scopeSpans: { spans: any[] }[] }[]
  }
  return request.resourceSpans.flatMap((resourceSpans) => {
    const service = String(jsonAttributes(resourceSpans.resource?.attributes)['service.name'] ?? '')
    return resourceSpans.scopeSpans.flatMap((scope) =>
      scope.spans.map((span) => ({
        traceId: span.traceId,
        spanId: span.spanId,
        parentSpanId: span.parentSpanId ?? '',
        name: span.name,
        kind: span.kind,
        attributes: jsonAttributes(span.attributes),
        status: { code: span.status?.code ?? 0, message: span.status?.message ?? '' },
        service,
      })),
    )
  })
}

export function startOtlpReceiver() {
  const spans: ReceivedSpan[] = []
  const rawBodies: string[] = []
  const headers: Record<string, string>[] = []
  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    async fetch(request) {
      if (request.method !== 'POST' || new URL(request.url).pathname !== '/v1/traces') return new Response(null, { status: 404 })
      const contentType = request.headers.get('content-type') ?? ''
      headers.push(Object.fromEntries(request.headers))
      const body = new Uint8Array(await request.arrayBuffer())
      rawBodies.push(Buffer.from(body).toString('latin1'))
      const decoded = contentType.includes('json') ? decodeJson(utf8(body)) : decodeProtobuf(body)
      spans.push(...decoded.map((span) => ({ ...span, contentType })))
      return contentType.includes('json') ? Response.json({}) : new Response(new Uint8Array(0), { headers: { 'content-type': 'application/x-protobuf' } })
    },
  })
  afterAll(() => server.stop(true))
  return {
    endpoint: `http://127.0.0.1:${server.port}`,
    spans,
    /** Every request body as it came (protobuf as latin1 text): what a search for a leaked secret reads. */
    rawBodies,
    headers,
    /** The spans of one trace. */
    trace: (traceId: string) => spans.filter((span) => span.traceId === traceId),
    async waitFor(predicate: (spans: ReceivedSpan[]) => boolean, timeoutMs = 15_000): Promise<void> {
      const until = Date.now() + timeoutMs
      while (!predicate(spans)) {
        if (Date.now() > until) throw new Error(`the spans expected did not arrive within ${timeoutMs} ms: ${spans.map((span) => span.name).join(', ')}`)
        await Bun.sleep(50)
      }
    },
  }
}
