/**
 * The container gateway's use cases (docs/api.md "Container gateway"), whatever face calls them:
 *
 *   proxy        a request relayed to a running service (status, headers and body streams)
 *   agentProxy   a request relayed to the local port an agent exposes (its tunnel)
 *   invoke       one structured call to a running service, the whole answer returned
 *   openWebSocket  a WebSocket relayed to a service or an agent's tunnel target
 *
 * A request goes through the tunnel on the gRPC stream of the instance's agent (the gateway never
 * dials an agent); when that stream is on another node of the cluster, the tunnel is forwarded
 * there node to node (OpenTunnel hides where). External services (service_type external) are
 * egress to their https URL with the vault header. Errors: 404 unknown slug, 400 not running,
 * 503 no healthy instance / no online agent, 502 the tunnel or the container failed; any other
 * status is the container's own.
 */
import { autoscaleOf, type ServiceInstance, type ServiceRecord } from '../domain/containers/schema.js';
import { AppError, badGateway, badRequest, invalidParameter, notFound, unavailable } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { affinityOf, pinCookie } from './affinity.js';
import type { LoadMeter } from './autoscale.js';
import type { Balancer, PickResult } from './balancer.js';
import type { ServiceDirectory, ServiceRoute } from './directory.js';
import { ExternalError, type ExternalErrorCode, type ExternalResponse } from './external.js';
import { HOP, RESPONSE_OWN, firstOf } from './headers.js';
import type { InvokeRequest, InvokeResponse } from './invoke.js';
import { TunnelFailure, bodyOf, inlineBody, relay, released, type ClientLink, type RelayRequest, type Upstream } from './relay.js';
import { TUNNEL_WINDOW, type HeaderList, type OpenTunnel, type TunnelChannel, type TunnelHandlers, type TunnelHeadInfo } from './tunnel.js';
import type { WsBridge, WsTarget } from './websocket.js';

export interface GatewayCoreDeps {
  directory: ServiceDirectory;
  balancer: Balancer;
  openTunnel: OpenTunnel;
  /** The agent's stream is live on some node. */
  agentOnline(agentId: string): boolean;
  /** External services: egress through the outbound guard with the vault header. */
  external(svc: ServiceRecord, req: { path: string; method: string; headers: Record<string, string>; body: AsyncIterable<Buffer> | Buffer | null; signal: AbortSignal }): Promise<ExternalResponse>;
  /** External services: a WebSocket through the outbound guard with the vault header (src/gateway/external-ws.ts). */
  externalWebSocket(svc: ServiceRecord, req: { path: string; headers: HeaderList }, h: TunnelHandlers): Promise<TunnelChannel>;
  /** The agent's tunnel target: the agent of the team (with a tunnel) or null. */
  agentTunnel(teamId: string, agentId: string): Promise<{ tunnel: boolean } | null>;
  /** Until the response head. */
  timeoutMs: number;
  /** Invoke: the largest container response it returns (base64 in JSON). */
  invokeMaxResponseBytes: number;
  /**
   * Autoscaled services (src/gateway/autoscale.ts): the load meter reporting to their actors, the
   * wake-up of a service that has no replica to take a request, and how long a request is held.
   */
  autoscale?: { meter: LoadMeter; wake(serviceId: string): Promise<{ scaleError: string }>; holdTimeoutMs: number };
  logger: Logger;
}

/** Whose request it is: the gateway needs only the team. */
export interface TeamContext {
  teamId: string;
}

/** A proxied request: the path after the slug with its query, the headers the container gets. */
export interface ProxyRequest extends RelayRequest {
  /** The client's body stream (null: none). */
  body: AsyncIterable<Buffer> | null;
}

/** An external service's answer: relayable headers, the declared length, the body stream. */
export interface StreamedResponse {
  status: number;
  headers: HeaderList;
  length: number | undefined;
  body: AsyncIterable<Buffer>;
}

/** A proxied response: from an instance's tunnel (its head may hold the whole body) or from an external service. */
export type ProxyResponse = { kind: 'tunnel'; upstream: Upstream } | { kind: 'external'; response: StreamedResponse };

export class GatewayCore {
  constructor(private readonly d: GatewayCoreDeps) {}

  /** At shutdown: the load meter stops reporting; held requests look once more and end. */
  close(): void {
    this.d.autoscale?.meter.close();
  }

  // ---------------------------------------------------------------------------------------------
  // transparent proxy

