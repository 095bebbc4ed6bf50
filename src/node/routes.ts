import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Clock } from '../shared/clock.js';
import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import type { Database } from '../persistence/db.js';
import type { AuditStore } from '../persistence/audit.js';
import type { Cluster } from '../cluster/index.js';
import type { LocalEventBus } from '../cluster/event-bus.js';
import type { LocalActorSystem } from '../actors/runtime/system.js';
import type { Protocols } from '../actors/ports.js';
import type { HttpEdge } from '../edge/http.js';
import { withIdempotency } from '../edge/idempotency.js';
import { metricsRoute, type NodeMetrics } from '../edge/metrics.js';
import { openApiRoutes } from '../edge/routes/openapi.js';
import { API_DESCRIPTION_VERSION } from '../edge/openapi/build.js';
import { systemRoutes } from '../edge/routes/system.js';
import { debugRoutes } from '../edge/routes/debug.js';
import { identityRoutes, identityDebugRoutes } from '../edge/routes/identity.js';
import { teamRoutes } from '../edge/routes/teams.js';
import { workflowRoutes } from '../edge/routes/workflows.js';
import { taskRoutes } from '../edge/routes/tasks.js';
import { pageRoutes } from '../edge/routes/pages.js';
import { consoleRoutes } from '../edge/routes/console.js';
import { storageRoutes } from '../edge/routes/storage.js';
import { fileRoutes } from '../edge/routes/files.js';
import { uploadRoutes } from '../edge/routes/uploads.js';
import { modelRoutes } from '../edge/routes/models.js';
import { nodeRoutes } from '../edge/routes/nodes.js';
import { agentRoutes } from '../edge/routes/agents.js';
import { eventRoutes } from '../edge/routes/events.js';
import { webhookRoutes } from '../edge/routes/webhooks.js';
import { notificationRoutes } from '../edge/routes/notifications.js';
import { containerRoutes } from '../edge/routes/containers.js';
import { mcpRoutes } from '../edge/routes/mcp.js';
import { vaultRoutes } from '../edge/routes/vault.js';
import { auditRoutes } from '../edge/routes/audit.js';
import { usageRoutes } from '../edge/routes/usage.js';
import { schedulingRoutes } from '../edge/routes/scheduling.js';
import { oidcRoutes } from '../edge/routes/oidc.js';
import { cloudProviderRoutes } from '../edge/routes/cloud-providers.js';
import type { Gateway } from '../edge/routes/gateway.js';
import { McpEndpoint } from '../mcp/server.js';
import { SessionTokens } from '../mcp/session.js';
import type { Identity } from '../identity/index.js';
import { endStreamsOnInvalidation } from '../events/stream-revocation.js';
import type { LiveEvents } from '../events/index.js';
import type { Files } from '../files/index.js';
import { LocalObjectStore, type ObjectStore } from '../storage/index.js';
import type { Stores } from './actors.js';
import type { Agents } from './agents.js';
import type { CloudModule } from './cloud.js';
import type { Containers } from './gateway.js';
import type { NodeSettings, PublicUrl } from './settings.js';
import { createUseCases, type UseCases } from './app.js';

/** /readyz waits at most this long for the database's answer. */
const READY_DB_BOUND_MS = 600;

/** What the routes are built on: every module's public parts. */
export interface RouteParts {
  config: Config;
  settings: NodeSettings;
  publicUrl: PublicUrl;
  db: Database;
  objectStore: ObjectStore;
  stores: Stores;
  actors: LocalActorSystem<Protocols>;
  cluster: Cluster<Protocols> | null;
  events: LocalEventBus;
  identity: Identity;
  files: Files;
  agents: Agents;
  liveEvents: LiveEvents;
  containers: Containers;
  gateway: Gateway;
  cloud: CloudModule;
  auditStore: AuditStore;
  metrics: NodeMetrics;
  clock: Clock;
  /** The clock of usage budgets (StartOptions.usageNow); absent: clock. */
  usageNow?: () => number;
  logger: Logger;
}

/** Mounts every route, WebSocket route and shutdown hook on the edge, in the edge's order. */
export async function mountRoutes(edge: HttpEdge, p: RouteParts): Promise<void> {
  const app = createUseCases(p);
  mountRuntime(edge, p, app);
  mountIdentityAndEvents(edge, p, app);
  mountAgentsAndServices(edge, p, app);
  await mountMcp(edge, p, app);
  mountSite(edge, p);
}

/** Health, workflows, runs, files, uploads, models and custom nodes. */
function mountRuntime(edge: HttpEdge, p: RouteParts, app: UseCases): void {
  const { config, db, stores } = p;
  const idem = stores.taskQueries.idempotency;
  edge.addAll(
    systemRoutes({
      config,
      agentGrpcPort: () => p.agents.agentGrpc.boundPort,
      ready: async () => {
        // answered within READY_DB_BOUND_MS whatever the database does (a hung one is "not ready")
        const dbOk = await db.ping(READY_DB_BOUND_MS);
        return { ready: dbOk && !edge.isDraining(), checks: { database: dbOk, accepting: !edge.isDraining() } };
      },
    }),
  );
  edge.addAll(withIdempotency(workflowRoutes(app.workflows), idem));
  edge.addAll(taskRoutes(app.tasks));
  edge.addAll(fileRoutes(app.uploads));
  edge.addAll(uploadRoutes({ multipart: app.multipart }));
  edge.addAll(withIdempotency(modelRoutes({ models: app.models, uploads: app.uploads }), idem));
  edge.addAll(withIdempotency(nodeRoutes({ nodes: app.nodes, uploads: app.uploads }), idem));
}

