import { z } from 'zod';
import { TaskRecordMsg } from '../task-record.js';

const epoch = z.number().int().nonnegative();
const progress = z.object({
  progress: z.number().min(0).max(1),
  step_current: z.number().int().nonnegative(),
  step_total: z.number().int().nonnegative(),
  current_node: z.string().max(500),
  stage: z.enum(['download', 'process_data', 'train', 'export', 'upload']).optional(),
  message: z.string().max(2000).optional(),
});

/** Every message a task actor accepts. */
export const TaskMsg = z.discriminatedUnion('type', [
  // task: the scheduler's copy of the record, so an idle task actor need not load it (fencing still decides)
  z.object({ type: z.literal('assign'), agentId: z.string(), provision: z.boolean(), task: TaskRecordMsg.optional() }),
  z.object({ type: z.literal('mark_waiting') }),
  z.object({ type: z.literal('provisioned'), epoch }),
  z.object({ type: z.literal('ack'), attempt: z.number().int().positive(), epoch }),
  z.object({ type: z.literal('ack_timeout'), epoch }),
  z.object({ type: z.literal('progress'), epoch, progress }),
  z.object({ type: z.literal('flush_progress') }),
  z.object({ type: z.literal('finish'), epoch, output: z.record(z.string(), z.unknown()) }),
  z.object({ type: z.literal('fail'), epoch, error: z.string().max(10_000) }),
  z.object({ type: z.literal('timeout'), epoch }),
  z.object({ type: z.literal('agent_lost'), agentId: z.string(), epoch: epoch.optional() }),
  z.object({ type: z.literal('reattach'), agentId: z.string(), epoch }),
  z.object({ type: z.literal('grace_expired'), epoch }),
  z.object({ type: z.literal('cancel') }),
  z.object({ type: z.literal('recover'), graceMs: z.number().int().nonnegative() }),
  z.object({ type: z.literal('get') }),
]);
export type TaskMsg = z.infer<typeof TaskMsg>;
export type TaskMsgType = TaskMsg['type'];
export type TaskProgressMsg = z.infer<typeof progress>;
