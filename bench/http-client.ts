/**
 * A lean keep-alive HTTP/1.1 client for load generation (bench/webhooks.ts), because Bun's fetch
 * costs a few hundred µs of CPU per POST: at 2,000 requests/s on two cores that is a large part
 * of a core taken from the server being measured.
 *
 * - `connections` TCP connections (Bun.connect) to one plain-HTTP origin, opened on demand and
 *   again after a close; each has at most one request outstanding (no pipelining).
 * - A request is one ASCII string (request line, headers, body), written with one write; a
 *   partial write is finished from the socket's drain callback.
 * - A response is parsed just enough: the status code, Content-Length (a chunked or
 *   length-less response is an error), the body kept only when asked or when the status is not
 *   the expected one, `Connection: close` honoured.
 * - Requests beyond the free connections wait in a FIFO queue, so an open-loop caller never
 *   opens more than `connections` sockets.
 * - Every request is bounded by `timeoutMs` (checked every 250 ms): it is then failed and its
 *   connection closed.
 *
 * Loopback, benchmarks only: no TLS, no redirects, no proxies, no request bodies beyond ASCII.
 */
import type { Socket } from 'bun'

export interface Answer {
  status: number
  /** The body, when the status was not `expectStatus`; '' otherwise. */
  body: string
  /** From the write to the end of the response. */
  ms: number
}

interface Pending {
  data: string
  resolve: (answer: Answer) => void
  reject: (error: Error) => void
  enqueuedAt: number
  writtenAt: number
}

interface Connection {
  socket: Socket<Connection> | null
  /** Which connect() the socket callbacks belong to: those of a socket already given up are ignored. */
  generation: number
  connecting: boolean
  current: Pending | null
  buffer: Buffer | null
  /** Left to write of the current request (after a partial write). */
  unwritten: Buffer | null
  closeAfter: boolean
}

export interface PoolOptions {
  hostname: string
  port: number
  connections: number
  /** The status every answer should have; any other keeps its body for the error message. */
  expectStatus?: number
  timeoutMs?: number
}

/** What a request dropped by dropQueued() (never sent) fails with. */
export class DroppedError extends Error {
  constructor() {
    super('dropped before it was sent')
  }
}

const HEADER_END = Buffer.from('\r\n\r\n')
const CONTENT_LENGTH = /\r\ncontent-length:[ \t]*(\d+)/i
const CHUNKED = /\r\ntransfer-encoding:[^\r]*chunked/i
const CONNECTION_CLOSE = /\r\nconnection:[ \t]*close/i

export class HttpPool {
  private readonly idle: Connection[] = []
  private readonly all: Connection[] = []
  private readonly queue: Pending[] = []
  private queueHead = 0
  private readonly timer: ReturnType<typeof setInterval>
  private closed = false
  readonly host: string

  constructor(private readonly options: PoolOptions) {
    this.host = `${options.hostname}:${options.port}`
    for (let i = 0; i < options.connections; i++) {
      const connection: Connection = { socket: null, generation: 0, connecting: false, current: null, buffer: null, unwritten: null, closeAfter: false }
      this.all.push(connection)
      this.idle.push(connection)
    }
    const timeoutMs = options.timeoutMs ?? 10_000
    this.timer = setInterval(() => {
      const now = performance.now()
      for (const connection of this.all) {
        const current = connection.current
        if (current && now - Math.max(current.writtenAt, current.enqueuedAt) > timeoutMs) this.fail(connection, new Error(`no answer within ${timeoutMs} ms`))
      }
    }, 250)
  }

