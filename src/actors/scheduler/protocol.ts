import { z } from 'zod';
import { AgentInfoMsg, TaskRecordMsg } from '../task-record.js';

/** A task as the scheduler needs it (the run endpoint has it, so no PostgreSQL read per submit). */
export const SchedTask = TaskRecordMsg;

/** Every message a team scheduler accepts. */
export const SchedulerMsg = z.discriminatedUnion('type', [
  z.object({ type: z.literal('task_submitted'), taskId: z.string(), task: SchedTask.optional() }),
  z.object({ type: z.literal('task_requeued'), taskId: z.string() }),
  z.object({ type: z.literal('task_removed'), taskId: z.string() }),
  z.object({ type: z.literal('slot_freed'), taskId: z.string(), agentId: z.string().nullable() }),
  z.object({ type: z.literal('agent_up'), agent: AgentInfoMsg }),
  z.object({ type: z.literal('agent_down'), agentId: z.string() }),
  z.object({ type: z.literal('assign_rejected'), taskId: z.string(), agentId: z.string() }),
  // a credential's fair-share weight or max_concurrent_tasks changed (PUT /credentials/{id}/scheduling)
  z.object({ type: z.literal('limits_changed'), credentialId: z.string(), weight: z.number().positive(), maxConcurrent: z.number().int().positive().nullable() }),
  z.object({ type: z.literal('kick') }),
  // timer: while tasks wait, the view is rebuilt from PostgreSQL now and then (a message lost with a
  // dead cluster node must not leave a slot counted busy forever)
  z.object({ type: z.literal('resync') }),
  z.object({ type: z.literal('stats') }),
  // a query: why a queued task waits (GET /tasks/{id}'s waiting_reason); changes nothing
  z.object({ type: z.literal('why_waiting'), taskId: z.string() }),
]);
export type SchedulerMsg = z.infer<typeof SchedulerMsg>;
export type SchedulerMsgType = SchedulerMsg['type'];

/** A snapshot of the scheduler's view (tests and diagnostics). */
export interface SchedulerStats {
  queued: number;
  active: number;
  agents: Array<{ agentId: string; free: number }>;
}

/** Why a queued task waits, in words; null when the scheduler does not hold it (not queued, or a cloud task). */
export interface WaitingReason {
  reason: string | null;
}

export type SchedulerReplies = { [T in SchedulerMsgType]: T extends 'stats' ? SchedulerStats : T extends 'why_waiting' ? WaitingReason : { ok: true } };
export type SchedulerReply = SchedulerReplies[SchedulerMsgType];

const Ok = z.object({ ok: z.literal(true) });

/** Each message type's reply as a schema: a reply from another cluster node is validated with it. */
export const SchedulerReplySchemas: { [T in SchedulerMsgType]: z.ZodType<SchedulerReplies[T]> } = {
  stats: z.object({ queued: z.number(), active: z.number(), agents: z.array(z.object({ agentId: z.string(), free: z.number() })) }),
  why_waiting: z.object({ reason: z.string().nullable() }),
  task_submitted: Ok,
  task_requeued: Ok,
  task_removed: Ok,
  slot_freed: Ok,
  agent_up: Ok,
  agent_down: Ok,
  assign_rejected: Ok,
  limits_changed: Ok,
  kick: Ok,
  resync: Ok,
};
