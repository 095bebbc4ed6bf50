/**
 * The container gateway (docs/api.md "Container gateway"):
 *
 *   ANY  /r/containers/{serviceSlug}/*   transparent proxy: method, path after the slug, query,
 *                                        headers (minus hop-by-hop and the caller's Authorization)
 *                                        and body stream to an instance; status, headers and body
 *                                        stream back unchanged (WebSocket upgrades too)
 *   POST /r/invoke/{serviceSlug}          {method, path, headers, body_base64}
 *                                        -> {status_code, headers, body_base64}
 *   ANY  /agents/{agentId}/tunnel/*       the agent's exposed local port (e.g. its ComfyUI UI)
 *
 * A request goes through the tunnel on the gRPC stream of the instance's agent (the gateway never
 * dials an agent); when that stream is on another node of the cluster, the tunnel is forwarded
 * there node to node (OpenTunnel hides where). External services (service_type external) are
 * egress to their https URL with the vault header. Errors: 404 unknown slug, 400 not running,
 * 503 no healthy instance / no online agent, 502 the tunnel or the container failed; any other
 * status is the container's own.
 */
import { Readable } from 'node:stream';
import type uWS from 'uWebSockets.js';
import { z } from 'zod';
import type { ServiceRecord } from '../../domain/containers/schema.js';
import type { Balancer, PickResult } from '../../gateway/balancer.js';
import type { ServiceDirectory, ServiceRoute } from '../../gateway/directory.js';
import { ExternalError, type ExternalResponse } from '../../gateway/external.js';
import { INLINE_BODY_MAX, MAX_CHUNK, TUNNEL_WINDOW, type HeaderList, type OpenTunnel, type TunnelChannel, type TunnelHandlers, type TunnelHeadInfo, type WsFrame } from '../../gateway/tunnel.js';
import { AppError, badGateway, badRequest, invalidParameter, notFound, unavailable } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { toHttpError, statusLine } from '../error-map.js';
import { upgradeAfterAwait, type Ctx, type RouteDef, type StreamResponse, type UpgradeRequest, type WebSocketHandler } from '../http.js';
import type { Authenticator, RouteAuth, TeamPrincipal } from '../principal.js';
import { parseBody, teamPrincipalOf } from '../params.js';
import * as D from '../openapi/schemas.js';

const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };
const MEMBERS: RouteAuth = { kinds: ['user', 'device'], team: true };

/** Hop-by-hop headers (RFC 9110 §7.6.1) and the ones the gateway owns: never relayed to the container. */
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'host', 'proxy-authenticate', 'proxy-authorization']);
/** Also not forwarded by the transparent proxy: Gantry's own credential and team header. */
const GANTRY_OWN = new Set(['authorization', 'x-team-id', 'x-request-id']);
/** Not relayed back: framing (uWS writes its own) and the date (uWS writes its own). */
const RESPONSE_OWN = new Set([...HOP, 'content-length', 'date']);
export const INVOKE_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'] as const;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export interface GatewayDeps {
  basePath: string;
  directory: ServiceDirectory;
  balancer: Balancer;
  openTunnel: OpenTunnel;
  /** The agent's stream is live on some node. */
  agentOnline(agentId: string): boolean;
  /** External services: egress through the outbound guard with the vault header. */
  external(svc: ServiceRecord, req: { path: string; method: string; headers: Record<string, string>; body: AsyncIterable<Buffer> | Buffer | null; signal: AbortSignal }): Promise<ExternalResponse>;
  /** The agent's tunnel target: the agent of the team (with a tunnel) or null. */
  agentTunnel(teamId: string, agentId: string): Promise<{ tunnel: boolean } | null>;
  authenticator: Authenticator;
  /** Until the response head. */
  timeoutMs: number;
  maxBodyBytes: number;
  /** Invoke: the largest container response it returns (base64 in JSON). */
  invokeMaxResponseBytes: number;
  logger: Logger;
}