  async proxy(team: TeamContext, slug: string, req: ProxyRequest, client: ClientLink): Promise<ProxyResponse> {
    const route = await this.running(team.teamId, slug);
    if (route.svc.type === 'external') return { kind: 'external', response: await this.proxyExternal(route.svc, req, client) };
    return { kind: 'tunnel', upstream: await this.exchange(route, team, req, client) };
  }

  async agentProxy(team: TeamContext, agentId: string, req: ProxyRequest, client: ClientLink): Promise<Upstream> {
    const a = await this.d.agentTunnel(team.teamId, agentId);
    if (!a) throw notFound('agent', 'agent_not_found');
    if (!a.tunnel) throw unavailable('tunnel_not_exposed', 'this agent exposes no tunnel target (start it with --tunnel-url, or the comfyui executor)');
    if (!this.d.agentOnline(agentId)) throw unavailable('agent_offline', 'the agent is not connected');
    return relay(this.d.openTunnel, this.d.timeoutMs, { agentId, teamId: team.teamId, instanceId: '' }, req, client);
  }

  private async proxyExternal(svc: ServiceRecord, req: ProxyRequest, client: ClientLink): Promise<StreamedResponse> {
    const ac = new AbortController();
    client.onAbort(() => ac.abort());
    const hs: Record<string, string> = {};
    for (const [k, v] of req.headers) hs[k] = hs[k] === undefined ? v : `${hs[k]}, ${v}`;
    let r: ExternalResponse;
    try {
      r = await this.d.external(svc, { path: req.path, method: req.method, headers: hs, body: req.body, signal: ac.signal });
    } catch (e) {
      throw externalError(e);
    }
    const list: HeaderList = [];
    for (const [k, v] of Object.entries(r.headers)) for (const one of Array.isArray(v) ? v : [v]) if (!RESPONSE_OWN.has(k.toLowerCase())) list.push([k, one]);
    const len = Number(firstOf(r.headers['content-length']) ?? NaN);
    return { status: r.status, headers: list, length: Number.isFinite(len) ? len : undefined, body: r.body as AsyncIterable<Buffer> };
  }

  // ---------------------------------------------------------------------------------------------
  // invoke

