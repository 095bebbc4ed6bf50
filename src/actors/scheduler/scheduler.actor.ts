import type { Actor, ActorContext, ReplyHandle } from '../runtime/system.js';
import { CLOUD_DISPATCHER_KIND, cloudDispatcherId, SCHEDULER_KIND, TASK_KIND } from '../../domain/tasks/record.js';
import type { AgentInfo, AgentStorePort, EventBusPort, Protocols, QuotaPort, SchedulingLimitsPort, TaskMetricsPort, TaskRecord, TaskStorePort } from '../ports.js';
import { endSpan, startSpan, traceparentOfSpan, tracingEnabled } from '../../shared/tracing.js';
import { decide, initialState, statsOf, type SchedulerEffect, type SchedulerInput, type SchedulerMemory, type SchedulerState } from './decide.js';
import { UsageLedger } from './ledger.js';
import { DEFAULT_POLICY, type PolicySettings } from './policy.js';
import { SchedulerMsg, type SchedulerReply } from './protocol.js';
import { waitingReason } from './waiting.js';

export const SCHEDULER = SCHEDULER_KIND;

export interface SchedulerDeps {
  tasks: TaskStorePort;
  agents: AgentStorePort;
  quotas: QuotaPort;
  events: EventBusPort;
  askTimeoutMs: number;
  /**
   * Cluster: while tasks wait and nothing happens for this long, the view is rebuilt from PostgreSQL
   * (messages can be lost with a dead node). 0 = off (a single node loses no message; a rebuild would
   * re-add an agent still in its disconnect grace period).
   */
  resyncMs?: number;
  metrics?: TaskMetricsPort;
  /** The scheduling policy (default: fair, aging 300 s). */
  policy?: PolicySettings;
  /** Fair share's sliding window in seconds (default 3600). */
  fairShareWindowS?: number;
  /** Per-credential weights and caps (absent: none). */
  limits?: SchedulingLimitsPort;
}

export const parseSchedulerMsg = (m: SchedulerMsg): SchedulerMsg => SchedulerMsg.parse(m);

type Ctx = ActorContext<Protocols, typeof SCHEDULER>;

/**
 * One per team: a single run loop whose state (FIFO queue, agents and their free slots, active
 * count) lives in memory and is rebuilt from PostgreSQL on activation. The decisions are made by
 * the pure decide(); this shell runs their effects. No turn awaits I/O: the bulk reads (loadMany)
 * and the pending -> waiting batch write are started here and their results come back as
 * `loaded` / `waiting_marked` turns. A `stats` ask is answered once the scheduler is quiescent
 * (no I/O in flight, no pass pending), so tests can use it as a barrier.
 */
export class TeamSchedulerActor implements Actor<Protocols, typeof SCHEDULER> {
  private s: SchedulerState;
  private inflight = 0;
  private statsWaiting: Array<ReplyHandle<SchedulerReply>> = [];

  constructor(
    private readonly teamId: string,
    private readonly ctx: Ctx,
    private readonly d: SchedulerDeps,
  ) {
    this.mem = { ledger: new UsageLedger(d.fairShareWindowS ?? 3600), limits: new Map(), lastWorkflow: new Map() };
    this.s = initialState(teamId, [], [], [], this.mem);
  }

  /** Survives rebuilds of the view: the fair-share ledger, the credential limits, what each agent ran last. */
  private readonly mem: Required<SchedulerMemory>;

  async onActivate(): Promise<void> {
    const [waiting, active, agents] = await this.reads();
    this.s = initialState(this.teamId, waiting, active, agents, this.mem);
  }

  /** The activation reads: the queue, the held tasks, the agents, and the credential limits. */
  private async reads(): Promise<[TaskRecord[], TaskRecord[], AgentInfo[]]> {
    const now = this.ctx.clock.now();
    const none = Promise.resolve(null);
    const limitsRead = this.d.limits ? this.d.limits.forTeam(this.teamId) : none;
    const seedRead = this.d.tasks.recentUsage && !this.seeded ? this.d.tasks.recentUsage(this.teamId, now - this.mem.ledger.windowS * 1000) : none;
    const [waiting, active, agents, limits, usage] = await Promise.all([this.d.tasks.schedulable(this.teamId), this.d.tasks.active(this.teamId), this.d.agents.online(this.teamId), limitsRead, seedRead]);
    if (limits) {
      this.mem.limits.clear();
      for (const [k, v] of limits) this.mem.limits.set(k, v);
    }
    if (usage) {
      // once per activation: afterwards the ledger is fed by this scheduler's own events
      this.seeded = true;
      this.mem.ledger.seed(usage);
      for (const r of [...usage].sort((a, b) => a.start - b.start)) if (r.agentId && r.workflowKey) this.mem.lastWorkflow.set(r.agentId, r.workflowKey);
    }
    return [waiting, active, agents];
  }

  private seeded = false;

  receive(m: SchedulerMsg): SchedulerReply | undefined {
    // a query, answered from the view as it is (no pass, no state change)
    if (m.type === 'why_waiting') return { reason: waitingReason(this.s, m.taskId, { now: this.ctx.clock.now(), maxConcurrent: this.d.quotas.maxConcurrentTasks(this.teamId) }) };
    if (m.type === 'stats' && !this.quiescent()) {
      this.statsWaiting.push(this.ctx.deferReply());
      return undefined;
    }
    return this.step(m);
  }

