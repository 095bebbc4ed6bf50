import { z } from 'zod';
import { TASK_STATUSES, TaskProgressSchema, type TaskRecord, type TaskStatus } from '../../domain/tasks/record.js';
import { TaskRecordMsg } from '../task-record.js';

const epoch = z.number().int().nonnegative();

/** Every message a task actor accepts. */
export const TaskMsg = z.discriminatedUnion('type', [
  // task: the scheduler's copy of the record, so an idle task actor need not load it (fencing still decides)
  // traceparent: the scheduler's decision span (tracing on): the assigning transition's span is its child
  z.object({ type: z.literal('assign'), agentId: z.string(), provision: z.boolean(), task: TaskRecordMsg.optional(), traceparent: z.string().optional() }),
  z.object({ type: z.literal('mark_waiting') }),
  z.object({ type: z.literal('provisioned'), epoch }),
  z.object({ type: z.literal('ack'), attempt: z.number().int().positive(), epoch }),
  z.object({ type: z.literal('ack_timeout'), epoch }),
  z.object({ type: z.literal('progress'), epoch, progress: TaskProgressSchema }),
  z.object({ type: z.literal('flush_progress') }),
  z.object({ type: z.literal('finish'), epoch, output: z.record(z.string(), z.unknown()), traceparent: z.string().optional() }),
  z.object({ type: z.literal('fail'), epoch, error: z.string().max(10_000), traceparent: z.string().optional() }),
  z.object({ type: z.literal('timeout'), epoch }),
  z.object({ type: z.literal('agent_lost'), agentId: z.string(), epoch: epoch.optional() }),
  z.object({ type: z.literal('reattach'), agentId: z.string(), epoch }),
  z.object({ type: z.literal('grace_expired'), epoch }),
  z.object({ type: z.literal('cancel') }),
  // confirm: the actor moved to this cluster node while its agent may still run it: ask the agent actor (it answers with reattach)
  z.object({ type: z.literal('recover'), graceMs: z.number().int().nonnegative(), confirm: z.boolean().optional() }),
  z.object({ type: z.literal('get') }),
  // hosted cloud (dispatch_target comfy_cloud): the provider accepted the job (pending|waiting -> provisioning),
  // reports execution (provisioning -> running), or refused it before accepting (pending|waiting -> failed)
  z.object({ type: z.literal('cloud_accept') }),
  z.object({ type: z.literal('cloud_start'), epoch }),
  z.object({ type: z.literal('cloud_reject'), error: z.string().max(10_000) }),
]);
export type TaskMsg = z.infer<typeof TaskMsg>;
export type TaskMsgType = TaskMsg['type'];
export type TaskProgressMsg = z.infer<typeof TaskProgressSchema>;

/** Most messages are acknowledged: ok=false when stale, rejected by the fence, or the task is missing. */
export interface TaskAck {
  ok: boolean;
  status?: TaskStatus | 'missing';
}
export type AssignReply = { ok: true; epoch: number } | { ok: false; status: TaskStatus | 'missing' };

/** The reply to each task message type (`get` answers the record; a missing task is a not_found error). */
/** cloud_accept: the new epoch, or ok=false when the task no longer waits for the provider (cancelled meanwhile). */
export type CloudAcceptReply = { ok: true; epoch: number } | { ok: false; status?: TaskStatus | 'missing' };

export type TaskReplies = { [T in TaskMsgType]: T extends 'get' ? TaskRecord : T extends 'assign' ? AssignReply : T extends 'cloud_accept' ? CloudAcceptReply : TaskAck };
export type TaskReply = TaskReplies[TaskMsgType];

const TaskStatusOrMissing = z.enum([...TASK_STATUSES, 'missing']);
const TaskAckSchema = z.object({ ok: z.boolean(), status: TaskStatusOrMissing.optional() });
const EpochReply = z.object({ ok: z.literal(true), epoch });

/** Each message type's reply as a schema: a reply from another cluster node is validated with it. */
export const TaskReplySchemas: { [T in TaskMsgType]: z.ZodType<TaskReplies[T]> } = {
  assign: z.union([EpochReply, z.object({ ok: z.literal(false), status: TaskStatusOrMissing })]),
  cloud_accept: z.union([EpochReply, z.object({ ok: z.literal(false), status: TaskStatusOrMissing.optional() })]),
  get: TaskRecordMsg,
  mark_waiting: TaskAckSchema,
  provisioned: TaskAckSchema,
  ack: TaskAckSchema,
  ack_timeout: TaskAckSchema,
  progress: TaskAckSchema,
  flush_progress: TaskAckSchema,
  finish: TaskAckSchema,
  fail: TaskAckSchema,
  timeout: TaskAckSchema,
  agent_lost: TaskAckSchema,
  reattach: TaskAckSchema,
  grace_expired: TaskAckSchema,
  cancel: TaskAckSchema,
  recover: TaskAckSchema,
  cloud_start: TaskAckSchema,
  cloud_reject: TaskAckSchema,
};
