/**
 * Ports the actors talk to. Actor code imports only these interfaces (and src/shared); the
 * persistence, cluster and edge layers implement them, and src/main.ts wires them together.
 */
import type { Clock } from '../shared/clock.js';
import type { AuditNote } from '../shared/audit.js';
import type { ActorKind, TaskRecord, TaskStatus, TaskProgress } from '../domain/tasks/record.js';
import type { TaskAssignment, AgentInfo, ServerToAgent } from './task-record.js';
import type { TaskMsg, TaskReplies } from './task/protocol.js';
import type { SchedulerMsg, SchedulerReplies } from './scheduler/protocol.js';
import type { AgentMsg, AgentReplies } from './agent/protocol.js';
import type { ContainerServiceMsg, ContainerServiceReplies } from './container/protocol.js';
import type { CloudDispatcherMsg, CloudDispatcherReplies } from './cloud/protocol.js';
import type { LedgerSeedRow } from './scheduler/ledger.js';
import type { SubmitterLimits } from './scheduler/fair.js';
import type { InstanceState, ServiceInstance, ServiceRecord, ServiceSpec, ServiceStatus } from '../domain/containers/schema.js';

export { TASK_STATUSES, TERMINAL_STATUSES, isTerminal, ACTOR_KINDS } from '../domain/tasks/record.js';
export type { TaskRecord, TaskStatus, TaskProgress, ActorKind } from '../domain/tasks/record.js';
export type { TaskAssignment, AgentInfo, ServerToAgent } from './task-record.js';

// ---------------------------------------------------------------------------------------------
// Typed addresses and the protocol registry

/** What a protocol looks like to the runtime: a message union (discriminated by `type`) and a reply per type. */
export interface ProtocolShape {
  msg: { type: string };
  replies: object;
}
/** A map kind -> protocol (the runtime is generic over it; `Protocols` is this service's). */
export type ProtocolMap<P> = { [K in keyof P]: ProtocolShape };
export type KindOf<P> = keyof P & string;
/** The messages an actor of kind K accepts. */
export type MsgOf<P extends ProtocolMap<P>, K extends KindOf<P>> = P[K]['msg'];
/** The reply to a message of type T sent to kind K. */
export type ReplyOf<P extends ProtocolMap<P>, K extends KindOf<P>, T extends string> = T extends keyof P[K]['replies'] ? P[K]['replies'][T] : never;
/** Any reply of kind K (what a turn may return). */
export type AnyReplyOf<P extends ProtocolMap<P>, K extends KindOf<P>> = P[K]['replies'][keyof P[K]['replies']];

/**
 * Every actor kind of this service with its protocol: each kind's zod message union (protocol.ts)
 * and its reply type per message type. tell/ask are checked against it.
 */
export interface Protocols {
  task: { msg: TaskMsg; replies: TaskReplies };
  'team-scheduler': { msg: SchedulerMsg; replies: SchedulerReplies };
  agent: { msg: AgentMsg; replies: AgentReplies };
  'container-service': { msg: ContainerServiceMsg; replies: ContainerServiceReplies };
  'cloud-dispatcher': { msg: CloudDispatcherMsg; replies: CloudDispatcherReplies };
}

/** The registry has exactly the kinds of the vocabulary (a kind added on one side only does not compile). */
type SameKeys<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
export const PROTOCOLS_COVER_ACTOR_KINDS: SameKeys<keyof Protocols, ActorKind> = true;

/** Address of an actor of kind K: never a JS object reference, so a remote node can stand behind it. */
export interface ActorRef<K extends string = string> {
  readonly kind: K;
  readonly id: string;
}

export interface AskOptions {
  /** Absolute deadline in ms (clock time). */
  deadlineMs?: number;
}

/**
 * How callers reach actors, wherever they live (this node or another). `tell` accepts only the
 * messages of the ref's kind; `ask` returns the reply type of the message's type.
 */
export interface ActorSystemPort<P extends ProtocolMap<P> = Protocols> {
  tell<K extends KindOf<P>>(ref: ActorRef<K>, msg: MsgOf<P, K>): void;
  ask<K extends KindOf<P>, M extends MsgOf<P, K>>(ref: ActorRef<K>, msg: M, opts?: AskOptions): Promise<ReplyOf<P, K, M['type']>>;
}

export interface RuntimePorts {
  clock: Clock;
}

// ---------------------------------------------------------------------------------------------
// Tasks

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
  /** With createRetry: the retry is not scheduled before this instant (epoch ms; retry backoff). */
  retryNotBefore?: number;
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
  /** Many records in one statement (the scheduler's bulk refresh); missing ids are absent. */
  loadMany(taskIds: readonly string[]): Promise<TaskRecord[]>;
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
  /**
   * The team's tasks that held an agent since `sinceMs` (assigned, and still held or released
   * after it), with their submitter and the agent's GPU count: seeds the fair-share ledger.
   */
  recentUsage?(teamId: string, sinceMs: number): Promise<LedgerSeedRow[]>;
}

/** Fan-out of committed task events (SSE, webhooks, notifications) — in-memory or Redis pub/sub. */
export interface EventBusPort {
  publish(events: readonly TaskEvent[]): void;
}

// ---------------------------------------------------------------------------------------------
// Agents

