import type { Clock } from '../shared/clock.js';
import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import { isUuid } from '../shared/ids.js';
import { badRequest } from '../shared/errors.js';
import type { Database } from '../persistence/db.js';
import { PgContainerStore } from '../persistence/container-store.js';
import type { PgAgentStore } from '../persistence/agent-store.js';
import type { RedisInvalidation } from '../cluster/invalidation-redis.js';
import type { Cluster } from '../cluster/index.js';
import type { ActorSystemPort, Protocols } from '../actors/ports.js';
import { CONTAINER_SERVICE } from '../actors/index.js';
import { LoadMeter } from '../gateway/autoscale.js';
import { ServiceDirectory } from '../gateway/directory.js';
import { Balancer } from '../gateway/balancer.js';
import { externalRequest } from '../gateway/external.js';
import { openExternalWebSocket } from '../gateway/external-ws.js';
import type { OpenTunnel } from '../gateway/tunnel.js';
import { Gateway } from '../edge/routes/gateway.js';
import type { AgentSessions, LocalAgentStreams } from '../edge/agents/sessions.js';
import type { Identity } from '../identity/index.js';
import type { OutboundGuard } from '../events/outbound.js';
import type { VaultStore } from '../vault/store.js';
import type { NodeSettings } from './settings.js';

export interface Containers {
  containerStore: PgContainerStore;
  /** Every node's gateway routing table. */
  serviceDirectory: ServiceDirectory;
  /** A team's services changed: its routing table entry is dropped here and, in cluster mode, on every node. */
  containerChanges: { changed(teamId: string): void };
}

/** Container services: the store, this node's gateway routing table, and the change broadcast. */
export function createContainers(d: { db: Database; invalidation: RedisInvalidation | null; clock: Clock }): Containers {
  const { clock } = d;
  const inv = d.invalidation;
  const containerStore = new PgContainerStore(d.db);
  const serviceDirectory = new ServiceDirectory(containerStore, { ttlMs: 5_000, now: () => clock.now(), healthy: () => inv?.state?.().healthy ?? true });
  const publish = (teamId: string): void => {
    if (inv) void Promise.resolve(inv.publish({ type: 'container', teamId })).catch(() => undefined);
  };
  // container changes reach every node's gateway routing table
  if (inv) {
    let generation = inv.state?.().generation ?? 0;
    inv.subscribe((ev) => {
      if (ev.type === 'container') serviceDirectory.invalidate(ev.teamId);
      const g = inv.state?.().generation ?? 0;
      if (g !== generation) {
        generation = g;
        serviceDirectory.invalidateAll();
      }
    });
  }
  return {
    containerStore,
    serviceDirectory,
    containerChanges: {
      changed: (teamId: string): void => {
        serviceDirectory.invalidate(teamId);
        publish(teamId);
      },
    },
  };
}

/** The gateway: proxied and invoked requests to container services (on agents, through tunnels) and external services. */
export function createGateway(d: {
  config: Config;
  settings: NodeSettings;
  containers: Containers;
  streams: LocalAgentStreams;
  sessions: AgentSessions;
  cluster: Cluster<Protocols> | null;
  actors: ActorSystemPort;
  agentStore: PgAgentStore;
  vault: VaultStore;
  guard: OutboundGuard;
  identity: Identity;
  clock: Clock;
  logger: Logger;
}): Gateway {
  const { config, streams, sessions, cluster, vault, clock } = d;
  const timeoutMs = config.GANTRY_PROXY_TIMEOUT_MS;
  const outboundCaList = d.settings.outboundCa;
  const balancer = new Balancer({ maxInflight: config.GANTRY_PROXY_MAX_INFLIGHT, ejectMs: 5_000, now: () => clock.now() });
  // every deployed service's load (requests in flight per replica) goes to its actor (one per cluster, wherever it lives): autoscaling decides on it, and drains (autoscaling's, a rolling update's) wait on it
  const meter = new LoadMeter({
    intervalMs: config.GANTRY_AUTOSCALE_INTERVAL_MS,
    now: () => clock.now(),
    inflight: (id) => balancer.inflight(id),
    report: (serviceId, r) => d.actors.tell({ kind: CONTAINER_SERVICE, id: serviceId }, { type: 'load', node: cluster?.memberId ?? 'local', ...r }),
  });
  d.containers.serviceDirectory.onInvalidate((teamId) => meter.signalTeam(teamId));
  const holdTimeoutMs = config.GANTRY_AUTOSCALE_HOLD_TIMEOUT_MS;
  // gateway tunnels: on this node's agent streams, else forwarded to the node holding the stream
  const openTunnel: OpenTunnel = (agentId, teamId, open, h) => streams.openTunnel(agentId, teamId, open, h) ?? cluster?.openRemoteTunnel(agentId, teamId, open, h) ?? null;
  return new Gateway({
    basePath: '/api/v1',
    directory: d.containers.serviceDirectory,
    balancer,
    autoscale: {
      meter,
      holdTimeoutMs,
      wake: (serviceId) => d.actors.ask({ kind: CONTAINER_SERVICE, id: serviceId }, { type: 'wake' }, { deadlineMs: clock.now() + holdTimeoutMs }),
    },
    openTunnel,
    agentOnline: (id) => sessions.session(id) !== null || (cluster?.agentElsewhere(id) ?? false),
    external: async (svc, r) => {
      const inject = svc.externalAuthCredentialId ? await vault.resolveHeader(svc.teamId, svc.externalAuthCredentialId) : null;
      if (svc.externalAuthCredentialId && !inject) throw badRequest('credential_not_found', 'the service\'s external_auth_credential_id no longer exists in the vault');
      return externalRequest(d.guard, { baseUrl: svc.externalUrl, path: r.path, method: r.method, headers: r.headers, body: r.body, inject, timeoutMs, signal: r.signal, ...(outboundCaList ? { ca: outboundCaList } : {}) });
    },
    externalWebSocket: async (svc, r, h) => {
      const inject = svc.externalAuthCredentialId ? await vault.resolveHeader(svc.teamId, svc.externalAuthCredentialId) : null;
      if (svc.externalAuthCredentialId && !inject) throw badRequest('credential_not_found', 'the service\'s external_auth_credential_id no longer exists in the vault');
      return openExternalWebSocket(d.guard, { baseUrl: svc.externalUrl, path: r.path, headers: r.headers, inject, timeoutMs, ...(outboundCaList ? { ca: outboundCaList } : {}) }, h);
    },
    agentTunnel: async (teamId, agentId) => {
      if (!isUuid(agentId)) return null;
      const a = await d.agentStore.get(teamId, agentId);
      return a ? { tunnel: a.tunnel } : null;
    },
    authenticator: d.identity.authenticator,
    timeoutMs,
    maxBodyBytes: config.GANTRY_PROXY_MAX_BODY_BYTES,
    invokeMaxResponseBytes: config.GANTRY_INVOKE_MAX_RESPONSE_BYTES,
    logger: d.logger.child({ component: 'gateway' }),
  });
}
