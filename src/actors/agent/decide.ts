import type { AgentInfo, ServerToAgent } from '../task-record.js';
import type { TaskAssignment } from '../task-record.js';
import type { TaskMsg } from '../task/protocol.js';
import type { SchedulerMsg } from '../scheduler/protocol.js';
import { dispatchTo, type Handlers } from '../runtime/handlers.js';
import type { AgentMsg, AgentReply } from './protocol.js';

export type AgentStatus = 'online' | 'busy' | 'draining' | 'offline';
export interface StatusRow {
  status: AgentStatus;
  currentTaskId: string | null;
}

/**
 * One agent actor's view: its session, the tasks it holds (with the epoch each was given), and the
 * displayed agents row (agent_status, current_task_id): what was last written, what is wanted next,
 * and whether the one write is in flight.
 */
export interface AgentState {
  agentId: string;
  info: AgentInfo | null;
  sessionId: string | null;
  connected: boolean;
  /** taskId -> what this agent holds */
  tasks: Map<string, { attempt: number; epoch: number }>;
  statusWritten: StatusRow | null;
  statusWanted: StatusRow | null;
  /** The row being written (one write at a time). */
  statusWriting: StatusRow | null;
}

/** Results of I/O the shell ran for an earlier decision, fed back as messages (never on the wire). */
export type AgentResult =
  | { type: 'status_written'; row: StatusRow; ok: boolean }
  /** The tasks PostgreSQL assigns to the agent's team (read after `connected`). */
  | { type: 'active_loaded'; sessionId: string; reported: string[]; rows: Array<{ id: string; agentId: string | null; leaseEpoch: number }> }
  | { type: 'assignment_loaded'; taskId: string; attempt: number; epoch: number; provision: boolean; assignment: TaskAssignment | null }
  /** What transport.send answered for a send that asked to be told (an assignment). */
  | { type: 'send_result'; taskId: string; epoch: number; ok: boolean };

export type AgentInput = AgentMsg | AgentResult;

export type AgentEffect =
  | { type: 'tell_task'; taskId: string; msg: TaskMsg }
  | { type: 'tell_scheduler'; teamId: string; msg: SchedulerMsg }
  /** Down the stream; with `report`, the shell feeds back send_result in the same turn. */
  | { type: 'send'; msg: ServerToAgent; report?: { taskId: string; epoch: number } }
  | { type: 'set_timer'; name: 'grace'; ms: number; msg: AgentMsg }
  | { type: 'cancel_timer'; name: 'grace' }
  | { type: 'write_status'; row: StatusRow }
  | { type: 'load_active'; sessionId: string; teamId: string; reported: string[] }
  | { type: 'load_assignment'; taskId: string; attempt: number; epoch: number; provision: boolean }
  | { type: 'warn'; msg: string; fields: Record<string, unknown> }
  /** End the agent's stream on this node for good (deleted). */
  | { type: 'kick' }
  | { type: 'stop' };

export interface AgentDecision {
  state: AgentState;
  effects: AgentEffect[];
  reply?: AgentReply;
}

export interface AgentEnv {
  now: number;
  /** How long a disconnected agent keeps its tasks before they are handled as lost. */
  graceMs: number;
  /**
   * Cluster: the agent's stream is now held by another node (it reconnected there). A grace expiry
   * here then loses nothing: that node's agent actor holds the tasks.
   */
  connectedElsewhere?: boolean;
}

export function initialAgentState(agentId: string): AgentState {
  return { agentId, info: null, sessionId: null, connected: false, tasks: new Map(), statusWritten: null, statusWanted: null, statusWriting: null };
}

/** The row the live view implies: idle or busy (naming a task it holds), or draining. */
export function liveStatus(s: AgentState): StatusRow {
  const draining = s.info?.draining ?? false;
  if (s.tasks.size === 0) return { status: draining ? 'draining' : 'online', currentTaskId: null };
  const shown = (s.statusWanted ?? s.statusWriting ?? s.statusWritten)?.currentTaskId ?? null;
  const current = shown !== null && s.tasks.has(shown) ? shown : ([...s.tasks.keys()].pop() as string);
  return { status: draining ? 'draining' : 'busy', currentTaskId: current };
}

/** Starts the one write if none is in flight (the wanted row is taken; a newer one waits its turn). */
function flushStatus(s: AgentState, out: AgentEffect[]): void {
  if (s.statusWriting || !s.statusWanted) return;
  out.push({ type: 'write_status', row: s.statusWanted });
  s.statusWriting = s.statusWanted;
  s.statusWanted = null;
}

/**
 * The agents row displays the live view; it is not a source of truth for tasks (the scheduler
 * learns agents from agent_up/agent_down). It is written only when it changes (idle <-> busy, or the
 * task it names is no longer held), by one write at a time, so dispatches and results are never
 * serialised behind an UPDATE; the latest wanted row is written next, in order.
 */