/** The agent stream transport (gRPC in production, a fake in tests). */
export interface AgentTransportPort {
  /** False when the agent has no live session on this node. */
  send(agentId: string, msg: ServerToAgent): boolean;
  /** The live session on this node, if any (an agent actor restarted after a crash re-reads it). */
  session(agentId: string): { sessionId: string; info: AgentInfo } | null;
  /** Cluster: the agent's stream is held by another node now (its directory entry moved). */
  connectedElsewhere?(agentId: string): boolean;
  /** Ends the agent's stream on this node for good (the agent was deleted through another node). */
  kick?(agentId: string): void;
}

export interface AgentStorePort {
  /** Agents currently online (or draining) of a team, as the scheduler needs them. */
  online(teamId: string): Promise<AgentInfo[]>;
  setStatus(agentId: string, status: 'online' | 'busy' | 'draining' | 'offline', currentTaskId?: string | null): Promise<void>;
}

/** Per-credential scheduling settings (fair-share weight, max_concurrent_tasks) of a team's credentials. */
export interface SchedulingLimitsPort {
  forTeam(teamId: string): Promise<Map<string, SubmitterLimits>>;
}

export interface QuotaPort {
  /** 0 = unlimited. */
  maxConcurrentTasks(teamId: string): number;
}

/** What the actors count for /metrics (prom-client lives in the edge; the actors only call this). */
export interface TaskMetricsPort {
  /** A scheduler handed a task to an agent, queueWaitMs after the task was created (or requeued). */
  assigned(queueWaitMs: number): void;
  /** A transition to a terminal state committed on this node. */
  finished(status: 'completed' | 'failed' | 'cancelled'): void;
}

// ---------------------------------------------------------------------------------------------
// Container services

/** What the container-service actor reads and writes (PgContainerStore implements it). */
export interface ContainerStorePort {
  byId(id: string): Promise<ServiceRecord | null>;
  /** audit: appended in the same transaction (the delete operation's note). */
  delete(id: string, audit?: AuditNote): Promise<void>;
  /** audit: appended in the same transaction (the lifecycle operation that caused this write). */
  setStatus(id: string, status: ServiceStatus, detail: ServiceRecord['detail'], audit?: AuditNote): Promise<void>;
  /** Appends an operation's audit note on its own (an operation that changed no stored state). */
  audit(note: AuditNote): Promise<void>;
  instances(serviceId: string): Promise<ServiceInstance[]>;
  putInstance(i: { id: string; serviceId: string; teamId: string; agentId: string; status: InstanceState; healthy: boolean; error: string; revision?: string }): Promise<void>;
  deleteInstance(id: string): Promise<void>;
  /** A rolled-back update: the service's spec fields go back to the previous spec. */
  restoreSpec(id: string, spec: ServiceSpec): Promise<void>;
  /** The team's online agents that offer a container runtime. */
  placementAgents(teamId: string): Promise<Array<{ id: string; labels: string[]; gpuCount: number; runtime: string; status: string }>>;
  /** GPUs held on each agent by live instances of the team's other services. */
  gpuUsage(teamId: string, exceptServiceId: string): Promise<Map<string, number>>;
}

/** Tells every node that a team's services or instances changed (gateway routing tables reload). */
export interface ContainerChangesPort {
  changed(teamId: string): void;
}

// ---------------------------------------------------------------------------------------------
// Hosted cloud providers (dispatch_target comfy_cloud)

/** What a cloud job reports while it runs; the dispatcher turns each into a task message. */
export interface CloudJobCallbacks {
  /** The provider accepted the job: the task goes to provisioning; resolves with the task's new epoch, or null when it no longer wants the job (cancelled meanwhile). */
  accepted(promptId: string): Promise<number | null>;
  /** The provider reports execution: provisioning -> running. */
  started(): void;
  progress(p: TaskProgress): void;
  /** Transient trouble (socket lost, a failed poll): logged. */
  trouble(what: string): void;
}

export type CloudJobResult =
  /** The outputs are in the object store; output is the task's completed output record. */
  | { kind: 'completed'; output: Record<string, unknown> }
  /** The job failed (provider error, bad workflow, bad key, no credits): error is what the user reads. */
  | { kind: 'failed'; error: string }
  /** The provider cannot take it now (busy, outage): the task stays queued on our side; try again after retryInMs. */
  | { kind: 'later'; reason: string; retryInMs: number }
  /** Stopped (cancel, passivation): nothing to record. */
  | { kind: 'stopped' };

/** Runs provider jobs for the cloud dispatcher (src/cloud/runner.ts implements it). */
export interface CloudJobsPort {
  /** The team's concurrency limit for the provider; null when the team has no key for it. */
  capacity(teamId: string, provider: string): Promise<number | null>;
  /**
   * One job of a task, from submission (or re-attachment to a job the provider already accepted)
   * to its outputs in the object store. Never throws: every ending is a CloudJobResult.
   */
  run(job: { teamId: string; provider: string; taskId: string; attempt: number; epoch: number | null }, cb: CloudJobCallbacks, signal: AbortSignal): Promise<CloudJobResult>;
  /** Cancels the provider's job of the task, if one was submitted. */
  cancel(teamId: string, provider: string, taskId: string): Promise<void>;
}
