import type { Actor, ActorContext } from '../runtime/system.js';
import type { AgentStorePort, QuotaPort, TaskRecord, TaskStorePort } from '../ports.js';
import { plan, type AgentSlot } from './decide.js';
import { SchedulerMsg } from './protocol.js';

export const SCHEDULER = 'team-scheduler';
const TASK = 'task';

export interface SchedulerDeps {
  tasks: TaskStorePort;
  agents: AgentStorePort;
  quotas: QuotaPort;
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
        const t = await this.d.tasks.load(m.taskId);
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
      case 'agent_up':
        this.upsertAgent(m.agent);
        break;
      case 'agent_down':
        this.agents.delete(m.agentId);
        break;
      case 'kick':
        break;
      case 'stats':
        return { queued: this.queue.size, active: this.active.size, agents: [...this.agents.values()].map((a) => ({ agentId: a.agentId, free: a.free })) };
    }
    await this.dispatch();
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
      const ref = { kind: TASK, id: step.taskId };
      let reply: { ok: boolean } = { ok: false };
      try {
        reply = await this.ctx.system.ask<{ ok: boolean }>(ref, { type: 'assign', agentId: agent.agentId, provision: agent.needsSync }, { deadlineMs: this.ctx.clock.now() + this.d.askTimeoutMs });
      } catch (e) {
        this.ctx.log.warn({ task_id: step.taskId, err: e }, 'assignment failed; will retry on next pass');
        this.ctx.setTimer('retry', 1000, { type: 'kick' });
        continue;
      }
      this.queue.delete(step.taskId);
      if (reply.ok) {
        this.active.set(step.taskId, agent.agentId);
        agent.free -= 1;
        agent.lastAssignedAt = this.ctx.clock.now();
      }
    }
    for (const id of p.wait) {
      const t = this.queue.get(id);
      if (!t || t.status !== 'pending') continue;
      try {
        await this.ctx.system.ask({ kind: TASK, id }, { type: 'mark_waiting' }, { deadlineMs: this.ctx.clock.now() + this.d.askTimeoutMs });
        t.status = 'waiting';
      } catch (e) {
        this.ctx.log.warn({ task_id: id, err: e }, 'mark waiting failed');
      }
    }
  }
}