function wantStatus(s: AgentState, out: AgentEffect[]): void {
  const row = liveStatus(s);
  // compared with what the row will be once the queued/in-flight writes land (not the last landed one)
  const last = s.statusWanted ?? s.statusWriting ?? s.statusWritten;
  if (last && last.status === row.status && last.currentTaskId === row.currentTaskId) return;
  s.statusWanted = row;
  flushStatus(s, out);
}

/** Lifecycle rows (connected, update, lost, revoke) are written even if they look unchanged. */
function forceStatus(s: AgentState, row: StatusRow, out: AgentEffect[]): void {
  s.statusWritten = null;
  s.statusWanted = row;
  flushStatus(s, out);
}

function lose(s: AgentState, taskId: string, epoch: number, out: AgentEffect[]): void {
  s.tasks.delete(taskId);
  out.push({ type: 'tell_task', taskId, msg: { type: 'agent_lost', agentId: s.agentId, epoch } });
}

function loseAll(s: AgentState, out: AgentEffect[]): void {
  for (const [taskId, t] of [...s.tasks]) lose(s, taskId, t.epoch, out);
}

const tellScheduler = (s: AgentState, msg: SchedulerMsg, out: AgentEffect[]): void => {
  if (s.info) out.push({ type: 'tell_scheduler', teamId: s.info.teamId, msg });
};

/** Sends the assignment (the agent holds the task from now), or loses it when there is no stream. */
function assign(s: AgentState, m: { taskId: string; attempt: number; epoch: number; provision: boolean }, assignment: TaskAssignment | null, out: AgentEffect[]): void {
  s.tasks.set(m.taskId, { attempt: m.attempt, epoch: m.epoch });
  if (assignment === null || !s.connected) return lose(s, m.taskId, m.epoch, out);
  out.push({ type: 'send', msg: { type: 'assign', taskId: m.taskId, attempt: m.attempt, epoch: m.epoch, assignment, provision: m.provision }, report: { taskId: m.taskId, epoch: m.epoch } });
}

type R = { effects: AgentEffect[]; reply?: AgentReply };
type Handler = Handlers<AgentInput, [s: AgentState, env: AgentEnv], R>;
const ok = (effects: AgentEffect[] = []): R => ({ effects, reply: { ok: true } });

