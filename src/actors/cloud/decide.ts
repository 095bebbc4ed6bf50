import { dispatchTo, type Handlers } from '../runtime/handlers.js';
import type { TaskRecord } from '../ports.js';
import type { CloudDispatcherMsg, CloudDispatcherReply, CloudDispatcherStats } from './protocol.js';

/**
 * A cloud dispatcher's view (one per team and provider): the FIFO queue of tasks waiting for a
 * provider slot, the jobs it follows, the provider's concurrency limit, and a hold while the
 * provider said it is busy or down. Rebuilt from PostgreSQL on activation.
 */
export interface CloudState {
  capacity: number;
  queue: Map<string, { seq: number; attempt: number; notBefore: number }>;
  /** taskId -> the epoch it runs under (null until the provider accepted it) and its queue place. */
  running: Map<string, { epoch: number | null; seq: number; attempt: number }>;
  /** No new submission before this instant (the provider answered busy/unavailable). */
  holdUntil: number;
}

/** Results of the I/O the shell ran, fed back as input (never on the wire). */
export type CloudResult = { type: 'ended'; taskId: string; later: { retryInMs: number } | null };
export type CloudInput = CloudDispatcherMsg | CloudResult;

export type CloudEffect =
  | { type: 'start'; taskId: string; attempt: number; epoch: number | null }
  /** Stop following the job here (its task is terminal, or it is being cancelled). */
  | { type: 'abort'; taskId: string }
  /** Cancel the provider's job of the task. */
  | { type: 'cancel_job'; taskId: string }
  | { type: 'set_timer'; ms: number };

export const initialCloudState = (capacity: number): CloudState => ({ capacity: Math.max(1, capacity), queue: new Map(), running: new Map(), holdUntil: 0 });

export const cloudStats = (s: CloudState): CloudDispatcherStats => ({ queued: s.queue.size, running: s.running.size, capacity: s.capacity });

export function enqueue(s: CloudState, t: Pick<TaskRecord, 'id' | 'seq' | 'attempt' | 'notBefore'>): void {
  if (s.running.has(t.id)) return;
  s.queue.set(t.id, { seq: t.seq, attempt: t.attempt, notBefore: t.notBefore ?? 0 });
}

/** One pass: start queued tasks (FIFO, due ones) while the provider has free slots. */
function pass(s: CloudState, now: number): CloudEffect[] {
  if (s.queue.size === 0) return [];
  if (now < s.holdUntil) return [{ type: 'set_timer', ms: s.holdUntil - now }];
  const effects: CloudEffect[] = [];
  let earliest = Infinity;
  const due = [...s.queue.entries()].filter(([, q]) => {
    if (q.notBefore > now) {
      earliest = Math.min(earliest, q.notBefore);
      return false;
    }
    return true;
  });
  due.sort((a, b) => a[1].seq - b[1].seq);
  for (const [taskId, q] of due) {
    if (s.running.size >= s.capacity) break; // queue on our side: never more jobs than the provider runs at once
    s.queue.delete(taskId);
    s.running.set(taskId, { epoch: null, seq: q.seq, attempt: q.attempt });
    effects.push({ type: 'start', taskId, attempt: q.attempt, epoch: null });
  }
  if (earliest !== Infinity) effects.push({ type: 'set_timer', ms: earliest - now });
  return effects;
}

type Handler = Handlers<CloudInput, [s: CloudState, now: number], CloudEffect[]>;

const handlers: Handler = {
  enqueue: (m, s, now) => {
    enqueue(s, m.task);
    return pass(s, now);
  },
  resume: (m, s) => {
    // a job the provider already accepted: follow it again here (it already holds a provider slot)
    s.queue.delete(m.taskId);
    if (s.running.has(m.taskId)) return [];
    s.running.set(m.taskId, { epoch: m.epoch, seq: 0, attempt: 0 });
    return [{ type: 'start', taskId: m.taskId, attempt: 0, epoch: m.epoch }];
  },
  cancel: (m, s) => {
    s.queue.delete(m.taskId);
    return s.running.has(m.taskId) ? [{ type: 'abort', taskId: m.taskId }, { type: 'cancel_job', taskId: m.taskId }] : [{ type: 'cancel_job', taskId: m.taskId }];
  },
  kick: (_m, s, now) => pass(s, now),
  stats: () => [],
  ended: (m, s, now) => {
    const was = s.running.get(m.taskId);
    s.running.delete(m.taskId);
    if (m.later && was) {
      // the provider is busy or down: the task waits on our side (keeping its place), and so does every other submission
      s.holdUntil = Math.max(s.holdUntil, now + m.later.retryInMs);
      s.queue.set(m.taskId, { seq: was.seq, attempt: was.attempt, notBefore: 0 });
    }
    return pass(s, now);
  },
};

/** The dispatcher's decision for one input (no I/O; the state is updated in place). */
export function decideCloud(s: CloudState, m: CloudInput, now: number): { effects: CloudEffect[]; reply?: CloudDispatcherReply } {
  const effects = dispatchTo<CloudInput, [CloudState, number], CloudEffect[]>(handlers, m, s, now);
  return { effects, ...(m.type === 'stats' ? { reply: cloudStats(s) } : m.type === 'ended' ? {} : { reply: { ok: true as const } }) };
}
