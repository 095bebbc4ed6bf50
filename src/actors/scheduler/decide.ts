import type { AgentInfo, TaskEvent, TaskRecord } from '../ports.js';
import { dispatchTo, type Handlers } from '../runtime/handlers.js';
import type { SchedulerMsg, SchedulerReply, SchedulerStats } from './protocol.js';
import type { AgentSlot } from './fifo-lru.js';
import { UsageLedger } from './ledger.js';
import type { SubmitterLimits } from './fair.js';
import { schedule, type PolicySettings } from './policy.js';

export { ineligibility, pickAgent, plan, type AgentSlot, type PlanStep } from './fifo-lru.js';

// ---------------------------------------------------------------------------------------------
// The scheduler as a pure core: decide(state, msg, now) -> {state, effects, reply}

/**
 * A team scheduler's view: the FIFO queue (pending/waiting tasks), the agents and their free slots,
 * and which agent holds each active (provisioning/queued/running) task. Rebuilt from PostgreSQL on
 * activation; afterwards kept current by messages and by bulk refreshes.
 */
export interface SchedulerState {
  teamId: string;
  queue: Map<string, TaskRecord>;
  agents: Map<string, AgentSlot>;
  /** provisioning/queued/running task -> agent */
  active: Map<string, string | null>;
  /** A dispatch pass (kick) is queued: bursts of messages coalesce into one pass. */
  passPending: boolean;
  /** Tasks whose record must be re-read: one bulk load at the next pass for all of them. */
  toLoad: Set<string>;
  /** Tasks with a bulk load in flight -> its token. A later message about the task cancels it (it wins). */
  loading: Map<string, number>;
  nextLoad: number;
  /** A bulk read is in flight: the next one waits for it (ids accumulate meanwhile, like a group commit). */
  loadInFlight: boolean;
  /** Tasks with a pending -> waiting write in flight (not marked twice; the next batch waits for it). */
  marking: Set<string>;
  /** Fair share: GPU-seconds per submitter over the window (kept across resyncs). */
  ledger: UsageLedger;
  /** Per-credential fair-share weight and cap. */
  limits: Map<string, SubmitterLimits>;
  /** agent -> the workflow version it last ran (warm placement; kept while the agent is known). */
  lastWorkflow: Map<string, string>;
  /**
   * Hints, so a pass costs what changed, not the queue's length (a backlog of thousands with every
   * slot busy is re-passed on every submit): ids put in the queue as `pending` (not yet marked
   * waiting), and ids of tasks for a hosted provider. Supersets: an entry is checked against the
   * queue when used and dropped when it no longer holds.
   */
  unmarked: Set<string>;
  cloudIds: Set<string>;
}

/** Results of the I/O the shell ran for an earlier decision, fed back as messages (never on the wire). */
export type SchedulerResult =
  | { type: 'loaded'; token: number; ids: string[]; records: TaskRecord[] }
  | { type: 'waiting_marked'; ids: string[]; moved: string[]; events: TaskEvent[] };

export type SchedulerInput = SchedulerMsg | SchedulerResult;

export type SchedulerEffect =
  | { type: 'assign'; taskId: string; agentId: string; provision: boolean; task: TaskRecord | undefined }
  /** A task for a hosted cloud provider: handed to that provider's dispatcher (it queues and runs it). */
  | { type: 'cloud'; task: TaskRecord }
  | { type: 'kick' }
  /** One statement for many tasks (TaskStorePort.loadMany): the answer comes back as `loaded`. */
  | { type: 'load'; token: number; ids: string[] }
  /** One fenced statement pending -> waiting for the batch: the answer comes back as `waiting_marked`. */
  | { type: 'mark_waiting'; ids: string[] }
  | { type: 'publish'; events: TaskEvent[] }
  /** (Re)arms the scheduler's one timer: a kick to self when the earliest retry backoff ends, or a task held back for a warm agent stops waiting. */
  | { type: 'set_timer'; ms: number }
  /** Rebuild the view from PostgreSQL (the shell runs the activation reads when nothing is in flight). */
  | { type: 'resync' };

export interface SchedulerDecision {
  state: SchedulerState;
  effects: SchedulerEffect[];
  reply?: SchedulerReply;
}

