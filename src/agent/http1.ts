/**
 * A lean HTTP/1.1 keep-alive client for the gateway tunnel's common case: a request whose whole
 * body came in the open frame, to a container on this host. node:http's client (ClientRequest, the
 * Agent's bookkeeping, IncomingMessage streams) was half of the agent's CPU per proxied request;
 * this writes the request head and body in one write on a pooled socket and reads the response
 * with a small strict parser (status line, headers, Content-Length, chunked or close-delimited
 * bodies, 1xx interim answers skipped), handing the body on as it arrives, with pause/resume for
 * the tunnel's credit.
 *
 * The request bytes are what node:http writes for the same call (the header object's order,
 * `Connection: keep-alive` last); requests this does not cover (streamed bodies, a body without a
 * matching Content-Length, WebSockets, header bytes node:http would refuse) stay on node:http.
 * A request that fails on a reused socket before any response byte is sent once more on a fresh
 * connection, as with node:http (see AgentTunnel).
 */
import net from 'node:net';

/** Header values node:http accepts (checkInvalidHeaderChar) and names it accepts (tokens). */
const INVALID_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
const TOKEN = /^[\^_`a-zA-Z\-0-9!#$%&'*+.|~]+$/;
/** Methods node:http sends without a body framing header when no body is written. */
const NO_BODY_DEFAULT = new Set(['GET', 'HEAD', 'DELETE', 'OPTIONS', 'TRACE']);
const MAX_HEAD = 64 * 1024;

export interface Http1Handlers {
  /** The final response head (1xx interim answers are skipped). */
  head(status: number, rawHeaders: string[]): void;
  data(chunk: Buffer): void;
  end(): void;
  /** `sent` false: nothing of the response was read (the request may not have reached the server). */
  error(e: NodeJS.ErrnoException, responseStarted: boolean): void;
}

/**
 * The request head node:http would write for these headers, or null when this request is not for
 * the lean path (then node:http takes it, with its own checks and framing).
 */
export function leanRequestHead(method: string, path: string, headers: Record<string, string | string[]>, body: Buffer): string | null {
  if (!TOKEN.test(method) || method === 'CONNECT' || INVALID_VALUE.test(path) || path.includes(' ')) return null;
  let head = `${method} ${path} HTTP/1.1\r\n`;
  let contentLength: string | undefined;
  for (const k in headers) {
    if (!TOKEN.test(k) || k === 'connection' || k === 'transfer-encoding' || k === 'expect' || k === 'upgrade' || k === 'trailer') return null;
    const v = headers[k] as string | string[];
    for (const one of Array.isArray(v) ? v : [v]) {
      if (INVALID_VALUE.test(one)) return null;
      head += `${k}: ${one}\r\n`;
    }
    if (k === 'content-length') {
      if (Array.isArray(v)) return null;
      contentLength = v;
    }
  }
  if (contentLength !== undefined ? contentLength !== String(body.length) : body.length > 0 || !NO_BODY_DEFAULT.has(method)) return null;
  return `${head}Connection: keep-alive\r\n\r\n`;
}

interface Pooled {
  sock: net.Socket;
  key: string;
  idleTimer: NodeJS.Timeout | null;
}

/** Keep-alive sockets per host:port: LIFO free lists, an idle timeout, a cap on open sockets. */
export class Http1Pool {
  private readonly free = new Map<string, Pooled[]>();
  private readonly active = new Map<string, number>();
  /** Requests waiting for a socket: handed a parked one, or null with a slot to connect. */
  private readonly waiting = new Map<string, Array<(p: Pooled | null) => void>>();
  private closed = false;

  constructor(private readonly o: { maxSockets: number; maxFree: number; idleMs: number }) {}

  /** Sends the request; the handlers hear the response. Returns the exchange (pause, resume, destroy). */
  request(host: string, port: number, head: string, body: Buffer, h: Http1Handlers, fresh = false): Http1Exchange {
    const x = new Http1Exchange(this, `${host}:${port}`, host, port, head, body, h);
    x.start(fresh);
    return x;
  }

  /** A pooled socket (or null: open a new one). */
  take(key: string): Pooled | null {
    const list = this.free.get(key);
    while (list && list.length) {
      const p = list.pop() as Pooled;
      if (p.idleTimer) clearTimeout(p.idleTimer);
      p.idleTimer = null;
      if (p.sock.destroyed || !p.sock.writable) {
        p.sock.destroy();
        continue;
      }
      p.sock.removeAllListeners('close');
      p.sock.removeAllListeners('error');
      p.sock.removeAllListeners('data');
      return p;
    }
    return null;
  }

  /** Whether a new socket may be opened now; else `wake` runs when a socket frees (or one may be opened: null). */
  reserve(key: string, wake: (p: Pooled | null) => void): boolean {
    const n = this.active.get(key) ?? 0;
    if (n < this.o.maxSockets) {
      this.active.set(key, n + 1);
      return true;
    }
    const w = this.waiting.get(key) ?? [];
    w.push(wake);
    this.waiting.set(key, w);
    return false;
  }

  /** A socket (busy or free) is gone: its slot frees, or passes to the first request waiting for one. */
  released(key: string): void {
    const w = this.waiting.get(key)?.shift();
    if (w) w(null);
    else this.active.set(key, Math.max(0, (this.active.get(key) ?? 1) - 1));
  }

  /** A socket whose exchange completed cleanly: kept for the next request (or closed). */
  park(p: Pooled): void {
    const w = this.closed || p.sock.destroyed ? undefined : this.waiting.get(p.key)?.shift();
    if (w) {
      p.sock.removeAllListeners('data');
      p.sock.removeAllListeners('error');
      p.sock.removeAllListeners('close');
      w(p);
      return;
    }
    const list = this.free.get(p.key) ?? [];
    if (this.closed || list.length >= this.o.maxFree || p.sock.destroyed) {
      p.sock.destroy();
      return;
    }
    p.sock.removeAllListeners('data');
    p.sock.removeAllListeners('error');
    p.sock.removeAllListeners('close');
    // a free socket that closes or errors simply leaves the pool
    let dropped = false;
    const drop = (): void => {
      if (dropped) return;
      dropped = true;
      const i = list.indexOf(p);
      if (i >= 0) list.splice(i, 1);
      if (p.idleTimer) clearTimeout(p.idleTimer);
      p.sock.destroy();
      this.released(p.key);
    };
    p.sock.on('error', drop);
    p.sock.on('close', drop);
    // bytes on an idle connection are a protocol error: drop it
    p.sock.on('data', drop);
    p.idleTimer = setTimeout(drop, this.o.idleMs);
    p.idleTimer.unref();
    list.push(p);
    this.free.set(p.key, list);
  }

  destroy(): void {
    this.closed = true;
    for (const list of this.free.values()) for (const p of list.splice(0)) p.sock.destroy();
  }
}

type Phase = 'head' | 'length' | 'chunk-size' | 'chunk-data' | 'chunk-crlf' | 'trailers' | 'close' | 'done';

/** One request/response on a pooled socket. */
export class Http1Exchange {
  private p: Pooled | null = null;
  private reused = false;
  private buf: Buffer | null = null;
  private phase: Phase = 'head';
  private remaining = 0;
  private started = false;
  private finished = false;
  private keepAlive = true;
  private noBody = false;
  private paused = false;
  private pending: Buffer | null = null;

  constructor(
    private readonly pool: Http1Pool,
    private readonly key: string,
    private readonly host: string,
    private readonly port: number,
    private readonly reqHead: string,
    private readonly body: Buffer,
    private readonly h: Http1Handlers,
  ) {
    this.noBody = reqHead.startsWith('HEAD ');
  }

  start(fresh: boolean): void {
    const p = fresh ? null : this.pool.take(this.key);
    if (p) {
      this.reused = true;
      this.attach(p);
      return;
    }
    if (this.pool.reserve(this.key, (q) => this.woken(q))) this.connect();
  }

  /** A socket freed while this request waited: a parked one to use, or a slot to connect. */
  private woken(p: Pooled | null): void {
    if (!p) return this.connect();
    if (this.finished) return this.pool.park(p);
    this.reused = true;
    this.attach(p);
  }

  get reusedSocket(): boolean {
    return this.reused;
  }

  private connect(): void {
    if (this.finished) return this.pool.released(this.key);
    const sock = net.connect({ host: this.host, port: this.port, noDelay: true });
    this.attach({ sock, key: this.key, idleTimer: null });
  }

  private attach(p: Pooled): void {
    this.p = p;
    const s = p.sock;
    s.on('data', (d: Buffer) => this.onData(d));
    s.on('error', (e: NodeJS.ErrnoException) => this.onError(e));
    s.on('close', () => this.onClose());
    // one write: the head and the body (a socket still connecting sends it once connected)
    if (this.body.length) s.write(Buffer.concat([Buffer.from(this.reqHead, 'latin1'), this.body]));
    else s.write(this.reqHead, 'latin1');
  }

  pause(): void {
    this.paused = true;
    this.p?.sock.pause();
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    const rest = this.pending;
    this.pending = null;
    if (rest) this.onData(rest);
    if (!this.paused && !this.finished) this.p?.sock.resume();
  }

  /** Abandons the exchange: the socket is closed (not reused). */
  destroy(): void {
    if (this.finished) return;
    this.finished = true;
    this.p?.sock.destroy();
  }

  private fail(e: NodeJS.ErrnoException): void {
    if (this.finished) return;
    this.finished = true;
    this.p?.sock.destroy();
    this.h.error(e, this.started);
  }

  private onError(e: NodeJS.ErrnoException): void {
    this.fail(e);
  }

  private onClose(): void {
    if (this.p) this.pool.released(this.key);
    if (this.finished) return;
    if (this.phase === 'close') {
      // a close-delimited body ends with the connection
      this.finished = true;
      this.h.end();
      return;
    }
    const e: NodeJS.ErrnoException = new Error(this.started ? 'aborted' : 'socket hang up');
    e.code = 'ECONNRESET';
    this.fail(e);
  }

  private protocolError(message: string): void {
    const e: NodeJS.ErrnoException = new Error(`Parse Error: ${message}`);
    e.code = 'HPE_INVALID';
    this.fail(e);
  }

  private onData(d: Buffer): void {
    if (this.finished) return;
    if (this.paused) {
      this.pending = this.pending ? Buffer.concat([this.pending, d]) : d;
      return;
    }
    let b = this.buf ? Buffer.concat([this.buf, d]) : d;
    this.buf = null;
    while (b.length > 0 && !this.finished) {
      if (this.paused) {
        this.pending = b;
        return;
      }
      switch (this.phase) {
        case 'head': {
          const end = b.indexOf('\r\n\r\n');
          if (end < 0) {
            if (b.length > MAX_HEAD) return this.protocolError('response head too large');
            this.buf = b;
            return;
          }
          if (!this.parseHead(b.toString('latin1', 0, end))) return;
          b = b.subarray(end + 4);
          continue;
        }
        case 'length': {
          const n = Math.min(this.remaining, b.length);
          const chunk = b.subarray(0, n);
          b = b.subarray(n);
          this.remaining -= n;
          if (this.remaining === 0) this.phase = 'done';
          this.h.data(chunk);
          if (this.phase === 'done') return this.complete(b);
          continue;
        }
        case 'chunk-size': {
          const eol = b.indexOf('\r\n');
          if (eol < 0) {
            if (b.length > 1024) return this.protocolError('chunk size line too long');
            this.buf = b;
            return;
          }
          const line = b.toString('latin1', 0, eol);
          const sizeText = (line.split(';')[0] as string).trim();
          if (!/^[0-9a-fA-F]{1,12}$/.test(sizeText)) return this.protocolError('invalid chunk size');
          this.remaining = parseInt(sizeText, 16);
          b = b.subarray(eol + 2);
          this.phase = this.remaining === 0 ? 'trailers' : 'chunk-data';
          continue;
        }
        case 'chunk-data': {
          const n = Math.min(this.remaining, b.length);
          const chunk = b.subarray(0, n);
          b = b.subarray(n);
          this.remaining -= n;
          if (this.remaining === 0) this.phase = 'chunk-crlf';
          this.h.data(chunk);
          continue;
        }
        case 'chunk-crlf': {
          if (b.length < 2) {
            this.buf = b;
            return;
          }
          if (b[0] !== 13 || b[1] !== 10) return this.protocolError('invalid chunk terminator');
          b = b.subarray(2);
          this.phase = 'chunk-size';
          continue;
        }
        case 'trailers': {
          // trailer fields end with an empty line; they are not relayed
          const eol = b.indexOf('\r\n');
          if (eol < 0) {
            if (b.length > MAX_HEAD) return this.protocolError('trailers too large');
            this.buf = b;
            return;
          }
          b = b.subarray(eol + 2);
          if (eol === 0) {
            this.phase = 'done';
            return this.complete(b);
          }
          continue;
        }
        case 'close': {
          this.h.data(b);
          return;
        }
        case 'done':
          return this.complete(b);
      }
    }
  }

  /** Parses a response head; false when it failed the exchange. Skips 1xx interim answers. */
  private parseHead(text: string): boolean {
    const lines = text.split('\r\n');
    const m = /^HTTP\/1\.([01]) (\d{3})(?: .*)?$/.exec(lines[0] as string);
    if (!m) {
      this.protocolError('invalid status line');
      return false;
    }
    const minor = m[1] as string;
    const status = Number(m[2]);
    const raw: string[] = [];
    let contentLength: number | null = null;
    let chunked = false;
    let te = false;
    let connection = '';
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i] as string;
      const c = line.indexOf(':');
      if (c <= 0) {
        this.protocolError('invalid header line');
        return false;
      }
      const name = line.slice(0, c);
      if (!TOKEN.test(name)) {
        this.protocolError('invalid header name');
        return false;
      }
      const value = line.slice(c + 1).trim();
      if (INVALID_VALUE.test(value)) {
        this.protocolError('invalid header value');
        return false;
      }
      raw.push(name, value);
      const k = name.toLowerCase();
      if (k === 'content-length') {
        if (!/^\d{1,15}$/.test(value) || (contentLength !== null && contentLength !== Number(value))) {
          this.protocolError('invalid Content-Length');
          return false;
        }
        contentLength = Number(value);
      } else if (k === 'transfer-encoding') {
        te = true;
        const codings = value.toLowerCase().split(',').map((t) => t.trim());
        chunked = codings[codings.length - 1] === 'chunked';
      } else if (k === 'connection') connection += `${value.toLowerCase()},`;
    }
    if (status < 200) {
      if (status === 101) {
        this.protocolError('unexpected 101 Switching Protocols');
        return false;
      }
      return true; // interim: the final head follows
    }
    if (te && contentLength !== null) {
      this.protocolError('Content-Length with Transfer-Encoding');
      return false;
    }
    const tokens = connection.split(',').map((t) => t.trim());
    this.keepAlive = minor === '1' ? !tokens.includes('close') : tokens.includes('keep-alive');
    this.started = true;
    this.h.head(status, raw);
    if (this.finished) return false;
    if (this.noBody || status === 204 || status === 304) this.phase = 'done';
    else if (te) this.phase = chunked ? 'chunk-size' : 'close';
    else if (contentLength !== null) {
      this.remaining = contentLength;
      this.phase = contentLength === 0 ? 'done' : 'length';
    } else this.phase = 'close';
    if (this.phase === 'close') this.keepAlive = false;
    if (this.phase === 'done') {
      this.complete(Buffer.alloc(0));
      return false;
    }
    return true;
  }

  /** The response is complete: the socket goes back to the pool (unless it cannot be reused). */
  private complete(rest: Buffer): void {
    if (this.finished) return;
    this.finished = true;
    const p = this.p;
    if (p) {
      if (this.keepAlive && rest.length === 0 && !this.paused) {
        this.pool.park(p);
      } else p.sock.destroy();
    }
    this.h.end();
  }
}
