import { Readable } from 'node:stream';
import uWS from 'uWebSockets.js';
import type { HttpResponse, HttpRequest, TemplatedApp, us_listen_socket } from 'uWebSockets.js';
import type { Logger } from '../shared/logger.js';
import { ConfigError } from '../shared/config.js';
import { AppError, badRequest, notFound } from '../shared/errors.js';
import { uuidv7 } from '../shared/ids.js';
import { contextFrom, endSpan, SpanKind, spanLogFields, startSpan, tracingEnabled, withActive, type Span } from '../shared/tracing.js';
import { Router, type Method } from './router.js';
import { toHttpError, statusLine } from './error-map.js';
import { checkPairs, parseJsonBody, parseQuery } from '../shared/input-hygiene.js';
import { createBodyChannel } from '../storage/local-http.js';
import type { Authenticator, Principal, RouteAuth, TeamPrincipal } from './principal.js';
import { refusalResponse, type RequestRateLimits } from './rate-limits.js';
import type { RouteDoc } from './openapi/types.js';

const EMPTY = Buffer.alloc(0);
/** Control characters other than HTAB are invalid in a field value (RFC 9110 §5.5). */
/**
 * Pipelining (issue 29): this uWebSockets.js build answers pipelined requests only while each is
 * answered synchronously; when a request arrives on a connection whose previous answer is still
 * pending (our handlers are async), uWS closes the connection in C++ (HttpContext.h: "denying async
 * pipelining") within the same read, before any JavaScript sees the second request, and the first
 * request is aborted. uWS runs the JavaScript callbacks of that read one after the other with the
 * microtask queue drained between them, so a handler started from them could reach PostgreSQL before
 * the close. A request that may change state therefore first waits one macrotask (setImmediate: after
 * the whole read was parsed) and does nothing when the connection was closed meanwhile: pipelined
 * writes get no answer and commit nothing (a client may retry them). GET and HEAD change nothing and
 * run at once. README, "Reverse proxy".
 */
async function pipelinedAway(method: string, sr: StreamResponse): Promise<boolean> {
  if (method === 'GET' || method === 'HEAD') return false;
  await new Promise<void>((resolve) => setImmediate(resolve));
  return sr.aborted;
}

const CTL_IN_VALUE = /[\x00-\x08\x0a-\x1f\x7f]/;
/** uri-host [":" port] (RFC 9112 §3.2, RFC 3986 §3.2.2); empty is allowed. */
const HOST_VALUE = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(?::[0-9]*)?$/;
/** uWS listen option: fail instead of sharing a port another process listens on (no SO_REUSEPORT). */
const LIBUS_LISTEN_EXCLUSIVE_PORT = 1;

export interface Ctx {
  method: string;
  path: string;
  /** The raw query string (without '?'), as the client sent it. */
  rawQuery: string;
  params: Record<string, string>;
  query: URLSearchParams;
  /** Lower-cased header names. */
  headers: Record<string, string>;
  ip: string;
  requestId: string;
  log: Logger;
  principal: Principal | null;
  /** Parsed JSON body (json routes); undefined when the request had none. */
  body: unknown;
  rawBody: Buffer;
}

export interface TeamCtx extends Ctx {
  principal: TeamPrincipal;
}

export class Reply {
  constructor(
    readonly status: number,
    readonly body: unknown,
    readonly headers: Record<string, string> = {},
  ) {}
}

export type JsonHandler = (ctx: Ctx) => Promise<unknown>;
export type StreamHandler = (ctx: Ctx, res: StreamResponse) => Promise<void>;

export interface RouteDef {
  method: Method;
  path: string;
  auth: RouteAuth;
  /** json (default): the body is read (with the cap) and parsed before the handler runs. */
  handler?: JsonHandler;
  /** stream: the handler owns the response and may read the body as a stream. */
  stream?: StreamHandler;
  /** Raw body routes: body kept as bytes, not parsed (e.g. MCP parses itself). */
  rawBody?: boolean;
  /** Override of the body cap for this route. */
  maxBodyBytes?: number;
  /** Routes outside /api/v1 (health, storage) set this. */
  absolute?: boolean;
  /** Extra tag for the route table test and docs. */
  tag?: string;
  /** OpenAPI documentation of the route (src/edge/openapi/types.ts; docs/api.md "OpenAPI document"). */
  doc?: RouteDoc;
}

