import type { TransitionRequest } from '../ports.js';
import { isTerminal, NON_TERMINAL, ON_AGENT, SCHEDULABLE, type TaskRecord, type TaskStatus } from '../../domain/tasks/record.js';
import type { ServerToAgent } from '../task-record.js';
import type { SchedulerMsg } from '../scheduler/protocol.js';
import type { CloudDispatcherMsg } from '../cloud/protocol.js';
import { dispatchTo, type Handlers } from '../runtime/handlers.js';
import type { TaskMsg, TaskReply } from './protocol.js';

/** Side effects the shell runs after a successful transition (or right away when there is none). */
export type TaskEffect =
  | { type: 'dispatch'; agentId: string; epoch: number; provision: boolean }
  | { type: 'tell_agent'; agentId: string; msg: ServerToAgent }
  /** Ask the agent actor whether the agent still holds this task at this epoch (it answers with reattach). */
  | { type: 'confirm_agent'; agentId: string; epoch: number }
  | {
      type: 'scheduler';
      msg: Extract<SchedulerMsg, { type: 'slot_freed' | 'task_requeued' | 'task_removed' | 'assign_rejected' }>;
    }
  | { type: 'set_timer'; name: string; ms: number; msg: TaskMsg }
  | { type: 'cancel_timer'; name: string }
  | { type: 'progress'; epoch: number }
  /** To the task's cloud dispatcher (dispatch_target comfy_cloud). */
  | { type: 'cloud'; msg: Extract<CloudDispatcherMsg, { type: 'resume' | 'cancel' }> }
  | { type: 'stop' };

export interface Decision {
  transition?: TransitionRequest;
  effects: TaskEffect[];
  /** Reply to an ask (after the transition, when there is one). */
  reply?: TaskReply;
  /** Rejects an ask with an application error (e.g. cancel of a terminal task). */
  conflict?: { code: string; message: string };
  /** A message for an old epoch/attempt or a state that does not accept it. */
  stale?: string;
}

export interface DecideConfig {
  timeoutMaxS: number;
  /**
   * How long a queued task waits for its agent's ACK. Dispatch is at-least-once: an assignment the
   * agent never acknowledges (lost on a dying stream, refused) goes back to waiting instead of
   * staying queued forever; the late ACK of that epoch is stale.
   */
  ackTimeoutMs: number;
  /** Retry backoff (0 = a retry may run at once); see retryDelayMs. */
  retryBackoffBaseMs?: number;
  retryBackoffMaxMs?: number;
}

/**
 * The delay before the retry of a failed attempt may be scheduled: exponential with full jitter,
 * `u * min(base * 2^(attempt-1), max)` for a uniform draw u in [0, 1) supplied by the caller (so
 * this stays pure). attempt is the failed task's attempt (1 for the first run).
 */
export function retryDelayMs(attempt: number, baseMs: number, maxMs: number, u: number): number {
  if (baseMs <= 0 || maxMs <= 0) return 0;
  const cap = Math.min(maxMs, baseMs * 2 ** Math.min(Math.max(attempt - 1, 0), 40));
  return Math.floor(Math.min(Math.max(u, 0), 1) * cap);
}

const OPEN_AGENT: readonly TaskStatus[] = ON_AGENT;
const statusEvent = (t: TaskRecord, status: TaskStatus, now: number) => ({ type: 'status' as const, data: { task_id: t.id, status, timestamp: new Date(now).toISOString() } });

/**
 * The run timeout after ACK: the workflow's task_timeout as given (a training may run for days);
 * 0 = the gateway default maximum (GANTRY_TASK_TIMEOUT_MAX_S), as the contract says.
 */
export const timeoutMs = (t: TaskRecord, cfg: DecideConfig): number => (t.timeoutS > 0 ? t.timeoutS : cfg.timeoutMaxS) * 1000;

function failure(t: TaskRecord, now: number, error: string, from: readonly TaskStatus[], epoch: number, extra: TaskEffect[] = []): Decision {
  return {
    transition: {
      taskId: t.id,
      from,
      epoch,
      to: 'failed',
      patch: { error, finishedAt: now },
      events: [{ type: 'failed', data: { task_id: t.id, status: 'failed', error } }],
      createRetry: true,
    },
    effects: [...extra, { type: 'cancel_timer', name: 'timeout' }, { type: 'cancel_timer', name: 'grace' }, { type: 'scheduler', msg: { type: 'slot_freed', taskId: t.id, agentId: t.agentId } }, { type: 'stop' }],
  };
}

type Handler = Handlers<TaskMsg, [t: TaskRecord, now: number, cfg: DecideConfig], Decision>;

