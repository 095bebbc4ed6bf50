import { z } from 'zod';
import { AgentInfoMsg, TaskAssignmentMsg } from '../task-record.js';

export { AgentInfoMsg };

const epoch = z.number().int().nonnegative();
const taskRef = { taskId: z.string(), attempt: z.number().int().positive(), epoch };


/** Every message an agent actor accepts: from its transport session, from task actors, timers. */
export const AgentMsg = z.discriminatedUnion('type', [
  // transport -> actor
  z.object({ type: z.literal('connected'), sessionId: z.string(), info: AgentInfoMsg, running: z.array(z.object(taskRef)).default([]) }),
  z.object({ type: z.literal('disconnected'), sessionId: z.string() }),
  z.object({ type: z.literal('update'), sessionId: z.string(), info: AgentInfoMsg }),
  z.object({ type: z.literal('ack'), sessionId: z.string(), ...taskRef }),
  z.object({ type: z.literal('provisioned'), sessionId: z.string(), ...taskRef }),
  z.object({
    type: z.literal('progress'),
    sessionId: z.string(),
    ...taskRef,
    progress: z.object({
      progress: z.number().min(0).max(1),
      step_current: z.number().int().nonnegative(),
      step_total: z.number().int().nonnegative(),
      current_node: z.string(),
      stage: z.enum(['download', 'process_data', 'train', 'export', 'upload']).optional(),
      message: z.string().optional(),
    }),
  }),
  z.object({ type: z.literal('finished'), sessionId: z.string(), ...taskRef, output: z.record(z.string(), z.unknown()) }),
  z.object({ type: z.literal('failed'), sessionId: z.string(), ...taskRef, error: z.string() }),
  // task actor -> agent actor
  // assignment: read by the assigning transition's own statement (absent: the agent actor reads it)
  z.object({ type: z.literal('dispatch'), ...taskRef, provision: z.boolean(), assignment: TaskAssignmentMsg.optional() }),
  z.object({ type: z.literal('server_msg'), msg: z.any() }),
  // admin / timers
  z.object({ type: z.literal('revoke') }),
  z.object({ type: z.literal('lost'), sessionId: z.string() }),
  z.object({ type: z.literal('get') }),
]);
export type AgentMsg = z.infer<typeof AgentMsg>;
export type AgentInfoMsg = z.infer<typeof AgentInfoMsg>;
