/**
 * Ports the actors talk to. Actor code imports only these interfaces (and src/shared); the
 * persistence, cluster and edge layers implement them, and src/main.ts wires them together.
 */
import type { Clock } from '../shared/clock.js';

/** Address of an actor: never a JS object reference, so a remote node can stand behind it. */
export interface ActorRef {
  readonly kind: string;
  readonly id: string;
}

export interface AskOptions {
  /** Absolute deadline in ms (clock time). */
  deadlineMs?: number;
}

/** How callers reach actors, wherever they live (this node or another). */
export interface ActorSystemPort {
  tell(ref: ActorRef, msg: unknown): void;
  ask<R = unknown>(ref: ActorRef, msg: unknown, opts?: AskOptions): Promise<R>;
}

export interface RuntimePorts {
  clock: Clock;
}

// ---------------------------------------------------------------------------------------------
// Tasks

export const TASK_STATUSES = ['pending', 'waiting', 'provisioning', 'queued', 'running', 'completed', 'failed', 'cancelled'] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];
export const TERMINAL_STATUSES: readonly TaskStatus[] = ['completed', 'failed', 'cancelled'];
export const isTerminal = (s: TaskStatus): boolean => TERMINAL_STATUSES.includes(s);

export interface TaskProgress {
  progress: number;
  step_current: number;
  step_total: number;
  current_node: string;
  stage?: string;
  message?: string;
}

/** What the actors know of a task (a row of `tasks`). */
export interface TaskRecord {
  id: string;
  teamId: string;
  status: TaskStatus;
  attempt: number;
  maxRetries: number;
  leaseEpoch: number;
  agentId: string | null;
  dispatchTarget: 'agent' | 'comfy_cloud';
  toolType: 'comfyui' | 'nerfstudio';
  timeoutS: number;
  requiredLabels: string[];
  minVramGb: number;
  requiredModels: string[];
  preferredGpu: string | null;
  seq: number;
  startedAt: number | null;
  createdAt: number;
  parentTaskId: string | null;
  retryTaskId: string | null;
}

/** The task event types of the spec's SSE stream. */
export type TaskEventType = 'status' | 'progress' | 'completed' | 'failed' | 'cancelled';

export interface TaskEventInput {
  type: TaskEventType;
  data: Record<string, unknown>;
}

export interface TaskEvent extends TaskEventInput {
  id: number;
  taskId: string;
  teamId: string;
  createdAt: number;
}

export interface TransitionPatch {
  agentId?: string | null;
  /** Sets lease_epoch to this value (assignment increments it). */
  leaseEpoch?: number;
  progress?: TaskProgress | null;
  output?: Record<string, unknown> | null;
  error?: string | null;
  queuedAt?: number | null;
  startedAt?: number | null;
  finishedAt?: number | null;
}

export interface TransitionRequest {
  taskId: string;
  /** Allowed from-states. */
  from: readonly TaskStatus[];
  /** When set, the row's lease_epoch must equal it (the fencing token). */
  epoch?: number;
  to: TaskStatus;
  patch: TransitionPatch;
  events: TaskEventInput[];
  /** Create the retry task (attempt+1, parent_task_id) in the same transaction. */
  createRetry?: boolean;
}

export type TransitionResult =
  | {
      ok: true;
      task: TaskRecord;
      events: TaskEvent[];
      retryTaskId: string | null;
      /** An assigning transition (agentId + new leaseEpoch) returns what the agent needs, read by the same statement. */
      assignment?: TaskAssignment;
    }
  | { ok: false; current: TaskRecord | null };

export interface TaskStorePort {
  load(taskId: string): Promise<TaskRecord | null>;
  /** One conditional UPDATE fenced by (from-states, epoch) + its events, in one transaction. */
  transition(req: TransitionRequest): Promise<TransitionResult>;
  /** Progress while running with this epoch; appends the event when given. False = stale. */
  progress(taskId: string, epoch: number, p: TaskProgress, event: TaskEventInput | null): Promise<{ ok: boolean; event: TaskEvent | null }>;
  /**
   * pending -> waiting for many tasks in one conditional UPDATE (still fenced on the from-state),
   * with their status events in the same transaction. Returns the tasks that moved.
   */
  markWaiting(teamId: string, taskIds: readonly string[]): Promise<{ moved: string[]; events: TaskEvent[] }>;
  /** pending and waiting tasks of a team, FIFO (by seq). */
  schedulable(teamId: string): Promise<TaskRecord[]>;
  /** provisioning + queued + running tasks of a team. */
  active(teamId: string): Promise<TaskRecord[]>;
  /** Every non-terminal task (recovery on start). */
  nonTerminal(): Promise<TaskRecord[]>;
  /** The payload an agent needs to run the task. */
  assignment(taskId: string): Promise<TaskAssignment | null>;
}

export interface TaskAssignment {
  taskId: string;
  attempt: number;
  toolType: 'comfyui' | 'nerfstudio';
  workflow: unknown;
  parameters: Record<string, unknown>;
  inputFiles: Array<{ key: string; fileKey: string; fileName: string; nodeId?: string; field?: string; targetPath?: string }>;
  timeoutS: number;
}

/** Fan-out of committed task events (SSE, webhooks, notifications) — in-memory or Redis pub/sub. */
export interface EventBusPort {
  publish(events: readonly TaskEvent[]): void;
}

// ---------------------------------------------------------------------------------------------
// Agents

export interface AgentInfo {
  agentId: string;
  teamId: string;
  labels: string[];
  gpuType: string | null;
  gpuCount: number;
  vramTotalGb: number;
  models: string[];
  slots: number;
  draining: boolean;
  /** Active team models/custom nodes the agent lacks: a task assigned to it provisions first. */
  needsSync: boolean;
}

/** Messages the server sends down an agent's stream. */
export type ServerToAgent =
  | { type: 'assign'; taskId: string; attempt: number; epoch: number; assignment: TaskAssignment; provision: boolean }
  | { type: 'cancel'; taskId: string; attempt: number; epoch: number }
  | { type: 'drain' };

/** The agent stream transport (gRPC in production, a fake in tests). */
export interface AgentTransportPort {
  /** False when the agent has no live session on this node. */
  send(agentId: string, msg: ServerToAgent): boolean;
  /** The live session on this node, if any (an agent actor restarted after a crash re-reads it). */
  session(agentId: string): { sessionId: string; info: AgentInfo } | null;
}

export interface AgentStorePort {
  /** Agents currently online (or draining) of a team, as the scheduler needs them. */
  online(teamId: string): Promise<AgentInfo[]>;
  setStatus(agentId: string, status: 'online' | 'busy' | 'draining' | 'offline', currentTaskId?: string | null): Promise<void>;
}

export interface QuotaPort {
  /** 0 = unlimited. */
  maxConcurrentTasks(teamId: string): number;
}
