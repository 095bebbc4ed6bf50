import { z } from 'zod';
import { TaskRecordMsg } from '../task-record.js';

/** Every message a cloud dispatcher (one per team and provider) accepts. */
export const CloudDispatcherMsg = z.discriminatedUnion('type', [
  // a pending/waiting task with this dispatch target (the team scheduler hands them over)
  z.object({ type: z.literal('enqueue'), task: TaskRecordMsg }),
  // a task the provider already accepted (provisioning/running): follow its job again (recovery, takeover)
  z.object({ type: z.literal('resume'), taskId: z.string(), epoch: z.number().int().nonnegative() }),
  // the task was cancelled or timed out: stop following it and cancel the provider's job
  z.object({ type: z.literal('cancel'), taskId: z.string() }),
  // a dispatch pass (capacity freed, a retry's backoff ended)
  z.object({ type: z.literal('kick') }),
  z.object({ type: z.literal('stats') }),
]);
export type CloudDispatcherMsg = z.infer<typeof CloudDispatcherMsg>;
export type CloudDispatcherMsgType = CloudDispatcherMsg['type'];

export interface CloudDispatcherStats {
  queued: number;
  running: number;
  capacity: number;
}

export type CloudDispatcherReplies = { [T in CloudDispatcherMsgType]: T extends 'stats' ? CloudDispatcherStats : { ok: true } };
export type CloudDispatcherReply = CloudDispatcherReplies[CloudDispatcherMsgType];

const Ok = z.object({ ok: z.literal(true) });

/** Each message type's reply as a schema: a reply from another cluster node is validated with it. */
export const CloudDispatcherReplySchemas: { [T in CloudDispatcherMsgType]: z.ZodType<CloudDispatcherReplies[T]> } = {
  stats: z.object({ queued: z.number(), running: z.number(), capacity: z.number() }),
  enqueue: Ok,
  resume: Ok,
  cancel: Ok,
  kick: Ok,
};
