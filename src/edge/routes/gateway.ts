/**
 * The container gateway's HTTP face (docs/api.md "Container gateway"); the use cases are
 * src/gateway/core.ts:
 *
 *   ANY  /r/containers/{serviceSlug}/*   transparent proxy: method, path after the slug, query,
 *                                        headers (minus hop-by-hop and the caller's Authorization)
 *                                        and body stream to an instance; status, headers and body
 *                                        stream back unchanged (WebSocket upgrades too)
 *   POST /r/invoke/{serviceSlug}          {method, path, headers, body_base64}
 *                                        -> {status_code, headers, body_base64}
 *   ANY  /agents/{agentId}/tunnel/*       the agent's exposed local port (e.g. its ComfyUI UI)
 *
 * This file decodes the uWS request (path, headers, body stream, WebSocket upgrade), calls the
 * core and writes its answer.
 */
import { Readable } from 'node:stream';
import { GatewayCore, type GatewayCoreDeps } from '../../gateway/core.js';
import { forwardHeaders, RESPONSE_OWN } from '../../gateway/headers.js';
import { InvokeBody, invokeRequestOf, invokeResultOf, type InvokeResultBody } from '../../gateway/invoke.js';
import { bodyOf, type Upstream } from '../../gateway/relay.js';
import type { HeaderList } from '../../gateway/tunnel.js';
import { WsBridge, type WsTarget } from '../../gateway/websocket.js';
import { notFound } from '../../shared/errors.js';
import { toHttpError, statusLine } from '../error-map.js';
import { upgradeAfterAwait, type Ctx, type RouteDef, type StreamResponse, type UpgradeRequest, type WebSocketHandler } from '../http.js';
import type { Authenticator, RouteAuth, TeamPrincipal } from '../principal.js';
import { parseBody, teamPrincipalOf } from '../params.js';
import * as D from '../openapi/schemas.js';

export { INVOKE_METHODS } from '../../gateway/invoke.js';

const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };
const MEMBERS: RouteAuth = { kinds: ['user', 'device'], team: true };

export interface GatewayDeps extends GatewayCoreDeps {
  basePath: string;
  authenticator: Authenticator;
  maxBodyBytes: number;
}

export class Gateway {
  /** The gateway's use cases (src/gateway/core.ts); the application layer invokes services through it. */
  readonly core: GatewayCore;

  constructor(private readonly d: GatewayDeps) {
    this.core = new GatewayCore(d);
  }

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

  async proxy(c: Ctx, res: StreamResponse, path: string): Promise<void> {
    const req = { method: c.method, path, headers: forwardHeaders(c.headers, c, this.d.basePath), body: res.body() };
    const r = await this.core.proxy(teamPrincipalOf(c), c.params.serviceSlug ?? '', req, res);
    if (r.kind === 'tunnel') return writeUpstream(res, c.method, r.upstream);
    const x = r.response;
    await writeResponse(res, c.method, x.status, x.headers, x.length, Readable.from(x.body));
  }

  async agentProxy(c: Ctx, res: StreamResponse, path: string): Promise<void> {
    const req = { method: c.method, path, headers: forwardHeaders(c.headers, c, this.d.basePath), body: res.body() };
    const up = await this.core.agentProxy(teamPrincipalOf(c), c.params.agentId ?? '', req, res);
    await writeUpstream(res, c.method, up);
  }

  async invoke(c: Ctx): Promise<InvokeResultBody> {
    const p = teamPrincipalOf(c);
    const b = parseBody(InvokeBody, c.body);
    return invokeResultOf(await this.core.invoke(p, c.params.serviceSlug ?? '', invokeRequestOf(b)));
  }

  // ---------------------------------------------------------------------------------------------
  // WebSocket

  webSocketHandler(): WebSocketHandler<WsUser> {
    return {
      upgrade: (r) => void this.upgrade(r),
      open: (ws) => ws.getUserData().s.opened(ws),
      message: (ws, data, isBinary) => ws.getUserData().s.fromClient(Buffer.from(data.slice(0)), isBinary),
      drain: () => undefined,
      close: (ws, code, message) => ws.getUserData().s.clientClosed(code, Buffer.from(message).toString('utf8')),
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
      const principal = (await this.d.authenticator.authenticate({ headers: r.headers, ip: r.ip }, m.target.kind === 'agent' ? MEMBERS : RUNTIME)) as TeamPrincipal;
      const path = `${m.rest}${r.rawQuery ? `?${r.rawQuery}` : ''}`;
      const headers = forwardHeaders(r.headers, { ip: r.ip, headers: r.headers, path: r.path }, this.d.basePath).filter(([k]) => !k.toLowerCase().startsWith('sec-websocket-') || k.toLowerCase() === 'sec-websocket-protocol');
      const bridge = new WsBridge();
      const head = await this.core.openWebSocket(principal, m.target, path, headers, bridge);
      if (aborted) {
        bridge.channel?.reset('cancelled', 'the client went away');
        bridge.release();
        return;
      }
      if (head.status !== 101) {
        answer(head.status, head.headers.filter(([k]) => !RESPONSE_OWN.has(k.toLowerCase())), head.body);
        bridge.release();
        return;
      }
      const protocol = head.headers.find(([k]) => k.toLowerCase() === 'sec-websocket-protocol')?.[1] ?? '';
      // uWS copies the userData object's own properties: the state lives behind one reference
      upgradeAfterAwait<WsUser>(r, { s: bridge }, protocol);
    } catch (e) {
      const { status, body, headers } = toHttpError(e);
      answer(status, [['Content-Type', 'application/json'], ...Object.entries(headers)], JSON.stringify(body));
    }
  }

  private matchWs(path: string): { target: WsTarget; rest: string } | null {
    const base = this.d.basePath;
    let m = new RegExp(`^${base}/r/containers/([^/]+)(/.*)?$`).exec(path);
    if (m) return { target: { kind: 'service', slug: decodeURIComponent(m[1] as string) }, rest: m[2] ?? '/' };
    m = new RegExp(`^${base}/agents/([^/]+)/tunnel(/.*)?$`).exec(path);
    if (m) return { target: { kind: 'agent', agentId: decodeURIComponent(m[1] as string) }, rest: m[2] ?? '/' };
    return null;
  }
}

interface WsUser {
  s: WsBridge;
}

/** Writes the container's response: status and headers as they came, the body with backpressure. */
async function writeUpstream(res: StreamResponse, method: string, up: Upstream): Promise<void> {
  res.onAbort(() => up.cancel());
  // one pass: the relayed headers, and the declared length (the first Content-Length)
  const headers: HeaderList = [];
  let lenHeader: string | undefined;
  for (const h of up.head.headers) {
    const k = h[0].toLowerCase();
    if (k === 'content-length') lenHeader ??= h[1];
    if (!RESPONSE_OWN.has(k)) headers.push(h);
  }
  const len = lenHeader !== undefined && /^\d+$/.test(lenHeader) ? Number(lenHeader) : undefined;
  const first = up.head.body;
  const rest = up.body;
  const noBody = method === 'HEAD' || up.head.status === 204 || up.head.status === 304 || up.head.status < 200;
  if (!rest && !noBody) {
    // the whole response came in the head frame: one corked write
    res.sendWhole(up.head.status, headers, first);
    return;
  }
  const body = first.length || rest ? Readable.from(bodyOf(up), { objectMode: true, highWaterMark: 1 }) : null;
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
