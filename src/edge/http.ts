import uWS from 'uWebSockets.js';
import type { HttpResponse, HttpRequest, TemplatedApp, us_listen_socket } from 'uWebSockets.js';
import type { Logger } from '../shared/logger.js';
import { ConfigError } from '../shared/config.js';
import { AppError, badRequest, notFound } from '../shared/errors.js';
import { uuidv7 } from '../shared/ids.js';
import { contextFrom, endSpan, SpanKind, spanLogFields, startSpan, tracingEnabled, withActive, type Span } from '../shared/tracing.js';
import { Router } from './router.js';
import { toHttpError } from './error-map.js';
import { checkPairs, parseJsonBody, parseQuery } from '../shared/input-hygiene.js';
import type { Authenticator, Principal } from './principal.js';
import { refusalResponse, type RequestRateLimits } from './rate-limits.js';
import { StreamResponse } from './http-stream.js';
import { registerWebSocket, type WebSocketHandler, type WebSocketRouteOptions } from './http-ws.js';
import { readRequestHeaders } from './http-framing.js';
import { Reply, TextReply, type Ctx, type RouteDef } from './http-types.js';

export { StreamResponse } from './http-stream.js';
export { Reply, TextReply, type Ctx, type JsonHandler, type RouteDef, type StreamHandler, type TeamCtx } from './http-types.js';
export { upgradeAfterAwait, type UpgradeRequest, type WebSocketHandler, type WebSocketRouteOptions } from './http-ws.js';

const EMPTY = Buffer.alloc(0);
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

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const NO_PARAMS: Record<string, string> = Object.freeze({}) as Record<string, string>;

/** A request's context: query and child logger built on first use (most requests need neither). */
class RequestCtx implements Ctx {
  params: Record<string, string> = NO_PARAMS;
  principal: Principal | null = null;
  body: unknown = undefined;
  rawBody: Buffer = EMPTY;
  private q: URLSearchParams | undefined;
  private child: Logger | undefined;
  constructor(
    readonly method: string,
    readonly path: string,
    readonly rawQuery: string,
    readonly headers: Record<string, string>,
    readonly ip: string,
    readonly requestId: string,
    private readonly root: Logger,
  ) {}
  get query(): URLSearchParams {
    return (this.q ??= parseQuery(this.rawQuery));
  }
  get log(): Logger {
    return (this.child ??= this.root.child({ request_id: this.requestId }));
  }
}

/**
 * One request's bookkeeping between the edge and its StreamResponse: the status to log, the
 * route and span, and the single finish. A class rather than closures: nothing is allocated per
 * request but this object (the hot path of every route).
 */
class Exchange {
  finished = false;
  statusSent = 0;
  span: Span | null = null;
  routed: RouteDef | null = null;
  sr!: StreamResponse;
  readonly method: string;
  readonly path: string;
  readonly requestId: string;
  /**
   * The request's context while its handler runs; dropped when the handler returned (a stream
   * route's response may stay open for hours: an SSE stream then holds no headers, query or
   * principal).
   */
  ctx: RequestCtx | null;
  constructor(
    private readonly edge: HttpEdge,
    readonly started: number,
    ctx: RequestCtx,
  ) {
    this.ctx = ctx;
    this.method = ctx.method;
    this.path = ctx.path;
    this.requestId = ctx.requestId;
  }

  /** StreamResponse's end (or abort) of the response. */
  onDone(): void {
    this.finish(this.statusSent || this.sr.statusCode || 200);
  }

  aborted(): void {
    this.sr._abort();
    if (!this.finished) this.finish(499);
  }

  finish(status: number): void {
    if (this.finished) return;
    this.finished = true;
    this.statusSent = status;
    this.ctx = null;
    this.edge._finished(this, status);
  }

  fail(e: unknown): void {
    const { status, body, headers: h, unexpected } = toHttpError(e);
    // RFC 9110 §11.6.1: a 401 carries the challenge (the only scheme is Bearer)
    if (status === 401) h['WWW-Authenticate'] = 'Bearer';
    if (unexpected) (this.ctx?.log ?? this.edge._logger().child({ request_id: this.requestId })).error({ err: e, method: this.method, path: this.path }, 'unexpected error');
    this.statusSent = status;
    const sr = this.sr;
    if (!sr.aborted && !sr.ended) sr.json(status, body, h);
    else this.finish(status);
  }
}

