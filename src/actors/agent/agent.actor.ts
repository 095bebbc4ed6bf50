import type { Actor, ActorContext } from '../runtime/system.js';
import type { AgentStorePort, AgentTransportPort, ServerToAgent, TaskStorePort } from '../ports.js';
import { AgentMsg, type AgentInfoMsg } from './protocol.js';

export const AGENT = 'agent';
const TASK = 'task';
const SCHEDULER = 'team-scheduler';

export interface AgentActorDeps {
  transport: AgentTransportPort;
  store: AgentStorePort;
  tasks: TaskStorePort;
  /** How long a disconnected agent keeps its tasks before they are handled as lost. */
  graceMs: number;
}

export const parseAgentMsg = (m: unknown): AgentMsg => AgentMsg.parse(m);

/**
 * One per connected agent, on the node holding its stream. Relays assignments down the stream,
 * forwards ACK/progress/results (with their epoch) to the task actors, and turns a lost stream
 * into agent_lost after a grace period (a reconnect within it re-attaches running tasks).
 */
export class AgentActor implements Actor {
  private info: AgentInfoMsg | null = null;
  private sessionId: string | null = null;
  private connected = false;
  /** taskId -> epoch of what this agent holds */
  private tasks = new Map<string, { attempt: number; epoch: number }>();

  constructor(
    private readonly agentId: string,
    private readonly ctx: ActorContext,
    private readonly d: AgentActorDeps,
  ) {}

  /** Restart after a crash or passivation: the live session and held tasks come from the transport and PostgreSQL. */
  async onActivate(): Promise<void> {
    const s = this.d.transport.session(this.agentId);
    if (!s) return;
    this.info = s.info;
    this.sessionId = s.sessionId;
    this.connected = true;
    for (const t of await this.d.tasks.active(s.info.teamId)) if (t.agentId === this.agentId) this.tasks.set(t.id, { attempt: t.attempt, epoch: t.leaseEpoch });
  }

  private tellTask(taskId: string, msg: unknown): void {
    this.ctx.system.tell({ kind: TASK, id: taskId }, msg);
  }

  private tellScheduler(msg: unknown): void {
    if (this.info) this.ctx.system.tell({ kind: SCHEDULER, id: this.info.teamId }, msg);
  }

  private send(msg: ServerToAgent): boolean {
    return this.connected && this.d.transport.send(this.agentId, msg);
  }

  async receive(raw: unknown): Promise<unknown> {
    const m = raw as AgentMsg;
    const fromSession = 'sessionId' in m && m.type !== 'lost' ? m.sessionId : null;
    if (fromSession !== null && m.type !== 'connected' && fromSession !== this.sessionId) {
      this.ctx.log.warn({ agent_id: this.agentId, msg: m.type }, 'message from a superseded agent session rejected');
      return { ok: false };
    }
    switch (m.type) {
      case 'connected': {
        this.info = m.info;
        this.sessionId = m.sessionId;
        this.connected = true;
        this.ctx.cancelTimer('grace');
        await this.d.store.setStatus(this.agentId, m.info.draining ? 'draining' : 'online');
        const reported = new Set<string>();
        for (const r of m.running) {
          reported.add(r.taskId);
          this.tasks.set(r.taskId, { attempt: r.attempt, epoch: r.epoch });
          this.tellTask(r.taskId, { type: 'reattach', agentId: this.agentId, epoch: r.epoch });
        }
        // tasks we thought it had but it does not report: lost (before or after ACK)
        for (const [taskId, t] of this.tasks) if (!reported.has(taskId)) this.lose(taskId, t.epoch);
        // tasks PostgreSQL assigns to it that it does not report (node restart): lost too
        for (const t of await this.d.tasks.active(m.info.teamId))
          if (t.agentId === this.agentId && !reported.has(t.id) && !this.tasks.has(t.id)) this.tellTask(t.id, { type: 'agent_lost', agentId: this.agentId, epoch: t.leaseEpoch });
        this.tellScheduler({ type: 'agent_up', agent: m.info });
        return { ok: true };
      }
      case 'update':
        this.info = m.info;
        await this.d.store.setStatus(this.agentId, m.info.draining ? 'draining' : this.tasks.size > 0 ? 'busy' : 'online');
        this.tellScheduler({ type: 'agent_up', agent: m.info });
        return { ok: true };
      case 'disconnected':
        this.connected = false;
        this.tellScheduler({ type: 'agent_down', agentId: this.agentId });
        this.ctx.setTimer('grace', this.d.graceMs, { type: 'lost', sessionId: m.sessionId });
        return { ok: true };
      case 'lost':
        if (this.connected || m.sessionId !== this.sessionId) return { ok: false };
        await this.d.store.setStatus(this.agentId, 'offline', null);
        for (const [taskId, t] of this.tasks) this.lose(taskId, t.epoch);
        this.ctx.stop();
        return { ok: true };
      case 'revoke':
        this.connected = false;
        this.tellScheduler({ type: 'agent_down', agentId: this.agentId });
        await this.d.store.setStatus(this.agentId, 'offline', null);
        for (const [taskId, t] of this.tasks) this.lose(taskId, t.epoch);
        this.ctx.stop();
        return { ok: true };
      case 'dispatch': {
        const assignment = await this.d.tasks.assignment(m.taskId);
        this.tasks.set(m.taskId, { attempt: m.attempt, epoch: m.epoch });
        const sent = assignment !== null && this.send({ type: 'assign', taskId: m.taskId, attempt: m.attempt, epoch: m.epoch, assignment, provision: m.provision });
        if (!sent) this.lose(m.taskId, m.epoch);
        else await this.d.store.setStatus(this.agentId, 'busy', m.taskId);
        return { ok: sent };
      }
      case 'server_msg': {
        const msg = m.msg as ServerToAgent;
        this.send(msg);
        if (msg.type === 'cancel') {
          // the task was cancelled or timed out: the agent is told to interrupt; its slot is free
          this.tasks.delete(msg.taskId);
          if (this.tasks.size === 0) await this.d.store.setStatus(this.agentId, this.info?.draining ? 'draining' : 'online', null);
        }
        return { ok: true };
      }
      case 'ack':
        this.tellTask(m.taskId, { type: 'ack', attempt: m.attempt, epoch: m.epoch });
        return { ok: true };
      case 'provisioned':
        this.tellTask(m.taskId, { type: 'provisioned', epoch: m.epoch });
        return { ok: true };
      case 'progress':
        this.tellTask(m.taskId, { type: 'progress', epoch: m.epoch, progress: m.progress });
        return { ok: true };
      case 'finished':
      case 'failed': {
        this.tellTask(m.taskId, m.type === 'finished' ? { type: 'finish', epoch: m.epoch, output: m.output } : { type: 'fail', epoch: m.epoch, error: m.error });
        const held = this.tasks.get(m.taskId);
        if (held && held.epoch === m.epoch) this.tasks.delete(m.taskId);
        if (this.tasks.size === 0) await this.d.store.setStatus(this.agentId, this.info?.draining ? 'draining' : 'online', null);
        return { ok: true };
      }
      case 'get':
        return { agentId: this.agentId, connected: this.connected, info: this.info, tasks: [...this.tasks.keys()] };
    }
  }

  private lose(taskId: string, epoch: number): void {
    this.tasks.delete(taskId);
    this.tellTask(taskId, { type: 'agent_lost', agentId: this.agentId, epoch });
  }
}