export interface EdgeOptions {
  host: string;
  port: number;
  basePath: string;
  maxBodyBytes: number;
  logger: Logger;
  authenticator: Authenticator;
  /** Per credential / per team request limits (src/edge/rate-limits.ts); null or absent = none. */
  rateLimits?: RequestRateLimits | null;
  /** Called once per routed request when its response ended (or it was aborted): metrics. */
  observe?: (route: RouteDef, status: number, seconds: number) => void;
}

/**
 * A response that a stream route drives itself. Every write is corked; write() returns false under
 * backpressure and onWritable() tells when to continue, so a slow client never balloons memory.
 */
export class StreamResponse {
  aborted = false;
  ended = false;
  private abortHandlers: Array<() => void> = [];
  private writableWaiters: Array<() => void> = [];
  private headersSent = false;
  private pendingBody: Readable | null = null;

  constructor(
    readonly raw: HttpResponse,
    private readonly requestId: string,
    private readonly onDone: () => void,
  ) {}

  /** @internal */
  _abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.pendingBody?.destroy();
    for (const h of this.abortHandlers.splice(0)) h();
    for (const w of this.writableWaiters.splice(0)) w();
    this.finish();
  }

  onAbort(h: () => void): void {
    if (this.aborted) h();
    else this.abortHandlers.push(h);
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
      const first = this.writableWaiters.length === 0;
      this.writableWaiters.push(resolve);
      if (first)
        this.raw.onWritable(() => {
          for (const w of this.writableWaiters.splice(0)) w();
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
      this.writableWaiters.push(onAbort);
      this.raw.onWritable((offset) => {
        let ok = false;
        let done = false;
        this.raw.cork(() => {
          [ok, done] = this.raw.tryEnd(buf.subarray(offset - lastOffset), totalSize);
        });
        if (ok || done) {
          const i = this.writableWaiters.indexOf(onAbort);
          if (i >= 0) this.writableWaiters.splice(i, 1);
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
    this.onDone();
  }
}

/** A WebSocket upgrade request, read synchronously from uWS (the request object dies after the callback). */
export interface UpgradeRequest {
  method: string;
  path: string;
  rawQuery: string;
  /** Lower-cased header names. */
  headers: Record<string, string>;
  ip: string;
  requestId: string;
  res: HttpResponse;
  context: uWS.us_socket_context_t;
}

/**
 * Completes a WebSocket upgrade decided after an await (authentication, a tunnel to a container).
 * Deliberately NOT inside res.cork(): in the uWebSockets build we can install (npm uwebsockets@3.0.6),
 * cork() tells that its handler upgraded the socket only by comparing socket pointers, but
 * us_socket_context_adopt_socket() reallocates the poll in place when the WebSocket's extension is
 * not larger than the HTTP response's, so the pointer stays the same; cork() then ran its HTTP
 * "connection close" logic on memory that is now the WebSocket's and, depending on what that memory
 * held, shut the new WebSocket down right after open (the client sees 1006; measured: 2 of 12 fresh
 * nodes dropped one of their first three agent connections). Fixed upstream in uWebSockets
 * fe7c01a (#1929, "Fix cork() closing a WebSocket that was upgraded asynchronously"), which no npm
 * build carries yet. Uncorked, uWS writes the 101 as it goes and prints its "writes must be made
 * from within a corked callback" warning on stderr once per such upgrade (README, Operations).
 */
export function upgradeAfterAwait<U>(r: UpgradeRequest, userData: U, protocol = ''): void {
  r.res.upgrade<U>(userData, r.headers['sec-websocket-key'] ?? '', protocol, '', r.context);
}

/** uWS settings of a WebSocket route. */
export interface WebSocketRouteOptions {
  maxPayloadLength: number;
  maxBackpressure: number;
  idleTimeout: number;
}

/** WebSocket handling (the gateway): upgrade decides (answers or upgrades with userData), the rest relays. */
export interface WebSocketHandler<U = unknown> {
  upgrade(r: UpgradeRequest): void;
  open(ws: uWS.WebSocket<U>): void;
  message(ws: uWS.WebSocket<U>, data: ArrayBuffer, isBinary: boolean): void;
  drain(ws: uWS.WebSocket<U>): void;
  close(ws: uWS.WebSocket<U>, code: number, message: ArrayBuffer): void;
}

export interface HttpServerHandle {
  port: number;
  /** Stop accepting, wait for in-flight requests (bounded), close remaining connections. */
  shutdown(timeoutMs: number): Promise<void>;
  routes(): ReadonlyArray<RouteDef>;
}

/**
 * The uWebSockets.js edge: one catch-all handler feeding our router, JSON bodies read with a cap,
 * errors from the error map, request ids, access logs, and a drain on shutdown.
 */
export class HttpEdge {
  private readonly router = new Router<RouteDef>();
  private readonly defs: RouteDef[] = [];
  private app: TemplatedApp | null = null;
  private listenSocket: us_listen_socket | false = false;
  private inflight = 0;
  private idleWaiters: Array<() => void> = [];
  private draining = false;
  private readonly streams = new Set<StreamResponse>();
  private readonly shutdownHooks: Array<() => void> = [];
  private ws: WebSocketHandler<never> | null = null;
  private readonly wsRoutes: Array<{ path: string; h: WebSocketHandler<never>; opts: WebSocketRouteOptions }> = [];

  constructor(private readonly o: EdgeOptions) {}

  /** WebSocket upgrades on any path go to this handler (set before listen). */
  setWebSocketHandler<U>(h: WebSocketHandler<U>): void {
    this.ws = h as unknown as WebSocketHandler<never>;
  }

  /**
   * WebSocket upgrades on one exact path (the full path) go to this handler rather than the
   * catch-all one (the agent transport at /api/v1/agents/connect); set before listen.
   */
  addWebSocketRoute<U>(path: string, h: WebSocketHandler<U>, opts: WebSocketRouteOptions): void {
    this.wsRoutes.push({ path, h: h as unknown as WebSocketHandler<never>, opts });
  }

  add(def: RouteDef): void {
    const full = def.absolute ? def.path : `${this.o.basePath}${def.path}`;
    this.router.add(def.method, full, def);
    this.defs.push({ ...def, path: full });
  }

  /**
   * The route a method and path (the full path, base path included) resolve to, with its path
   * parameters: the MCP tools call the runtime routes' own handlers through this (src/mcp/runtime.ts).
   */
  lookup(method: string, path: string): { def: RouteDef; params: Record<string, string> } | null {
    const m = this.router.find(method, path);
    return m === null || m === 'method_not_allowed' ? null : { def: m.route, params: m.params };
  }

  addAll(defs: RouteDef[]): void {
    for (const d of defs) this.add(d);
  }

  /** Every route added so far, with its full path (the OpenAPI document is built from this). */
  routes(): ReadonlyArray<RouteDef> {
    return this.defs;
  }

  /** Called when shutdown starts (SSE streams close themselves through this). */
  onShutdown(h: () => void): void {
    this.shutdownHooks.push(h);
  }

  isDraining(): boolean {
    return this.draining;
  }

  async listen(): Promise<HttpServerHandle> {
    const app = uWS.App();
    this.app = app;
    app.any('/*', (res, req) => this.onRequest(res, req));
    // exact paths first (uWS prefers a static pattern over the wildcard anyway)
    for (const r of this.wsRoutes) this.registerWs(app, r.path, r.h, r.opts);
    if (this.ws) this.registerWs(app, '/*', this.ws, { maxPayloadLength: 16 * 1024 * 1024, maxBackpressure: 4 * 1024 * 1024, idleTimeout: 120 });
    await new Promise<void>((resolve, reject) => {
      // the typings lack the (host, port, options, cb) overload the addon implements
      const listen = app.listen.bind(app) as unknown as (host: string, port: number, options: number, cb: (s: us_listen_socket | false) => void) => void;
      listen(this.o.host, this.o.port, LIBUS_LISTEN_EXCLUSIVE_PORT, (sock) => {
        if (!sock) reject(new ConfigError(`cannot listen on HTTP ${this.o.host}:${this.o.port}: address in use (another node or process listens there) or not available`));
        else {
          this.listenSocket = sock;
          resolve();
        }
      });
    });
    const port = uWS.us_socket_local_port(this.listenSocket as unknown as uWS.us_socket);
    return { port, shutdown: (t) => this.shutdown(t), routes: () => this.defs };
  }

  private registerWs(app: TemplatedApp, pattern: string, wsh: WebSocketHandler<never>, opts: WebSocketRouteOptions): void {
    app.ws<never>(pattern, {
      compression: uWS.DISABLED,
      maxPayloadLength: opts.maxPayloadLength,
      maxBackpressure: opts.maxBackpressure,
      idleTimeout: opts.idleTimeout,
      sendPingsAutomatically: true,
      upgrade: (res, req, context) => {
        const headers: Record<string, string> = {};
        req.forEach((k, v) => {
          headers[k] = headers[k] === undefined ? v : `${headers[k]}, ${v}`;
        });
        const rid = headers['x-request-id'];
        wsh.upgrade({
          method: req.getCaseSensitiveMethod().toUpperCase(),
          path: req.getUrl(),
          rawQuery: req.getQuery() ?? '',
          headers,
          ip: Buffer.from(res.getRemoteAddressAsText()).toString(),
          requestId: rid && /^[A-Za-z0-9._:-]{1,128}$/.test(rid) ? rid : uuidv7(),
          res,
          context,
        });
      },
      open: (ws) => wsh.open(ws),
      message: (ws, data, isBinary) => wsh.message(ws, data, isBinary),
      drain: (ws) => wsh.drain(ws),
      close: (ws, code, message) => wsh.close(ws, code, message),
    });
  }

  private async shutdown(timeoutMs: number): Promise<void> {
    if (this.draining) return;
    this.draining = true;
    if (this.listenSocket) uWS.us_listen_socket_close(this.listenSocket);
    this.listenSocket = false;
    for (const h of this.shutdownHooks) {
      try {
        h();
      } catch (e) {
        this.o.logger.warn({ err: e }, 'shutdown hook failed');
      }
    }
    for (const s of this.streams) s.close();
    if (this.inflight > 0) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, timeoutMs);
        this.idleWaiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    this.app?.close();
  }

  private done(): void {
    this.inflight--;
    if (this.inflight === 0) for (const w of this.idleWaiters.splice(0)) w();
  }

  private onRequest(res: HttpResponse, req: HttpRequest): void {
    const started = performance.now();
    this.inflight++;
    const method = req.getCaseSensitiveMethod().toUpperCase();
    const path = req.getUrl();
    const qs = req.getQuery() ?? '';
    const headers: Record<string, string> = {};
    // framing checks (RFC 9112 §3.2, §6.3; RFC 9110 §5.5): uWS passes these through to us
    let framing: [code: string, message: string] | null = null;
    let hosts = 0;
    let contentLength: string | undefined;
    req.forEach((k, v) => {
      if (CTL_IN_VALUE.test(v)) framing ??= ['invalid_header_value', `header ${k} contains a control character`];
      if (k === 'host') hosts++;
      else if (k === 'content-length') {
        if (contentLength !== undefined && contentLength !== v) framing ??= ['conflicting_content_length', 'conflicting Content-Length headers'];
        contentLength = v;
        headers[k] = v;
        return;
      }
      headers[k] = headers[k] === undefined ? v : `${headers[k]}, ${v}`;
    });
    // RFC 9112 §6.1: chunked must be the final coding, applied once; the node decodes no other coding, so
    // anything but exactly `chunked` (`chunked, identity`, `gzip, chunked`, chunked twice) is refused
    const te = headers['transfer-encoding'];
    if (te !== undefined && te.trim().toLowerCase() !== 'chunked')
      framing ??= ['invalid_transfer_encoding', 'Transfer-Encoding must be exactly "chunked" (the only coding this server decodes, once and last)'];
    if (hosts !== 1) framing ??= ['invalid_host_header', hosts === 0 ? 'missing Host header' : 'more than one Host header'];
    else if (!HOST_VALUE.test(headers.host ?? '')) framing ??= ['invalid_host_header', 'invalid Host header'];
    const ip = Buffer.from(res.getRemoteAddressAsText()).toString();
    const rid = headers['x-request-id'];
    const requestId = rid && /^[A-Za-z0-9._:-]{1,128}$/.test(rid) ? rid : uuidv7();
    // the request's child logger is built on first use: most requests never log beyond the access line
    let child: Logger | null = null;
    let query: URLSearchParams | undefined;
    const root = this.o.logger;
    let finished = false;
    let statusSent = 0;
    // tracing on: one server span per routed request (a traceparent header makes it a child of the caller's span)
    let span: Span | null = null;
    let routed: RouteDef | null = null;
    const finish = (status: number): void => {
      if (finished) return;
      finished = true;
      statusSent = status;
      this.done();
      if (routed && this.o.observe) this.o.observe(routed, status, (performance.now() - started) / 1000);
      if (span) {
        span.setAttribute('http.response.status_code', status);
        endSpan(span, status >= 500 ? new Error(`HTTP ${status}`) : undefined);
      }
      // polling (a GET/HEAD answered 200 or 304: task status, lists, health, metrics) at debug;
      // writes and errors at info
      const polling = (method === 'GET' || method === 'HEAD') && (statusSent === 200 || statusSent === 304);
      const level = polling ? 'debug' : 'info';
      if (root.isLevelEnabled(level)) {
        const line: Record<string, unknown> = { request_id: requestId, method, path, status: statusSent, ms: Math.round((performance.now() - started) * 10) / 10 };
        // the access line is written after the request's span ended (outside its context): its ids explicitly
        if (span) Object.assign(line, spanLogFields(span));
        root[level](line, 'request');
      }
    };
    const sr: StreamResponse = new StreamResponse(res, requestId, () => finish(statusSent || sr.statusCode || 200));
    res.onAborted(() => {
      sr._abort();
      if (!finished) finish(499);
    });

    const ctx: Ctx = {
      method,
      path,
      rawQuery: qs,
      params: {},
      get query(): URLSearchParams {
        return (query ??= parseQuery(qs));
      },
      headers,
      ip,
      requestId,
      get log(): Logger {
        return (child ??= root.child({ request_id: requestId }));
      },
      principal: null,
      body: undefined,
      rawBody: EMPTY,
    };

    const fail = (e: unknown): void => {
      const { status, body, headers: h, unexpected } = toHttpError(e);
      // RFC 9110 §11.6.1: a 401 carries the challenge (the only scheme is Bearer)
      if (status === 401) h['WWW-Authenticate'] = 'Bearer';
      if (unexpected) ctx.log.error({ err: e, method, path }, 'unexpected error');
      statusSent = status;
      if (!sr.aborted && !sr.ended) sr.json(status, body, h);
      else finish(status);
    };

    if (framing !== null) {
      // answered on the next turn and closed: a request pipelined behind this one in the same read
      // (the smuggling case) makes uWS drop the connection instead of routing it
      const [code, message] = framing;
      setImmediate(() => {
        if (sr.aborted || sr.ended) return;
        statusSent = 400;
        sr.writeHead(400, { 'Content-Type': 'application/json' });
        sr.endAndClose(JSON.stringify({ error_message: message, error_code: code }));
      });
      return;
    }

    if (this.draining) {
      statusSent = 503;
      sr.json(503, { error_message: 'server is shutting down', error_code: 'shutting_down' }, { Connection: 'close' });
      return;
    }

    const m = this.router.find(method, path);
    if (m === null || m === 'method_not_allowed') {
      // drain any body so the connection stays usable
      res.onData(() => undefined);
      statusSent = m === null ? 404 : 405;
      if (m === null) fail(notFound(`route ${method} ${path}`, 'route_not_found'));
      else fail(new AppError('method_not_allowed', 'method_not_allowed', `method ${method} not allowed on ${path}`));
      return;
    }
    const def = m.route;
    routed = def;
    ctx.params = m.params;
    if (tracingEnabled())
      span = startSpan(`${method} ${def.path}`, {
        kind: SpanKind.SERVER,
        parent: contextFrom(headers.traceparent),
        attributes: { 'http.request.method': method, 'http.route': def.path, 'url.path': path, 'gantry.request_id': requestId },
      });

    if (def.stream) {
      const hasBody = method !== 'GET' && method !== 'HEAD' && (Number(headers['content-length'] ?? '0') > 0 || headers['transfer-encoding'] !== undefined);
      if (hasBody) sr._prepareBody(def.maxBodyBytes ?? this.o.maxBodyBytes);
      this.streams.add(sr);
      sr.onAbort(() => this.streams.delete(sr));
      const run = async (): Promise<void> => {
        try {
          if (await pipelinedAway(method, sr)) return;
          ctx.principal = await this.o.authenticator.authenticate({ headers, ip }, def.auth);
          if (this.o.rateLimits && this.refused(ctx, sr, (s) => (statusSent = s))) return;
          await def.stream?.(ctx, sr);
        } catch (e) {
          if (!sr.aborted && !sr.ended) fail(e);
        } finally {
          this.streams.delete(sr);
        }
      };
      void withActive(span, run);
      return;
    }

    const cap = def.maxBodyBytes ?? this.o.maxBodyBytes;
    const declared = headers['content-length'];
    if (declared !== undefined && Number(declared) > cap) {
      res.onData(() => undefined);
      fail(new AppError('payload_too_large', 'body_too_large', `request body exceeds ${cap} bytes`));
      return;
    }
    if ((method === 'GET' || method === 'HEAD') && declared === undefined && headers['transfer-encoding'] === undefined) {
      // no body to read: straight to the handler (no data callback, no buffers)
      void withActive(span, () => this.handleJson(def, ctx, EMPTY, sr, fail, (s) => (statusSent = s)));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    res.onData((ab, isLast) => {
      if (tooLarge) return;
      size += ab.byteLength;
      if (size > cap) {
        tooLarge = true;
        fail(new AppError('payload_too_large', 'body_too_large', `request body exceeds ${cap} bytes`));
        return;
      }
      chunks.push(Buffer.from(new Uint8Array(ab.slice(0))));
      if (!isLast) return;
      void withActive(span, () => this.handleJson(def, ctx, Buffer.concat(chunks), sr, fail, (s) => (statusSent = s)));
    });
  }

  /** Takes a token for the authenticated caller; on refusal answers 429 with the rate limit headers. */
  private refused(ctx: Ctx, sr: StreamResponse, setStatus: (s: number) => void): boolean {
    const r = this.o.rateLimits?.take(ctx.principal, ctx.path);
    if (!r) return false;
    const { body, headers } = refusalResponse(r);
    setStatus(429);
    sr.json(429, body, headers);
    return true;
  }

  private async handleJson(def: RouteDef, ctx: Ctx, raw: Buffer, sr: StreamResponse, fail: (e: unknown) => void, setStatus: (s: number) => void): Promise<void> {
    try {
      if (await pipelinedAway(ctx.method, sr)) return;
      ctx.rawBody = raw;
      ctx.principal = await this.o.authenticator.authenticate({ headers: ctx.headers, ip: ctx.ip }, def.auth);
      if (this.o.rateLimits && this.refused(ctx, sr, setStatus)) return;
      if (!def.rawBody && raw.length > 0) {
        const ct = ctx.headers['content-type'] ?? 'application/json';
        if (!/^application\/(.+\+)?json\b/i.test(ct) && !/^text\/plain\b/i.test(ct))
          throw badRequest('unsupported_content_type', `content-type must be application/json (got ${ct})`);
        // NUL, unpaired surrogates, non-finite numbers and deep nesting are refused here, once for every route
        ctx.body = parseJsonBody(raw.toString('utf8'));
      }
      const badParam = checkPairs(Object.entries(ctx.params), 'path parameter');
      if (badParam) throw badParam;
      const out = await def.handler?.(ctx);
      if (sr.aborted || sr.ended) return;
      if (out instanceof Reply) {
        setStatus(out.status);
        if (out.status === 204 || out.body === undefined) {
          sr.writeHead(out.status, out.headers);
          sr.end();
        } else sr.json(out.status, out.body, out.headers);
      } else {
        setStatus(200);
        sr.json(200, out ?? { is_success: true });
      }
    } catch (e) {
      fail(e);
    }
  }
}
