import { z } from 'zod';
import { TaskProgressSchema } from '../../domain/tasks/record.js';
import { AgentInfoMsg, ServerToAgentMsg, TaskAssignmentMsg, type AgentInfo } from '../task-record.js';

export { AgentInfoMsg };

const epoch = z.number().int().nonnegative();
const taskRef = { taskId: z.string(), attempt: z.number().int().positive(), epoch };
const sessionId = z.string();

/** What an agent says on its stream about a task (the transport adds the session id). */
export const AgentReportMsg = z.discriminatedUnion('type', [
  z.object({ type: z.literal('ack'), ...taskRef }),
  z.object({ type: z.literal('provisioned'), ...taskRef }),
  z.object({ type: z.literal('progress'), ...taskRef, progress: TaskProgressSchema }),
  // traceparent: the agent's span of the run (tracing on): the completion span is its child
  z.object({ type: z.literal('finished'), ...taskRef, output: z.record(z.string(), z.unknown()), traceparent: z.string().optional() }),
  z.object({ type: z.literal('failed'), ...taskRef, error: z.string(), traceparent: z.string().optional() }),
]);
export type AgentReport = z.infer<typeof AgentReportMsg>;

/** Every message an agent actor accepts: from its transport session, from task actors, timers. */
export const AgentMsg = z.discriminatedUnion('type', [
  // transport -> actor
  z.object({ type: z.literal('connected'), sessionId, info: AgentInfoMsg, running: z.array(z.object(taskRef)).default([]) }),
  z.object({ type: z.literal('disconnected'), sessionId }),
  z.object({ type: z.literal('update'), sessionId, info: AgentInfoMsg }),
  ...AgentReportMsg.options.map((o) => o.extend({ sessionId })),
  // task actor -> agent actor
  // assignment: read by the assigning transition's own statement (absent: the agent actor reads it)
  z.object({ type: z.literal('dispatch'), ...taskRef, provision: z.boolean(), assignment: TaskAssignmentMsg.optional() }),
  z.object({ type: z.literal('server_msg'), msg: ServerToAgentMsg }),
  // admin / timers
  z.object({ type: z.literal('revoke') }),
  // the agent was deleted on another node: end its stream here (the node holding it)
  z.object({ type: z.literal('kick') }),
  z.object({ type: z.literal('lost'), sessionId }),
  // a task actor (re)activated on another cluster node: does the agent still hold this task at this epoch?
  z.object({ type: z.literal('holds'), taskId: z.string(), epoch }),
  z.object({ type: z.literal('get') }),
]);
export type AgentMsg = z.infer<typeof AgentMsg>;
export type AgentMsgType = AgentMsg['type'];
export type AgentInfoMsg = AgentInfo;

/** What `get` answers: the agent actor's live view. */
export interface AgentView {
  agentId: string;
  connected: boolean;
  info: AgentInfo | null;
  tasks: string[];
}

export type AgentReplies = { [T in AgentMsgType]: T extends 'get' ? AgentView : { ok: boolean } };
export type AgentReply = AgentReplies[AgentMsgType];

const Ok = z.object({ ok: z.boolean() });

/** Each message type's reply as a schema: a reply from another cluster node is validated with it. */
export const AgentReplySchemas: { [T in AgentMsgType]: z.ZodType<AgentReplies[T]> } = {
  get: z.object({ agentId: z.string(), connected: z.boolean(), info: AgentInfoMsg.nullable(), tasks: z.array(z.string()) }),
  connected: Ok,
  disconnected: Ok,
  update: Ok,
  ack: Ok,
  provisioned: Ok,
  progress: Ok,
  finished: Ok,
  failed: Ok,
  dispatch: Ok,
  server_msg: Ok,
  revoke: Ok,
  kick: Ok,
  lost: Ok,
  holds: Ok,
};