  async invoke(team: TeamContext, slug: string, req: InvokeRequest): Promise<InvokeResponse> {
    const route = await this.running(team.teamId, slug);
    const headers: HeaderList = Object.entries(req.headers).filter(([k]) => !HOP.has(k.toLowerCase()));
    const body = req.body;
    if (body.length > 0 && !headers.some(([k]) => k.toLowerCase() === 'content-length')) headers.push(['content-length', String(body.length)]);
    let status: number;
    let list: HeaderList;
    let stream: AsyncIterable<Buffer>;
    if (route.svc.type === 'external') {
      const hs = Object.fromEntries(headers);
      const ac = new AbortController();
      let r: ExternalResponse;
      try {
        r = await this.d.external(route.svc, { path: req.path, method: req.method, headers: hs, body: body.length ? body : null, signal: ac.signal });
      } catch (e) {
        throw externalError(e);
      }
      status = r.status;
      list = [];
      for (const [k, v] of Object.entries(r.headers)) for (const one of Array.isArray(v) ? v : [v]) list.push([k, one]);
      stream = r.body as AsyncIterable<Buffer>;
    } else {
      const up = await this.exchange(route, team, { method: req.method, path: req.path, headers, body }, null);
      status = up.head.status;
      list = up.head.headers;
      stream = bodyOf(up);
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
    return { status, headers: out, body: Buffer.concat(chunks) };
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
   * A client that went away fails the exchange (cancelled).
   */
  private async exchange(route: ServiceRoute, team: TeamContext, req: RelayRequest, client: ClientLink | null): Promise<Upstream> {
    const tried = new Set<string>();
    const inline = await inlineBody(req.body, req.headers);
    const affinity = affinityOf(route.svc.sessionAffinity, route.svc.slug, req.headers);
    const scaled = this.d.autoscale && autoscaleOf(route.svc) ? this.d.autoscale : null;
    if (!scaled) return this.exchangeLoop(route, team, req, client, tried, inline, affinity, null, () => undefined);
    let held: Held | null = null;
    try {
      return await this.exchangeLoop(route, team, req, client, tried, inline, affinity, scaled, (h) => (held = h));
    } finally {
      const h = held as Held | null;
      if (h) scaled.meter.holdEnd(route.svc.id, h.token);
    }
  }

  /** The instances a request may go to: draining replicas (autoscaling) take no new request. */
  private routable(route: ServiceRoute): ServiceInstance[] {
    const draining = route.svc.detail.draining;
    return draining?.length ? route.instances.filter((i) => !draining.includes(i.id)) : route.instances;
  }

  private async exchangeLoop(
    route: ServiceRoute,
    team: TeamContext,
    req: RelayRequest,
    client: ClientLink | null,
    tried: Set<string>,
    inline: Buffer | null,
    affinity: ReturnType<typeof affinityOf>,
    scaled: NonNullable<GatewayCoreDeps['autoscale']> | null,
    onHold: (h: Held) => void,
  ): Promise<Upstream> {
    let held: Held | null = null;
    for (;;) {
      let pick: PickResult = this.d.balancer.pick(route.svc.id, this.routable(route), (a) => this.d.agentOnline(a), tried, affinity);
      if (!pick.ok && scaled && tried.size === 0) {
        // autoscaled: no replica can take it now (scaled to zero, every replica busy or starting):
        // hold it while the service's actor scales up, up to the hold timeout
        if (!held) {
          held = { token: scaled.meter.holdBegin(route.svc.id, team.teamId), deadline: scaled.meter.now() + scaled.holdTimeoutMs, scaleError: null, gone: false };
          onHold(held);
          const h = held;
          const svcId = route.svc.id;
          client?.onAbort(() => {
            h.gone = true;
            scaled.meter.signal(svcId);
          });
          scaled.wake(route.svc.id).then(
            (r) => {
              h.scaleError = r.scaleError || null;
              scaled.meter.signal(route.svc.id);
            },
            () => undefined,
          );
        }
        if (held.scaleError) throw unavailable('no_eligible_agent', `container service ${route.svc.slug} has no replica and none can be started: ${held.scaleError}`, 5);
        if (scaled.meter.now() >= held.deadline) throw unavailable('cold_start_timeout', `container service ${route.svc.slug} had no replica able to take the request within ${scaled.holdTimeoutMs} ms (GANTRY_AUTOSCALE_HOLD_TIMEOUT_MS)`, 5);
        await scaled.meter.wait(route.svc.id, held.deadline);
        if (held.gone) throw badGateway('cancelled', 'the client went away while its request was held');
        const again = await this.d.directory.get(team.teamId, route.svc.slug);
        if (!again) throw notFound(`container service ${route.svc.slug}`, 'service_not_found');
        if (again.svc.status !== 'running') throw badRequest('service_not_running', `container service ${route.svc.slug} is ${again.svc.status}, not running`);
        route = again;
        continue;
      }
      if (pick.ok && scaled) {
        scaled.meter.started(route.svc.id, team.teamId, pick.instance.id);
        const release = pick.release;
        const svcId = route.svc.id;
        pick = { ...pick, release: (failed) => (release(failed), scaled.meter.signal(svcId)) };
      } else if (pick.ok && this.d.autoscale) {
        // every service's requests are metered: a rolling update drains an old replica only once
        // nothing is in flight on it (the meter reports only services with requests under way)
        this.d.autoscale.meter.started(route.svc.id, team.teamId, pick.instance.id);
      }
      if (!pick.ok) {
        if (tried.size > 0 && pick.reason === 'no_healthy_instance') throw badGateway('tunnel_failed', 'every instance failed to take the request');
        throw unavailable(pick.reason, pick.reason === 'instances_busy' ? `every instance of ${route.svc.slug} is at its concurrent request limit` : pick.reason === 'no_online_agent' ? `no online agent can reach an instance of ${route.svc.slug}` : `container service ${route.svc.slug} has no healthy instance`, 1);
      }
      tried.add(pick.instance.id);
      try {
        const up = await relay(this.d.openTunnel, this.d.timeoutMs, { agentId: pick.instance.agentId, teamId: team.teamId, instanceId: pick.instance.id }, { ...req, body: inline ?? req.body }, client);
        // the instance answered: its slot frees when the response ends; cookie affinity pins the client to it
        const pin = pinCookie(route.svc.sessionAffinity, route.svc.slug, affinity, pick.instance.id);
        if (pin) up.head = { ...up.head, headers: [...up.head.headers, ['set-cookie', pin]] };
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

  // ---------------------------------------------------------------------------------------------
  // WebSocket

  /**
   * Opens a WebSocket tunnel stream for `bridge`; resolves with the container's answer to the
   * upgrade (101: the face upgrades the client's socket and hands it to the bridge).
   */
  async openWebSocket(team: TeamContext, target: WsTarget, path: string, headers: HeaderList, bridge: WsBridge): Promise<TunnelHeadInfo> {
    let agentId: string;
    let instanceId = '';
    let release: (failed: boolean) => void = () => undefined;
    if (target.kind === 'agent') {
      const a = await this.d.agentTunnel(team.teamId, target.agentId);
      if (!a) throw notFound('agent', 'agent_not_found');
      if (!a.tunnel) throw unavailable('tunnel_not_exposed', 'this agent exposes no tunnel target');
      agentId = target.agentId;
    } else {
      const route = await this.running(team.teamId, target.slug);
      if (route.svc.type === 'external') return this.externalWebSocket(route.svc, path, headers, bridge);
      const pick = this.d.balancer.pick(route.svc.id, this.routable(route), (a) => this.d.agentOnline(a), undefined, affinityOf(route.svc.sessionAffinity, route.svc.slug, headers));
      if (!pick.ok) {
        // autoscaled and scaled to zero: a WebSocket is not held (a replica is started for the next try)
        if (this.d.autoscale && autoscaleOf(route.svc)) void this.d.autoscale.wake(route.svc.id).catch(() => undefined);
        throw unavailable(pick.reason, `container service ${route.svc.slug} has no instance to take the connection (${pick.reason})`, 1);
      }
      if (this.d.autoscale) this.d.autoscale.meter.started(route.svc.id, team.teamId, pick.instance.id);
      agentId = pick.instance.agentId;
      instanceId = pick.instance.id;
      release = pick.release;
    }
    let released = false;
    bridge.release = () => {
      if (released) return;
      released = true;
      release(false);
    };
    return new Promise<TunnelHeadInfo>((resolve, reject) => {
      const timer = setTimeout(() => {
        bridge.channel?.reset('timeout', 'no answer to the upgrade in time');
        bridge.release();
        reject(badGateway('upstream_timeout', `the container did not answer the upgrade within ${this.d.timeoutMs} ms`));
      }, this.d.timeoutMs);
      const handlers = bridge.handlers;
      const ch = this.d.openTunnel(
        agentId,
        team.teamId,
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
        bridge.release();
        reject(unavailable('no_online_agent', 'the agent is not connected to any node', 1));
        return;
      }
      bridge.channel = ch;
    });
  }

  /** An external service's WebSocket: the bridge relays it like a container's (nothing to release: no instance slot). */
  private async externalWebSocket(svc: ServiceRecord, path: string, headers: HeaderList, bridge: WsBridge): Promise<TunnelHeadInfo> {
    let answered = false;
    let settle: { resolve(h: TunnelHeadInfo): void; reject(e: AppError): void } | null = null;
    const head = new Promise<TunnelHeadInfo>((resolve, reject) => (settle = { resolve, reject }));
    const handlers: TunnelHandlers = {
      ...bridge.handlers,
      head: (h) => {
        answered = true;
        settle?.resolve(h);
      },
      reset: (code, message) => {
        if (answered) return bridge.handlers.reset(code, message);
        answered = true;
        settle?.reject(externalWsError(code, message));
      },
    };
    try {
      bridge.channel = await this.d.externalWebSocket(svc, { path, headers }, handlers);
    } catch (e) {
      throw externalError(e);
    }
    return head;
  }
}

/** A request held while an autoscaled service has no replica to take it. */
interface Held {
  token: number;
  deadline: number;
  /** Why the service's actor could not start a replica (then: 503 at once). */
  scaleError: string | null;
  gone: boolean;
}

/** How a failed external WebSocket maps to the client's answer (as the HTTP path's externalError). */
function externalWsError(code: string, message: string): AppError {
  const codes: Record<string, ExternalErrorCode> = { refused: 'refused', timeout: 'timeout', connect: 'connect', aborted: 'aborted', invalid_request: 'invalid_request' };
  return externalError(new ExternalError(codes[code] ?? 'connect', message));
}

function externalError(e: unknown): AppError {
  if (e instanceof ExternalError) {
    if (e.code === 'invalid_request') return invalidParameter(e.message);
    return badGateway(e.code === 'timeout' ? 'upstream_timeout' : e.code === 'refused' ? 'egress_refused' : 'tunnel_failed', e.message);
  }
  return e instanceof AppError ? e : badGateway('tunnel_failed', (e as Error).message);
}
