import { z } from 'zod';
import type { TaskAssignment } from './ports.js';

/**
 * A task record (ports.TaskRecord) as it travels in messages: the run endpoint hands it to the
 * scheduler, and the scheduler to the task actor with an assignment, so neither re-reads the row.
 * Only an optimisation: every write is still fenced in PostgreSQL, so a stale copy can only lose.
 */
export const TaskRecordMsg = z.object({
  id: z.string(),
  teamId: z.string(),
  status: z.enum(['pending', 'waiting', 'provisioning', 'queued', 'running', 'completed', 'failed', 'cancelled']),
  attempt: z.number().int(),
  maxRetries: z.number().int(),
  leaseEpoch: z.number().int(),
  agentId: z.string().nullable(),
  dispatchTarget: z.enum(['agent', 'comfy_cloud']),
  toolType: z.enum(['comfyui', 'nerfstudio']),
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
});

/**
 * What an agent needs to run a task (ports.TaskAssignment), carried by the dispatch message. It comes
 * from our own statement's RETURNING, so it is checked shallowly and passed through untouched (a
 * strict schema would strip or reject fields the agent needs).
 */
export const TaskAssignmentMsg = z.custom<TaskAssignment>(
  (v) =>
    typeof v === 'object' &&
    v !== null &&
    typeof (v as TaskAssignment).taskId === 'string' &&
    typeof (v as TaskAssignment).attempt === 'number' &&
    Array.isArray((v as TaskAssignment).inputFiles),
  { message: 'invalid task assignment' },
);

/** What an agent advertises, as the agent actor and the scheduler exchange it (AgentInfo). */
export const AgentInfoMsg = z.object({
  agentId: z.string(),
  teamId: z.string(),
  labels: z.array(z.string()),
  gpuType: z.string().nullable(),
  gpuCount: z.number().int().nonnegative(),
  vramTotalGb: z.number().nonnegative(),
  models: z.array(z.string()),
  slots: z.number().int().nonnegative(),
  draining: z.boolean(),
  needsSync: z.boolean(),
});
