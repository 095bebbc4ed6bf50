import type { Actor, ActorContext } from '../runtime/system.js';
import type { AgentStorePort, EventBusPort, QuotaPort, TaskRecord, TaskStorePort } from '../ports.js';
import { plan, type AgentSlot } from './decide.js';
import { SchedulerMsg } from './protocol.js';

export const SCHEDULER = 'team-scheduler';
const TASK = 'task';

export interface SchedulerDeps {
  tasks: TaskStorePort;
  agents: AgentStorePort;
  quotas: QuotaPort;
  events: EventBusPort;
  askTimeoutMs: number;
}

export const parseSchedulerMsg = (m: unknown): SchedulerMsg => SchedulerMsg.parse(m);

/**
 * One per team: a single run loop whose state (FIFO queue, agents and their free slots, active
 * count) lives in memory and is rebuilt from PostgreSQL on activation.
 */
export class TeamSchedulerActor implements Actor {
  private queue = new Map<string, TaskRecord>();
  private agents = new Map<string, AgentSlot>();
  /** provisioning/queued/running task -> agent */
  private active = new Map<string, string | null>();
  /** A dispatch pass is scheduled (bursts of messages coalesce into one pass). */
  private passPending = false;

  constructor(
    private readonly teamId: string,
    private readonly ctx: ActorContext,
    private readonly d: SchedulerDeps,
  ) {}

  async onActivate(): Promise<void> {
    const [waiting, active, agents] = await Promise.all([this.d.tasks.schedulable(this.teamId), this.d.tasks.active(this.teamId), this.d.agents.online(this.teamId)]);
    for (const t of waiting) this.queue.set(t.id, t);
    for (const t of active) this.active.set(t.id, t.agentId);
    for (const a of agents) this.upsertAgent(a);
  }

  private upsertAgent(a: Omit<AgentSlot, 'free' | 'lastAssignedAt'>): void {
    const prev = this.agents.get(a.agentId);
    let used = 0;
    for (const ag of this.active.values()) if (ag === a.agentId) used++;
    this.agents.set(a.agentId, { ...a, free: Math.max(0, a.slots - used), lastAssignedAt: prev?.lastAssignedAt ?? 0 });
  }

  async receive(raw: unknown): Promise<unknown> {
    const m = raw as SchedulerMsg;
    switch (m.type) {
      case 'task_submitted':
      case 'task_requeued': {
        const t = m.type === 'task_submitted' && m.task ? m.task : await this.d.tasks.load(m.taskId);
        this.active.delete(m.taskId);
        if (t && t.teamId === this.teamId && (t.status === 'pending' || t.status === 'waiting')) this.queue.set(t.id, t);
        break;
      }
      case 'task_removed':
        this.queue.delete(m.taskId);
        this.active.delete(m.taskId);
        break;
      case 'slot_freed': {
        const agentId = this.active.get(m.taskId) ?? m.agentId;
        if (this.active.delete(m.taskId) && agentId) {
          const a = this.agents.get(agentId);
          if (a) a.free = Math.min(a.slots, a.free + 1);
        }
        this.queue.delete(m.taskId);
        break;
      }
      case 'assign_rejected': {
        // the task actor refused (cancelled meanwhile, or a fenced write lost): release the slot
        if (this.active.get(m.taskId) === m.agentId) {
          this.active.delete(m.taskId);
          const a = this.agents.get(m.agentId);
          if (a) a.free = Math.min(a.slots, a.free + 1);
        }
        const t = await this.d.tasks.load(m.taskId);
        if (t && (t.status === 'pending' || t.status === 'waiting')) this.queue.set(t.id, t);
        break;
      }
      case 'agent_up':
        this.upsertAgent(m.agent);
        break;
      case 'agent_down':
        this.agents.delete(m.agentId);
        break;
      case 'kick':
        this.passPending = false;
        await this.dispatch();
        return { ok: true };
      case 'stats':
        return { queued: this.queue.size, active: this.active.size, agents: [...this.agents.values()].map((a) => ({ agentId: a.agentId, free: a.free })) };
    }
    // coalesce: one pass after the burst of messages already in the mailbox
    if (!this.passPending) {
      this.passPending = true;
      this.ctx.system.tell(this.ctx.self, { type: 'kick' });
    }
    return { ok: true };
  }

  /** One pass over the FIFO queue: assign what can run, mark the rest waiting. */
  private async dispatch(): Promise<void> {
    if (this.queue.size === 0) return;
    const queue = [...this.queue.values()].sort((a, b) => a.seq - b.seq);
    const p = plan(queue, this.agents, this.active.size, this.d.quotas.maxConcurrentTasks(this.teamId));
    for (const step of p.assign) {
      const agent = step.agentId ? this.agents.get(step.agentId) : undefined;
      if (!agent) continue;
      // optimistic reservation; the task actor applies the fenced transition concurrently and
      // answers assign_rejected if it cannot (so one slow transaction never stalls the team)
      const task = this.queue.get(step.taskId);
      this.queue.delete(step.taskId);
      this.active.set(step.taskId, agent.agentId);
      agent.free -= 1;
      agent.lastAssignedAt = this.ctx.clock.now();
      // the record rides along so an idle task actor does not read it again (its write is fenced anyway)
      this.ctx.system.tell({ kind: TASK, id: step.taskId }, { type: 'assign', agentId: agent.agentId, provision: agent.needsSync, ...(task ? { task } : {}) });
    }
    const toWait = p.wait.filter((id) => this.queue.get(id)?.status === 'pending');
    if (toWait.length > 0) {
      // one fenced statement for the whole batch (pending -> waiting, with its events)
      const r = await this.d.tasks.markWaiting(this.teamId, toWait);
      for (const id of toWait) {
        const t = this.queue.get(id);
        if (t) t.status = 'waiting';
      }
      this.d.events.publish(r.events);
      // tasks that were no longer pending (cancelled meanwhile) leave the queue
      const moved = new Set(r.moved);
      for (const id of toWait) if (!moved.has(id)) {
        const cur = await this.d.tasks.load(id);
        if (!cur || (cur.status !== 'pending' && cur.status !== 'waiting')) this.queue.delete(id);
        else this.queue.set(id, cur);
      }
    }
  }
}
