import type { Actor, ActorContext, ReplyHandle } from '../runtime/system.js';
import { AGENT_KIND, SCHEDULER_KIND, TASK_KIND } from '../../domain/tasks/record.js';
import type { AgentStorePort, AgentTransportPort, Protocols, TaskStorePort } from '../ports.js';
import { decide, initialAgentState, type AgentEffect, type AgentInput, type AgentState } from './decide.js';
import { AgentMsg, type AgentReply } from './protocol.js';
import type { TaskMsg } from '../task/protocol.js';
import { AppError } from '../../shared/errors.js';

export const AGENT = AGENT_KIND;

/** A task result is resent while its task actor is unreachable (cluster): per-try deadline, tries, longest pause. */
const RESULT_ASK_MS = 5_000;
const RESULT_RETRIES = 12;
const RESULT_RETRY_MAX_MS = 4_000;

export interface AgentActorDeps {
  transport: AgentTransportPort;
  store: AgentStorePort;
  tasks: TaskStorePort;
  /** How long a disconnected agent keeps its tasks before they are handled as lost. */
  graceMs: number;
}

export const parseAgentMsg = (m: AgentMsg): AgentMsg => AgentMsg.parse(m);

type Ctx = ActorContext<Protocols, typeof AGENT>;

/**
 * One per connected agent, on the node holding its stream. Relays assignments down the stream,
 * forwards ACK/progress/results (with their epoch) to the task actors, and turns a lost stream
 * into agent_lost after a grace period (a reconnect within it re-attaches running tasks).
 *
 * The decisions are made by the pure decide(); this shell runs their effects. No turn awaits I/O:
 * the agents-row write, the read of the team's active tasks after a connect and a missing
 * assignment's read are started here and come back as messages. A `get` ask is answered once no
 * such I/O is in flight (so tests can use it as a barrier); the runtime keeps a stopping actor
 * alive until its last status write has landed.
 */
export class AgentActor implements Actor<Protocols, typeof AGENT> {
  private s: AgentState;
  private inflight = 0;
  private getsWaiting: Array<ReplyHandle<AgentReply>> = [];

  constructor(
    private readonly agentId: string,
    private readonly ctx: Ctx,
    private readonly d: AgentActorDeps,
  ) {
    this.s = initialAgentState(agentId);
  }

  /** Restart after a crash or passivation: the live session and held tasks come from the transport and PostgreSQL. */
  async onActivate(): Promise<void> {
    const sess = this.d.transport.session(this.agentId);
    if (!sess) return;
    this.s.info = sess.info;
    this.s.sessionId = sess.sessionId;
    this.s.connected = true;
    for (const t of await this.d.tasks.active(sess.info.teamId)) if (t.agentId === this.agentId) this.s.tasks.set(t.id, { attempt: t.attempt, epoch: t.leaseEpoch });
  }

  receive(m: AgentMsg): AgentReply | undefined {
    if (m.type === 'get' && this.inflight > 0) {
      this.getsWaiting.push(this.ctx.deferReply());
      return undefined;
    }
    return this.step(m);
  }

  private step(m: AgentInput): AgentReply | undefined {
    const dec = decide(this.s, m, this.env());
    this.s = dec.state;
    let reply = dec.reply;
    for (const e of dec.effects) {
      // an assignment the transport refused is lost (decided in this same turn)
      if (this.run(e) === false && m.type === 'dispatch') reply = { ok: false };
    }
    if (this.inflight === 0 && this.getsWaiting.length > 0) {
      const view = decide(this.s, { type: 'get' }, this.env()).reply;
      for (const h of this.getsWaiting.splice(0)) if (view) h.resolve(view);
    }
    return reply;
  }

  private env(): { now: number; graceMs: number; connectedElsewhere: boolean } {
    return { now: this.ctx.clock.now(), graceMs: this.d.graceMs, connectedElsewhere: this.d.transport.connectedElsewhere?.(this.agentId) ?? false };
  }

