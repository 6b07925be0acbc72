/**
 * A cheap HTTP/1.1 client for the benchmarks' load generators: one keep-alive connection that
 * sends one pre-serialized request at a time and reads the answer only as far as its status.
 */
import { connect, type Socket } from "node:net"

/**
 * A keep-alive HTTP/1.1 connection that sends one request at a time: requests are serialized in
 * advance and the answer is read only as far as its status and Content-Length. Much cheaper than
 * `node:http`'s client, so the generator leaves more of the shared CPUs to the server it measures.
 */
export class Connection {
  private readonly socket: Socket
  private buffer: Buffer = Buffer.alloc(0)
  private waiting: ((status: number) => void) | undefined
  busy = false
  /** Closed by the server (idle timeout) or broken: never used again. */
  closed = false

  constructor(host: string, port: number) {
    this.socket = connect({ host, port, noDelay: true })
    this.socket.on("data", (chunk: Buffer) => this.read(chunk))
    this.socket.on("error", () => this.end())
    this.socket.on("close", () => this.end())
  }

  private end() {
    this.closed = true
    this.answer(0)
  }

  send(bytes: Buffer, done: (status: number) => void) {
    this.busy = true
    this.waiting = done
    this.socket.write(bytes)
  }

  close() {
    this.socket.destroy()
  }

  private answer(status: number) {
    const waiting = this.waiting
    this.waiting = undefined
    this.busy = false
    waiting?.(status)
  }

  private read(chunk: Buffer) {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk])
    const headEnd = this.buffer.indexOf("\r\n\r\n")
    if (headEnd < 0) return
    const head = this.buffer.subarray(0, headEnd).toString("latin1")
    const bodyEnd = /\r\ntransfer-encoding: *chunked/i.test(head)
      ? chunkedEnd(this.buffer, headEnd + 4)
      : headEnd + 4 + Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0)
    if (bodyEnd === undefined || this.buffer.length < bodyEnd) return
    this.buffer = this.buffer.subarray(bodyEnd)
    this.answer(Number(head.slice(9, 12)))
  }
}

/** Where a chunked body starting at `from` ends (after its last, empty chunk), if it has all arrived. */
const chunkedEnd = (buffer: Buffer, from: number): number | undefined => {
  let at = from
  while (true) {
    const line = buffer.indexOf("\r\n", at)
    if (line < 0) return undefined
    const size = Number.parseInt(buffer.subarray(at, line).toString("latin1"), 16)
    if (size === 0) return buffer.length >= line + 4 ? line + 4 : undefined
    at = line + 2 + size + 2
    if (at > buffer.length) return undefined
  }
}
