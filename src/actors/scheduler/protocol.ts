import { z } from 'zod';

const agentInfo = z.object({
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

/** A task as the scheduler needs it (the run endpoint has it, so no PostgreSQL read per submit). */
export const SchedTask = z.object({
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

/** Every message a team scheduler accepts. */
export const SchedulerMsg = z.discriminatedUnion('type', [
  z.object({ type: z.literal('task_submitted'), taskId: z.string(), task: SchedTask.optional() }),
  z.object({ type: z.literal('task_requeued'), taskId: z.string() }),
  z.object({ type: z.literal('task_removed'), taskId: z.string() }),
  z.object({ type: z.literal('slot_freed'), taskId: z.string(), agentId: z.string().nullable() }),
  z.object({ type: z.literal('agent_up'), agent: agentInfo }),
  z.object({ type: z.literal('agent_down'), agentId: z.string() }),
  z.object({ type: z.literal('assign_rejected'), taskId: z.string(), agentId: z.string() }),
  z.object({ type: z.literal('kick') }),
  z.object({ type: z.literal('stats') }),
]);
export type SchedulerMsg = z.infer<typeof SchedulerMsg>;