/** One handler per message type (a missing one does not compile). */
const handlers: Handler = {
  connected: (m, s) => {
    const out: AgentEffect[] = [{ type: 'cancel_timer', name: 'grace' }];
    s.info = m.info;
    s.sessionId = m.sessionId;
    s.connected = true;
    forceStatus(s, { status: m.info.draining ? 'draining' : 'online', currentTaskId: null }, out);
    const reported = new Set<string>();
    for (const r of m.running) {
      reported.add(r.taskId);
      s.tasks.set(r.taskId, { attempt: r.attempt, epoch: r.epoch });
      out.push({ type: 'tell_task', taskId: r.taskId, msg: { type: 'reattach', agentId: s.agentId, epoch: r.epoch } });
    }
    // tasks we thought it had but it does not report: lost (before or after ACK)
    for (const [taskId, t] of [...s.tasks]) if (!reported.has(taskId)) lose(s, taskId, t.epoch, out);
    // tasks PostgreSQL assigns to it that it does not report (node restart) are lost too: read them,
    // and announce the agent to the scheduler once that is done (active_loaded)
    out.push({ type: 'load_active', sessionId: m.sessionId, teamId: m.info.teamId, reported: [...reported] });
    return ok(out);
  },
  active_loaded: (m, s) => {
    const out: AgentEffect[] = [];
    if (m.sessionId !== s.sessionId) return { effects: out }; // a newer session reads its own
    const reported = new Set(m.reported);
    for (const t of m.rows)
      if (t.agentId === s.agentId && !reported.has(t.id) && !s.tasks.has(t.id)) out.push({ type: 'tell_task', taskId: t.id, msg: { type: 'agent_lost', agentId: s.agentId, epoch: t.leaseEpoch } });
    if (s.connected && s.info) tellScheduler(s, { type: 'agent_up', agent: s.info }, out);
    return { effects: out };
  },
  update: (m, s) => {
    const out: AgentEffect[] = [];
    s.info = m.info;
    forceStatus(s, liveStatus(s), out);
    tellScheduler(s, { type: 'agent_up', agent: m.info }, out);
    return ok(out);
  },
  disconnected: (m, s, env) => {
    s.connected = false;
    const out: AgentEffect[] = [];
    tellScheduler(s, { type: 'agent_down', agentId: s.agentId }, out);
    out.push({ type: 'set_timer', name: 'grace', ms: env.graceMs, msg: { type: 'lost', sessionId: m.sessionId } });
    return ok(out);
  },
  lost: (m, s, env) => {
    if (s.connected || m.sessionId !== s.sessionId) return { effects: [], reply: { ok: false } };
    // the agent reconnected to another node of the cluster: its actor there holds the tasks and the row
    if (env.connectedElsewhere) return ok([{ type: 'stop' }]);
    const out: AgentEffect[] = [];
    forceStatus(s, { status: 'offline', currentTaskId: null }, out);
    loseAll(s, out);
    out.push({ type: 'stop' });
    return ok(out);
  },
  revoke: (_m, s) => {
    s.connected = false;
    const out: AgentEffect[] = [];
    tellScheduler(s, { type: 'agent_down', agentId: s.agentId }, out);
    forceStatus(s, { status: 'offline', currentTaskId: null }, out);
    loseAll(s, out);
    out.push({ type: 'stop' });
    return ok(out);
  },
  dispatch: (m, s) => {
    const out: AgentEffect[] = [];
    // the task actor passes the payload its assigning statement returned; read it only when absent
    if (m.assignment) assign(s, m, m.assignment, out);
    else {
      s.tasks.set(m.taskId, { attempt: m.attempt, epoch: m.epoch });
      out.push({ type: 'load_assignment', taskId: m.taskId, attempt: m.attempt, epoch: m.epoch, provision: m.provision });
    }
    return ok(out);
  },
  assignment_loaded: (m, s) => {
    const out: AgentEffect[] = [];
    // still held for that epoch (a cancel may have come meanwhile): send it now
    if (s.tasks.get(m.taskId)?.epoch === m.epoch) assign(s, m, m.assignment, out);
    return { effects: out };
  },
  send_result: (m, s) => {
    const out: AgentEffect[] = [];
    if (m.ok) wantStatus(s, out);
    else lose(s, m.taskId, m.epoch, out);
    return { effects: out };
  },
  server_msg: (m, s) => {
    const out: AgentEffect[] = [];
    if (s.connected) out.push({ type: 'send', msg: m.msg });
    if (m.msg.type === 'cancel') {
      // the task was cancelled or timed out: the agent is told to interrupt; its slot is free
      s.tasks.delete(m.msg.taskId);
      wantStatus(s, out);
    }
    return ok(out);
  },
  ack: (m) => ok([{ type: 'tell_task', taskId: m.taskId, msg: { type: 'ack', attempt: m.attempt, epoch: m.epoch } }]),
  provisioned: (m) => ok([{ type: 'tell_task', taskId: m.taskId, msg: { type: 'provisioned', epoch: m.epoch } }]),
  progress: (m) => ok([{ type: 'tell_task', taskId: m.taskId, msg: { type: 'progress', epoch: m.epoch, progress: m.progress } }]),
  finished: (m, s) => finished(s, m.taskId, m.epoch, { type: 'finish', epoch: m.epoch, output: m.output, ...(m.traceparent ? { traceparent: m.traceparent } : {}) }),
  failed: (m, s) => finished(s, m.taskId, m.epoch, { type: 'fail', epoch: m.epoch, error: m.error, ...(m.traceparent ? { traceparent: m.traceparent } : {}) }),
  status_written: (m, s) => {
    const out: AgentEffect[] = [];
    s.statusWriting = null;
    // a failed write (the shell logged it) leaves the row unknown: the next change writes again
    s.statusWritten = m.ok ? m.row : null;
    flushStatus(s, out);
    return { effects: out };
  },
  kick: (_m, s) => ok(s.connected ? [{ type: 'kick' }] : [{ type: 'stop' }]),
  holds: (m, s) => {
    // a task actor that moved to this cluster node asks whether the agent still runs its task
    const held = s.tasks.get(m.taskId);
    if (s.connected && held && held.epoch === m.epoch) return ok([{ type: 'tell_task', taskId: m.taskId, msg: { type: 'reattach', agentId: s.agentId, epoch: m.epoch } }]);
    // no session on this node (an activation by this question alone): nothing to keep in memory
    return { effects: s.sessionId === null && !s.connected ? [{ type: 'stop' }] : [], reply: { ok: false } };
  },
  get: (_m, s) => ({ effects: [], reply: { agentId: s.agentId, connected: s.connected, info: s.info, tasks: [...s.tasks.keys()] } }),
};

function finished(s: AgentState, taskId: string, epoch: number, msg: TaskMsg): R {
  const out: AgentEffect[] = [{ type: 'tell_task', taskId, msg }];
  const held = s.tasks.get(taskId);
  if (held && held.epoch === epoch) s.tasks.delete(taskId);
  wantStatus(s, out);
  return ok(out);
}

/**
 * The agent actor's decision for one message: no I/O (status writes and reads are effects whose
 * results come back as messages). The state is the actor's own and is updated in place; the same
 * object is returned. Stream messages of a superseded session are rejected.
 */
export function decide(s: AgentState, m: AgentInput, env: AgentEnv): AgentDecision {
  const fromSession = 'sessionId' in m && m.type !== 'lost' && m.type !== 'active_loaded' ? m.sessionId : null;
  if (fromSession !== null && m.type !== 'connected' && fromSession !== s.sessionId)
    return { state: s, effects: [{ type: 'warn', msg: 'message from a superseded agent session rejected', fields: { agent_id: s.agentId, msg: m.type } }], reply: { ok: false } };
  const r: R = dispatchTo(handlers, m, s, env);
  return { state: s, effects: r.effects, ...(r.reply ? { reply: r.reply } : {}) };
}
