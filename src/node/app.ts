import { AGENT } from '../actors/index.js';
import { TaskUseCases } from '../app/tasks.js';
import { WorkflowUseCases } from '../app/workflows.js';
import { AgentUseCases } from '../app/agents.js';
import { AuditUseCases } from '../app/audit.js';
import { SchedulingUseCases } from '../app/scheduling.js';
import { UploadUseCases } from '../app/uploads.js';
import { ContainerUseCases } from '../app/containers.js';
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
  scheduling: SchedulingUseCases;
}

/** Builds every use case once, over the stores, actors and ports of the started modules. */
export function createUseCases(p: RouteParts): UseCases {
  const { stores, files, clock, actors, cluster } = p;
  const { sessions, agentGrpc } = p.agents;
  const { containerStore, containerChanges } = p.containers;
  const { vault, cloudStore } = p.cloud;
  return {
    workflows: new WorkflowUseCases(stores.workflowStore),
    tasks: new TaskUseCases({
      actors,
      tasks: stores.taskQueries,
      workflows: stores.workflowStore,
      files: files.staging,
      outputs: files.outputs,
      events: p.events,
      outputRetentionS: p.settings.outputRetentionS,
      now: () => clock.now(),
      cloudConfigured: async (teamId, provider) => (await cloudStore.get(teamId, provider)) !== null,
      cloudInputProblem: (fileKey, what) => stagedInputProblem(p.objectStore, fileKey, what),
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
      guard: p.liveEvents.guard,
      invoker: p.gateway.core,
    }),
    audit: new AuditUseCases(p.auditStore),
    scheduling: new SchedulingUseCases({ store: stores.schedulingStore, actors }),
  };
}
