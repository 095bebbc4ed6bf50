import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import { isUuid } from '../shared/ids.js';
import type { PgAgentStore } from '../persistence/agent-store.js';
import type { PgTaskStore } from '../persistence/task-store.js';
import type { PgContainerStore } from '../persistence/container-store.js';
import type { ObjectStore } from '../storage/index.js';
import type { Cluster } from '../cluster/index.js';
import type { LocalActorSystem } from '../actors/runtime/system.js';
import { CONTAINER_SERVICE } from '../actors/index.js';
import type { AgentTransportPort, Protocols } from '../actors/ports.js';
import type { Identity } from '../identity/index.js';
import type { Files } from '../files/index.js';
import type { CloudProviderStore } from '../cloud/store.js';
import { AgentGrpcServer, type AgentContainerHooks } from '../edge/agents/grpc-server.js';
import { AGENT_WS_OPTIONS, AgentWebSocketTransport } from '../edge/agents/ws-transport.js';
import { AGENT_WS_PATH } from '../protocol/agent-wire.js';
import type { HttpEdge } from '../edge/http.js';
import { SyncAwareSessions, agentTransport, type LocalAgentStreams } from '../edge/agents/sessions.js';
import { clusterPresence } from './cluster.js';
import type { RegistryChanges } from './files.js';
import type { Participant } from './lifecycle.js';
import type { NodeSettings } from './settings.js';

export interface Agents {
  sessions: SyncAwareSessions;
  /** The agent gRPC stream server (its WebSocket transport is mounted on the HTTP edge). */
  agentGrpc: AgentGrpcServer;
  /** What the agent actors send through. */
  transport: AgentTransportPort;
  /** The gRPC port listens (GANTRY_GRPC_PORT=0 picks a free one); a node that cannot refuses to start. */
  grpc: Participant;
  /** Node shutdown: no more needsSync rechecks (the database is about to close). */
  sessionsStop: Participant;
  /** Mounts the agent protocol's WebSocket transport on the HTTP edge. */
  mountWebSocket(edge: HttpEdge): void;
}

export interface AgentsDeps {
  config: Config;
  settings: NodeSettings;
  installationId: string;
  actors: LocalActorSystem<Protocols>;
  cluster: Cluster<Protocols> | null;
  streams: LocalAgentStreams;
  identity: Identity;
  files: Files;
  registryChanges: RegistryChanges;
  agentStore: PgAgentStore;
  taskStore: PgTaskStore;
  containerStore: PgContainerStore;
  cloudStore: CloudProviderStore;
  objectStore: ObjectStore;
  logger: Logger;
}

/** The agent streams: the sessions (fed into the agent actors), the gRPC server, and what ties them to the rest of the node. */
export function createAgents(d: AgentsDeps): Agents {
  const { config, cluster, identity, files, agentStore, logger } = d;
  const { grpc } = d.settings;
  // needsSync of live sessions is recomputed from the team's active models/nodes (files module)
  const sessions = new SyncAwareSessions(
    d.actors,
    { needsSync: (teamId, inv) => files.sync.needsSync(teamId, inv), customNodes: async (agentId) => (await agentStore.byId(agentId))?.customNodes ?? [], logger },
    { streams: d.streams, presence: cluster ? clusterPresence(cluster, logger) : null },
  );
  const agentGrpc = new AgentGrpcServer({
    host: grpc.host,
    port: grpc.port,
    tlsCertFile: config.GANTRY_GRPC_TLS_CERT,
    tlsKeyFile: config.GANTRY_GRPC_TLS_KEY,
    heartbeatIntervalS: config.GANTRY_HEARTBEAT_INTERVAL_S,
    maxAgentsPerTeam: config.quotas.maxAgents,
    // the agents row's node_id: in cluster mode the member id (the directory and the member fence use it)
    nodeId: () => cluster?.memberId ?? d.settings.nodeId ?? d.installationId,
    logger,
    sessions,
    agents: agentStore,
    tasks: d.taskStore,
    checkpoints: d.taskStore,
    verifyCredential: (v) => identity.verifyAgentCredential(v),
    objectStore: d.objectStore,
    needsSync: (teamId, inv) => files.sync.needsSync(teamId, inv),
    syncManifest: (teamId) => files.sync.syncManifest(teamId),
    partnerKey: (teamId) => d.cloudStore.partnerKeyForAgents(teamId),
    containers: containerHooks(d),
  });
  // live sessions recompute needsSync; this node's agents of the team are told to sync now
  d.registryChanges.listen((teamId) => {
    sessions.refreshTeam(teamId);
    agentGrpc.syncHint(teamId);
  });
  identity.onCredentialsRevoked((ids) => agentGrpc.credentialsRevoked(ids));
  if (cluster) {
    // declared dead while paused and re-joined: the agent streams held here stay; their rows (moved to
    // the new member id) were marked offline by the fence, so each agent actor writes its status again
    // and tells its team's scheduler (which may now live elsewhere)
    cluster.onEvicted(() => {
      for (const s of sessions.all()) sessions.update(s.agentId, s.sessionId, s.info);
    });
  }
  return {
    sessions,
    agentGrpc,
    transport: agentTransport(sessions, agentGrpc),
    grpc: {
      failure: `cannot listen on gRPC ${grpc.host}:${grpc.port}`,
      start: async () => {
        await agentGrpc.start();
      },
      stop: () => agentGrpc.stop(),
    },
    sessionsStop: { stop: () => sessions.stop() },
    mountWebSocket(edge) {
      // the agent protocol over WebSocket on this port (ingresses that pass WebSocket but not gRPC): the same sessions as the gRPC port's
      edge.addWebSocketRoute(AGENT_WS_PATH, new AgentWebSocketTransport(agentGrpc, logger).handler(), AGENT_WS_OPTIONS);
      edge.onShutdown(() => agentGrpc.endTransport('ws'));
    },
  };
}

/** Container services on the agents: what an agent holds at hello, its reports, its disconnect (to the service actors). */
function containerHooks(d: AgentsDeps): AgentContainerHooks {
  const { actors, containerStore, logger } = d;
  return {
    hello: async (agentId, _teamId, runtime, tunnel, instances) => {
      await containerStore.setAgentRuntime(agentId, runtime, tunnel);
      const held = instances.map((r) => r.instance_id);
      for (const r of instances) {
        if (isUuid(r.service_id)) actors.tell({ kind: CONTAINER_SERVICE, id: r.service_id }, { type: 'report', agentId, instanceId: r.instance_id, state: r.state, healthy: r.healthy, error: r.error });
      }
      for (const id of await containerStore.serviceIdsOnAgent(agentId)) actors.tell({ kind: CONTAINER_SERVICE, id }, { type: 'agent_up', agentId, held });
    },
    report: (agentId, r) => {
      if (isUuid(r.service_id)) actors.tell({ kind: CONTAINER_SERVICE, id: r.service_id }, { type: 'report', agentId, instanceId: r.instance_id, state: r.state, healthy: r.healthy, error: r.error });
    },
    closed: (agentId) => {
      void containerStore
        .serviceIdsOnAgent(agentId)
        .then((ids) => {
          for (const id of ids) actors.tell({ kind: CONTAINER_SERVICE, id }, { type: 'agent_down', agentId });
        })
        .catch((e: unknown) => logger.warn({ err: e, agent_id: agentId }, 'container services: agent disconnect not delivered'));
    },
  };
}
