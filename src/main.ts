import { mkdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError, type Config } from './shared/config.js';
import { createLogger, type Logger } from './shared/logger.js';
import { Database } from './persistence/db.js';
import { assertPortFree, lockDataDir } from './shared/startup.js';
import { HttpEdge, type RouteDef } from './edge/http.js';
import { openApiRoutes } from './edge/routes/openapi.js';
import { API_DESCRIPTION_VERSION } from './edge/openapi/build.js';
import { createRateLimits, SharedRateLimits } from './edge/rate-limits.js';
import { withIdempotency } from './edge/idempotency.js';
import { RedisWindowCounter } from './cluster/rate-limit-redis.js';
import { systemRoutes } from './edge/routes/system.js';
import { debugRoutes } from './edge/routes/debug.js';
import { identityRoutes, identityDebugRoutes } from './edge/routes/identity.js';
import { teamRoutes } from './edge/routes/teams.js';
import { createIdentity, type Identity } from './identity/index.js';
import { PgSigningKeys, deploymentSecret } from './identity/signing-keys.js';
import { workflowRoutes } from './edge/routes/workflows.js';
import { WorkflowStore } from './persistence/workflow-store.js';
import { systemClock, type Clock } from './shared/clock.js';
import { LocalActorSystem } from './actors/runtime/system.js';
import { registerActors, recoverTasks, recoverOwned, recoverContainers, envelopes, AGENT, SCHEDULER, CONTAINER_SERVICE } from './actors/index.js';
import { PROGRESS_MIN_INTERVAL_MS } from './actors/task/task.actor.js';
import type { Protocols } from './actors/ports.js';
import { PgTaskStore } from './persistence/task-store.js';
import { PgAgentStore } from './persistence/agent-store.js';
import { TaskQueries } from './persistence/task-queries.js';
import { randomUUID } from 'node:crypto';
import { LocalEventBus } from './cluster/event-bus.js';
import { RedisEventBus } from './cluster/event-bus-redis.js';
import { RedisInvalidation } from './cluster/invalidation-redis.js';
import { connectRedis, type RedisConnection } from './cluster/redis.js';
import { Cluster } from './cluster/index.js';
import { createMembership } from './cluster/membership.js';
import { RedisAgentDirectory } from './cluster/directory.js';
import { InMemoryLeases, RedisLeases, type LeasePort } from './cluster/leases.js';
import { ClusterMemberStore } from './persistence/cluster-store.js';
import { encodeError, decodeError } from './actors/runtime/envelope.js';
import { SyncAwareSessions, type AgentSessions } from './edge/agents/sessions.js';
import { taskRoutes } from './edge/routes/tasks.js';
import { actorMetrics, metricsRoute, NodeMetrics } from './edge/metrics.js';
import { OpsQueries } from './persistence/ops-queries.js';
import { startTracing, type TracingHandle } from './shared/tracing-sdk.js';
import { pageRoutes } from './edge/routes/pages.js';
import { consoleRoutes } from './edge/routes/console.js';
import { createObjectStore, LocalObjectStore, type ObjectStore } from './storage/index.js';
import { storageRoutes } from './edge/routes/storage.js';
import { createFiles, type Files } from './files/index.js';
import { fileRoutes } from './edge/routes/files.js';
import { uploadRoutes } from './edge/routes/uploads.js';
import { modelRoutes } from './edge/routes/models.js';
import { nodeRoutes } from './edge/routes/nodes.js';
import { AgentGrpcServer } from './edge/agents/grpc-server.js';
import { AGENT_WS_OPTIONS, AgentWebSocketTransport } from './edge/agents/ws-transport.js';
import { AGENT_WS_PATH } from './protocol/agent-wire.js';
import { agentRoutes } from './edge/routes/agents.js';
import { LiveEvents } from './events/index.js';
import { eventRoutes } from './edge/routes/events.js';
import { endStreamsOnInvalidation } from './events/stream-revocation.js';
import { webhookRoutes } from './edge/routes/webhooks.js';
import { notificationRoutes } from './edge/routes/notifications.js';
import { PgContainerStore } from './persistence/container-store.js';
import { ServiceDirectory } from './gateway/directory.js';
import { Balancer } from './gateway/balancer.js';
import { closeExternalAgents, externalRequest } from './gateway/external.js';
import type { OpenTunnel } from './gateway/tunnel.js';
import { Gateway } from './edge/routes/gateway.js';
import { containerRoutes } from './edge/routes/containers.js';
import { gatewayInvoker } from './edge/routes/container-invoker.js';
import { mcpRoutes } from './edge/routes/mcp.js';
import { McpEndpoint } from './mcp/server.js';
import { TaskUseCases } from './app/tasks.js';
import { WorkflowUseCases } from './app/workflows.js';
import { AgentUseCases } from './app/agents.js';
import { AuditUseCases } from './app/audit.js';
import { UploadUseCases } from './app/uploads.js';
import { ContainerUseCases } from './app/containers.js';
import { SessionTokens } from './mcp/session.js';
import { VaultKeyring } from './vault/keyring.js';
import { VaultStore } from './vault/store.js';
import { vaultRoutes } from './edge/routes/vault.js';
import { auditRoutes } from './edge/routes/audit.js';
import { oidcRoutes } from './edge/routes/oidc.js';
import { OidcLogin } from './identity/oidc.js';
import { AuditRetention, AuditStore } from './persistence/audit.js';
import { cloudProviderRoutes } from './edge/routes/cloud-providers.js';
import { CloudProviderStore } from './cloud/store.js';
import { CloudRunner } from './cloud/runner.js';
import { ComfyCloudClient } from './cloud/comfy-cloud.js';
import { stagedInputProblem } from './cloud/limits.js';
import type { CloudProviderSlug } from './cloud/provider.js';
import type { CloudCredentials } from './cloud/store.js';
import { OutboundGuard } from './events/outbound.js';
import { outboundCa } from './events/outbound.js';
import { isUuid } from './shared/ids.js';
import { badRequest } from './shared/errors.js';