const isCloud = (t: TaskRecord): boolean => t.dispatchTarget !== 'agent';
/** A cloud task's provider job is told to stop (cancel, timeout). */
const cloudCancel = (t: TaskRecord): TaskEffect[] => (isCloud(t) ? [{ type: 'cloud', msg: { type: 'cancel', taskId: t.id } }] : []);

/** Agent loss (reported by the agent actor, or its grace period ran out) before or after the ACK. */
function agentLoss(m: Extract<TaskMsg, { type: 'agent_lost' | 'grace_expired' }>, t: TaskRecord, now: number): Decision {
  const epoch = m.epoch ?? t.leaseEpoch;
  if (m.type === 'agent_lost' && m.agentId !== t.agentId) return { effects: [], stale: `agent_lost from ${m.agentId}, task is on ${t.agentId}` };
  if (epoch !== t.leaseEpoch) return { effects: [], stale: `agent loss for epoch ${epoch}, task at ${t.leaseEpoch}` };
  if (t.status === 'queued' || t.status === 'provisioning') {
    // lost before ACK: back to waiting, no retry consumed
    return {
      transition: { taskId: t.id, from: ['queued', 'provisioning'], epoch, to: 'waiting', patch: { agentId: null, queuedAt: null }, events: [statusEvent(t, 'waiting', now)] },
      effects: [
        { type: 'cancel_timer', name: 'grace' },
        { type: 'scheduler', msg: { type: 'slot_freed', taskId: t.id, agentId: t.agentId } },
        { type: 'scheduler', msg: { type: 'task_requeued', taskId: t.id } },
      ],
    };
  }
  if (t.status === 'running') return failure(t, now, 'agent disconnected', ['running'], epoch);
  return { effects: [] };
}

/**
 * The task state machine, one handler per message type (a missing one does not compile).
 * The fencing token is lease_epoch: it grows on every assignment, and every agent-originated
 * message carries the epoch it was given; anything else is stale and never applied.
 */