  /** Runs one effect; returns false when a reported send failed. */
  private run(e: AgentEffect): boolean {
    switch (e.type) {
      case 'tell_task':
        if (e.msg.type === 'finish' || e.msg.type === 'fail') this.deliverResult(e.taskId, e.msg, 0);
        else this.ctx.system.tell({ kind: TASK_KIND, id: e.taskId }, e.msg);
        return true;
      case 'tell_scheduler':
        this.ctx.system.tell({ kind: SCHEDULER_KIND, id: e.teamId }, e.msg);
        return true;
      case 'send': {
        const sent = this.d.transport.send(this.agentId, e.msg);
        if (e.report) this.step({ type: 'send_result', taskId: e.report.taskId, epoch: e.report.epoch, ok: sent });
        return sent || !e.report;
      }
      case 'set_timer':
        this.ctx.setTimer(e.name, e.ms, e.msg);
        return true;
      case 'cancel_timer':
        this.ctx.cancelTimer(e.name);
        return true;
      case 'write_status': {
        const row = e.row;
        this.io(
          this.d.store.setStatus(this.agentId, row.status, row.currentTaskId).then(
            () => true,
            (err: unknown) => {
              this.ctx.log.warn({ agent_id: this.agentId, err }, 'agent status write failed');
              return false;
            },
          ),
          (ok) => ({ type: 'status_written', row, ok }),
        );
        return true;
      }
      case 'load_active':
        this.io(this.d.tasks.active(e.teamId), (rows) => ({
          type: 'active_loaded',
          sessionId: e.sessionId,
          reported: e.reported,
          rows: rows.map((t) => ({ id: t.id, agentId: t.agentId, leaseEpoch: t.leaseEpoch })),
        }));
        return true;
      case 'load_assignment':
        this.io(this.d.tasks.assignment(e.taskId), (assignment) => ({ type: 'assignment_loaded', taskId: e.taskId, attempt: e.attempt, epoch: e.epoch, provision: e.provision, assignment }));
        return true;
      case 'kick':
        this.d.transport.kick?.(this.agentId);
        return true;
      case 'warn':
        this.ctx.log.warn(e.fields, e.msg);
        return true;
      case 'stop':
        this.ctx.stop();
        return true;
    }
  }

  /**
   * A task's result (the agent already handed it over and forgot it) must reach the task actor even
   * when that actor's node dies or is moving (cluster): it is asked, and resent while the answer is a
   * retryable `unavailable` error (node unreachable, actor moving, timeout). A reply of any kind,
   * including a stale `ok: false`, ends it: the task's fenced write decided.
   */
  private deliverResult(taskId: string, msg: Extract<TaskMsg, { type: 'finish' | 'fail' }>, attempt: number): void {
    const ask = this.ctx.system.ask({ kind: TASK_KIND, id: taskId }, msg, { deadlineMs: this.ctx.clock.now() + RESULT_ASK_MS });
    this.ctx.reenterAfter(ask, (r) => {
      if (r.ok || !(r.error instanceof AppError) || r.error.kind !== 'unavailable' || attempt >= RESULT_RETRIES) {
        if (!r.ok) this.ctx.log.warn({ agent_id: this.agentId, task_id: taskId, err: r.error, attempts: attempt + 1 }, 'task result not delivered');
        return;
      }
      const wait = new Promise<void>((res) => this.ctx.clock.setTimeout(res, Math.min(RESULT_RETRY_MAX_MS, 250 * 2 ** attempt)));
      this.ctx.reenterAfter(wait, () => this.deliverResult(taskId, msg, attempt + 1));
    });
  }

  /** Starts I/O; its result is decided as a later turn. A failed read is a crash (restart from the transport and PostgreSQL). */
  private io<T>(work: Promise<T>, toMsg: (v: T) => AgentInput): void {
    this.inflight++;
    this.ctx.reenterAfter(work, (r) => {
      this.inflight--;
      if (!r.ok) throw new Error('agent actor I/O failed', { cause: r.error });
      this.step(toMsg(r.value));
    });
  }
}
