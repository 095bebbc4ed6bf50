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

type StatusRow = { status: 'online' | 'busy' | 'draining' | 'offline'; currentTaskId: string | null };

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
  /** agent_status / current_task_id: what was last written, what is wanted, and the one writer. */
  private statusWritten: StatusRow | null = null;
  private statusWanted: StatusRow | null = null;
  private statusWriter: Promise<void> | null = null;

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

  async onPassivate(): Promise<void> {
    await this.statusWriter;
  }

  /** The row the live view implies: idle or busy (naming a task it holds), or draining. */
  private liveStatus(): StatusRow {
    const draining = this.info?.draining ?? false;
    if (this.tasks.size === 0) return { status: draining ? 'draining' : 'online', currentTaskId: null };
    const shown = (this.statusWanted ?? this.statusWritten)?.currentTaskId ?? null;
    const current = shown !== null && this.tasks.has(shown) ? shown : [...this.tasks.keys()].pop()!;
    return { status: draining ? 'draining' : 'busy', currentTaskId: current };
  }

  /**
   * The agents row (agent_status, current_task_id) displays the live view; it is not a source of
   * truth for tasks (the scheduler learns agents from agent_up/agent_down). It is written only when
   * it changes (idle <-> busy, or the task it names is no longer held), by one writer per actor
   * outside the mailbox turn, so dispatches and results are not serialised behind an UPDATE. The
   * writer always writes the latest wanted row, in order.
   */
  private wantStatus(): void {
    const row = this.liveStatus();
    const last = this.statusWanted ?? this.statusWritten;
    if (last && last.status === row.status && last.currentTaskId === row.currentTaskId) return;
    this.statusWanted = row;
    if (this.statusWriter) return;
    this.statusWriter = (async () => {
      while (this.statusWanted) {
        const w = this.statusWanted;
        this.statusWanted = null;
        try {
          await this.d.store.setStatus(this.agentId, w.status, w.currentTaskId);
          this.statusWritten = w;
        } catch (e) {
          this.statusWritten = null; // unknown now: the next change writes again
          this.ctx.log.warn({ agent_id: this.agentId, err: e }, 'agent status write failed');
        }
      }
      this.statusWriter = null;
    })();
  }

  /** Lifecycle writes (connected, update, lost, revoke): after any queued write, awaited in the turn, errors propagate. */
  private async writeStatusNow(row: StatusRow): Promise<void> {
    this.statusWanted = null;
    await this.statusWriter;
    this.statusWritten = null;
    await this.d.store.setStatus(this.agentId, row.status, row.currentTaskId);
    this.statusWritten = row;
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
        await this.writeStatusNow({ status: m.info.draining ? 'draining' : 'online', currentTaskId: null });
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
        await this.writeStatusNow(this.liveStatus());
        this.tellScheduler({ type: 'agent_up', agent: m.info });
        return { ok: true };
      case 'disconnected':
        this.connected = false;
        this.tellScheduler({ type: 'agent_down', agentId: this.agentId });
        this.ctx.setTimer('grace', this.d.graceMs, { type: 'lost', sessionId: m.sessionId });
        return { ok: true };
      case 'lost':
        if (this.connected || m.sessionId !== this.sessionId) return { ok: false };
        await this.writeStatusNow({ status: 'offline', currentTaskId: null });
        for (const [taskId, t] of this.tasks) this.lose(taskId, t.epoch);
        this.ctx.stop();
        return { ok: true };
      case 'revoke':
        this.connected = false;
        this.tellScheduler({ type: 'agent_down', agentId: this.agentId });
        await this.writeStatusNow({ status: 'offline', currentTaskId: null });
        for (const [taskId, t] of this.tasks) this.lose(taskId, t.epoch);
        this.ctx.stop();
        return { ok: true };
      case 'dispatch': {
        // the task actor passes the payload its assigning statement returned; read it only when absent
        const assignment = m.assignment ?? (await this.d.tasks.assignment(m.taskId));
        this.tasks.set(m.taskId, { attempt: m.attempt, epoch: m.epoch });
        const sent = assignment !== null && this.send({ type: 'assign', taskId: m.taskId, attempt: m.attempt, epoch: m.epoch, assignment, provision: m.provision });
        if (!sent) this.lose(m.taskId, m.epoch);
        else this.wantStatus();
        return { ok: sent };
      }
      case 'server_msg': {
        const msg = m.msg as ServerToAgent;
        this.send(msg);
        if (msg.type === 'cancel') {
          // the task was cancelled or timed out: the agent is told to interrupt; its slot is free
          this.tasks.delete(msg.taskId);
          this.wantStatus();
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
        this.wantStatus();
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
