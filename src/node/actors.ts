import type { Files } from '../files/index.js';
import type { Config } from '../shared/config.js';
import type { Clock } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import type { Database } from '../persistence/db.js';
import { PgTaskStore } from '../persistence/task-store.js';
import { PgAgentStore } from '../persistence/agent-store.js';
import { TaskQueries } from '../persistence/task-queries.js';
import { WorkflowStore } from '../persistence/workflow-store.js';
import { CredentialSchedulingStore } from '../persistence/credential-scheduling.js';
import type { PgContainerStore } from '../persistence/container-store.js';
import type { RedisInvalidation } from '../cluster/invalidation-redis.js';
import type { Cluster } from '../cluster/index.js';
import type { LocalEventBus } from '../cluster/event-bus.js';
import { LocalActorSystem } from '../actors/runtime/system.js';
import { registerActors, recoverTasks, recoverOwned, recoverContainers } from '../actors/index.js';
import { PROGRESS_MIN_INTERVAL_MS } from '../actors/task/task.actor.js';
import type { AgentTransportPort, Protocols } from '../actors/ports.js';
import type { CloudRunner } from '../cloud/runner.js';
import { actorMetrics, type NodeMetrics } from '../edge/metrics.js';
import type { Participant } from './lifecycle.js';
import { PgUsageStore } from '../persistence/usage-store.js';
import type { NodeSettings } from './settings.js';

/** One task actor per open task, one scheduler per team, one agent actor per stream, one per container service and cloud dispatcher. */
export function createActorSystem(clock: Clock, logger: Logger): LocalActorSystem<Protocols> {
  return new LocalActorSystem<Protocols>(clock, logger.child({ component: 'actors' }), actorMetrics);
}

export interface Stores {
  taskStore: PgTaskStore;
  agentStore: PgAgentStore;
  /** Task reads and the group-committed submit insert. */
  taskQueries: TaskQueries;
  workflowStore: WorkflowStore;
  /** Usage accounting: attempt aggregations and GPU budgets (the attempts are written by taskStore). */
  usageStore: PgUsageStore;
  /** Per-credential fair-share weights and caps. */
  schedulingStore: CredentialSchedulingStore;
}

/** The task, agent and workflow stores; rows written in cluster mode carry this node's member id. */
export function createStores(d: { db: Database; cluster: Cluster<Protocols> | null; invalidation: RedisInvalidation | null; files: Files }): Stores {
  const memberId = (): string | null => d.cluster?.memberId ?? null;
  const workflowStore = new WorkflowStore(d.db);
  // cluster: a workflow changed on one node drops it from every node's workflow cache (same broadcast as identity's)
  const inv = d.invalidation;
  if (inv) {
    workflowStore.cache.onInvalidate((workflowId, dropVersions) => inv.publish({ type: 'workflow', workflowId, dropVersions }));
    inv.subscribe((ev) => {
      if (ev.type === 'workflow') workflowStore.cache.applyInvalidation(ev.workflowId, ev.dropVersions);
    });
  }
  // cluster: a budget set or removed on one node drops the team from every node's budget presence cache
  const usageStore = new PgUsageStore(d.db, inv ? { state: () => inv.state(), changed: async (teamId) => inv.publish({ type: 'budget', teamId }) } : {});
  inv?.subscribe((ev) => {
    if (ev.type === 'budget') usageStore.presence.drop(ev.teamId);
  });
  return { taskStore: new PgTaskStore(d.db, { memberId }), agentStore: new PgAgentStore(d.db, { memberId, needsSync: (teamId, inv) => d.files.sync.needsSync(teamId, inv) }), taskQueries: new TaskQueries(d.db), workflowStore, usageStore, schedulingStore: new CredentialSchedulingStore(d.db) };
}

