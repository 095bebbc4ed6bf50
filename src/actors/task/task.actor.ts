import type { ActorContext, Actor } from '../runtime/system.js';
import { conflict, notFound } from '../../shared/errors.js';
import type { EventBusPort, TaskAssignment, TaskRecord, TaskStorePort } from '../ports.js';
import { decide, type DecideConfig, type TaskEffect } from './decide.js';
import { TaskMsg, type TaskProgressMsg } from './protocol.js';

export const TASK = 'task';
export const SCHEDULER = 'team-scheduler';
export const AGENT = 'agent';

export interface TaskActorDeps {
  store: TaskStorePort;
  events: EventBusPort;
  config: DecideConfig;
  /** Minimum interval between persisted progress ticks (coalescing). */
  progressIntervalMs: number;
}

export const parseTaskMsg = (m: unknown): TaskMsg => TaskMsg.parse(m);

/**
 * The shell around decide(): loads the task from PostgreSQL, applies fenced transitions, then
 * runs the effects (dispatch to the agent actor, scheduler notifications, timers).
 */
export class TaskActor implements Actor {
  private t: TaskRecord | null = null;
  private pendingProgress: TaskProgressMsg | null = null;
  /** The payload returned by the last assigning transition (handed to the dispatch effect). */
  private assignment: TaskAssignment | null = null;
  private lastProgressAt = 0;

  constructor(
    private readonly id: string,
    private readonly ctx: ActorContext,
    private readonly d: TaskActorDeps,
  ) {}

  /**
   * The record is loaded by the first message, not on activation: an assignment carries the
   * scheduler's copy, which saves a read per task. A stale copy is harmless — the transition is
   * fenced by (from-states, lease_epoch) in PostgreSQL, and a rejected one re-reads the truth.
   */
  async receive(raw: unknown): Promise<unknown> {
    const m = raw as TaskMsg;
    if (!this.t && m.type === 'assign' && m.task && m.task.id === this.id) this.t = m.task;
    if (!this.t) {
      this.t = await this.d.store.load(this.id);
      if (!this.t) {
        this.ctx.stop();
        if (m.type === 'get' || m.type === 'cancel') throw notFound('task');
        return { ok: false, status: 'missing' };
      }
    }
    if (m.type === 'progress') this.pendingProgress = m.progress;
    const now = this.ctx.clock.now();
    const dec = decide(this.t, m, now, this.d.config);
    if (dec.stale) this.ctx.log.warn({ task_id: this.id, msg: m.type, reason: dec.stale }, 'stale task message rejected');
    if (dec.conflict) throw conflict(dec.conflict.code, dec.conflict.message);
    if (dec.transition) {
      const res = await this.d.store.transition(dec.transition);
      if (!res.ok) {
        // a stale writer (another epoch/owner got there first): never applied; re-read the truth
        this.ctx.log.warn({ task_id: this.id, msg: m.type, from: dec.transition.from, to: dec.transition.to, current: res.current?.status }, 'fenced transition rejected');
        this.t = res.current;
        if (m.type === 'cancel' && this.t) throw conflict('task_terminal', `task is already ${this.t.status}`);
        if (m.type === 'assign') {
          if (this.t) this.ctx.system.tell({ kind: SCHEDULER, id: this.t.teamId }, { type: 'assign_rejected', taskId: this.id, agentId: m.agentId });
          return { ok: false, status: this.t?.status ?? 'missing' };
        }
        return { ok: false };
      }
      this.t = res.task;
      this.assignment = res.assignment ?? null;
      this.d.events.publish(res.events);
      if (res.retryTaskId) this.ctx.system.tell({ kind: SCHEDULER, id: res.task.teamId }, { type: 'task_submitted', taskId: res.retryTaskId });
    }
    await this.run(dec.effects);
    return dec.reply ?? { ok: !dec.stale };
  }

  private async run(effects: TaskEffect[]): Promise<void> {
    const t = this.t;
    if (!t) return;
    for (const e of effects) {
      switch (e.type) {
        case 'dispatch': {
          // the assigning statement returned the payload: the agent actor need not read it again
          const assignment = this.assignment?.taskId === t.id ? this.assignment : undefined;
          this.assignment = null;
          this.ctx.system.tell({ kind: AGENT, id: e.agentId }, { type: 'dispatch', taskId: t.id, attempt: t.attempt, epoch: e.epoch, provision: e.provision, ...(assignment ? { assignment } : {}) });
          break;
        }
        case 'tell_agent':
          this.ctx.system.tell({ kind: AGENT, id: e.agentId }, { type: 'server_msg', msg: e.msg });
          break;
        case 'scheduler':
          this.ctx.system.tell({ kind: SCHEDULER, id: t.teamId }, e.msg);
          break;
        case 'set_timer':
          this.ctx.setTimer(e.name, e.ms, e.msg);
          break;
        case 'cancel_timer':
          this.ctx.cancelTimer(e.name);
          break;
        case 'progress':
          await this.progress(e.epoch);
          break;
        case 'stop':
          this.ctx.cancelTimer('progress');
          this.ctx.stop();
          break;
      }
    }
  }

  /** Coalesces ticks: at most one persisted progress row per interval; the latest tick wins. */
  private async progress(epoch: number): Promise<void> {
    const p = this.pendingProgress;
    if (!p || !this.t) return;
    const now = this.ctx.clock.now();
    const wait = this.lastProgressAt + this.d.progressIntervalMs - now;
    if (wait > 0) {
      this.ctx.setTimer('progress', wait, { type: 'flush_progress' });
      return;
    }
    this.pendingProgress = null;
    this.lastProgressAt = now;
    const data: Record<string, unknown> = { task_id: this.t.id, ...p, timestamp: new Date(now).toISOString() };
    const r = await this.d.store.progress(this.t.id, epoch, p, { type: 'progress', data });
    if (r.event) this.d.events.publish([r.event]);
  }
}
