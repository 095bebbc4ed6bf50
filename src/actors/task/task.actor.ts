import type { ActorContext, Actor, ReplyHandle } from '../runtime/system.js';
import { conflict, notFound } from '../../shared/errors.js';
import { AGENT_KIND, CLOUD_DISPATCHER_KIND, cloudDispatcherId, SCHEDULER_KIND, TASK_KIND, type TaskRecord } from '../../domain/tasks/record.js';
import type { EventBusPort, Protocols, TaskAssignment, TaskMetricsPort, TaskStorePort, TransitionRequest, TransitionResult } from '../ports.js';
import { endSpan, spanLogFields, startSpan, traceparentOfSpan, tracingEnabled, withActive, type Span } from '../../shared/tracing.js';
import { decide, retryDelayMs, timeoutMs, type DecideConfig, type Decision, type TaskEffect } from './decide.js';
import { TaskMsg, type TaskProgressMsg, type TaskReply } from './protocol.js';

export const TASK = TASK_KIND;
export const SCHEDULER = SCHEDULER_KIND;
export const AGENT = AGENT_KIND;

export interface TaskActorDeps {
  store: TaskStorePort;
  events: EventBusPort;
  config: DecideConfig;
  /**
   * Minimum interval between persisted progress ticks: a safety bound for runaway agents only
   * (PROGRESS_MIN_INTERVAL_MS, 20 ticks/s per task); every tick slower than that is its own event,
   * and the tick pending at a status change is written before it (see receive).
   */
  progressIntervalMs: number;
  metrics?: TaskMetricsPort;
}

export const parseTaskMsg = (m: TaskMsg): TaskMsg => TaskMsg.parse(m);

/** The contract: one SSE event per progress tick; the rate bound for runaway agents is >= 20/s per task. */
export const PROGRESS_MIN_INTERVAL_MS = 50;

type Ctx = ActorContext<Protocols, typeof TASK>;

/**
 * The reports whose rejection by a stale copy would lose something (an agent's ACK, result or
 * failure; a loss or timeout that must fail the attempt): these are decided again against a fresh read.
 */
const RECHECKED: ReadonlySet<TaskMsg['type']> = new Set(['ack', 'provisioned', 'progress', 'finish', 'fail', 'agent_lost', 'grace_expired', 'timeout', 'reattach']);

/**
 * The shell around decide(): applies fenced transitions, then runs the effects (dispatch to the
 * agent actor, scheduler notifications, timers).
 *
 * No turn awaits I/O. A turn that needs PostgreSQL (the first load, a transition, a progress write)
 * starts it with ctx.reenterAfter and marks the actor busy; until the result has been applied in
 * its continuation turn, every other message is stashed (Akka's stash) and then replayed in arrival
 * order. The next decision depends on the transition's result (the new status and epoch), so this
 * keeps exactly the serial semantics of one message at a time against the committed row, while the
 * mailbox loop itself never blocks. An ask whose answer depends on the write (cancel, assign) is
 * answered from the continuation through ctx.deferReply().
 */
export class TaskActor implements Actor<Protocols, typeof TASK> {
  private t: TaskRecord | null = null;
  /** The row does not exist (every message answers missing / not_found, then the actor stops). */
  private missing = false;
  /** A write or load is in flight: other messages are stashed until its continuation ran. */
  private busy = false;
  /** The busy I/O is a read of the row (not a write). */
  private loading = false;
  private pendingProgress: TaskProgressMsg | null = null;
  /** The lease epoch the pending tick was sent for. */
  private pendingEpoch = -1;
  /** The payload returned by the last assigning transition (handed to the dispatch effect). */
  private assignment: TaskAssignment | null = null;
  private lastProgressAt = 0;
  /** Tracing on: the traceparent of the assigning transition's span, handed to the agent with the assignment. */
  private dispatchTrace: string | null = null;
  /** Messages already decided once against a record re-read for them (see recheck): never re-read twice. */
  private readonly rechecked = new WeakSet<TaskMsg>();