export interface SchedulerEnv {
  now: number;
  /** The team's quota (0 = unlimited). */
  maxConcurrent: number;
  /** The scheduling policy; absent = fifo-lru (the scheduler before priorities). */
  policy?: PolicySettings;
}

const FIFO_LRU: PolicySettings = { strategy: 'fifo-lru', agingS: 0, warmLookahead: 0, warmSlackTasks: 0 };

/** What survives a rebuild of the view: the fair-share ledger, the credential limits, warm placement. */
export interface SchedulerMemory {
  ledger?: UsageLedger;
  limits?: Map<string, SubmitterLimits>;
  lastWorkflow?: Map<string, string>;
}

export function initialState(teamId: string, schedulable: readonly TaskRecord[], active: readonly TaskRecord[], agents: readonly AgentInfo[], mem: SchedulerMemory = {}): SchedulerState {
  const s: SchedulerState = {
    teamId,
    queue: new Map(),
    agents: new Map(),
    active: new Map(),
    passPending: false,
    toLoad: new Set(),
    loading: new Map(),
    nextLoad: 1,
    loadInFlight: false,
    marking: new Set(),
    ledger: mem.ledger ?? new UsageLedger(3600),
    limits: mem.limits ?? new Map(),
    lastWorkflow: mem.lastWorkflow ?? new Map(),
    unmarked: new Set(),
    cloudIds: new Set(),
  };
  for (const t of schedulable) enqueue(s, t);
  for (const t of active) s.active.set(t.id, t.agentId);
  for (const a of agents) upsertAgent(s, a);
  return s;
}

function upsertAgent(s: SchedulerState, a: AgentInfo): void {
  const prev = s.agents.get(a.agentId);
  let used = 0;
  for (const ag of s.active.values()) if (ag === a.agentId) used++;
  s.agents.set(a.agentId, { ...a, free: Math.max(0, a.slots - used), lastAssignedAt: prev?.lastAssignedAt ?? 0, lastWorkflow: s.lastWorkflow.get(a.agentId) ?? null });
}

const schedulable = (s: SchedulerState, t: TaskRecord): boolean => t.teamId === s.teamId && (t.status === 'pending' || t.status === 'waiting');

/** Puts a task in the queue (and in the pass's hints). */
function enqueue(s: SchedulerState, t: TaskRecord): void {
  s.queue.set(t.id, t);
  if (t.status === 'pending') s.unmarked.add(t.id);
  if (t.dispatchTarget !== 'agent') s.cloudIds.add(t.id);
}

/** Takes a task out of the queue (and out of the hints). */
function dequeue(s: SchedulerState, taskId: string): void {
  s.queue.delete(taskId);
  s.unmarked.delete(taskId);
  s.cloudIds.delete(taskId);
}

/** A message about a task is newer than any load in flight for it: that load's answer is ignored. */
const touch = (s: SchedulerState, taskId: string): void => {
  s.loading.delete(taskId);
};

/** The record must be re-read (at the next pass, in one statement with the others). */
const refresh = (s: SchedulerState, taskId: string): void => {
  touch(s, taskId);
  s.toLoad.add(taskId);
};

const freeSlot = (s: SchedulerState, agentId: string): void => {
  const a = s.agents.get(agentId);
  if (a) a.free = Math.min(a.slots, a.free + 1);
};

export const statsOf = (s: SchedulerState): SchedulerStats => ({ queued: s.queue.size, active: s.active.size, agents: [...s.agents.values()].map((a) => ({ agentId: a.agentId, free: a.free })) });

const bySeq = (a: TaskRecord, b: TaskRecord): number => a.seq - b.seq;

/** The fair-share inputs of a pass: the ledger's window, the limits, the team's held tasks and quota. */
function usageOf(s: SchedulerState, env: SchedulerEnv): Parameters<typeof schedule>[2] {
  const u = (env.policy?.strategy ?? 'fifo-lru') === 'fair' ? s.ledger.usage(env.now) : { gpuSeconds: new Map<string, number>(), active: new Map<string, number>(), quantumS: 60 };
  return { ...u, limits: s.limits, teamActive: s.active.size, teamMax: env.maxConcurrent };
}

