/**
 * The task vocabulary, defined once: statuses, stages, the task record as the actors and stores
 * know it, and the actor kind names. Everything else (ports, actor protocols, stores, routes)
 * imports these instead of spelling the lists again.
 */
import { z } from 'zod';

/** Every task status, in lifecycle order. */
export const TASK_STATUSES = ['pending', 'waiting', 'provisioning', 'queued', 'running', 'completed', 'failed', 'cancelled'] as const;
export const TaskStatusSchema = z.enum(TASK_STATUSES);
export type TaskStatus = z.infer<typeof TaskStatusSchema>;

/** The three terminal statuses (exactly one is ever reached). */
export const TERMINAL = ['completed', 'failed', 'cancelled'] as const satisfies readonly TaskStatus[];
export const TERMINAL_STATUSES: readonly TaskStatus[] = TERMINAL;
export const isTerminal = (s: TaskStatus): boolean => TERMINAL_STATUSES.includes(s);
/** Waiting for an agent (the scheduler's queue). */
export const SCHEDULABLE = ['pending', 'waiting'] as const satisfies readonly TaskStatus[];
/** Held by an agent (assigned, not finished). */
export const ON_AGENT = ['provisioning', 'queued', 'running'] as const satisfies readonly TaskStatus[];
/** Every status but the terminal ones. */
export const NON_TERMINAL = [...SCHEDULABLE, ...ON_AGENT] as const;

/** Stages a long task (nerfstudio) reports in its progress. */
export const TASK_STAGES = ['download', 'process_data', 'train', 'export', 'upload'] as const;
export const TaskStageSchema = z.enum(TASK_STAGES);
export type TaskStage = z.infer<typeof TaskStageSchema>;

export const DISPATCH_TARGETS = ['agent', 'comfy_cloud'] as const;
export const TOOL_TYPES = ['comfyui', 'nerfstudio'] as const;

/**
 * What the actors know of a task (a row of `tasks`, without the large JSON). It also travels in
 * messages: the run endpoint hands it to the scheduler, and the scheduler to the task actor with an
 * assignment, so neither re-reads the row. Only an optimisation: every write is still fenced in
 * PostgreSQL, so a stale copy can only lose.
 */
export const TaskRecordSchema = z.object({
  id: z.string(),
  teamId: z.string(),
  status: TaskStatusSchema,
  attempt: z.number().int(),
  maxRetries: z.number().int(),
  leaseEpoch: z.number().int(),
  agentId: z.string().nullable(),
  dispatchTarget: z.enum(DISPATCH_TARGETS),
  toolType: z.enum(TOOL_TYPES),
  timeoutS: z.number().int(),
  requiredLabels: z.array(z.string()),
  minVramGb: z.number(),
  requiredModels: z.array(z.string()),
  preferredGpu: z.string().nullable(),
  seq: z.number(),
  startedAt: z.number().nullable(),
  createdAt: z.number(),
  parentTaskId: z.string().nullable(),
  retryTaskId: z.string().nullable(),
  /** A retry waiting out its backoff is not scheduled before this instant (epoch ms); null = at once. */
  notBefore: z.number().nullable().optional(),
  /** W3C traceparent of the submit span (tracing on): later spans of the task join its trace. */
  traceParent: z.string().nullable().optional(),
  /** 1 (highest) .. 5; absent = 3. */
  priority: z.number().int().min(1).max(5).optional(),
  /** Who submitted it, for fair share: the credential id (sk- or dk-), else the user id; null = unknown. */
  submitter: z.string().nullable().optional(),
  /** `<workflow id>@<version>`: warm placement prefers the agent that last ran the same. */
  workflowKey: z.string().nullable().optional(),
});
export type TaskRecord = z.infer<typeof TaskRecordSchema>;

/** Progress as an agent reports it and a task stores it. */
export const TaskProgressSchema = z.object({
  progress: z.number().min(0).max(1),
  step_current: z.number().int().nonnegative(),
  step_total: z.number().int().nonnegative(),
  current_node: z.string().max(500),
  stage: TaskStageSchema.optional(),
  message: z.string().max(2000).optional(),
});
export type TaskProgress = z.infer<typeof TaskProgressSchema>;

/** The actor kinds (the `kind` of an actor address). */
export const ACTOR_KINDS = ['task', 'team-scheduler', 'agent', 'container-service', 'cloud-dispatcher'] as const;
export const ActorKindSchema = z.enum(ACTOR_KINDS);
export type ActorKind = z.infer<typeof ActorKindSchema>;
export const TASK_KIND = 'task' satisfies ActorKind;
export const SCHEDULER_KIND = 'team-scheduler' satisfies ActorKind;
export const AGENT_KIND = 'agent' satisfies ActorKind;
export const CONTAINER_SERVICE_KIND = 'container-service' satisfies ActorKind;
export const CLOUD_DISPATCHER_KIND = 'cloud-dispatcher' satisfies ActorKind;
/** The cloud dispatcher of a team and provider: one actor per (team, provider), id `<team>:<provider>`. */
export const cloudDispatcherId = (teamId: string, provider: string): string => `${teamId}:${provider}`;