const handlers: Handler = {
  get: (_m, t) => ({ effects: [], reply: t }),
  assign: (m, t, now, cfg) => {
    if (t.status !== 'pending' && t.status !== 'waiting')
      return { effects: [{ type: 'scheduler', msg: { type: 'assign_rejected', taskId: t.id, agentId: m.agentId } }], reply: { ok: false, status: t.status } };
    const epoch = t.leaseEpoch + 1;
    const to: TaskStatus = m.provision ? 'provisioning' : 'queued';
    return {
      transition: { taskId: t.id, from: SCHEDULABLE, epoch: t.leaseEpoch, to, patch: { agentId: m.agentId, leaseEpoch: epoch, queuedAt: now }, events: [statusEvent(t, to, now)] },
      effects: [
        { type: 'dispatch', agentId: m.agentId, epoch, provision: m.provision },
        ...(m.provision ? [] : [{ type: 'set_timer' as const, name: 'ack', ms: cfg.ackTimeoutMs, msg: { type: 'ack_timeout' as const, epoch } }]),
      ],
      reply: { ok: true, epoch },
    };
  },
  mark_waiting: (_m, t, now) => {
    if (t.status !== 'pending') return { effects: [] };
    return { transition: { taskId: t.id, from: ['pending'], to: 'waiting', patch: {}, events: [statusEvent(t, 'waiting', now)] }, effects: [] };
  },
  provisioned: (m, t, now, cfg) => {
    if (t.status !== 'provisioning' || m.epoch !== t.leaseEpoch) return { effects: [], stale: `provisioned for epoch ${m.epoch} in ${t.status}/${t.leaseEpoch}` };
    return {
      transition: { taskId: t.id, from: ['provisioning'], epoch: m.epoch, to: 'queued', patch: {}, events: [statusEvent(t, 'queued', now)] },
      effects: [{ type: 'set_timer', name: 'ack', ms: cfg.ackTimeoutMs, msg: { type: 'ack_timeout', epoch: m.epoch } }],
    };
  },
  ack_timeout: (m, t, now) => {
    if (t.status !== 'queued' || m.epoch !== t.leaseEpoch) return { effects: [] };
    // never acknowledged: back to waiting (no retry consumed); the agent is told to drop it
    return {
      transition: { taskId: t.id, from: ['queued'], epoch: m.epoch, to: 'waiting', patch: { agentId: null, queuedAt: null }, events: [statusEvent(t, 'waiting', now)] },
      effects: [
        ...(t.agentId ? [{ type: 'tell_agent' as const, agentId: t.agentId, msg: { type: 'cancel' as const, taskId: t.id, attempt: t.attempt, epoch: t.leaseEpoch } }] : []),
        { type: 'scheduler', msg: { type: 'slot_freed', taskId: t.id, agentId: t.agentId } },
        { type: 'scheduler', msg: { type: 'task_requeued', taskId: t.id } },
      ],
    };
  },
  ack: (m, t, now, cfg) => {
    if (t.status === 'running' && m.epoch === t.leaseEpoch) return { effects: [] }; // duplicate ACK: idempotent
    if (t.status !== 'queued' || m.epoch !== t.leaseEpoch || m.attempt !== t.attempt) return { effects: [], stale: `ack ${m.attempt}/${m.epoch} in ${t.status}/${t.attempt}/${t.leaseEpoch}` };
    const running = { ...t, status: 'running' as const, startedAt: now };
    return {
      transition: { taskId: t.id, from: ['queued'], epoch: m.epoch, to: 'running', patch: { startedAt: now }, events: [statusEvent(t, 'running', now)] },
      effects: [
        { type: 'set_timer', name: 'timeout', ms: timeoutMs(running, cfg), msg: { type: 'timeout', epoch: m.epoch } },
        { type: 'cancel_timer', name: 'grace' },
        { type: 'cancel_timer', name: 'ack' },
      ],
    };
  },
  progress: (m, t, now, cfg) => {
    // progress for the current epoch while queued: the agent runs it, its ACK was lost (its owner node
    // died on the way, cluster): an implicit ACK
    if (t.status === 'queued' && m.epoch === t.leaseEpoch) return handlers.ack({ type: 'ack', attempt: t.attempt, epoch: m.epoch }, t, now, cfg);
    if (t.status !== 'running' || m.epoch !== t.leaseEpoch) return { effects: [], stale: `progress for ${m.epoch} in ${t.status}/${t.leaseEpoch}` };
    return { effects: [{ type: 'progress', epoch: m.epoch }] };
  },
  flush_progress: (_m, t) => ({ effects: t.status === 'running' ? [{ type: 'progress', epoch: t.leaseEpoch }] : [] }),
  finish: (m, t, now) => {
    if (t.status === 'completed' && m.epoch === t.leaseEpoch) return { effects: [] }; // duplicate
    // a result for the current epoch while still queued: the ACK was lost on the way (cluster); the
    // result implies it (running is recorded with the completion, in the same statement)
    const unacked = t.status === 'queued' && m.epoch === t.leaseEpoch;
    if ((t.status !== 'running' && !unacked) || m.epoch !== t.leaseEpoch) return { effects: [], stale: `finish for ${m.epoch} in ${t.status}/${t.leaseEpoch}` };
    return {
      transition: {
        taskId: t.id,
        from: unacked ? ['queued'] : ['running'],
        epoch: m.epoch,
        to: 'completed',
        patch: { output: m.output, finishedAt: now, progress: null, ...(unacked ? { startedAt: now } : {}) },
        events: [
          ...(unacked ? [statusEvent(t, 'running', now)] : []),
          { type: 'completed', data: { task_id: t.id, status: 'completed', completed_at: new Date(now).toISOString(), output: m.output } },
        ],
      },
      effects: [
        { type: 'cancel_timer', name: 'timeout' },
        ...(unacked ? [{ type: 'cancel_timer' as const, name: 'ack' }, { type: 'cancel_timer' as const, name: 'grace' }] : []),
        { type: 'scheduler', msg: { type: 'slot_freed', taskId: t.id, agentId: t.agentId } },
        { type: 'stop' },
      ],
    };
  },
  fail: (m, t, now) => {
    if (t.status === 'failed' && m.epoch === t.leaseEpoch) return { effects: [] };
    if (!OPEN_AGENT.includes(t.status) || m.epoch !== t.leaseEpoch) return { effects: [], stale: `fail for ${m.epoch} in ${t.status}/${t.leaseEpoch}` };
    return failure(t, now, m.error, OPEN_AGENT, m.epoch);
  },
  timeout: (m, t, now, cfg) => {
    const open = t.status === 'running' || (isCloud(t) && t.status === 'provisioning');
    if (!open || m.epoch !== t.leaseEpoch) return { effects: [] };
    const s = timeoutMs(t, cfg) / 1000;
    const cancel: TaskEffect[] = t.agentId ? [{ type: 'tell_agent', agentId: t.agentId, msg: { type: 'cancel', taskId: t.id, attempt: t.attempt, epoch: t.leaseEpoch } }] : cloudCancel(t);
    return failure(t, now, `task timed out after ${s} s`, [t.status], m.epoch, cancel);
  },
  agent_lost: (m, t, now) => agentLoss(m, t, now),
  grace_expired: (m, t, now) => agentLoss(m, t, now),
  reattach: (m, t) => {
    if (!OPEN_AGENT.includes(t.status) || m.epoch !== t.leaseEpoch || m.agentId !== t.agentId) return { effects: [], stale: `reattach ${m.agentId}/${m.epoch} in ${t.status}/${t.agentId}/${t.leaseEpoch}` };
    return { effects: [{ type: 'cancel_timer', name: 'grace' }] };
  },
  recover: (m, t, now, cfg) => {
    const effects: TaskEffect[] = [];
    if (isCloud(t) && OPEN_AGENT.includes(t.status)) {
      // no agent to wait for: the dispatcher re-attaches to the provider's job (its prompt_id is in PostgreSQL)
      effects.push({ type: 'cloud', msg: { type: 'resume', taskId: t.id, epoch: t.leaseEpoch } });
    } else if (OPEN_AGENT.includes(t.status)) {
      effects.push({ type: 'set_timer', name: 'grace', ms: m.graceMs, msg: { type: 'grace_expired', epoch: t.leaseEpoch } });
      if (m.confirm && t.agentId) effects.push({ type: 'confirm_agent', agentId: t.agentId, epoch: t.leaseEpoch });
    }
    if (t.status === 'running' && t.startedAt !== null)
      effects.push({ type: 'set_timer', name: 'timeout', ms: Math.max(0, t.startedAt + timeoutMs(t, cfg) - now), msg: { type: 'timeout', epoch: t.leaseEpoch } });
    if (isTerminal(t.status)) effects.push({ type: 'stop' });
    return { effects };
  },
  cancel: (_m, t, now) => {
    if (isTerminal(t.status)) return { effects: [], conflict: { code: 'task_terminal', message: `task is already ${t.status}` } };
    const effects: TaskEffect[] = [{ type: 'cancel_timer', name: 'timeout' }, { type: 'cancel_timer', name: 'grace' }];
    if (t.agentId && OPEN_AGENT.includes(t.status)) {
      effects.push({ type: 'tell_agent', agentId: t.agentId, msg: { type: 'cancel', taskId: t.id, attempt: t.attempt, epoch: t.leaseEpoch } });
      effects.push({ type: 'scheduler', msg: { type: 'slot_freed', taskId: t.id, agentId: t.agentId } });
    } else effects.push({ type: 'scheduler', msg: { type: 'task_removed', taskId: t.id } });
    effects.push(...cloudCancel(t));
    effects.push({ type: 'stop' });
    return {
      transition: { taskId: t.id, from: NON_TERMINAL, to: 'cancelled', patch: { finishedAt: now }, events: [{ type: 'cancelled', data: { task_id: t.id, status: 'cancelled' } }] },
      effects,
      reply: { ok: true },
    };
  },
  cloud_accept: (_m, t, now, cfg) => {
    if (!isCloud(t) || (t.status !== 'pending' && t.status !== 'waiting')) return { effects: [], reply: { ok: false, status: t.status } };
    const epoch = t.leaseEpoch + 1;
    return {
      transition: { taskId: t.id, from: SCHEDULABLE, epoch: t.leaseEpoch, to: 'provisioning', patch: { agentId: null, leaseEpoch: epoch, queuedAt: now }, events: [statusEvent(t, 'provisioning', now)] },
      // the provider's acceptance is the cloud task's ACK: task_timeout runs from here (a job the
      // provider never starts does not hold the task forever)
      effects: [{ type: 'set_timer', name: 'timeout', ms: timeoutMs(t, cfg), msg: { type: 'timeout', epoch } }],
      reply: { ok: true, epoch },
    };
  },
  cloud_start: (m, t, now) => {
    if (t.status === 'running' && m.epoch === t.leaseEpoch) return { effects: [] };
    if (!isCloud(t) || t.status !== 'provisioning' || m.epoch !== t.leaseEpoch) return { effects: [], stale: `cloud_start ${m.epoch} in ${t.status}/${t.leaseEpoch}` };
    return {
      transition: { taskId: t.id, from: ['provisioning'], epoch: m.epoch, to: 'running', patch: { startedAt: now }, events: [statusEvent(t, 'running', now)] },
      effects: [],
    };
  },
  cloud_reject: (m, t, now) => {
    if (!isCloud(t) || (t.status !== 'pending' && t.status !== 'waiting')) return { effects: [], stale: `cloud_reject in ${t.status}` };
    return failure(t, now, m.error, SCHEDULABLE, t.leaseEpoch);
  },
};

/** The task state machine as a pure function: (state, message, now) -> what to write and do. */
export function decide(t: TaskRecord, m: TaskMsg, now: number, cfg: DecideConfig): Decision {
  return dispatchTo(handlers, m, t, now, cfg);
}