/** One pass over the FIFO queue: assign what can run (optimistic reservation), mark the rest waiting. */
function pass(s: SchedulerState, env: SchedulerEnv): SchedulerEffect[] {
  const effects: SchedulerEffect[] = [];
  if (s.toLoad.size > 0 && !s.loadInFlight) {
    s.loadInFlight = true;
    const token = s.nextLoad++;
    const ids = [...s.toLoad];
    s.toLoad.clear();
    for (const id of ids) s.loading.set(id, token);
    effects.push({ type: 'load', token, ids });
  }
  // tasks for a hosted cloud provider are not placed on agents: their dispatcher takes them (it keeps
  // its own queue against the provider's concurrency limit and rebuilds it from PostgreSQL)
  for (const id of [...s.cloudIds]) {
    s.cloudIds.delete(id);
    const t = s.queue.get(id);
    if (!t || t.dispatchTarget === 'agent') continue;
    dequeue(s, t.id);
    touch(s, t.id);
    effects.push({ type: 'cloud', task: t });
  }
  if (s.queue.size === 0) return effects;
  // nothing can be placed (no free slot, or the quota is used up): FIFO order does not matter, only
  // which tasks are still `pending` (they move to `waiting`): the hint set names them, so neither the
  // queue is walked nor sorted (a pass that frees or adds capacity walks it, below)
  const full = (env.maxConcurrent > 0 && s.active.size >= env.maxConcurrent) || ![...s.agents.values()].some((a) => !a.draining && a.free > 0);
  if (full) {
    const wait: string[] = [];
    for (const id of s.unmarked) {
      if (s.queue.get(id)?.status === 'pending') wait.push(id);
      else s.unmarked.delete(id);
    }
    markWaiting(s, wait, effects);
    return effects;
  }
  // retries still in their backoff are not placed; a timer kicks a pass when the earliest is due
  const due: TaskRecord[] = [];
  const notDue: TaskRecord[] = [];
  let earliest = Infinity;
  for (const t of s.queue.values()) {
    if (t.notBefore != null && t.notBefore > env.now) {
      notDue.push(t);
      earliest = Math.min(earliest, t.notBefore);
    } else due.push(t);
  }
  const p = schedule(due.sort(bySeq), s.agents, usageOf(s, env), env.now, env.policy ?? FIFO_LRU);
  for (const t of notDue) if (t.status === 'pending') p.wait.push(t.id);
  // ... and when a task the policy held back for a busy warm agent stops waiting for it
  const wake = Math.min(earliest, ('wakeAt' in p ? p.wakeAt : null) ?? Infinity);
  if (wake !== Infinity) effects.push({ type: 'set_timer', ms: Math.max(0, wake - env.now) });
  for (const step of p.assign) {
    const agent = step.agentId ? s.agents.get(step.agentId) : undefined;
    if (!agent) continue;
    // the task actor applies the fenced transition concurrently and answers assign_rejected if it
    // cannot (so one slow transaction never stalls the team)
    const task = s.queue.get(step.taskId);
    dequeue(s, step.taskId);
    touch(s, step.taskId);
    s.active.set(step.taskId, agent.agentId);
    agent.free -= 1;
    agent.lastAssignedAt = env.now;
    s.ledger.start(step.taskId, task?.submitter ?? '', agent.gpuCount, env.now);
    if (task?.workflowKey) {
      agent.lastWorkflow = task.workflowKey;
      s.lastWorkflow.set(agent.agentId, task.workflowKey);
    }
    // the record rides along so an idle task actor does not read it again (its write is fenced anyway)
    effects.push({ type: 'assign', taskId: step.taskId, agentId: agent.agentId, provision: agent.needsSync, task });
  }
  markWaiting(s, p.wait, effects);
  return effects;
}

/** One pending -> waiting batch at a time for the pending ones of `ids` (the next pass takes the rest). */
function markWaiting(s: SchedulerState, ids: string[], effects: SchedulerEffect[]): void {
  if (s.marking.size > 0) return;
  const toWait = ids.filter((id) => s.queue.get(id)?.status === 'pending' && !s.marking.has(id));
  if (toWait.length === 0) return;
  for (const id of toWait) s.marking.add(id);
  effects.push({ type: 'mark_waiting', ids: toWait });
}