  private quiescent(): boolean {
    return this.inflight === 0 && !this.s.passPending && this.s.toLoad.size === 0;
  }

  /** Rebuilds the view from PostgreSQL (the same reads as activation), when nothing is in flight. */
  private resync(): void {
    // (also sent by the node every 10 s while the team has pending/waiting tasks: a scheduler that lost
    // tasks from its queue, e.g. to a second scheduler during a view change, finds them here)
    if (!this.quiescent() || this.resyncing) return this.armResync();
    this.resyncing = true;
    this.inflight++;
    const reads = this.reads();
    this.ctx.reenterAfter(reads, (r) => {
      this.inflight--;
      this.resyncing = false;
      if (r.ok && this.quiescent()) {
        const [waiting, active, agents] = r.value;
        this.s = initialState(this.teamId, waiting, active, agents, this.mem);
        this.step({ type: 'kick' });
      }
      this.armResync();
    });
  }

  private resyncing = false;

  private armResync(): void {
    const ms = this.d.resyncMs ?? 0;
    if (ms <= 0) return;
    if (this.s.queue.size > 0) this.ctx.setTimer('resync', ms, { type: 'resync' });
    else this.ctx.cancelTimer('resync');
  }

  private step(m: SchedulerInput): SchedulerReply | undefined {
    const dec = decide(this.s, m, { now: this.ctx.clock.now(), maxConcurrent: this.d.quotas.maxConcurrentTasks(this.teamId), policy: this.d.policy ?? DEFAULT_POLICY });
    this.s = dec.state;
    for (const e of dec.effects) this.run(e);
    // tasks wait: make sure a resync is armed (re-armed by every message: it fires only when the queue sat still)
    if (this.s.queue.size > 0 && m.type !== 'stats' && m.type !== 'resync') this.armResync();
    if (this.statsWaiting.length > 0 && this.quiescent()) for (const h of this.statsWaiting.splice(0)) h.resolve(statsOf(this.s));
    return dec.reply;
  }

  private run(e: SchedulerEffect): void {
    switch (e.type) {
      case 'assign': {
        const waitMs = e.task ? Math.max(0, this.ctx.clock.now() - e.task.createdAt) : null;
        if (waitMs !== null) this.d.metrics?.assigned(waitMs);
        // tracing on: the decision is a span in the task's trace; the task actor's assigning
        // transition (and from it the agent's run) is its child
        let traceparent: string | null = null;
        if (tracingEnabled() && e.task?.traceParent) {
          const span = startSpan('scheduler assign', {
            parent: e.task.traceParent,
            attributes: { 'gantry.task.id': e.taskId, 'gantry.team.id': this.teamId, 'gantry.agent.id': e.agentId, 'gantry.provision': e.provision, ...(waitMs !== null ? { 'gantry.queue_wait_ms': waitMs } : {}) },
          });
          traceparent = traceparentOfSpan(span);
          endSpan(span);
        }
        this.ctx.system.tell({ kind: TASK_KIND, id: e.taskId }, { type: 'assign', agentId: e.agentId, provision: e.provision, ...(e.task ? { task: e.task } : {}), ...(traceparent ? { traceparent } : {}) });
        return;
      }
      case 'cloud':
        this.ctx.system.tell({ kind: CLOUD_DISPATCHER_KIND, id: cloudDispatcherId(this.teamId, e.task.dispatchTarget) }, { type: 'enqueue', task: e.task });
        return;
      case 'kick':
        this.ctx.system.tell(this.ctx.self, { type: 'kick' });
        return;
      case 'resync':
        this.resync();
        break;
      case 'set_timer':
        this.ctx.setTimer('backoff', e.ms, { type: 'kick' });
        return;
      case 'publish':
        this.d.events.publish(e.events);
        return;
      case 'load':
        this.io(this.d.tasks.loadMany(e.ids), (records) => ({ type: 'loaded', token: e.token, ids: e.ids, records }));
        return;
      case 'mark_waiting':
        this.io(this.d.tasks.markWaiting(this.teamId, e.ids), (r) => {
          // the task actors log their own transitions; this bulk pending -> waiting is the scheduler's
          if (r.moved.length > 0) this.ctx.log.info({ team_id: this.teamId, from: 'pending', to: 'waiting', task_ids: r.moved.slice(0, 100), count: r.moved.length }, 'task transition');
          return { type: 'waiting_marked', ids: e.ids, moved: r.moved, events: r.events };
        });
        return;
    }
  }

  /** Starts I/O; its result is decided as a later turn. A failure is a crash: the scheduler restarts from PostgreSQL. */
  private io<T>(work: Promise<T>, toMsg: (v: T) => SchedulerInput): void {
    this.inflight++;
    this.ctx.reenterAfter(work, (r) => {
      this.inflight--;
      // the view is uncertain after a failed read/write: crash, and restart from PostgreSQL
      if (!r.ok) throw new Error('team scheduler I/O failed', { cause: r.error });
      this.step(toMsg(r.value));
    });
  }
}
