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

/** Every message a team scheduler accepts. */
export const SchedulerMsg = z.discriminatedUnion('type', [
  z.object({ type: z.literal('task_submitted'), taskId: z.string() }),
  z.object({ type: z.literal('task_requeued'), taskId: z.string() }),
  z.object({ type: z.literal('task_removed'), taskId: z.string() }),
  z.object({ type: z.literal('slot_freed'), taskId: z.string(), agentId: z.string().nullable() }),
  z.object({ type: z.literal('agent_up'), agent: agentInfo }),
  z.object({ type: z.literal('agent_down'), agentId: z.string() }),
  z.object({ type: z.literal('kick') }),
  z.object({ type: z.literal('stats') }),
]);
export type SchedulerMsg = z.infer<typeof SchedulerMsg>;