/** /readyz waits at most this long for the database's answer. */
const READY_DB_BOUND_MS = 600;

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
}

/** A listen that failed at start: what was started is stopped, then one line for the operator. */
async function failStart(e: unknown, what: string, stops: Array<() => unknown>): Promise<never> {
  for (const stop of stops) {
    try {
      await stop();
    } catch {
      // already failing: the listen error is the one to report
    }
  }
  if (e instanceof ConfigError) throw e;
  const msg = (e as Error)?.message ?? String(e);
  throw new ConfigError(/EADDRINUSE/.test(msg) ? `${what}: address already in use (another node or process listens there)` : `${what}: ${msg}`);
}

function packageVersion(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version?: string }).version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
}

/** The composition root: the only place that knows every layer. */
export async function startNode(config: Config, opts: StartOptions = {}): Promise<GantryNode> {
  const logger = opts.logger ?? createLogger(config.LOG_LEVEL);
  const dataDir = resolve(config.GANTRY_DATA_DIR);
  // traces (GANTRY_TRACING=otlp): the OTLP exporter as the standard OTEL_* variables configure it
  const tracing: TracingHandle | null = config.GANTRY_TRACING === 'otlp' ? startTracing({ serviceName: 'gantry', serviceVersion: packageVersion() }) : null;
  // start-up checks before anything is touched (no migration, no key): busy ports, data dir in use
  await assertPortFree('GANTRY_GRPC_PORT', config.GANTRY_GRPC_HOST, config.GANTRY_GRPC_PORT);
  await assertPortFree('GANTRY_HTTP_PORT', config.GANTRY_HTTP_HOST, config.GANTRY_HTTP_PORT);
  mkdirSync(dataDir, { recursive: true });
  const dataDirLock = lockDataDir(dataDir);

  const db = await Database.open({
    databaseUrl: config.DATABASE_URL,
    dataDir,
    poolMax: config.GANTRY_DB_POOL_MAX,
    logger,
    createDatabase: config.GANTRY_DB_CREATE,
    acquireTimeoutMs: config.GANTRY_DB_ACQUIRE_TIMEOUT_MS,
    statementTimeoutMs: config.GANTRY_DB_STATEMENT_TIMEOUT_MS,
  }).catch((e: unknown) => {
    dataDirLock.release();
    throw e;
  });
  const migrationsApplied = await db.migrate();
  const installationId = await db.installationId();
  logger.info({ installation_id: installationId, embedded: db.embedded, migrations_applied: migrationsApplied.length }, 'database ready');

  // --- actors: one task actor per open task, one scheduler per team, one agent actor per stream
  const clock = opts.clock ?? systemClock;
  const actors = new LocalActorSystem<Protocols>(clock, logger.child({ component: 'actors' }), actorMetrics);
  // team schedulers' rebuild from PostgreSQL: needed where messages can be lost (cluster mode)
  const resyncMs = config.GANTRY_SCHEDULER_RESYNC_MS || (config.REDIS_URL ? 5_000 : 0);
  // cluster mode: Redis first (a node that cannot reach it refuses to start, before it owns anything)
  let redis: RedisConnection | null = null;
  if (config.REDIS_URL) {
    redis = await connectRedis(config.REDIS_URL, config.GANTRY_REDIS_PREFIX, logger).catch(async (e: unknown) => {
      await db.close();
      dataDirLock.release();
      throw new ConfigError(`cannot reach REDIS_URL: ${(e as Error).message}`);
    });
  }
  let cluster: Cluster<Protocols> | null = null;
  const memberId = (): string | null => cluster?.memberId ?? null;
  // cluster: task events and cache invalidations go to every node over Redis (tagged with this process's id)
  const processId = randomUUID();
  const redisEvents = redis ? new RedisEventBus(redis, processId, logger.child({ component: 'event-bus' })) : null;
  const events: LocalEventBus = redisEvents ?? new LocalEventBus();
  await redisEvents?.start();
  const redisInvalidation = redis ? new RedisInvalidation(redis, processId, logger.child({ component: 'invalidation' })) : null;
  await redisInvalidation?.start();
  const taskStore = new PgTaskStore(db, { memberId });
  const agentStore = new PgAgentStore(db, { memberId });
  const taskQueries = new TaskQueries(db);
  const workflowStore = new WorkflowStore(db);
  // needsSync of live sessions is recomputed from the team's active models/nodes (files module)
  const sessions = new SyncAwareSessions(actors, {
    needsSync: (teamId, inv) => files.sync.needsSync(teamId, inv),
    customNodes: async (agentId) => (await agentStore.byId(agentId))?.customNodes ?? [],
    logger,
  });
  const objectStore: ObjectStore = createObjectStore({
    storage: config.GANTRY_STORAGE,
    dataDir,
    publicBaseUrl: config.publicUrl,
    secret: await db.secret('storage-url-signing'),
    s3: { endpoint: config.S3_ENDPOINT, region: config.S3_REGION, accessKeyId: config.S3_ACCESS_KEY_ID, secretAccessKey: config.S3_SECRET_ACCESS_KEY },
    clock,
  });
  const files = createFiles({
    db,
    store: objectStore,
    logger,
    now: () => clock.now(),
    maxUploadBytes: config.GANTRY_MAX_UPLOAD_BYTES,
    inputRetentionS: config.GANTRY_INPUT_RETENTION_S,
    outputRetentionS: config.GANTRY_OUTPUT_RETENTION_S,
    // live sessions recompute needsSync; this node's agents of the team are told to sync now
    onRegistryChange: (teamId) => {
      sessions.refreshTeam(teamId);
      agentGrpc.syncHint(teamId);
    },
  });
  agentStore.useSyncCheck((teamId, inv) => files.sync.needsSync(teamId, inv));
  // container services: the store, every node's gateway routing table, and the change broadcast
  // (set up here; the cluster-wide half is connected once the invalidation port exists)
  const containerStore = new PgContainerStore(db);
  let publishContainerChange: (teamId: string) => void = () => undefined;
  const serviceDirectory = new ServiceDirectory(containerStore, { ttlMs: 5_000, now: () => clock.now(), healthy: () => redisInvalidation?.state?.().healthy ?? true });
  const containerChanges = {
    changed: (teamId: string): void => {
      serviceDirectory.invalidate(teamId);
      publishContainerChange(teamId);
    },
  };
  // hosted cloud providers: team keys under the vault keyring, provider calls through the outbound guard
  const vaultKeyring = VaultKeyring.fromConfig({ keys: config.GANTRY_VAULT_KEYS, fallbackSecret: deploymentSecret(config.GANTRY_SECRET_KEY, dataDir, logger) });
  const cloudStore = new CloudProviderStore(db, vaultKeyring, () => clock.now());
  const cloudGuard = new OutboundGuard({ allowlist: config.GANTRY_OUTBOUND_ALLOWLIST });
  const cloudCa = outboundCa(config.GANTRY_OUTBOUND_CA_FILE);
  const cloudClient = (_provider: CloudProviderSlug, c: CloudCredentials) =>
    new ComfyCloudClient({ baseUrl: c.baseUrl, apiKey: c.apiKey, guard: cloudGuard, ca: cloudCa, pollMs: config.GANTRY_CLOUD_POLL_MS, timeoutMs: config.GANTRY_CLOUD_TIMEOUT_MS });
  const cloudRunner = new CloudRunner({ store: cloudStore, tasks: taskStore, objects: objectStore, client: cloudClient, logger: logger.child({ component: 'cloud' }), busyRetryMs: config.GANTRY_CLOUD_BUSY_RETRY_MS });
  // operator/autoscaler metrics: PostgreSQL-derived gauges (cached per scrape) and this node's own
  let sseStreams = (): number => 0;
  const nodeMetrics = new NodeMetrics({
    ops: new OpsQueries(db),
    cacheMs: config.GANTRY_METRICS_CACHE_MS,
    sseStreams: () => sseStreams(),
    agentStreams: () => sessions.count(),
  });
  registerActors(actors, {
    metrics: nodeMetrics.tasks,
    cloudJobs: cloudRunner,
    tasks: taskStore,
    agents: agentStore,
    transport: sessions,
    events,
    quotas: { maxConcurrentTasks: () => config.quotas.maxConcurrentTasks },
    timeoutMaxS: config.GANTRY_TASK_TIMEOUT_MAX_S,
    ackTimeoutMs: config.GANTRY_ACK_TIMEOUT_S * 1000,
    retryBackoffBaseMs: config.GANTRY_RETRY_BACKOFF_BASE_S * 1000,
    retryBackoffMaxMs: config.GANTRY_RETRY_BACKOFF_MAX_S * 1000,
    agentGraceMs: config.GANTRY_AGENT_GRACE_S * 1000,
    progressIntervalMs: PROGRESS_MIN_INTERVAL_MS,
    askTimeoutMs: 15_000,
    schedulerResyncMs: resyncMs,
    containers: containerStore,
    containerChanges,
  });
  const graceMs = config.GANTRY_AGENT_GRACE_S * 1000;
  let takeOver: () => void = () => undefined;
  if (redis) {
    const conn = redis;
    const c: Cluster<Protocols> = new Cluster<Protocols>({
      nodeId: config.GANTRY_NODE_ID,
      host: config.GANTRY_CLUSTER_HOST,
      port: config.GANTRY_CLUSTER_PORT,
      advertise: config.GANTRY_CLUSTER_ADVERTISE,
      leaseMs: config.GANTRY_CLUSTER_LEASE_MS,
      system: actors,
      codec: envelopes,
      errors: { encode: encodeError, decode: decodeError },
      membership: createMembership(conn, { leaseMs: config.GANTRY_CLUSTER_LEASE_MS, logger }),
      directory: (self) => new RedisAgentDirectory(conn, self, logger),
      fence: new ClusterMemberStore(db),
      directoryKinds: new Set([AGENT]),
      hasLocalStream: (agentId) => sessions.session(agentId) !== null,
      localStreams: () => sessions.all().map((s) => s.agentId),
      logger: logger.child({ component: 'cluster' }),
    });
    cluster = c;
    await c.start().catch((e: unknown) =>
      failStart(e, `cannot join the cluster (cluster port ${config.GANTRY_CLUSTER_HOST}:${config.GANTRY_CLUSTER_PORT})`, [
        () => c.stop(),
        () => actors.shutdown(),
        () => conn.close(),
        () => db.close(),
        () => dataDirLock.release(),
      ]),
    );
    sessions.presence = {
      opened: (agentId) => void c.directory.claim(agentId).catch((e: unknown) => logger.warn({ agent_id: agentId, err_message: (e as Error).message }, 'agent directory claim failed')),
      closed: (agentId) => void c.directory.release(agentId).catch(() => undefined),
      elsewhere: (agentId) => c.agentElsewhere(agentId),
    };
    // every new view: take over the open tasks (and team schedulers) this node owns now
    takeOver = () => {
      void recoverOwned(actors, taskStore, graceMs, (ref) => c.owns(ref))
        .then((n) => n > 0 && logger.info({ tasks: n }, 'took over open tasks'))
        .catch((e: unknown) => logger.warn({ err: e }, 'taking over owned tasks failed'));
      void recoverContainers(actors, () => containerStore.activeServiceIds(), (ref) => c.owns(ref)).catch((e: unknown) => logger.warn({ err: e }, 'taking over container services failed'));
    };
    c.onView(() => takeOver());
    takeOver();
  } else {
    // single node: no agent stream survived the restart
    await agentStore.markAllOffline(null);
    const recovered = await recoverTasks(actors, taskStore, graceMs);
    if (recovered) logger.info({ open_tasks: recovered }, 'recovering open tasks');
    await recoverContainers(actors, () => containerStore.activeServiceIds());
  }

  // token signing keys: shared by every node through PostgreSQL (encrypted with the deployment secret), unless one PEM is configured
  const keyring = config.GANTRY_JWT_PRIVATE_KEY
    ? null
    : await PgSigningKeys.open({
        db,
        secret: deploymentSecret(config.GANTRY_SECRET_KEY, dataDir, logger),
        dataDir,
        rotateDays: config.GANTRY_JWT_ROTATE_DAYS,
        accessTokenTtlS: config.GANTRY_ACCESS_TOKEN_TTL_S,
        logger,
      }).catch(async (e: unknown) => {
        await redis?.close();
        await db.close();
        dataDirLock.release();
        throw e;
      });
  const keyTimer = keyring
    ? setInterval(() => {
        void keyring
          .rotateIfDue()
          .then(() => keyring.reload())
          .catch((e: unknown) => logger.warn({ err: e }, 'signing keys: reload/rotation failed'));
      }, 60_000)
    : null;
  keyTimer?.unref();
  const identity = createIdentity({ config, db, logger, dataDir, clock, ...(keyring ? { keyring } : {}), ...(redisInvalidation ? { invalidation: redisInvalidation } : {}), ...(redis ? { failureCounter: new RedisWindowCounter(redis) } : {}) });
  identity.start();

  // --- agent gRPC streams (after the actors: sessions feed the agent actors)
  const agentGrpc = new AgentGrpcServer({
    host: config.GANTRY_GRPC_HOST,
    port: config.GANTRY_GRPC_PORT,
    tlsCertFile: config.GANTRY_GRPC_TLS_CERT,
    tlsKeyFile: config.GANTRY_GRPC_TLS_KEY,
    heartbeatIntervalS: config.GANTRY_HEARTBEAT_INTERVAL_S,
    maxAgentsPerTeam: config.quotas.maxAgents,
    // the agents row's node_id: in cluster mode the member id (the directory and the member fence use it)
    nodeId: () => cluster?.memberId ?? config.GANTRY_NODE_ID ?? installationId,
    logger,
    sessions,
    agents: agentStore,
    tasks: taskStore,
    checkpoints: taskStore,
    verifyCredential: (v) => identity.verifyAgentCredential(v),
    objectStore,
    needsSync: (teamId, inv) => files.sync.needsSync(teamId, inv),
    syncManifest: (teamId) => files.sync.syncManifest(teamId),
    partnerKey: (teamId) => cloudStore.partnerKeyForAgents(teamId),
    containers: {
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
    },
  });
  const grpcPort = await agentGrpc.start().catch((e: unknown) =>
    failStart(e, `cannot listen on gRPC ${config.GANTRY_GRPC_HOST}:${config.GANTRY_GRPC_PORT}`, [() => agentGrpc.stop(), () => sessions.stop(), () => actors.shutdown(), () => cluster?.stop(), () => identity.stop(), () => db.close(), () => redis?.close()]),
  );
  identity.onCredentialsRevoked((ids) => agentGrpc.credentialsRevoked(ids));
  // cluster: a workflow changed on one node drops it from every node's workflow cache (same broadcast as identity's)
  if (redisInvalidation) {
    const inv = redisInvalidation;
    workflowStore.cache.onInvalidate((workflowId, dropVersions) => inv.publish({ type: 'workflow', workflowId, dropVersions }));
    inv.subscribe((ev) => {
      if (ev.type === 'workflow') workflowStore.cache.applyInvalidation(ev.workflowId, ev.dropVersions);
    });
  }
  // container changes reach every node's gateway routing table
  if (redisInvalidation) {
    const inv = redisInvalidation;
    publishContainerChange = (teamId) => void Promise.resolve(inv.publish({ type: 'container', teamId })).catch(() => undefined);
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
  // gateway tunnels: on this node's agent streams, else forwarded to the node holding the stream
  const openTunnel: OpenTunnel = (agentId, teamId, open, h) => agentGrpc.openTunnel(agentId, teamId, open, h) ?? cluster?.openRemoteTunnel(agentId, teamId, open, h) ?? null;
  cluster?.setTunnelOpener((agentId, teamId, open, h) => agentGrpc.openTunnel(agentId, teamId, open, h));
  const vault = new VaultStore(db, vaultKeyring, () => clock.now());

  // declared dead while paused and re-joined: the agent streams held here stay; their rows (moved to
  // the new member id) were marked offline by the fence, so each agent actor writes its status again
  // and tells its team's scheduler (which may now live elsewhere)
  cluster?.onEvicted(() => {
    for (const s of sessions.all()) sessions.update(s.agentId, s.sessionId, s.info);
  });

  // --- live events: SSE, webhook outbox/dispatcher, notifications (all fed from task_events)
  const liveEvents = new LiveEvents({
    db,
    bus: events,
    clock,
    logger,
    outboundAllowlist: config.GANTRY_OUTBOUND_ALLOWLIST,
    outboundCaFile: config.GANTRY_OUTBOUND_CA_FILE,
    maxStreamsPerTeam: config.GANTRY_SSE_MAX_STREAMS_PER_TEAM,
    keepAliveMs: config.GANTRY_SSE_KEEPALIVE_MS,
  });
  await liveEvents.start();
  sseStreams = () => liveEvents.sse.openStreams();
  // cluster: events may have been lost (a node died between commit and publish, a bus gap): SSE streams re-read PostgreSQL
  cluster?.onView(() => liveEvents.sse.resync());
  redisEvents?.onGap(() => liveEvents.sse.resync());

  // rate limits: per node on its own, cluster-wide over Redis (a shared sliding window)
  const limitSettings = {
    runtimePerCredential: config.GANTRY_RATE_LIMIT_RUNTIME_PER_MIN,
    runtimePerTeam: config.GANTRY_RATE_LIMIT_RUNTIME_TEAM_PER_MIN,
    managementPerCredential: config.GANTRY_RATE_LIMIT_MANAGEMENT_PER_MIN,
    managementPerTeam: config.GANTRY_RATE_LIMIT_MANAGEMENT_TEAM_PER_MIN,
  };
  const sharedLimits = redis
    ? new SharedRateLimits(limitSettings, '/api/v1', new RedisWindowCounter(redis), { clock, onSyncError: (e) => logger.warn({ err_message: (e as Error).message }, 'rate limits: Redis unreachable; counting per node until it is back') })
    : null;
  const rateLimits = sharedLimits ? (sharedLimits.enabled() ? sharedLimits : null) : createRateLimits(limitSettings, '/api/v1', clock);
  if (rateLimits === sharedLimits) sharedLimits?.start();
  const edge = new HttpEdge({
    host: config.GANTRY_HTTP_HOST,
    port: config.GANTRY_HTTP_PORT,
    basePath: '/api/v1',
    maxBodyBytes: config.GANTRY_MAX_BODY_BYTES,
    logger,
    authenticator: identity.authenticator,
    rateLimits,
    observe: (route, status, seconds) => nodeMetrics.observeRequest(route, status, seconds),
  });
  edge.addAll(
    systemRoutes({
      config,
      ready: async () => {
        // answered within READY_DB_BOUND_MS whatever the database does (a hung one is "not ready")
        const dbOk = await db.ping(READY_DB_BOUND_MS);
        return { ready: dbOk && !edge.isDraining(), checks: { database: dbOk, accepting: !edge.isDraining() } };
      },
    }),
  );
  const workflowApp = new WorkflowUseCases(workflowStore);
  edge.addAll(withIdempotency(workflowRoutes(workflowApp), taskQueries.idempotency));
  const taskApp = new TaskUseCases({
    actors,
    tasks: taskQueries,
    workflows: workflowStore,
    files: files.staging,
    outputs: files.outputs,
    events,
    outputRetentionS: config.GANTRY_OUTPUT_RETENTION_S,
    now: () => clock.now(),
    cloudConfigured: async (teamId, provider) => (await cloudStore.get(teamId, provider)) !== null,
    cloudInputProblem: (fileKey, what) => stagedInputProblem(objectStore, fileKey, what),
  });
  edge.addAll(taskRoutes(taskApp));
  const uploadApp = new UploadUseCases(files.staging);
  edge.addAll(fileRoutes(uploadApp));
  edge.addAll(uploadRoutes({ multipart: files.multipart }));
  edge.addAll(withIdempotency(modelRoutes({ models: files.models, staging: files.staging }), taskQueries.idempotency));
  edge.addAll(withIdempotency(nodeRoutes({ nodes: files.nodes, staging: files.staging }), taskQueries.idempotency));
  edge.addAll(withIdempotency(identityRoutes(identity.service), taskQueries.idempotency));
  edge.addAll(withIdempotency(teamRoutes(identity.service), taskQueries.idempotency));
  // single sign-on (GANTRY_OAUTH_PROVIDERS); the redirect URI is built on the public URL known after listen
  const oidcLogin = new OidcLogin({ config, store: identity.store, identity: identity.service, invalidation: identity.invalidation, logger: logger.child({ component: 'oidc' }), publicUrl: () => publicUrlOf() });
  if (config.oidcProviders.length > 0) edge.addAll(oidcRoutes({ oidc: oidcLogin, secureCookies: () => publicUrlOf().startsWith('https:'), rateLimit: (ip) => identity.service.rateLimit('login', ip) }));
  edge.addAll(eventRoutes({ sse: liveEvents.sse }));
  // open SSE streams end with their credential, session or membership (on every node: the same port)
  const stopStreamRevocation = endStreamsOnInvalidation({ hub: liveEvents.sse, invalidation: identity.invalidation, isMember: async (t, u) => (await identity.store.memberRole(t, u)) !== null, logger: logger.child({ component: 'events' }) });
  edge.onShutdown(stopStreamRevocation);
  edge.addAll(withIdempotency(webhookRoutes(liveEvents, () => clock.now()), taskQueries.idempotency));
  edge.addAll(notificationRoutes(liveEvents, () => clock.now()));
  edge.onShutdown(() => liveEvents.sse.closeAll());
  sessions.kicker = (id) => agentGrpc.kickAgent(id);
  const agentApp = new AgentUseCases({
    agents: agentStore,
    // the stream may be on another node of the cluster (the agent directory knows)
    session: (id) => sessions.session(id) ?? (sessions.presence?.elsewhere(id) ? { sessionId: '' } : null),
    kick: (id) => {
      if (sessions.session(id)) agentGrpc.kickAgent(id);
      else if (cluster) actors.tell({ kind: AGENT, id }, { type: 'kick' });
    },
    publicUrl: () => publicUrlOf(),
  });
  edge.addAll(agentRoutes(agentApp));
  let publicUrlOf = (): string => config.publicUrl;
  const outboundCaList = outboundCa(config.GANTRY_OUTBOUND_CA_FILE);
  const gateway = new Gateway({
    basePath: '/api/v1',
    directory: serviceDirectory,
    balancer: new Balancer({ maxInflight: config.GANTRY_PROXY_MAX_INFLIGHT, ejectMs: 5_000, now: () => clock.now() }),
    openTunnel,
    agentOnline: (id) => sessions.session(id) !== null || (cluster?.agentElsewhere(id) ?? false),
    external: async (svc, r) => {
      const inject = svc.externalAuthCredentialId ? await vault.resolveHeader(svc.teamId, svc.externalAuthCredentialId) : null;
      if (svc.externalAuthCredentialId && !inject) throw badRequest('credential_not_found', 'the service\'s external_auth_credential_id no longer exists in the vault');
      return externalRequest(liveEvents.guard, { baseUrl: svc.externalUrl, path: r.path, method: r.method, headers: r.headers, body: r.body, inject, timeoutMs: config.GANTRY_PROXY_TIMEOUT_MS, signal: r.signal, ...(outboundCaList ? { ca: outboundCaList } : {}) });
    },
    agentTunnel: async (teamId, agentId) => {
      if (!isUuid(agentId)) return null;
      const a = await agentStore.get(teamId, agentId);
      return a ? { tunnel: a.tunnel } : null;
    },
    authenticator: identity.authenticator,
    timeoutMs: config.GANTRY_PROXY_TIMEOUT_MS,
    maxBodyBytes: config.GANTRY_PROXY_MAX_BODY_BYTES,
    invokeMaxResponseBytes: config.GANTRY_INVOKE_MAX_RESPONSE_BYTES,
    logger: logger.child({ component: 'gateway' }),
  });
  const containerApp = new ContainerUseCases({ store: containerStore, actors, credentialExists: async (teamId, id) => (await vault.get(teamId, id)) !== null, changed: (teamId) => containerChanges.changed(teamId), guard: liveEvents.guard, invoker: gatewayInvoker(gateway, '/api/v1', logger.child({ component: 'mcp' })) });
  edge.addAll(
    withIdempotency(
      containerRoutes({ containers: containerApp, gateway }),
      taskQueries.idempotency,
    ),
  );
  edge.addAll(gateway.routes());
  edge.setWebSocketHandler(gateway.webSocketHandler());
  // the agent protocol over WebSocket on this port (ingresses that pass WebSocket but not gRPC): the same sessions as the gRPC port's
  edge.addWebSocketRoute(AGENT_WS_PATH, new AgentWebSocketTransport(agentGrpc, logger).handler(), AGENT_WS_OPTIONS);
  edge.onShutdown(() => agentGrpc.endTransport('ws'));
  edge.addAll(withIdempotency(vaultRoutes({ vault }), taskQueries.idempotency));
  const auditStore = new AuditStore(db);
  edge.addAll(auditRoutes(new AuditUseCases(auditStore)));
  edge.addAll(cloudProviderRoutes({ store: cloudStore, guard: cloudGuard, client: cloudClient, defaultMaxConcurrentJobs: config.GANTRY_CLOUD_MAX_CONCURRENT_JOBS }));
  // MCP (sk- only; GANTRY_MCP_ENABLED=false: not served): its tools call the use cases of the
  // runtime routes above
  if (config.GANTRY_MCP_ENABLED) {
    const mcp = new McpEndpoint({
      tasks: taskApp,
      workflows: workflowApp,
      agents: agentApp,
      uploads: uploadApp,
      containers: containerApp,
      basePath: '/api/v1',
      readObject: (key) => objectStore.get(key),
      logger: logger.child({ component: 'mcp' }),
      sessions: new SessionTokens(await db.secret('mcp-session'), () => clock.now()),
      version: packageVersion(),
    });
    edge.addAll(mcpRoutes({ endpoint: mcp, maxBodyBytes: config.GANTRY_MAX_BODY_BYTES, publicUrl: () => publicUrlOf() }));
  }
  if (objectStore instanceof LocalObjectStore) edge.addAll(storageRoutes(objectStore));
  edge.add(metricsRoute([nodeMetrics.registry]));
  edge.addAll(pageRoutes('/api/v1'));
  edge.addAll(openApiRoutes({ routes: () => edge.routes(), basePath: '/api/v1', version: API_DESCRIPTION_VERSION }));
  // the web console (console/dist, built by `npm run build:console`) at `/`; it may fetch from and
  // show images of the object store's URLs (the public URL's /storage, or the S3 endpoint)
  if (config.GANTRY_CONSOLE_ENABLED)
    edge.addAll(
      consoleRoutes({
        dir: resolve(fileURLToPath(new URL('.', import.meta.url)), '../console/dist'),
        extraOrigins: () => [publicUrlOf(), ...(config.S3_ENDPOINT ? [config.S3_ENDPOINT] : objectStore instanceof LocalObjectStore ? [] : ['https://*.amazonaws.com'])].map((u) => (u.startsWith('https://*.') ? u : new URL(u).origin)),
      }),
    );
  if (config.GANTRY_DEBUG_ROUTES) edge.addAll([...debugRoutes(), ...identityDebugRoutes()]);
  const http = await edge
    .listen()
    .catch((e: unknown) =>
      failStart(e, `cannot listen on HTTP ${config.GANTRY_HTTP_HOST}:${config.GANTRY_HTTP_PORT}`, [
        () => liveEvents.stop(),
        () => sessions.stop(),
        () => agentGrpc.stop(),
        () => actors.shutdown(),
        () => cluster?.stop(),
        () => identity.stop(),
        () => db.close(),
        () => redis?.close(),
      ]),
    );
  const baseUrl = `http://127.0.0.1:${http.port}/api/v1`;
  const publicUrl = config.GANTRY_PUBLIC_URL ?? `http://127.0.0.1:${http.port}`;
  publicUrlOf = () => publicUrl.replace(/\/+$/, '');
  if (objectStore instanceof LocalObjectStore) objectStore.setPublicBaseUrl(publicUrl);
  logger.info({ http_port: http.port, base_url: baseUrl }, 'listening');
  // the schedulers' safety net: every 10 s each team with pending/waiting tasks gets a resync on the
  // node that owns its scheduler (its view is rebuilt from PostgreSQL): a wake-up lost with a dead node,
  // a crashed scheduler, or tasks taken by a second scheduler during a view change must not leave tasks
  // waiting
  const schedulerWatch = setInterval(() => {
    if (resyncMs <= 0) return;
    void taskStore
      .teamsWithSchedulable()
      .then((teams) => {
        for (const team of teams) {
          const ref = { kind: SCHEDULER, id: team } as const;
          if (!cluster || cluster.owns(ref)) actors.tell(ref, { type: 'resync' });
        }
      })
      .catch(() => undefined);
  }, Math.max(1_000, 2 * (resyncMs || 5_000)));
  schedulerWatch.unref();
  // cluster-wide singleton jobs run on the lease holder only
  const leases: LeasePort = redis ? new RedisLeases(redis, config.GANTRY_CLUSTER_LEASE_MS, logger.child({ component: 'leases' })) : new InMemoryLeases();
  const stopSweepers = leases.hold('file-sweepers', files.sweepers);
  const auditRetention = new AuditRetention({
    store: auditStore,
    retentionDays: config.GANTRY_AUDIT_RETENTION_DAYS,
    now: () => clock.now(),
    onError: (e) => logger.warn({ err: e }, 'audit retention sweep failed'),
    onSwept: (n) => logger.info({ deleted: n }, 'audit retention: old entries deleted'),
  });
  const stopAuditRetention = leases.hold('audit-retention', auditRetention);

  let closing: Promise<void> | null = null;
  return {
    config,
    logger,
    db,
    httpPort: http.port,
    baseUrl,
    installationId,
    migrationsApplied,
    identity,
    actors,
    sessions,
    events,
    liveEvents,
    agentStore,
    taskStore,
    taskQueries,
    objectStore,
    files,
    agentGrpc,
    grpcPort,
    publicUrl,
    cluster,
    auditStore,
    auditRetention,
    routes: () => http.routes(),
    close() {
      closing ??= (async () => {
        logger.info('shutting down');
        // in-flight requests get the budget minus what closing the rest needs, so the whole stop
        // stays within GANTRY_SHUTDOWN_TIMEOUT_MS
        await http.shutdown(Math.max(0, config.GANTRY_SHUTDOWN_TIMEOUT_MS - 2000));
        // graceful leave: the other members take over this node's actors now, not after a lease
        await cluster?.leave();
        await liveEvents.stop();
        closeExternalAgents(liveEvents.guard);
        closeExternalAgents(cloudGuard);
        sessions.stop();
        await agentGrpc.stop();
        clearInterval(schedulerWatch);
        await stopSweepers();
        await stopAuditRetention();
        // cloud jobs stop being followed here (the provider's jobs go on; the next owner re-attaches)
        cloudRunner.stop();
        await actors.shutdown();
        await cluster?.stop();
        sharedLimits?.stop();
        await identity.stop();
        if (keyTimer) clearInterval(keyTimer);
        await db.close();
        await redisEvents?.stop();
        await redisInvalidation?.stop();
        await redis?.close();
        dataDirLock.release();
        await tracing?.shutdown().catch(() => undefined);
        logger.info('stopped');
      })();
      return closing;
    },
  };
}