/** Identity, teams, single sign-on, live events (SSE, webhooks, notifications). */
function mountIdentityAndEvents(edge: HttpEdge, p: RouteParts, app: UseCases): void {
  const { config, identity, liveEvents, publicUrl } = p;
  const idem = p.stores.taskQueries.idempotency;
  edge.addAll(withIdempotency(identityRoutes(app.accounts), idem));
  edge.addAll(withIdempotency(teamRoutes(app.teams), idem));
  // single sign-on (GANTRY_OAUTH_PROVIDERS)
  if (config.oidcProviders.length > 0) edge.addAll(oidcRoutes({ sso: app.sso, secureCookies: () => publicUrl.origin().startsWith('https:') }));
  edge.addAll(eventRoutes(app.taskStreams));
  // open SSE streams end with their credential, session or membership (on every node: the same port)
  const stopStreamRevocation = endStreamsOnInvalidation({ hub: liveEvents.sse, invalidation: identity.invalidation, isMember: async (t, u) => (await identity.store.memberRole(t, u)) !== null, logger: p.logger.child({ component: 'events' }) });
  edge.onShutdown(stopStreamRevocation);
  edge.addAll(withIdempotency(webhookRoutes(app.webhooks), idem));
  edge.addAll(notificationRoutes(app.notifications));
  edge.onShutdown(() => liveEvents.sse.closeAll());
}

/** Agents (and their WebSocket transport), container services and the gateway, the vault, the audit log, cloud providers. */
function mountAgentsAndServices(edge: HttpEdge, p: RouteParts, app: UseCases): void {
  const { gateway } = p;
  const idem = p.stores.taskQueries.idempotency;
  edge.addAll(agentRoutes(app.agents));
  edge.addAll(withIdempotency(containerRoutes({ containers: app.containers, gateway }), idem));
  edge.addAll(gateway.routes());
  edge.setWebSocketHandler(gateway.webSocketHandler());
  p.agents.mountWebSocket(edge);
  edge.addAll(withIdempotency(vaultRoutes(app.vault), idem));
  edge.addAll(auditRoutes(app.audit));
  edge.addAll(schedulingRoutes(app.scheduling));
  edge.addAll(usageRoutes(app.usage));
  edge.addAll(cloudProviderRoutes(app.cloudProviders));
}

/** MCP (sk- only; GANTRY_MCP_ENABLED=false: not served): its tools call the same use cases as the routes. */
async function mountMcp(edge: HttpEdge, p: RouteParts, app: UseCases): Promise<void> {
  if (!p.config.GANTRY_MCP_ENABLED) return;
  const mcp = new McpEndpoint({
    tasks: app.tasks,
    workflows: app.workflows,
    agents: app.agents,
    uploads: app.uploads,
    containers: app.containers,
    basePath: '/api/v1',
    readObject: (key) => p.objectStore.get(key),
    logger: p.logger.child({ component: 'mcp' }),
    sessions: new SessionTokens(await p.db.secret('mcp-session'), () => p.clock.now()),
    version: p.settings.version,
  });
  edge.addAll(mcpRoutes({ endpoint: mcp, maxBodyBytes: p.settings.maxBodyBytes, publicUrl: () => p.publicUrl.origin() }));
}

/** The local object store's URLs, metrics, pages, the API description, the web console, debug routes. */
function mountSite(edge: HttpEdge, p: RouteParts): void {
  const { config, objectStore } = p;
  if (objectStore instanceof LocalObjectStore) edge.addAll(storageRoutes(objectStore));
  edge.add(metricsRoute([p.metrics.registry]));
  edge.addAll(pageRoutes('/api/v1'));
  edge.addAll(openApiRoutes({ routes: () => edge.routes(), basePath: '/api/v1', version: API_DESCRIPTION_VERSION }));
  // the web console (console/dist, built by `npm run build:console`) at `/`; it may fetch from and
  // show images of the object store's URLs (the public URL's /storage, or the S3 endpoint)
  const s3Endpoint = p.settings.s3Endpoint;
  if (config.GANTRY_CONSOLE_ENABLED)
    edge.addAll(
      consoleRoutes({
        dir: resolve(fileURLToPath(new URL('.', import.meta.url)), '../../console/dist'),
        extraOrigins: () => [p.publicUrl.origin(), ...(s3Endpoint ? [s3Endpoint] : objectStore instanceof LocalObjectStore ? [] : ['https://*.amazonaws.com'])].map((u) => (u.startsWith('https://*.') ? u : new URL(u).origin)),
      }),
    );
  if (config.GANTRY_DEBUG_ROUTES) edge.addAll([...debugRoutes(), ...identityDebugRoutes()]);
}