  constructor(
    private readonly id: string,
    private readonly ctx: Ctx,
    private readonly d: TaskActorDeps,
  ) {}

  /**
   * The record is loaded by the first message, not on activation: an assignment carries the
   * scheduler's copy, which saves a read per task. A stale copy is harmless — the transition is
   * fenced by (from-states, lease_epoch) in PostgreSQL, and a rejected one re-reads the truth.
   */
  receive(m: TaskMsg): TaskReply | undefined {
    if (this.busy) {
      // decided against the row being read now, which is newer than the message: no re-read for it
      if (this.loading) this.rechecked.add(m);
      this.ctx.stash();
      return undefined;
    }
    if (this.missing) {
      this.ctx.stop();
      if (m.type === 'get' || m.type === 'cancel') throw notFound('task');
      return { ok: false, status: 'missing' };
    }
    if (!this.t && m.type === 'assign' && m.task && m.task.id === this.id) this.t = m.task;
    if (!this.t) {
      // replayed once the record is here
      this.rechecked.add(m);
      this.ctx.stash();
      this.load();
      return undefined;
    }
    if (m.type === 'progress') {
      this.pendingProgress = m.progress;
      this.pendingEpoch = m.epoch;
    }
    const now = this.ctx.clock.now();
    const dec = decide(this.t, m, now, this.d.config);
    if (dec.stale && RECHECKED.has(m.type) && !this.rechecked.has(m)) {
      // stale by this actor's copy, which may be behind PostgreSQL: another activation of this task
      // (a cluster node with an older view, during a membership change) may have moved it on. The
      // copy is re-read and the message decided again against it, once; only then is it rejected.
      this.rechecked.add(m);
      this.ctx.stash();
      this.load();
      return undefined;
    }
    if (dec.transition && m.type !== 'progress' && this.pendingProgress && this.t.status === 'running' && this.pendingEpoch === this.t.leaseEpoch) {
      // never drop the last tick before a status change: write the tick held back by the rate
      // bound first, then replay this message (decide is pure; it decides again on replay)
      this.ctx.stash();
      this.ctx.cancelTimer('progress');
      this.writeProgress(this.t.leaseEpoch);
      return undefined;
    }
    if (dec.stale) this.ctx.log.warn({ task_id: this.id, msg: m.type, reason: dec.stale }, 'stale task message rejected');
    if (dec.conflict) throw conflict(dec.conflict.code, dec.conflict.message);
    if (dec.transition) {
      if (dec.transition.createRetry) {
        // retry backoff: the jitter draw is the shell's (decide stays pure); the retry row carries not_before
        const delay = retryDelayMs(this.t.attempt, this.d.config.retryBackoffBaseMs ?? 0, this.d.config.retryBackoffMaxMs ?? 0, Math.random());
        if (delay > 0) dec.transition = { ...dec.transition, retryNotBefore: now + delay };
      }
      const reply = this.ctx.deferReply();
      const req = dec.transition;
      const span = tracingEnabled() ? this.transitionSpan(m, req) : null;
      this.start(
        withActive(span, () => this.d.store.transition(req)),
        (res) => {
          span?.setAttribute('gantry.task.applied', res.ok);
          if (m.type === 'assign' && res.ok) this.dispatchTrace = traceparentOfSpan(span);
          this.applied(m, dec, res, reply, span);
          endSpan(span);
        },
        (e) => {
          endSpan(span, e);
          reply.reject(e);
        },
      );
      return undefined;
    }
    this.run(dec.effects);
    return dec.reply ?? { ok: !dec.stale };
  }

