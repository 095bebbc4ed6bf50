import type { Config } from './shared/config.js';
import { createLogger, type Logger } from './shared/logger.js';
import { systemClock, type Clock } from './shared/clock.js';
import { startTracing } from './shared/tracing-sdk.js';
import type { Database } from './persistence/db.js';
import type { RouteDef } from './edge/http.js';
import type { Identity } from './identity/index.js';
import type { LocalActorSystem } from './actors/runtime/system.js';
import type { Protocols } from './actors/ports.js';
import type { PgTaskStore } from './persistence/task-store.js';
import type { PgAgentStore } from './persistence/agent-store.js';
import type { TaskQueries } from './persistence/task-queries.js';
import type { LocalEventBus } from './cluster/event-bus.js';
import type { Cluster } from './cluster/index.js';
import { LocalAgentStreams, type AgentSessions } from './edge/agents/sessions.js';
import type { AgentGrpcServer } from './edge/agents/grpc-server.js';
import type { LiveEvents } from './events/index.js';
import type { ObjectStore } from './storage/index.js';
import type { Files } from './files/index.js';
import { AuditStore, type AuditRetention } from './persistence/audit.js';
import { Lifecycle } from './node/lifecycle.js';
import { nodeSettings, PublicUrl } from './node/settings.js';
import { claimDataDir, openStorage } from './node/storage.js';
import { connectBus, createCluster, clusterJoin, clusterLeave, createLeases } from './node/cluster.js';
import { startIdentity } from './node/identity.js';
import { createActorSystem, createStores, registerAll, actorsParticipant } from './node/actors.js';
import { createFilesModule } from './node/files.js';
import { createContainers, createGateway } from './node/gateway.js';
import { createCloud } from './node/cloud.js';
import { createLiveEvents, liveEventsParticipant, outboundClose } from './node/events.js';
import { createAgents } from './node/agents.js';
import { createNodeMetrics, createRequestLimits, createEdge, listen } from './node/http.js';
import { mountRoutes } from './node/routes.js';
import { createAuditRetention, schedulerWatch, singleton } from './node/jobs.js';

export interface GantryNode {
  config: Config;
  logger: Logger;
  db: Database;
  httpPort: number;
  baseUrl: string;
  installationId: string;
  migrationsApplied: string[];
  /** Users, teams, credentials; `identity.verifyAgentCredential(ak)` serves the agent stream. */
  identity: Identity;
  actors: LocalActorSystem<Protocols>;
  sessions: AgentSessions;
  events: LocalEventBus;
  /** SSE hub, webhook outbox + dispatcher, notifications; `liveEvents.notifySystem(teamId, kind, {title, message})` raises a system alert. */
  liveEvents: LiveEvents;
  agentStore: PgAgentStore;
  taskStore: PgTaskStore;
  /** Task reads and the group-committed submit insert (its batch stats and hold hook serve tests and bench). */
  taskQueries: TaskQueries;
  objectStore: ObjectStore;
  /** Staged files, multipart, output links/retention, model and node registries, sync manifest, sweepers. */
  files: Files;
  /** The agent gRPC stream server and its bound port (GANTRY_GRPC_PORT=0 picks a free one). */
  agentGrpc: AgentGrpcServer;
  grpcPort: number;
  /** Origin clients and agents use (GANTRY_PUBLIC_URL, or this node's loopback address). */
  publicUrl: string;
  /** Cluster mode (REDIS_URL set): membership, placement, remoting; null on a single node. */
  cluster: Cluster<Protocols> | null;
  /** The audit log (reads, retention; tests run a retention pass through auditRetention). */
  auditStore: AuditStore;
  auditRetention: AuditRetention;
  /** Every registered HTTP route (the auth-matrix test walks them all). */
  routes(): ReadonlyArray<RouteDef>;
  /** Graceful stop: stop accepting, finish in-flight work (bounded), close the database. */
  close(): Promise<void>;
}

export interface StartOptions {
  logger?: Logger;
  clock?: Clock;
  /** The clock of usage budgets and the default GET /usage range (tests: a month's reset without waiting); default: clock. */
  usageNow?: () => number;
}

/**
 * The composition root: the only place that knows every layer. A list of modules in dependency
 * order (each built from those before it); the lifecycle runner starts them in this order and
 * stops the started ones in reverse, after a failed start as at close() (docs/architecture.md).
 */
