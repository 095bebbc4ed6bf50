import { Readable } from 'node:stream';
import type { HttpResponse } from 'uWebSockets.js';
import { AppError } from '../shared/errors.js';
import { statusLine } from './error-map.js';
import { createBodyChannel } from '../storage/local-http.js';

/**
 * A response that a stream route drives itself. Every write is corked; write() returns false under
 * backpressure and onWritable() tells when to continue, so a slow client never balloons memory.
 */
export class StreamResponse {
  aborted = false;
  ended = false;
  // allocated on first use: most responses are written whole and never wait or watch for an abort
  private abortHandlers: Array<() => void> | null = null;
  private writableWaiters: Array<() => void> | null = null;
  private headersSent = false;
  private pendingBody: Readable | null = null;

  constructor(
    readonly raw: HttpResponse,
    private readonly requestId: string,
    private readonly owner: { onDone(): void },
  ) {}

  /** @internal */
  _abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.pendingBody?.destroy();
    const hs = this.abortHandlers;
    const ws = this.writableWaiters;
    this.abortHandlers = null;
    this.writableWaiters = null;
    if (hs) for (const h of hs) h();
    if (ws) for (const w of ws) w();
    this.finish();
  }

  onAbort(h: () => void): void {
    if (this.aborted) h();
    else (this.abortHandlers ??= []).push(h);
  }

  /** The status written (0 until the head is sent): the access log and metrics of stream routes. */
  statusCode = 0;

  writeHead(status: number, headers: Record<string, string> = {}): void {
    if (this.aborted || this.headersSent) return;
    this.headersSent = true;
    this.statusCode = status;
    this.raw.cork(() => {
      this.raw.writeStatus(statusLine(status));
      this.raw.writeHeader('X-Request-ID', this.requestId);
      for (const [k, v] of Object.entries(headers)) this.raw.writeHeader(k, v);
    });
  }

  /** Like writeHead, with a header list (a name may repeat, e.g. Set-Cookie). */
  writeHeadList(status: number, headers: ReadonlyArray<readonly [string, string]>): void {
    if (this.aborted || this.headersSent) return;
    this.headersSent = true;
    this.statusCode = status;
    this.raw.cork(() => {
      this.raw.writeStatus(statusLine(status));
      this.raw.writeHeader('X-Request-ID', this.requestId);
      for (const [k, v] of headers) this.raw.writeHeader(k, v);
    });
  }

  /** A whole response (status, a header list, the body) in one corked write. */
  sendWhole(status: number, headers: ReadonlyArray<readonly [string, string]>, body: Uint8Array | string): void {
    if (this.aborted || this.ended || this.headersSent) return;
    this.headersSent = true;
    this.ended = true;
    this.raw.cork(() => {
      this.raw.writeStatus(statusLine(status));
      this.raw.writeHeader('X-Request-ID', this.requestId);
      for (const [k, v] of headers) this.raw.writeHeader(k, v);
      this.raw.end(body);
    });
    this.finish();
  }

  /** Writes a chunk; false means the socket buffer is full: wait for drained() before the next. */
  write(chunk: string | Uint8Array): boolean {
    if (this.aborted || this.ended) return false;
    let ok = true;
    this.raw.cork(() => {
      ok = this.raw.write(chunk);
    });
    return ok;
  }

  /** Resolves when the socket can take more (or the client went away). */
  drained(): Promise<void> {
    if (this.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const waiters = (this.writableWaiters ??= []);
      const first = waiters.length === 0;
      waiters.push(resolve);
      if (first)
        this.raw.onWritable(() => {
          const ws = this.writableWaiters;
          this.writableWaiters = null;
          if (ws) for (const w of ws) w();
          return true;
        });
    });
  }

  /** Bytes uWS holds for this socket beyond what the kernel took (for a slow-reader cap). */
  bufferedAmount(): number {
    return this.aborted ? 0 : this.raw.getWriteOffset();
  }

  end(chunk?: string | Uint8Array): void {
    if (this.aborted || this.ended) return;
    this.ended = true;
    this.raw.cork(() => {
      if (chunk === undefined) this.raw.end();
      else this.raw.end(chunk);
    });
    this.finish();
  }

  /** Closes the connection abruptly (slow SSE reader, shutdown). */
  close(): void {
    if (this.aborted || this.ended) return;
    this.ended = true;
    this.raw.close();
    this.finish();
  }

  /** Sends a full JSON reply (errors of stream routes go through here). */
  json(status: number, body: unknown, headers: Record<string, string> = {}): void {
    if (this.aborted || this.ended) return;
    const payload = JSON.stringify(body);
    this.raw.cork(() => {
      if (!this.headersSent) {
        this.raw.writeStatus(statusLine(status));
        this.raw.writeHeader('X-Request-ID', this.requestId);
        this.raw.writeHeader('Content-Type', 'application/json');
        for (const [k, v] of Object.entries(headers)) this.raw.writeHeader(k, v);
      }
      this.raw.end(payload);
    });
    this.headersSent = true;
    this.ended = true;
    this.finish();
  }

  /**
   * Streams a Node readable to the client with backpressure, then ends. With totalSize the body is
   * sent with Content-Length through tryEnd (uWS's VideoStreamer pattern), else chunked.
   */
  async pipeFrom(src: NodeJS.ReadableStream, totalSize?: number): Promise<void> {
    const readable = src instanceof Readable ? src : Readable.from(src as AsyncIterable<Buffer>);
    this.pendingBody = readable;
    try {
      for await (const chunk of readable) {
        if (this.aborted) break;
        const buf = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
        if (totalSize === undefined) {
          if (!this.write(buf)) await this.drained();
          continue;
        }
        const lastOffset = this.raw.getWriteOffset();
        let ok = false;
        let done = false;
        this.raw.cork(() => {
          [ok, done] = this.raw.tryEnd(buf, totalSize);
        });
        if (done) break;
        if (!ok) done = await this.retryTail(buf, lastOffset, totalSize);
        if (done) break;
      }
      if (totalSize === undefined) this.end();
      else if (!this.aborted && !this.ended) {
        this.ended = true;
        this.finish();
      }
    } finally {
      this.pendingBody = null;
    }
  }

  /** Waits for writability and resends the unsent tail of buf; resolves done when the response ended. */
  private retryTail(buf: Buffer, lastOffset: number, totalSize: number): Promise<boolean> {
    return new Promise((resolve) => {
      if (this.aborted) return resolve(true);
      const onAbort = (): void => resolve(true);
      (this.writableWaiters ??= []).push(onAbort);
      this.raw.onWritable((offset) => {
        let ok = false;
        let done = false;
        this.raw.cork(() => {
          [ok, done] = this.raw.tryEnd(buf.subarray(offset - lastOffset), totalSize);
        });
        if (ok || done) {
          const ws = this.writableWaiters;
          const i = ws ? ws.indexOf(onAbort) : -1;
          if (ws && i >= 0) ws.splice(i, 1);
          resolve(done);
        }
        return ok;
      });
    });
  }

  private bodyIter: AsyncIterable<Buffer> | null = null;

  /**
   * @internal Attaches the body reader synchronously (uWS drops chunks that arrive before onData
   * is registered); the socket is paused while the consumer is behind.
   */
  _prepareBody(maxBytes: number): void {
    const raw = this.raw;
    const ch = createBodyChannel({ pause: () => raw.pause(), resume: () => raw.resume() });
    let received = 0;
    raw.onData((ab, isLast) => {
      received += ab.byteLength;
      if (received > maxBytes) {
        ch.fail(new AppError('payload_too_large', 'body_too_large', `request body exceeds ${maxBytes} bytes`));
        return;
      }
      ch.push(ab, isLast);
    });
    this.onAbort(() => ch.fail(new Error('client aborted')));
    this.bodyIter = ch.iterable;
  }

  /** The request body (stream routes), consumed once; empty when the request has none. */
  body(): AsyncIterable<Buffer> | null {
    return this.bodyIter;
  }

  /** HEAD responses and other body-less replies with a declared length. */
  endWithoutBody(contentLength?: number): void {
    if (this.aborted || this.ended) return;
    this.ended = true;
    this.raw.cork(() => {
      // no length: call without the argument (uWS turns an explicit undefined into a bogus
      // Content-Length that breaks the next request on a kept-alive connection)
      if (contentLength === undefined) this.raw.endWithoutBody();
      else this.raw.endWithoutBody(contentLength);
    });
    this.finish();
  }

  /** Ends and closes the connection (e.g. an error sent before the request body was read). */
  endAndClose(chunk: string | Uint8Array): void {
    if (this.aborted || this.ended) return;
    this.ended = true;
    this.raw.cork(() => {
      this.raw.end(chunk, true);
    });
    this.finish();
  }

  private finish(): void {
    this.owner.onDone();
  }
}
