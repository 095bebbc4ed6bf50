import type { LocalActorSystem } from './runtime/system.js';
import type { AgentStorePort, AgentTransportPort, CloudJobsPort, ContainerChangesPort, ContainerStorePort, EventBusPort, Protocols, QuotaPort, SchedulingLimitsPort, TaskMetricsPort, TaskStorePort } from './ports.js';
import type { PolicySettings } from './scheduler/policy.js';
import { AgentMsg, AgentReplySchemas } from './agent/protocol.js';
import { SchedulerMsg, SchedulerReplySchemas } from './scheduler/protocol.js';
import { TaskMsg, TaskReplySchemas } from './task/protocol.js';
import { envelopeCodec, type MessageSchemas, type ReplySchemas } from './runtime/envelope.js';
import { TaskActor, TASK, parseTaskMsg } from './task/task.actor.js';
import { TeamSchedulerActor, SCHEDULER, parseSchedulerMsg } from './scheduler/scheduler.actor.js';
import { AgentActor, AGENT, parseAgentMsg } from './agent/agent.actor.js';
import { ContainerServiceMsg, ContainerServiceReplySchemas } from './container/protocol.js';
import { ContainerServiceActor, CONTAINER_SERVICE, parseContainerServiceMsg, type ContainerMetricsPort } from './container/container.actor.js';
import { CloudDispatcherMsg, CloudDispatcherReplySchemas } from './cloud/protocol.js';
import { CloudDispatcherActor, CLOUD_DISPATCHER, parseCloudDispatcherMsg } from './cloud/cloud.actor.js';
import { cloudDispatcherId } from '../domain/tasks/record.js';

export { TASK, SCHEDULER, AGENT, CONTAINER_SERVICE, CLOUD_DISPATCHER, cloudDispatcherId };

export interface ActorDeps {
  tasks: TaskStorePort;
  agents: AgentStorePort;
  transport: AgentTransportPort;
  events: EventBusPort;
  quotas: QuotaPort;
  timeoutMaxS: number;
  ackTimeoutMs: number;
  /** Task retry backoff (full jitter): base and cap of the delay before a retry may be scheduled. */
  retryBackoffBaseMs?: number;
  retryBackoffMaxMs?: number;
  agentGraceMs: number;
  progressIntervalMs: number;
  askTimeoutMs: number;
  /** Cluster: the team scheduler's rebuild from PostgreSQL after this long without activity (0 = off). */
  schedulerResyncMs?: number;
  /** Container services: their store, the change broadcast, and the reconcile period (default 5 s). */
  containers: ContainerStorePort;
  containerChanges: ContainerChangesPort;
  containerTickMs?: number;
  /** Container autoscaling: report/evaluation interval, cool-down, queue delay that adds a replica. */
  containerAutoscale?: { intervalMs: number; cooldownMs: number; queueDelayMs: number };
  /** Container rolling updates: how long a new replica has to become healthy. */
  containerRollout?: { healthTimeoutMs: number };
  /** Cold starts of container services, for /metrics. */
  containerMetrics?: ContainerMetricsPort;
  /** /metrics counters (absent: nothing counted). */
  metrics?: TaskMetricsPort;
  /** Hosted cloud providers: runs provider jobs for the cloud dispatchers. */
  cloudJobs: CloudJobsPort;
  /** The team schedulers' policy (default fair), fair share's window, and per-credential limits. */
  schedulerPolicy?: PolicySettings;
  fairShareWindowS?: number;
  schedulingLimits?: SchedulingLimitsPort;
}

/** Each kind's zod message union: what the envelope codec (remoting) and wire decoders validate with. */
export const messageSchemas: MessageSchemas<Protocols> = { task: TaskMsg, 'team-scheduler': SchedulerMsg, agent: AgentMsg, 'container-service': ContainerServiceMsg, 'cloud-dispatcher': CloudDispatcherMsg };

/** Each kind's reply schemas: what remoting validates a remote node's answer with. */
export const replySchemas: ReplySchemas<Protocols> = {
  task: TaskReplySchemas,
  'team-scheduler': SchedulerReplySchemas,
  agent: AgentReplySchemas,
  'container-service': ContainerServiceReplySchemas,
  'cloud-dispatcher': CloudDispatcherReplySchemas,
};

/** The one JSON codec for envelopes of this service's actors (and the replies to their asks). */
export const envelopes = envelopeCodec<Protocols>(messageSchemas, replySchemas);