const InvokeBody = z
  .object({
    method: z
      .string()
      .transform((m) => m.toUpperCase())
      .pipe(z.enum(INVOKE_METHODS, { message: `must be one of ${INVOKE_METHODS.join(', ')}` })),
    path: z
      .string()
      .min(1, 'is required')
      .max(8192)
      .refine((p) => p.startsWith('/'), 'must start with /')
      .refine((p) => !p.startsWith('//') && !p.startsWith('/\\'), 'must be a path, not a protocol-relative URL')
      .refine((p) => !/^\/*[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(p), 'must be a path, not an absolute URL')
      .refine((p) => !/[\x00-\x20\x7f]/.test(p), 'must not contain spaces or control characters'),
    headers: z
      .record(z.string().regex(HEADER_NAME, 'header names must be HTTP tokens'), z.string().max(16 * 1024).refine((v) => !/[\r\n\x00]/.test(v), 'header values must not contain CR, LF or NUL'))
      .optional()
      .default({}),
    body_base64: z.string().regex(BASE64, 'must be base64').optional(),
  })
  .strict()
  .superRefine((b, ctx) => {
    if (b.body_base64 && (b.method === 'GET' || b.method === 'DELETE' || b.method === 'HEAD')) ctx.addIssue({ code: 'custom', message: `must be omitted for ${b.method}`, path: ['body_base64'] });
  });

/** What a relayed exchange produced, before it is written to the client. */
interface Upstream {
  head: TunnelHeadInfo;
  /** The rest of the body (absent when head.end). */
  body: AsyncIterable<Buffer> | null;
  cancel(): void;
}

class TunnelFailure extends Error {
  constructor(
    readonly code: string,
    message: string,
    /** The request never reached the container: another instance may take it. */
    readonly retryable: boolean,
  ) {
    super(message);
  }
}

export class Gateway {
  constructor(private readonly d: GatewayDeps) {}

  routes(): RouteDef[] {
    const max = this.d.maxBodyBytes;
    return [
      { method: 'ANY', path: '/r/containers/{serviceSlug}/*', auth: RUNTIME, maxBodyBytes: max, doc: { summary: 'Transparent proxy to a running container service (status and body relayed unchanged)', tags: ['runtime', 'containers'], rawBodyType: '*/*', responses: { 200: { description: 'The container\'s own response', contentType: '*/*' } }, errors: [502, 503] }, stream: (c, res) => this.proxy(c, res, this.restOf(c, `/r/containers/`)), tag: 'gateway' },
      { method: 'POST', path: '/r/invoke/{serviceSlug}', auth: RUNTIME, maxBodyBytes: Math.ceil(max * 1.4), doc: { summary: 'Structured call to a running container service', tags: ['runtime', 'containers'], body: InvokeBody, responses: { 200: D.InvokeResult }, errors: [502, 503] }, handler: (c) => this.invoke(c), tag: 'gateway' },
      { method: 'ANY', path: '/agents/{agentId}/tunnel/*', auth: MEMBERS, maxBodyBytes: max, doc: { summary: 'Proxy to the local port an agent exposes (its tunnel)', tags: ['agents'], rawBodyType: '*/*', responses: { 200: { description: 'The agent-side response', contentType: '*/*' } }, errors: [502, 503] }, stream: (c, res) => this.agentProxy(c, res, this.restOf(c, `/agents/`, 2)), tag: 'gateway' },
    ];
  }

  /**
   * The path after the slug (or after /agents/{id}/tunnel), raw as the client sent it, with the
   * query. `skip` counts path segments after the prefix that belong to Gantry (slug: 1; id+tunnel: 2).
   */
  restOf(c: Ctx, prefix: string, skip = 1): string {
    const full = `${this.d.basePath}${prefix}`;
    let rest = c.path.startsWith(full) ? c.path.slice(full.length) : '';
    for (let i = 0; i < skip; i++) {
      const j = rest.indexOf('/');
      rest = j < 0 ? '' : rest.slice(j + 1);
    }
    return `/${rest}${c.rawQuery ? `?${c.rawQuery}` : ''}`;
  }

  /** GET /r/containers/{slug}/ (trailing slash) is the container's root; the route table sends it here. */
  async proxyRoot(c: Ctx, res: StreamResponse): Promise<void> {
    return this.proxy(c, res, `/${c.rawQuery ? `?${c.rawQuery}` : ''}`);
  }

  // ---------------------------------------------------------------------------------------------
  // transparent proxy

  async proxy(c: Ctx, res: StreamResponse, path: string): Promise<void> {
    const p = teamPrincipalOf(c);
    const route = await this.running(p.teamId, c.params.serviceSlug ?? '');
    const headers = forwardHeaders(c.headers, c, this.d.basePath);
    const body = res.body();
    if (route.svc.type === 'external') return this.proxyExternal(route.svc, c, res, path, headers, body);
    const up = await this.exchange(route, p, { method: c.method, path, headers, body, websocket: false }, res);
    if (!up) return;
    await writeUpstream(res, c.method, up);
  }

  async agentProxy(c: Ctx, res: StreamResponse, path: string): Promise<void> {
    const p = teamPrincipalOf(c);
    const agentId = c.params.agentId ?? '';
    const a = await this.d.agentTunnel(p.teamId, agentId);
    if (!a) throw notFound('agent', 'agent_not_found');
    if (!a.tunnel) throw unavailable('tunnel_not_exposed', 'this agent exposes no tunnel target (start it with --tunnel-url, or the comfyui executor)');
    if (!this.d.agentOnline(agentId)) throw unavailable('agent_offline', 'the agent is not connected');
    const headers = forwardHeaders(c.headers, c, this.d.basePath);
    const up = await this.viaAgent(agentId, p.teamId, '', { method: c.method, path, headers, body: res.body(), websocket: false }, res);
    await writeUpstream(res, c.method, up);
  }

  private async proxyExternal(svc: ServiceRecord, c: Ctx, res: StreamResponse, path: string, headers: HeaderList, body: AsyncIterable<Buffer> | null): Promise<void> {
    const ac = new AbortController();
    res.onAbort(() => ac.abort());
    const hs: Record<string, string> = {};
    for (const [k, v] of headers) hs[k] = hs[k] === undefined ? v : `${hs[k]}, ${v}`;
    let r: ExternalResponse;
    try {
      r = await this.d.external(svc, { path, method: c.method, headers: hs, body, signal: ac.signal });
    } catch (e) {
      throw externalError(e);
    }
    const list: HeaderList = [];
    for (const [k, v] of Object.entries(r.headers)) for (const one of Array.isArray(v) ? v : [v]) if (!RESPONSE_OWN.has(k.toLowerCase())) list.push([k, one]);
    const len = Number(firstOf(r.headers['content-length']) ?? NaN);
    await writeResponse(res, c.method, r.status, list, Number.isFinite(len) ? len : undefined, Readable.from(r.body as AsyncIterable<Buffer>));
  }

  // ---------------------------------------------------------------------------------------------
  // invoke

  async invoke(c: Ctx): Promise<unknown> {
    const p = teamPrincipalOf(c);
    const b = parseBody(InvokeBody, c.body);
    const route = await this.running(p.teamId, c.params.serviceSlug ?? '');
    const headers: HeaderList = Object.entries(b.headers).filter(([k]) => !HOP.has(k.toLowerCase()));
    const body = b.body_base64 ? Buffer.from(b.body_base64, 'base64') : Buffer.alloc(0);
    if (body.length > 0 && !headers.some(([k]) => k.toLowerCase() === 'content-length')) headers.push(['content-length', String(body.length)]);
    let status: number;
    let list: HeaderList;
    let stream: AsyncIterable<Buffer> | null;
    if (route.svc.type === 'external') {
      const hs = Object.fromEntries(headers);
      const ac = new AbortController();
      let r: ExternalResponse;
      try {
        r = await this.d.external(route.svc, { path: b.path, method: b.method, headers: hs, body: body.length ? body : null, signal: ac.signal });
      } catch (e) {
        throw externalError(e);
      }
      status = r.status;
      list = [];
      for (const [k, v] of Object.entries(r.headers)) for (const one of Array.isArray(v) ? v : [v]) list.push([k, one]);
      stream = r.body as AsyncIterable<Buffer>;
    } else {
      const up = await this.exchange(route, p, { method: b.method, path: b.path, headers, body, websocket: false }, null);
      if (!up) throw badGateway('tunnel_failed', 'the tunnel closed');
      status = up.head.status;
      list = up.head.headers;
      const first = up.head.body;
      const rest = up.body;
      stream = (async function* () {
        if (first.length) yield first;
        if (rest) yield* rest;
      })();
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const ch of stream) {
      size += ch.length;
      if (size > this.d.invokeMaxResponseBytes) throw badGateway('response_too_large', `the container's response exceeds ${this.d.invokeMaxResponseBytes} bytes; use the proxy path /r/containers/{slug}/... for large bodies`);
      chunks.push(ch);
    }
    const out: Record<string, string> = {};
    for (const [k, v] of list) {
      const key = k.toLowerCase();
      if (HOP.has(key)) continue;
      out[key] = out[key] === undefined ? v : `${out[key]}, ${v}`;
    }
    return { status_code: status, headers: out, body_base64: Buffer.concat(chunks).toString('base64') };
  }

  // ---------------------------------------------------------------------------------------------
  // the exchange with an instance

  /** The service, if it exists and is running (404 / 400 otherwise). */
  private async running(teamId: string, slug: string): Promise<ServiceRoute> {
    const route = await this.d.directory.get(teamId, slug);
    if (!route) throw notFound(`container service ${slug}`, 'service_not_found');
    if (route.svc.status !== 'running') throw badRequest('service_not_running', `container service ${slug} is ${route.svc.status}, not running`);
    return route;
  }

  /**
   * Picks an instance and relays the request through its agent's tunnel. A failure before the
   * request reached the container (agent unreachable, connection refused, instance gone) ejects the
   * instance and tries the next one when the body can be replayed (it fit in the open frame).
   * Resolves null when the client went away.
   */
  private async exchange(route: ServiceRoute, p: TeamPrincipal, req: Req, res: StreamResponse | null): Promise<Upstream | null> {
    const tried = new Set<string>();
    const inline = await inlineBody(req.body, req.headers);
    for (;;) {
      const pick: PickResult = this.d.balancer.pick(route.svc.id, route.instances, (a) => this.d.agentOnline(a), tried);
      if (!pick.ok) {
        if (tried.size > 0 && pick.reason === 'no_healthy_instance') throw badGateway('tunnel_failed', 'every instance failed to take the request');
        throw unavailable(pick.reason, pick.reason === 'instances_busy' ? `every instance of ${route.svc.slug} is at its concurrent request limit` : pick.reason === 'no_online_agent' ? `no online agent can reach an instance of ${route.svc.slug}` : `container service ${route.svc.slug} has no healthy instance`, 1);
      }
      tried.add(pick.instance.id);
      try {
        const up = await this.viaAgent(pick.instance.agentId, p.teamId, pick.instance.id, { ...req, body: inline ?? req.body }, res);
        // the instance answered: its slot frees when the response ends
        return { ...up, body: up.body ? released(up.body, () => pick.release(false)) : (pick.release(false), null), cancel: () => (up.cancel(), pick.release(false)) };
      } catch (e) {
        if (e instanceof TunnelFailure) {
          // a slow answer or a client that left says nothing about the instance's health
          pick.release(e.code !== 'timeout' && e.code !== 'cancelled');
          this.d.logger.warn({ service: route.svc.slug, instance_id: pick.instance.id, agent_id: pick.instance.agentId, code: e.code, err_message: e.message }, 'gateway: instance failed; ejected');
          if (e.retryable && inline !== null) continue;
          throw badGateway(e.code === 'timeout' ? 'upstream_timeout' : 'tunnel_failed', e.message);
        }
        pick.release(false);
        throw e;
      }
    }
  }

  /** Opens a tunnel stream on the agent and relays the request; resolves with the response head. */
  private viaAgent(agentId: string, teamId: string, instanceId: string, req: Req, res: StreamResponse | null): Promise<Upstream> {
    return new Promise<Upstream>((resolve, reject) => {
      let headSeen = false;
      let settled = false;
      let reqCredit = TUNNEL_WINDOW;
      const creditWaiters: Array<() => void> = [];
      const q = new ChunkQueue();
      let channel: TunnelChannel | null = null;
      // the timeout runs from the moment the whole request was sent (a long upload is not a slow container)
      let timer: NodeJS.Timeout | undefined;
      const armTimeout = (): void => {
        if (settled && headSeen) return;
        timer = setTimeout(() => {
          channel?.reset('timeout', 'no response head in time');
          fail(new TunnelFailure('timeout', `the container did not answer within ${this.d.timeoutMs} ms of the request`, false));
        }, this.d.timeoutMs);
      };
      const fail = (e: Error): void => {
        clearTimeout(timer);
        for (const w of creditWaiters.splice(0)) w();
        if (!settled) {
          settled = true;
          reject(e);
        } else q.fail(e);
      };
      const h: TunnelHandlers = {
        head: (head) => {
          if (headSeen) return;
          headSeen = true;
          clearTimeout(timer);
          if (head.end) q.end();
          settled = true;
          resolve({ head, body: head.end ? null : q.iterable((n) => channel?.window(n)), cancel: () => channel?.reset('cancelled', 'the client went away') });
        },
        data: (chunk, end) => {
          if (chunk.length) q.push(chunk);
          if (end) q.end();
        },
        window: (n) => {
          reqCredit += n;
          for (const w of creditWaiters.splice(0)) w();
        },
        ws: () => undefined,
        reset: (code, message) => {
          const before = !headSeen;
          fail(new TunnelFailure(code, `the tunnel to the container failed (${code}): ${message}`, before && (code === 'connect_failed' || code === 'instance_not_found')));
        },
      };
      const inlineBody = Buffer.isBuffer(req.body) ? req.body : null;
      channel = this.d.openTunnel(agentId, teamId, { instanceId, method: req.method, path: req.path, headers: req.headers, body: inlineBody ?? Buffer.alloc(0), end: inlineBody !== null || req.body === null, websocket: false, window: TUNNEL_WINDOW, timeoutMs: this.d.timeoutMs }, h);
      if (!channel) {
        fail(new TunnelFailure('agent_unreachable', 'the agent of this instance is not connected to any node', true));
        return;
      }
      const ch = channel;
      if (req.body === null || inlineBody !== null) armTimeout();
      res?.onAbort(() => {
        ch.reset('cancelled', 'the client went away');
        fail(new TunnelFailure('cancelled', 'the client went away', false));
      });
      // a streamed request body: chunks go out under the agent's credit
      if (req.body !== null && inlineBody === null) {
        const src = req.body as AsyncIterable<Buffer>;
        void (async () => {
          try {
            for await (const chunk of src) {
              for (let off = 0; off < chunk.length; ) {
                while (reqCredit <= 0 && !q.failed) await new Promise<void>((r) => creditWaiters.push(r));
                if (q.failed) return;
                const n = Math.min(chunk.length - off, reqCredit, MAX_CHUNK);
                ch.data(chunk.subarray(off, off + n), false);
                reqCredit -= n;
                off += n;
              }
            }
            ch.data(Buffer.alloc(0), true);
            armTimeout();
          } catch (e) {
            ch.reset('cancelled', 'the request body could not be read');
            fail(e instanceof Error ? e : new Error(String(e)));
          }
        })();
      }
    });
  }

  // ---------------------------------------------------------------------------------------------
  // WebSocket

  webSocketHandler(): WebSocketHandler<WsUser> {
    return {
      upgrade: (r) => void this.upgrade(r),
      open: (ws) => {
        const u = ws.getUserData().s;
        u.ws = ws;
        for (const m of u.pending.splice(0)) deliverWs(u, m);
      },
      message: (ws, data, isBinary) => {
        ws.getUserData().s.channel.ws({ data: Buffer.from(data.slice(0)), binary: isBinary, close: false, closeCode: 0, closeReason: '' });
      },
      drain: () => undefined,
      close: (ws, code, message) => {
        const u = ws.getUserData().s;
        u.closed = true;
        u.ws = null;
        u.channel.ws({ data: Buffer.alloc(0), binary: false, close: true, closeCode: code, closeReason: Buffer.from(message).toString('utf8') });
        u.release();
      },
    };
  }

  private async upgrade(r: UpgradeRequest): Promise<void> {
    let aborted = false;
    r.res.onAborted(() => {
      aborted = true;
    });
    const answer = (status: number, headers: HeaderList, body: string | Buffer): void => {
      if (aborted) return;
      r.res.cork(() => {
        r.res.writeStatus(statusLine(status));
        r.res.writeHeader('X-Request-ID', r.requestId);
        for (const [k, v] of headers) r.res.writeHeader(k, v);
        r.res.end(body, true);
      });
    };
    try {
      const m = this.matchWs(r.path);
      if (!m) throw notFound(`route ${r.method} ${r.path}`, 'route_not_found');
      const principal = (await this.d.authenticator.authenticate({ headers: r.headers, ip: r.ip }, m.agentId ? MEMBERS : RUNTIME)) as TeamPrincipal;
      const path = `${m.rest}${r.rawQuery ? `?${r.rawQuery}` : ''}`;
      const headers = forwardHeaders(r.headers, { ip: r.ip, headers: r.headers, path: r.path }, this.d.basePath).filter(([k]) => !k.toLowerCase().startsWith('sec-websocket-') || k.toLowerCase() === 'sec-websocket-protocol');
      const data: WsData = { channel: null as unknown as TunnelChannel, ws: null, pending: [], closed: false, release: () => undefined };
      const handlers: TunnelHandlers = {
        head: () => undefined,
        data: () => undefined,
        window: () => undefined,
        ws: (msg) => {
          if (data.ws) deliverWs(data, msg);
          else data.pending.push(msg);
        },
        reset: () => {
          if (data.ws && !data.closed) data.ws.end(1011, 'the tunnel to the container failed');
          data.release();
        },
      };
      const head = await this.openWs(m, principal, path, headers, handlers, data);
      if (aborted) {
        data.channel.reset('cancelled', 'the client went away');
        data.release();
        return;
      }
      if (head.status !== 101) {
        answer(head.status, head.headers.filter(([k]) => !RESPONSE_OWN.has(k.toLowerCase())), head.body);
        data.release();
        return;
      }
      const protocol = head.headers.find(([k]) => k.toLowerCase() === 'sec-websocket-protocol')?.[1] ?? '';
      // uWS copies the userData object's own properties: the state lives behind one reference
      upgradeAfterAwait<WsUser>(r, { s: data }, protocol);
    } catch (e) {
      const { status, body, headers } = toHttpError(e);
      answer(status, [['Content-Type', 'application/json'], ...Object.entries(headers)], JSON.stringify(body));
    }
  }

  private matchWs(path: string): { slug: string; agentId: null; rest: string } | { slug: null; agentId: string; rest: string } | null {
    const base = this.d.basePath;
    let m = new RegExp(`^${base}/r/containers/([^/]+)(/.*)?$`).exec(path);
    if (m) return { slug: decodeURIComponent(m[1] as string), agentId: null, rest: m[2] ?? '/' };
    m = new RegExp(`^${base}/agents/([^/]+)/tunnel(/.*)?$`).exec(path);
    if (m) return { slug: null, agentId: decodeURIComponent(m[1] as string), rest: m[2] ?? '/' };
    return null;
  }

  /** Opens a WebSocket tunnel stream; resolves with the container's answer to the upgrade. */
  private async openWs(m: NonNullable<ReturnType<Gateway['matchWs']>>, p: TeamPrincipal, path: string, headers: HeaderList, handlers: TunnelHandlers, data: WsData): Promise<TunnelHeadInfo> {
    let agentId: string;
    let instanceId = '';
    let release: (failed: boolean) => void = () => undefined;
    if (m.agentId) {
      const a = await this.d.agentTunnel(p.teamId, m.agentId);
      if (!a) throw notFound('agent', 'agent_not_found');
      if (!a.tunnel) throw unavailable('tunnel_not_exposed', 'this agent exposes no tunnel target');
      agentId = m.agentId;
    } else {
      const route = await this.running(p.teamId, m.slug ?? '');
      if (route.svc.type === 'external') throw badRequest('websocket_not_supported', 'WebSocket is not relayed to external services');
      const pick = this.d.balancer.pick(route.svc.id, route.instances, (a) => this.d.agentOnline(a));
      if (!pick.ok) throw unavailable(pick.reason, `container service ${route.svc.slug} has no instance to take the connection (${pick.reason})`, 1);
      agentId = pick.instance.agentId;
      instanceId = pick.instance.id;
      release = pick.release;
    }
    let released = false;
    data.release = () => {
      if (released) return;
      released = true;
      release(false);
    };
    return new Promise<TunnelHeadInfo>((resolve, reject) => {
      const timer = setTimeout(() => {
        data.channel?.reset('timeout', 'no answer to the upgrade in time');
        data.release();
        reject(badGateway('upstream_timeout', `the container did not answer the upgrade within ${this.d.timeoutMs} ms`));
      }, this.d.timeoutMs);
      const ch = this.d.openTunnel(
        agentId,
        p.teamId,
        { instanceId, method: 'GET', path, headers, body: Buffer.alloc(0), end: true, websocket: true, window: TUNNEL_WINDOW, timeoutMs: this.d.timeoutMs },
        {
          ...handlers,
          head: (h) => {
            clearTimeout(timer);
            resolve(h);
          },
          reset: (code, message) => {
            clearTimeout(timer);
            release(true);
            released = true;
            handlers.reset(code, message);
            reject(badGateway('tunnel_failed', `the tunnel to the container failed (${code}): ${message}`));
          },
        },
      );
      if (!ch) {
        clearTimeout(timer);
        data.release();
        reject(unavailable('no_online_agent', 'the agent is not connected to any node', 1));
        return;
      }
      data.channel = ch;
    });
  }
}

interface WsUser {
  s: WsData;
}

interface WsData {
  channel: TunnelChannel;
  ws: uWS.WebSocket<WsUser> | null;
  /** Messages from the container that arrived before uWS opened the socket. */
  pending: WsFrame[];
  closed: boolean;
  release: () => void;
}

function deliverWs(u: WsData, m: WsFrame): void {
  const ws = u.ws;
  if (!ws || u.closed) return;
  if (m.close) {
    u.closed = true;
    const code = m.closeCode >= 1000 && m.closeCode !== 1005 && m.closeCode !== 1006 ? m.closeCode : 1000;
    ws.end(code, m.closeReason);
    u.release();
  } else ws.send(m.data, m.binary);
}

interface Req {
  method: string;
  path: string;
  headers: HeaderList;
  body: AsyncIterable<Buffer> | Buffer | null;
  websocket: boolean;
}

/**
 * A small body (Content-Length up to INLINE_BODY_MAX) is read whole: it travels in the open frame
 * and can be replayed on another instance. Null for a larger or chunked body (streamed once).
 */
async function inlineBody(body: AsyncIterable<Buffer> | Buffer | null, headers: HeaderList): Promise<Buffer | null> {
  if (body === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(body)) return body;
  const declared = headers.find(([k]) => k.toLowerCase() === 'content-length')?.[1];
  if (declared === undefined || !/^\d+$/.test(declared) || Number(declared) > INLINE_BODY_MAX) return null;
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(c);
  return Buffer.concat(chunks);
}

/** Request headers the container gets: the client's, minus hop-by-hop and Gantry's own, plus X-Forwarded-*. */
function forwardHeaders(h: Record<string, string>, c: { ip: string; headers: Record<string, string>; path: string }, basePath: string): HeaderList {
  const connTokens = new Set((h.connection ?? '').split(',').map((t) => t.trim().toLowerCase()).filter(Boolean));
  const out: HeaderList = [];
  for (const [k, v] of Object.entries(h)) {
    if (HOP.has(k) || GANTRY_OWN.has(k) || connTokens.has(k) || k.startsWith('x-forwarded-')) continue;
    out.push([k, v]);
  }
  const prior = h['x-forwarded-for'];
  out.push(['x-forwarded-for', prior ? `${prior}, ${c.ip}` : c.ip]);
  out.push(['x-forwarded-proto', h['x-forwarded-proto'] ?? 'http']);
  if (h.host) out.push(['x-forwarded-host', h['x-forwarded-host'] ?? h.host]);
  const m = new RegExp(`^(${basePath}/(?:r/containers/[^/]+|agents/[^/]+/tunnel))`).exec(c.path);
  if (m?.[1]) out.push(['x-forwarded-prefix', m[1]]);
  return out;
}

/** Writes the container's response: status and headers as they came, the body with backpressure. */
async function writeUpstream(res: StreamResponse, method: string, up: Upstream): Promise<void> {
  res.onAbort(() => up.cancel());
  const headers = up.head.headers.filter(([k]) => !RESPONSE_OWN.has(k.toLowerCase()));
  const lenHeader = up.head.headers.find(([k]) => k.toLowerCase() === 'content-length')?.[1];
  const len = lenHeader !== undefined && /^\d+$/.test(lenHeader) ? Number(lenHeader) : undefined;
  const first = up.head.body;
  const rest = up.body;
  const noBody = method === 'HEAD' || up.head.status === 204 || up.head.status === 304 || up.head.status < 200;
  if (!rest && !noBody) {
    // the whole response came in the head frame: one corked write
    res.sendWhole(up.head.status, headers, first);
    return;
  }
  const body = first.length || rest ? Readable.from((async function* () {
    if (first.length) yield first;
    if (rest) yield* rest;
  })(), { objectMode: true, highWaterMark: 1 }) : null;
  await writeResponse(res, method, up.head.status, headers, len, body);
}

async function writeResponse(res: StreamResponse, method: string, status: number, headers: HeaderList, len: number | undefined, body: Readable | null): Promise<void> {
  if (res.aborted) return;
  res.writeHeadList(status, headers);
  const noBody = method === 'HEAD' || status === 204 || status === 304 || (status >= 100 && status < 200);
  if (noBody) {
    body?.destroy();
    res.endWithoutBody(method === 'HEAD' ? len : undefined);
    return;
  }
  if (!body) {
    res.end();
    return;
  }
  await res.pipeFrom(body, len);
}

/** Counts a stream's end (or abandonment) once. */
async function* released(src: AsyncIterable<Buffer>, done: () => void): AsyncIterable<Buffer> {
  try {
    yield* src;
  } finally {
    done();
  }
}

const firstOf = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v);

function externalError(e: unknown): AppError {
  if (e instanceof ExternalError) {
    if (e.code === 'invalid_request') return invalidParameter(e.message);
    return badGateway(e.code === 'timeout' ? 'upstream_timeout' : e.code === 'refused' ? 'egress_refused' : 'tunnel_failed', e.message);
  }
  return e instanceof AppError ? e : badGateway('tunnel_failed', (e as Error).message);
}

/** Response body chunks from the tunnel, consumed by one reader; credit goes back as they are taken. */
class ChunkQueue {
  private chunks: Buffer[] = [];
  private ended = false;
  private error: Error | null = null;
  private waiter: (() => void) | null = null;

  get failed(): boolean {
    return this.error !== null;
  }

  push(c: Buffer): void {
    this.chunks.push(c);
    this.wake();
  }

  end(): void {
    this.ended = true;
    this.wake();
  }

  fail(e: Error): void {
    this.error = e;
    this.wake();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  async *iterable(credit: (n: number) => void): AsyncIterable<Buffer> {
    for (;;) {
      if (this.chunks.length) {
        const c = this.chunks.shift() as Buffer;
        yield c;
        credit(c.length);
        continue;
      }
      if (this.error) throw this.error;
      if (this.ended) return;
      await new Promise<void>((r) => (this.waiter = r));
    }
  }
}