/** Registers every actor kind with its dependencies (before the cluster routes messages here). */
export function registerAll(
  actors: LocalActorSystem<Protocols>,
  d: {
    config: Config;
    settings: NodeSettings;
    stores: Stores;
    metrics: NodeMetrics;
    cloudRunner: CloudRunner;
    transport: AgentTransportPort;
    events: LocalEventBus;
    containers: PgContainerStore;
    containerChanges: { changed(teamId: string): void };
  },
): void {
  const { config } = d;
  registerActors(actors, {
    metrics: d.metrics.tasks,
    cloudJobs: d.cloudRunner,
    tasks: d.stores.taskStore,
    agents: d.stores.agentStore,
    transport: d.transport,
    events: d.events,
    quotas: { maxConcurrentTasks: () => config.quotas.maxConcurrentTasks },
    timeoutMaxS: config.GANTRY_TASK_TIMEOUT_MAX_S,
    ackTimeoutMs: config.GANTRY_ACK_TIMEOUT_S * 1000,
    retryBackoffBaseMs: config.GANTRY_RETRY_BACKOFF_BASE_S * 1000,
    retryBackoffMaxMs: config.GANTRY_RETRY_BACKOFF_MAX_S * 1000,
    agentGraceMs: d.settings.agentGraceMs,
    progressIntervalMs: PROGRESS_MIN_INTERVAL_MS,
    askTimeoutMs: 15_000,
    schedulerResyncMs: d.settings.schedulerResyncMs,
    schedulerPolicy: { strategy: config.GANTRY_SCHEDULER_STRATEGY, agingS: config.GANTRY_PRIORITY_AGING_S, warmLookahead: config.GANTRY_SCHEDULER_WARM_LOOKAHEAD, warmSlackTasks: config.GANTRY_SCHEDULER_WARM_SLACK_TASKS, warmWaitS: config.GANTRY_SCHEDULER_WARM_WAIT_S },
    fairShareWindowS: config.GANTRY_FAIRSHARE_WINDOW_S,
    schedulingLimits: d.stores.schedulingStore,
    containers: d.containers,
    containerChanges: d.containerChanges,
    containerAutoscale: { intervalMs: config.GANTRY_AUTOSCALE_INTERVAL_MS, cooldownMs: config.GANTRY_AUTOSCALE_COOLDOWN_MS, queueDelayMs: config.GANTRY_AUTOSCALE_QUEUE_DELAY_MS },
    containerRollout: { healthTimeoutMs: config.GANTRY_ROLLOUT_HEALTH_TIMEOUT_MS },
    containerMetrics: d.metrics.containers,
  });
}

/**
 * The actors' participant: at start the open work is recovered (cluster: at every new view, the
 * open tasks, team schedulers and container services this node owns now; single node: everything,
 * no agent stream having survived the restart); at stop the actor system shuts down.
 */
export function actorsParticipant(d: { actors: LocalActorSystem<Protocols>; cluster: Cluster<Protocols> | null; stores: Stores; containers: PgContainerStore; settings: NodeSettings; logger: Logger }): Participant {
  const { actors, logger } = d;
  const { taskStore, agentStore } = d.stores;
  const graceMs = d.settings.agentGraceMs;
  const serviceIds = (): Promise<string[]> => d.containers.activeServiceIds();
  return {
    async start() {
      const c = d.cluster;
      if (c) {
        // every new view: take over the open tasks (and team schedulers) this node owns now
        const takeOver = (): void => {
          void recoverOwned(actors, taskStore, graceMs, (ref) => c.owns(ref))
            .then((n) => n > 0 && logger.info({ tasks: n }, 'took over open tasks'))
            .catch((e: unknown) => logger.warn({ err: e }, 'taking over owned tasks failed'));
          void recoverContainers(actors, serviceIds, (ref) => c.owns(ref)).catch((e: unknown) => logger.warn({ err: e }, 'taking over container services failed'));
        };
        c.onView(() => takeOver());
        takeOver();
        return;
      }
      // single node: no agent stream survived the restart
      await agentStore.markAllOffline(null);
      const recovered = await recoverTasks(actors, taskStore, graceMs);
      if (recovered) logger.info({ open_tasks: recovered }, 'recovering open tasks');
      await recoverContainers(actors, serviceIds);
    },
    stop: () => actors.shutdown(),
  };
}