/** Registers every actor kind with its protocol parser. */
export function registerActors(sys: LocalActorSystem<Protocols>, d: ActorDeps): void {
  sys.register(TASK, (id, ctx) => new TaskActor(id, ctx, { store: d.tasks, events: d.events, config: { timeoutMaxS: d.timeoutMaxS, ackTimeoutMs: d.ackTimeoutMs, retryBackoffBaseMs: d.retryBackoffBaseMs ?? 0, retryBackoffMaxMs: d.retryBackoffMaxMs ?? 0 }, progressIntervalMs: d.progressIntervalMs, ...(d.metrics ? { metrics: d.metrics } : {}) }), {
    parse: parseTaskMsg,
    idleMs: 60_000,
  });
  sys.register(SCHEDULER, (id, ctx) => new TeamSchedulerActor(id, ctx, {
        tasks: d.tasks,
        agents: d.agents,
        quotas: d.quotas,
        events: d.events,
        askTimeoutMs: d.askTimeoutMs,
        resyncMs: d.schedulerResyncMs ?? 0,
        ...(d.metrics ? { metrics: d.metrics } : {}),
        ...(d.schedulerPolicy ? { policy: d.schedulerPolicy } : {}),
        ...(d.fairShareWindowS ? { fairShareWindowS: d.fairShareWindowS } : {}),
        ...(d.schedulingLimits ? { limits: d.schedulingLimits } : {}),
      }), {
    parse: parseSchedulerMsg,
    idleMs: 10 * 60_000,
  });
  sys.register(AGENT, (id, ctx) => new AgentActor(id, ctx, { transport: d.transport, store: d.agents, tasks: d.tasks, graceMs: d.agentGraceMs }), {
    parse: parseAgentMsg,
    idleMs: 24 * 3600_000,
  });
  sys.register(CONTAINER_SERVICE, (id, ctx) => new ContainerServiceActor(id, ctx, { store: d.containers, changes: d.containerChanges, agentGraceMs: d.agentGraceMs, tickMs: d.containerTickMs ?? 5_000, ...(d.containerAutoscale ? { autoscale: d.containerAutoscale } : {}), ...(d.containerMetrics ? { metrics: d.containerMetrics } : {}), ...(d.containerRollout ? { rollout: d.containerRollout } : {}) }), {
    parse: parseContainerServiceMsg,
    idleMs: 10 * 60_000,
  });
  sys.register(CLOUD_DISPATCHER, (id, ctx) => new CloudDispatcherActor(id, ctx, { tasks: d.tasks, jobs: d.cloudJobs, askTimeoutMs: d.askTimeoutMs }), {
    parse: parseCloudDispatcherMsg,
    idleMs: 10 * 60_000,
  });
}

/** Start and cluster view changes: every service that should run or is stopping reconciles (on its owner). */
export async function recoverContainers(sys: LocalActorSystem<Protocols>, serviceIds: () => Promise<string[]>, owns: (ref: { kind: typeof CONTAINER_SERVICE; id: string }) => boolean = () => true): Promise<number> {
  let n = 0;
  for (const id of await serviceIds()) {
    const ref = { kind: CONTAINER_SERVICE, id } as const;
    if (sys.isActive(ref) || !owns(ref)) continue;
    sys.tell(ref, { type: 'tick' });
    n++;
  }
  return n;
}

/** Recovery on start: every non-terminal task is picked up again. */
export async function recoverTasks(sys: LocalActorSystem<Protocols>, tasks: TaskStorePort, graceMs: number): Promise<number> {
  const open = await tasks.nonTerminal();
  const teams = new Set<string>();
  for (const t of open) {
    teams.add(t.teamId);
    if (t.status === 'provisioning' || t.status === 'queued' || t.status === 'running') sys.tell({ kind: TASK, id: t.id }, { type: 'recover', graceMs });
  }
  for (const team of teams) sys.tell({ kind: SCHEDULER, id: team }, { type: 'kick' });
  // cloud dispatchers re-attach to their provider jobs on activation
  for (const d of new Set(open.filter((t) => t.dispatchTarget !== 'agent').map((t) => cloudDispatcherId(t.teamId, t.dispatchTarget)))) sys.tell({ kind: CLOUD_DISPATCHER, id: d }, { type: 'kick' });
  return open.length;
}

/**
 * Cluster: after a membership change, this node takes over the open tasks it owns now (their owner
 * died or left, or placement moved them here): each is recovered from PostgreSQL, asking its agent's
 * actor (wherever it lives) whether the agent still holds it (the ones it already runs are asked
 * too); and the schedulers of the teams it owns now are kicked. Returns how many task actors were
 * newly recovered.
 */
export async function recoverOwned(
  sys: LocalActorSystem<Protocols>,
  tasks: TaskStorePort,
  graceMs: number,
  owns: (ref: { kind: typeof TASK | typeof SCHEDULER | typeof CLOUD_DISPATCHER; id: string }) => boolean,
): Promise<number> {
  const open = await tasks.nonTerminal();
  const teams = new Set<string>();
  let n = 0;
  for (const t of open) {
    if (owns({ kind: SCHEDULER, id: t.teamId })) teams.add(t.teamId);
    const ref = { kind: TASK, id: t.id } as const;
    if (!owns(ref)) continue;
    if (t.status === 'provisioning' || t.status === 'queued' || t.status === 'running') {
      // an activation this node already runs is asked to confirm too: its agent may have handed
      // the result to another activation during the change (one whose copy rejected it), and then
      // only this question (unanswered: the grace period ends, the attempt fails over) finds that out
      // (agent runs only: a hosted provider's job is followed by its dispatcher, not re-attached twice)
      const active = sys.isActive(ref);
      if (active && t.dispatchTarget !== 'agent') continue;
      sys.tell(ref, { type: 'recover', graceMs, confirm: true });
      if (!active) n++;
    }
  }
  for (const team of teams) sys.tell({ kind: SCHEDULER, id: team }, { type: 'kick' });
  // the cloud dispatchers this node owns now: activated here, they re-attach to their provider jobs
  for (const id of new Set(open.filter((t) => t.dispatchTarget !== 'agent').map((t) => cloudDispatcherId(t.teamId, t.dispatchTarget)))) {
    const ref = { kind: CLOUD_DISPATCHER, id } as const;
    if (owns(ref) && !sys.isActive(ref)) sys.tell(ref, { type: 'kick' });
  }
  return n;
}