  /**
   * A span around one fenced transition (from the decision to the commit), in the task's trace: the parent is the
   * hop that caused it when it carried a traceparent (the scheduler's decision, the agent's run),
   * else the submit span stored with the row. None when the task has no trace.
   */
  private transitionSpan(m: TaskMsg, req: TransitionRequest): Span | null {
    const t = this.t;
    const parent = ('traceparent' in m ? m.traceparent : undefined) ?? t?.traceParent;
    // a task without a trace (submitted while tracing was off) gets no one-span traces of its own
    if (!parent) return null;
    return startSpan(`task ${m.type}`, {
      parent,
      attributes: {
        'gantry.task.id': this.id,
        'gantry.task.from': t?.status ?? req.from.join('|'),
        'gantry.task.to': req.to,
        'gantry.task.attempt': t?.attempt ?? 0,
        ...(t?.agentId || req.patch.agentId ? { 'gantry.agent.id': req.patch.agentId ?? t?.agentId ?? '' } : {}),
      },
    });
  }

  /** Reads the row (the messages stashed meanwhile are decided against it, see receive). */
  private load(): void {
    this.loading = true;
    this.start(this.d.store.load(this.id), (t) => {
      this.loading = false;
      this.reread(t);
    });
  }

  /**
   * Takes the row read from PostgreSQL as this actor's copy. A task found running that this
   * activation did not start gets its timeout armed here (an activation that saw it queued armed none).
   */
  private reread(t: TaskRecord | null): void {
    const was = this.t;
    this.t = t;
    if (!t) {
      this.missing = true;
      return;
    }
    if (t.status === 'running' && t.startedAt !== null && (was?.status !== 'running' || was.leaseEpoch !== t.leaseEpoch))
      this.ctx.setTimer('timeout', Math.max(0, t.startedAt + timeoutMs(t, this.d.config) - this.ctx.clock.now()), { type: 'timeout', epoch: t.leaseEpoch });
  }

  /** Starts I/O; its continuation runs as a later turn, after which stashed messages are replayed. */
  private start<T>(work: Promise<T>, then: (v: T) => void, failed?: (e: unknown) => void): void {
    this.busy = true;
    this.ctx.reenterAfter(work, (r) => {
      this.busy = false;
      this.ctx.unstashAll();
      if (!r.ok) {
        failed?.(r.error);
        // a failed write is a crash (unless it is an application error): restart from PostgreSQL
        throw r.error;
      }
      then(r.value);
    });
  }

  private applied(m: TaskMsg, dec: Decision, res: TransitionResult, reply: ReplyHandle<TaskReply>, span: Span | null = null): void {
    if (!res.ok) {
      // a stale writer (another epoch/owner got there first): never applied; re-read the truth
      const req = dec.transition;
      this.ctx.log.warn({ task_id: this.id, msg: m.type, from: req?.from, to: req?.to, current: res.current?.status }, 'fenced transition rejected');
      this.reread(res.current);
      if (RECHECKED.has(m.type) && !this.rechecked.has(m) && this.t) {
        // this actor's copy was behind (another activation moved the task on): the agent's report
        // is decided again against the row just read, as a new message, and answered from there.
        // Answering { ok: false } here lost a result: the agent had handed it over for good.
        this.rechecked.add(m);
        this.ctx.system.ask({ kind: TASK, id: this.id }, m).then(
          (r) => reply.resolve(r),
          (e: unknown) => reply.reject(e),
        );
        return;
      }
      if (m.type === 'cancel' && this.t) return reply.reject(conflict('task_terminal', `task is already ${this.t.status}`));
      if (m.type === 'cloud_accept') return reply.resolve({ ok: false, status: this.t?.status ?? 'missing' });
      if (m.type === 'assign') {
        if (this.t) this.ctx.system.tell({ kind: SCHEDULER, id: this.t.teamId }, { type: 'assign_rejected', taskId: this.id, agentId: m.agentId });
        return reply.resolve({ ok: false, status: this.t?.status ?? 'missing' });
      }
      return reply.resolve({ ok: false });
    }
    const from = this.t?.status ?? dec.transition?.from.join('|');
    this.t = res.task;
    // one info line per committed transition: ids and states only (no parameters, no secrets)
    this.ctx.log.info(
      { task_id: res.task.id, team_id: res.task.teamId, from, to: res.task.status, attempt: res.task.attempt, agent_id: res.task.agentId, lease_epoch: res.task.leaseEpoch, ...(res.retryTaskId ? { retry_task_id: res.retryTaskId } : {}), ...spanLogFields(span) },
      'task transition',
    );
    this.assignment = res.assignment ?? null;
    if (this.d.metrics && (res.task.status === 'completed' || res.task.status === 'failed' || res.task.status === 'cancelled')) this.d.metrics.finished(res.task.status);
    this.d.events.publish(res.events);
    if (res.retryTaskId) this.ctx.system.tell({ kind: SCHEDULER, id: res.task.teamId }, { type: 'task_submitted', taskId: res.retryTaskId });
    this.run(dec.effects);
    reply.resolve(dec.reply ?? { ok: !dec.stale });
  }