type Handler = Handlers<SchedulerInput, [s: SchedulerState, env: SchedulerEnv], SchedulerEffect[]>;

/**
 * One handler per message type; each updates the state and returns its effects. Every message but
 * kick and stats then asks for one coalesced pass (see decide).
 */
const handlers: Handler = {
  resync: () => [{ type: 'resync' }],
  task_submitted: (m, s) => {
    s.active.delete(m.taskId);
    if (!m.task) {
      refresh(s, m.taskId);
      return [];
    }
    touch(s, m.taskId);
    if (schedulable(s, m.task)) enqueue(s, m.task);
    return [];
  },
  task_requeued: (m, s, env) => {
    s.ledger.end(m.taskId, env.now);
    s.active.delete(m.taskId);
    refresh(s, m.taskId);
    return [];
  },
  task_removed: (m, s, env) => {
    s.ledger.end(m.taskId, env.now);
    dequeue(s, m.taskId);
    s.active.delete(m.taskId);
    s.toLoad.delete(m.taskId);
    touch(s, m.taskId);
    return [];
  },
  slot_freed: (m, s, env) => {
    s.ledger.end(m.taskId, env.now);
    const agentId = s.active.get(m.taskId) ?? m.agentId;
    if (s.active.delete(m.taskId) && agentId) freeSlot(s, agentId);
    dequeue(s, m.taskId);
    s.toLoad.delete(m.taskId);
    touch(s, m.taskId);
    return [];
  },
  assign_rejected: (m, s) => {
    // the task actor refused (cancelled meanwhile, or a fenced write lost): release the slot, re-read it
    if (s.active.get(m.taskId) === m.agentId) {
      s.ledger.drop(m.taskId);
      s.active.delete(m.taskId);
      freeSlot(s, m.agentId);
    }
    refresh(s, m.taskId);
    return [];
  },
  agent_up: (m, s) => {
    upsertAgent(s, m.agent);
    return [];
  },
  agent_down: (m, s) => {
    s.agents.delete(m.agentId);
    return [];
  },
  limits_changed: (m, s) => {
    if (m.weight === 1 && m.maxConcurrent === null) s.limits.delete(m.credentialId);
    else s.limits.set(m.credentialId, { weight: m.weight, maxConcurrent: m.maxConcurrent });
    return [];
  },
  kick: (_m, s, env) => {
    s.passPending = false;
    return pass(s, env);
  },
  stats: () => [],
  why_waiting: () => [], // answered by the actor from its view (waiting.ts), never decided
  loaded: (m, s) => {
    s.loadInFlight = false;
    const found = new Map(m.records.map((t) => [t.id, t]));
    for (const id of m.ids) {
      if (s.loading.get(id) !== m.token) continue; // a later message about it won
      s.loading.delete(id);
      const t = found.get(id);
      if (t && schedulable(s, t) && !s.active.has(id)) enqueue(s, t);
      else dequeue(s, id);
    }
    return [];
  },
  waiting_marked: (m, s) => {
    const moved = new Set(m.moved);
    for (const id of m.ids) {
      s.marking.delete(id);
      const t = s.queue.get(id);
      if (moved.has(id)) {
        if (t) s.queue.set(id, { ...t, status: 'waiting' });
        s.unmarked.delete(id);
      } else if (t) refresh(s, id); // no longer pending (cancelled or assigned meanwhile): re-read it
    }
    return m.events.length > 0 ? [{ type: 'publish', events: m.events }] : [];
  },
};

/**
 * The scheduler's decision for one message: no I/O (reads and writes are effects whose results come
 * back as `loaded` / `waiting_marked`). The state is the actor's own and is updated in place (a
 * team's queue may hold thousands of tasks: no copy per message); the same object is returned.
 */
export function decide(s: SchedulerState, m: SchedulerInput, env: SchedulerEnv): SchedulerDecision {
  const effects: SchedulerEffect[] = dispatchTo(handlers, m, s, env);
  if (m.type === 'stats') return { state: s, effects, reply: statsOf(s) };
  if (m.type !== 'kick' && m.type !== 'resync' && !s.passPending) {
    // coalesce: one pass after the burst of messages already in the mailbox
    s.passPending = true;
    effects.push({ type: 'kick' });
  }
  return { state: s, effects, reply: { ok: true } };
}