  /** Sends `data` (a whole HTTP/1.1 request) on a free connection, or once one is free. */
  request(data: string): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      if (this.closed) return reject(new Error('the pool is closed'))
      const pending: Pending = { data, resolve, reject, enqueuedAt: performance.now(), writtenAt: 0 }
      const connection = this.idle.pop()
      if (connection) this.start(connection, pending)
      else this.queue.push(pending)
    })
  }

  /** Fails every waiting request (they were never sent); answers how many there were. */
  dropQueued(): number {
    const dropped = this.queue.length - this.queueHead
    for (let i = this.queueHead; i < this.queue.length; i++) this.queue[i]!.reject(new DroppedError())
    this.queue.length = 0
    this.queueHead = 0
    return dropped
  }

  close(): void {
    this.closed = true
    clearInterval(this.timer)
    this.dropQueued()
    for (const connection of this.all) {
      if (connection.current) this.fail(connection, new Error('the pool is closed'))
      connection.socket?.end()
    }
  }

  /** POST `path` with a JSON body, as one string. */
  post(path: string, json: string): Promise<Answer> {
    return this.request(`POST ${path} HTTP/1.1\r\nHost: ${this.host}\r\nContent-Type: application/json\r\nContent-Length: ${json.length}\r\n\r\n${json}`)
  }

  private start(connection: Connection, pending: Pending): void {
    connection.current = pending
    if (connection.socket) this.write(connection)
    else if (!connection.connecting) this.connect(connection)
  }

  private connect(connection: Connection): void {
    connection.connecting = true
    const generation = ++connection.generation
    const mine = () => connection.generation === generation
    const pool = this
    Bun.connect<Connection>({
      hostname: this.options.hostname,
      port: this.options.port,
      data: connection,
      socket: {
        open(socket) {
          if (!mine()) return void socket.terminate()
          connection.connecting = false
          connection.socket = socket
          socket.setNoDelay(true)
          if (connection.current) pool.write(connection)
        },
        data(_socket, chunk) {
          if (mine()) pool.onData(connection, chunk)
        },
        drain(socket) {
          const rest = connection.unwritten
          if (!mine() || !rest) return
          const n = socket.write(rest)
          connection.unwritten = n < rest.length ? rest.subarray(n) : null
        },
        close() {
          if (mine()) pool.fail(connection, new Error('the connection closed before the answer'))
        },
        error(_socket, error) {
          if (mine()) pool.fail(connection, error)
        },
      },
    }).catch((error: Error) => {
      if (mine()) this.fail(connection, error)
    })
  }

  private write(connection: Connection): void {
    const pending = connection.current!
    pending.writtenAt = performance.now()
    const n = connection.socket!.write(pending.data)
    if (n < pending.data.length) connection.unwritten = Buffer.from(pending.data, 'latin1').subarray(Math.max(0, n))
  }

  private onData(connection: Connection, chunk: Buffer): void {
    const buffer = connection.buffer ? Buffer.concat([connection.buffer, chunk]) : chunk
    const headerEnd = buffer.indexOf(HEADER_END)
    if (headerEnd < 0) {
      connection.buffer = buffer
      return
    }
    // "HTTP/1.1 202 Accepted": the status is bytes 9–11.
    const status = (buffer[9]! - 48) * 100 + (buffer[10]! - 48) * 10 + (buffer[11]! - 48)
    const head = buffer.toString('latin1', 0, headerEnd)
    if (!head.startsWith('HTTP/1.') || !(status >= 100 && status < 600)) return this.fail(connection, new Error(`not an HTTP/1.x answer: ${head.slice(0, 80)}`))
    if (CHUNKED.test(head)) return this.fail(connection, new Error('a chunked answer (this client reads Content-Length bodies only)'))
    const length = CONTENT_LENGTH.exec(head)
    if (!length) return this.fail(connection, new Error('an answer without Content-Length'))
    const end = headerEnd + 4 + Number(length[1])
    if (buffer.length < end) {
      connection.buffer = buffer
      return
    }
    if (buffer.length > end) return this.fail(connection, new Error('bytes after the answer (this client never pipelines)'))
    connection.buffer = null
    const pending = connection.current
    if (!pending) return this.fail(connection, new Error('an answer to no request'))
    const keep = status !== this.options.expectStatus
    const answer: Answer = { status, body: keep ? buffer.toString('utf8', headerEnd + 4, end) : '', ms: performance.now() - pending.writtenAt }
    connection.current = null
    if (CONNECTION_CLOSE.test(head)) {
      const socket = connection.socket
      connection.generation++
      connection.socket = null
      socket?.end()
    }
    pending.resolve(answer)
    this.next(connection)
  }

  /** The connection is free: the next waiting request, or back to the idle list. */
  private next(connection: Connection): void {
    if (this.closed) return
    if (this.queueHead < this.queue.length) {
      const pending = this.queue[this.queueHead]!
      this.queue[this.queueHead++] = undefined as unknown as Pending
      if (this.queueHead > 1024 && this.queueHead * 2 > this.queue.length) {
        this.queue.splice(0, this.queueHead)
        this.queueHead = 0
      }
      this.start(connection, pending)
    } else {
      this.idle.push(connection)
    }
  }

  /**
   * The connection is given up (an error, a close, a timeout, a malformed answer): its socket is
   * closed and its callbacks ignored from now on; its request, if any, fails, and the next one
   * opens a new connection.
   */
  private fail(connection: Connection, error: Error): void {
    const socket = connection.socket
    connection.generation++
    connection.socket = null
    connection.connecting = false
    connection.buffer = null
    connection.unwritten = null
    socket?.terminate()
    const pending = connection.current
    connection.current = null
    if (pending) {
      pending.reject(error)
      this.next(connection)
    }
  }
}