  private run(effects: TaskEffect[]): void {
    const t = this.t;
    if (!t) return;
    for (const e of effects) {
      switch (e.type) {
        case 'dispatch': {
          // the assigning statement returned the payload: the agent actor need not read it again
          const loaded = this.assignment?.taskId === t.id ? this.assignment : undefined;
          const assignment = loaded && this.dispatchTrace ? { ...loaded, traceParent: this.dispatchTrace } : loaded;
          this.assignment = null;
          this.dispatchTrace = null;
          this.ctx.system.tell({ kind: AGENT, id: e.agentId }, { type: 'dispatch', taskId: t.id, attempt: t.attempt, epoch: e.epoch, provision: e.provision, ...(assignment ? { assignment } : {}) });
          break;
        }
        case 'tell_agent':
          this.ctx.system.tell({ kind: AGENT, id: e.agentId }, { type: 'server_msg', msg: e.msg });
          break;
        case 'confirm_agent':
          this.ctx.system.tell({ kind: AGENT, id: e.agentId }, { type: 'holds', taskId: t.id, epoch: e.epoch });
          break;
        case 'scheduler':
          this.ctx.system.tell({ kind: SCHEDULER, id: t.teamId }, e.msg);
          break;
        case 'cloud':
          this.ctx.system.tell({ kind: CLOUD_DISPATCHER_KIND, id: cloudDispatcherId(t.teamId, t.dispatchTarget) }, e.msg);
          break;
        case 'set_timer':
          this.ctx.setTimer(e.name, e.ms, e.msg);
          break;
        case 'cancel_timer':
          this.ctx.cancelTimer(e.name);
          break;
        case 'progress':
          this.progress(e.epoch);
          break;
        case 'stop':
          this.ctx.cancelTimer('progress');
          this.ctx.stop();
          break;
      }
    }
  }

  /**
   * Writes the tick now, or, when it comes sooner than the rate bound after the previous one, at
   * the end of the interval (ticks faster than the bound: the latest one wins).
   */
  private progress(epoch: number): void {
    if (!this.pendingProgress || !this.t) return;
    const wait = this.lastProgressAt + this.d.progressIntervalMs - this.ctx.clock.now();
    if (wait > 0) {
      this.ctx.setTimer('progress', wait, { type: 'flush_progress' });
      return;
    }
    this.writeProgress(epoch);
  }

  /** Persists the pending tick (a progress row and its event, fenced by the epoch) and publishes it. */
  private writeProgress(epoch: number): void {
    const p = this.pendingProgress;
    if (!p || !this.t) return;
    const now = this.ctx.clock.now();
    this.pendingProgress = null;
    this.lastProgressAt = now;
    const data: Record<string, unknown> = { task_id: this.t.id, ...p, timestamp: new Date(now).toISOString() };
    this.start(this.d.store.progress(this.t.id, epoch, p, { type: 'progress', data }), (r) => {
      if (r.event) this.d.events.publish([r.event]);
    });
  }
}