export async function startNode(config: Config, opts: StartOptions = {}): Promise<GantryNode> {
  const logger = opts.logger ?? createLogger(config.LOG_LEVEL);
  const clock = opts.clock ?? systemClock;
  const settings = nodeSettings(config);
  const publicUrl = new PublicUrl(config.GANTRY_PUBLIC_URL, settings.http.port);
  const life = new Lifecycle();
  return life.boot(async () => {
    // traces (GANTRY_TRACING=otlp): the OTLP exporter as the standard OTEL_* variables configure it
    if (config.GANTRY_TRACING === 'otlp') await life.open(() => startTracing({ serviceName: 'gantry', serviceVersion: settings.version }), (t) => t.shutdown().catch(() => undefined));
    const { deploymentSecret } = await claimDataDir(life, { settings, secretKey: config.GANTRY_SECRET_KEY, logger });
    const bus = await connectBus(life, { settings, prefix: config.GANTRY_REDIS_PREFIX, logger });
    const { db, migrationsApplied, installationId, objectStore } = await openStorage(life, { config, settings, publicUrl, clock, logger });
    const identity = await startIdentity(life, { config, settings, db, deploymentSecret, bus, clock, logger });
    const actors = createActorSystem(clock, logger);
    const streams = new LocalAgentStreams();
    const cluster = createCluster({ config, settings, redis: bus.redis, actors, db, streams, logger });
    const { files, registryChanges } = createFilesModule({ config, settings, db, objectStore, clock, logger });
    const stores = createStores({ db, cluster, invalidation: bus.invalidation, files });
    const { taskStore, agentStore } = stores;
    const containers = createContainers({ db, invalidation: bus.invalidation, clock });
    const { containerStore } = containers;
    const cloud = createCloud({ config, settings, deploymentSecret, db, taskStore, objectStore, clock, logger });
    const liveEvents = createLiveEvents({ config, settings, db, bus, clock, logger });
    const agents = createAgents({ config, settings, installationId, actors, cluster, streams, identity, files, registryChanges, agentStore, taskStore, containerStore, cloudStore: cloud.cloudStore, objectStore, logger });
    const { sessions, agentGrpc } = agents;
    const metrics = createNodeMetrics({ config, db, sseStreams: () => liveEvents.sse.openStreams(), agentStreams: () => sessions.count() });
    registerAll(actors, { config, settings, stores, metrics, cloudRunner: cloud.cloudRunner, transport: agents.transport, events: bus.events, containers: containerStore, containerChanges: containers.containerChanges });
    const limits = createRequestLimits({ config, redis: bus.redis, clock, logger });
    await life.start(limits.participant);
    if (cluster) await life.start(clusterJoin(cluster, settings));
    await life.start(actorsParticipant({ actors, cluster, stores, containers: containerStore, settings, logger }));
    await life.start(cloud.participant);
    const leases = createLeases(bus.redis, settings, logger);
    const auditStore = new AuditStore(db);
    const auditRetention = createAuditRetention({ store: auditStore, retentionDays: config.GANTRY_AUDIT_RETENTION_DAYS, clock, logger });
    await life.start(singleton(leases, 'audit-retention', auditRetention));
    await life.start(singleton(leases, 'file-sweepers', files.sweepers));
    await life.start(schedulerWatch({ resyncMs: settings.schedulerResyncMs, taskStore, actors, cluster }));
    await life.start(agents.grpc);
    await life.start(agents.sessionsStop);
    await life.start(outboundClose([liveEvents.guard, cloud.cloudGuard]));
    await life.start(liveEventsParticipant(liveEvents, { cluster, bus }));
    if (cluster) await life.start(clusterLeave(cluster));
    const edge = createEdge({ settings, identity, rateLimits: limits.rateLimits, metrics, logger });
    const gateway = createGateway({ config, settings, containers, streams, sessions, cluster, actors, agentStore, vault: cloud.vault, guard: liveEvents.guard, identity, clock, logger });
    await life.start({ stop: () => gateway.core.close() });
    await mountRoutes(edge, { config, settings, publicUrl, db, objectStore, stores, actors, cluster, events: bus.events, identity, files, agents, liveEvents, containers, gateway, cloud, auditStore, metrics, clock, usageNow: opts.usageNow, logger });
    const { http, baseUrl } = await listen(life, { edge, config, settings, publicUrl, objectStore, logger });
    let closing: Promise<void> | null = null;
    const close = async (): Promise<void> => {
      logger.info('shutting down');
      await life.stopAll();
      logger.info('stopped');
    };
    const { taskQueries } = stores;
    const grpcPort = agentGrpc.boundPort;
    return { config, logger, db, httpPort: http.port, baseUrl, installationId, migrationsApplied, identity, actors, sessions, events: bus.events, liveEvents, agentStore, taskStore, taskQueries, objectStore, files, agentGrpc, grpcPort, publicUrl: publicUrl.raw(), cluster, auditStore, auditRetention, routes: () => http.routes(), close: () => (closing ??= close()) };
  });
}