/** uWS listen option: fail instead of sharing a port another process listens on (no SO_REUSEPORT). */
const LIBUS_LISTEN_EXCLUSIVE_PORT = 1;

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
    for (const r of this.wsRoutes) registerWebSocket(app, r.path, r.h, r.opts);
    if (this.ws) registerWebSocket(app, '/*', this.ws, { maxPayloadLength: 16 * 1024 * 1024, maxBackpressure: 4 * 1024 * 1024, idleTimeout: 120 });
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
    const { headers, framing } = readRequestHeaders(req);
    const ip = Buffer.from(res.getRemoteAddressAsText()).toString();
    const rid = headers['x-request-id'];
    const requestId = rid && REQUEST_ID.test(rid) ? rid : uuidv7();
    const ctx = new RequestCtx(method, path, qs, headers, ip, requestId, this.o.logger);
    // one object per request holds what finishing and failing need (no closure per request)
    const x = new Exchange(this, started, ctx);
    const sr = new StreamResponse(res, requestId, x);
    x.sr = sr;
    res.onAborted(() => x.aborted());

    if (framing !== null) {
      // answered on the next turn and closed: a request pipelined behind this one in the same read
      // (the smuggling case) makes uWS drop the connection instead of routing it
      const [code, message] = framing;
      setImmediate(() => {
        if (sr.aborted || sr.ended) return;
        x.statusSent = 400;
        sr.writeHead(400, { 'Content-Type': 'application/json' });
        sr.endAndClose(JSON.stringify({ error_message: message, error_code: code }));
      });
      return;
    }

    if (this.draining) {
      x.statusSent = 503;
      sr.json(503, { error_message: 'server is shutting down', error_code: 'shutting_down' }, { Connection: 'close' });
      return;
    }

    const m = this.router.find(method, path);
    if (m === null || m === 'method_not_allowed') {
      // drain any body so the connection stays usable
      res.onData(() => undefined);
      x.statusSent = m === null ? 404 : 405;
      if (m === null) x.fail(notFound(`route ${method} ${path}`, 'route_not_found'));
      else x.fail(new AppError('method_not_allowed', 'method_not_allowed', `method ${method} not allowed on ${path}`));
      return;
    }
    const def = m.route;
    x.routed = def;
    ctx.params = m.params;
    if (tracingEnabled())
      x.span = startSpan(`${method} ${def.path}`, {
        kind: SpanKind.SERVER,
        parent: contextFrom(headers.traceparent),
        attributes: { 'http.request.method': method, 'http.route': def.path, 'url.path': path, 'gantry.request_id': requestId },
      });
    if (def.stream) {
      this.runStream(def, x);
      return;
    }
    this.runJson(res, def, x);
  }

  /** @internal The edge's logger (an error after the request's context was dropped). */
  _logger(): Logger {
    return this.o.logger;
  }

  /** @internal The end of a request (Exchange.finish): in-flight count, metrics, span, access line. */
  _finished(x: Exchange, status: number): void {
    this.done();
    const { method, path, requestId, span, routed } = x;
    if (routed && this.o.observe) this.o.observe(routed, status, (performance.now() - x.started) / 1000);
    if (span) {
      span.setAttribute('http.response.status_code', status);
      endSpan(span, status >= 500 ? new Error(`HTTP ${status}`) : undefined);
    }
    // polling (a GET/HEAD answered 200 or 304: task status, lists, health, metrics) at debug;
    // writes and errors at info
    const polling = (method === 'GET' || method === 'HEAD') && (status === 200 || status === 304);
    const level = polling ? 'debug' : 'info';
    const root = this.o.logger;
    if (root.isLevelEnabled(level)) {
      const line: Record<string, unknown> = { request_id: requestId, method, path, status, ms: Math.round((performance.now() - x.started) * 10) / 10 };
      // the access line is written after the request's span ended (outside its context): its ids explicitly
      if (span) Object.assign(line, spanLogFields(span));
      root[level](line, 'request');
    }
  }

  /** A stream route: the handler owns the response and may read the body as a stream. */
  private runStream(def: RouteDef, x: Exchange): void {
    const { sr } = x;
    const ctx = x.ctx as RequestCtx;
    const { method, headers, ip } = ctx;
    const hasBody = method !== 'GET' && method !== 'HEAD' && (Number(headers['content-length'] ?? '0') > 0 || headers['transfer-encoding'] !== undefined);
    if (hasBody) sr._prepareBody(def.maxBodyBytes ?? this.o.maxBodyBytes);
    this.track(sr);
    const run = async (): Promise<void> => {
      try {
        if (await pipelinedAway(method, sr)) return;
        ctx.principal = await this.o.authenticator.authenticate({ headers, ip }, def.auth);
        if (this.o.rateLimits && this.refused(x)) return;
        await def.stream?.(ctx, sr);
      } catch (e) {
        if (!sr.aborted && !sr.ended) x.fail(e);
      } finally {
        this.streams.delete(sr);
        // the handler returned; the response may stay open (SSE): it keeps nothing of the request
        x.ctx = null;
      }
    };
    void withActive(x.span, run);
  }

  /**
   * Keeps the response in the set shutdown closes, until it ends. Its own scope: a closure made in
   * runStream would share that scope's context and keep the request's context alive as long as an
   * SSE stream stays open.
   */
  private track(sr: StreamResponse): void {
    this.streams.add(sr);
    sr.onAbort(() => this.streams.delete(sr));
  }

  /** A json route: the body is read (with the cap), then handleJson parses it and runs the handler. */
  private runJson(res: HttpResponse, def: RouteDef, x: Exchange): void {
    const { method, headers } = x.ctx as RequestCtx;
    const cap = def.maxBodyBytes ?? this.o.maxBodyBytes;
    const declared = headers['content-length'];
    if (declared !== undefined && Number(declared) > cap) {
      res.onData(() => undefined);
      x.fail(new AppError('payload_too_large', 'body_too_large', `request body exceeds ${cap} bytes`));
      return;
    }
    if ((method === 'GET' || method === 'HEAD') && declared === undefined && headers['transfer-encoding'] === undefined) {
      // no body to read: straight to the handler (no data callback, no buffers)
      if (x.span) void withActive(x.span, () => this.handleJson(def, x, EMPTY));
      else void this.handleJson(def, x, EMPTY);
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
        x.fail(new AppError('payload_too_large', 'body_too_large', `request body exceeds ${cap} bytes`));
        return;
      }
      chunks.push(Buffer.from(new Uint8Array(ab.slice(0))));
      if (!isLast) return;
      void withActive(x.span, () => this.handleJson(def, x, Buffer.concat(chunks)));
    });
  }

  /** Takes a token for the authenticated caller; on refusal answers 429 with the rate limit headers. */
  private refused(x: Exchange): boolean {
    const ctx = x.ctx as RequestCtx;
    const r = this.o.rateLimits?.take(ctx.principal, ctx.path);
    if (!r) return false;
    const { body, headers } = refusalResponse(r);
    x.statusSent = 429;
    x.sr.json(429, body, headers);
    return true;
  }

  private async handleJson(def: RouteDef, x: Exchange, raw: Buffer): Promise<void> {
    const { sr } = x;
    const ctx = x.ctx as RequestCtx;
    try {
      if (await pipelinedAway(ctx.method, sr)) return;
      ctx.rawBody = raw;
      ctx.principal = await this.o.authenticator.authenticate({ headers: ctx.headers, ip: ctx.ip }, def.auth);
      if (this.o.rateLimits && this.refused(x)) return;
      if (!def.rawBody && raw.length > 0) {
        const ct = ctx.headers['content-type'] ?? 'application/json';
        if (!/^application\/(.+\+)?json\b/i.test(ct) && !/^text\/plain\b/i.test(ct))
          throw badRequest('unsupported_content_type', `content-type must be application/json (got ${ct})`);
        // NUL, unpaired surrogates, non-finite numbers and deep nesting are refused here, once for every route
        ctx.body = parseJsonBody(raw.toString('utf8'));
      }
      const badParam = ctx.params === NO_PARAMS ? null : checkPairs(Object.entries(ctx.params), 'path parameter');
      if (badParam) throw badParam;
      const out = await def.handler?.(ctx);
      if (sr.aborted || sr.ended) return;
      if (out instanceof TextReply) {
        x.statusSent = out.status;
        sr.sendWhole(out.status, [['Content-Type', out.contentType], ...Object.entries(out.headers)], out.text);
      } else if (out instanceof Reply) {
        x.statusSent = out.status;
        if (out.status === 204 || out.body === undefined) {
          sr.writeHead(out.status, out.headers);
          sr.end();
        } else sr.json(out.status, out.body, out.headers);
      } else {
        x.statusSent = 200;
        sr.json(200, out ?? { is_success: true });
      }
    } catch (e) {
      x.fail(e);
    }
  }
}
