import { AGENT } from '../actors/index.js';
import { TaskUseCases } from '../app/tasks.js';
import { WorkflowUseCases } from '../app/workflows.js';
import { AgentUseCases } from '../app/agents.js';
import { AuditUseCases } from '../app/audit.js';
import { UsageUseCases } from '../app/usage.js';
import { SchedulingUseCases } from '../app/scheduling.js';
import { UploadUseCases } from '../app/uploads.js';
import { ContainerUseCases } from '../app/containers.js';
import { AccountUseCases, SsoUseCases, TeamUseCases } from '../app/identity.js';
import { OidcLogin } from '../identity/oidc.js';
import { ModelUseCases, NodeUseCases } from '../app/registry.js';
import { MultipartUseCases } from '../app/uploads.js';
import { NotificationUseCases } from '../app/notifications.js';
import { TaskStreamUseCases } from '../app/task-streams.js';
import { WebhookUseCases } from '../app/webhooks.js';
import { VaultUseCases } from '../app/vault.js';
import { CloudProviderUseCases } from '../app/cloud-providers.js';
import { TooManyStreams } from '../events/sse.js';
import { OutboundRefused, type OutboundGuard } from '../events/outbound.js';
import type { OutboundUrlPolicy } from '../app/ports.js';
import { stagedInputProblem } from '../cloud/limits.js';
import type { RouteParts } from './routes.js';

/** The application layer's use cases, shared by the HTTP routes and the MCP tools. */
export interface UseCases {
  workflows: WorkflowUseCases;
  tasks: TaskUseCases;
  uploads: UploadUseCases;
  agents: AgentUseCases;
  containers: ContainerUseCases;
  audit: AuditUseCases;
  accounts: AccountUseCases;
  teams: TeamUseCases;
  sso: SsoUseCases;
  models: ModelUseCases;
  nodes: NodeUseCases;
  multipart: MultipartUseCases;
  notifications: NotificationUseCases;
  taskStreams: TaskStreamUseCases;
  webhooks: WebhookUseCases;
  vault: VaultUseCases;
  cloudProviders: CloudProviderUseCases;
  usage: UsageUseCases;
  scheduling: SchedulingUseCases;
}

/** The outbound guard as the use cases' URL policy: a refusal is its reason, anything else (a bug, not a refusal) is thrown. */
export function outboundPolicy(guard: Pick<OutboundGuard, 'checkUrl'>): OutboundUrlPolicy {
  return {
    refusal: async (url) => {
      try {
        await guard.checkUrl(url);
        return null;
      } catch (e) {
        if (e instanceof OutboundRefused) return e.message;
        throw e;
      }
    },
  };
}

/** Builds every use case once, over the stores, actors and ports of the started modules. */
export function createUseCases(p: RouteParts): UseCases {
  const { stores, files, clock, actors, cluster } = p;
  const { sessions, agentGrpc } = p.agents;
  const { containerStore, containerChanges } = p.containers;
  const { vault, cloudStore } = p.cloud;
  const live = p.liveEvents;
  const { identity } = p;
  const now = (): number => clock.now();
  // the usage clock: the node's, unless a test injects its own (a budget's reset without waiting a month)
  const usage = new UsageUseCases({ store: stores.usageStore, now: p.usageNow ?? (() => clock.now()) });
  return {
    workflows: new WorkflowUseCases(stores.workflowStore, (teamId) => stores.agentStore.teamNodeClasses(teamId)),
    tasks: new TaskUseCases({
      actors,
      tasks: stores.taskQueries,
      workflows: stores.workflowStore,
      files: files.staging,
      outputs: files.outputs,
      events: p.events,
      outputRetentionS: p.settings.outputRetentionS,
      now,
      cloudConfigured: async (teamId, provider) => (await cloudStore.get(teamId, provider)) !== null,
      cloudInputProblem: (fileKey, what) => stagedInputProblem(p.objectStore, fileKey, what),
      checkBudget: (principal) => usage.checkRun(principal),
    }),
    uploads: new UploadUseCases(files.staging),
    agents: new AgentUseCases({
      agents: stores.agentStore,
      // the stream may be on another node of the cluster (the agent directory knows)
      session: (id) => sessions.session(id) ?? (sessions.connectedElsewhere(id) ? { sessionId: '' } : null),
      kick: (id) => {
        if (sessions.session(id)) agentGrpc.kickAgent(id);
        else if (cluster) actors.tell({ kind: AGENT, id }, { type: 'kick' });
      },
      publicUrl: () => p.publicUrl.origin(),
    }),
    containers: new ContainerUseCases({
      store: containerStore,
      actors,
      credentialExists: async (teamId, id) => (await vault.get(teamId, id)) !== null,
      changed: (teamId) => containerChanges.changed(teamId),
      guard: outboundPolicy(live.guard),
      invoker: p.gateway.core,
    }),
    audit: new AuditUseCases(p.auditStore),
    accounts: new AccountUseCases(identity.service),
    teams: new TeamUseCases(identity.service),
    // single sign-on (GANTRY_OAUTH_PROVIDERS); the redirect URI is built on the public URL known after listen
    sso: new SsoUseCases({
      sso: new OidcLogin({ config: p.config, store: identity.store, identity: identity.service, invalidation: identity.invalidation, logger: p.logger.child({ component: 'oidc' }), publicUrl: () => p.publicUrl.origin() }),
      limits: identity.service,
    }),
    models: new ModelUseCases(files.models),
    nodes: new NodeUseCases(files.nodes),
    multipart: new MultipartUseCases(files.multipart),
    notifications: new NotificationUseCases({ store: live.store, now }),
    taskStreams: new TaskStreamUseCases({
      reserve: (teamId) => {
        try {
          return { release: live.sse.reserve(teamId) };
        } catch (e) {
          if (e instanceof TooManyStreams) return { refused: e.message };
          throw e;
        }
      },
      serve: (...a) => live.sse.serve(...a),
    }),
    webhooks: new WebhookUseCases({ store: live.store, guard: outboundPolicy(live.guard), dispatcher: live.dispatcher, now }),
    vault: new VaultUseCases(vault),
    cloudProviders: new CloudProviderUseCases({ store: cloudStore, guard: outboundPolicy(p.cloud.cloudGuard), client: p.cloud.cloudClient, defaultMaxConcurrentJobs: p.config.GANTRY_CLOUD_MAX_CONCURRENT_JOBS }),
    usage,
    scheduling: new SchedulingUseCases({ store: stores.schedulingStore, actors }),
  };
}
