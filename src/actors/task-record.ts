/**
 * Schemas of what travels between actors and down an agent's stream besides the task record
 * itself (which lives in src/domain/tasks/record.ts): the assignment payload, what an agent
 * advertises, and the server's messages to an agent. Types come from these schemas; ports.ts
 * re-exports them. This module imports no port (the protocols import it, and ports.ts imports the
 * protocols).
 */
import { z } from 'zod';
import { TaskRecordSchema } from '../domain/tasks/record.js';
import type { TaskAssignment } from '../protocol/agent-wire.js';

/** What an agent needs to run a task: the agent wire's assignment (src/protocol/agent-wire.ts). */
export type { TaskAssignment };

/** A task record as it travels in messages (see TaskRecordSchema). */
export const TaskRecordMsg = TaskRecordSchema;

/**
 * The assignment as carried by the dispatch message. It comes from our own statement's RETURNING,
 * so it is checked shallowly and passed through untouched (a strict schema would strip or reject
 * fields the agent needs).
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

/** What an agent advertises, as the agent actor and the scheduler exchange it. */
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
  /** Active team models/custom nodes the agent lacks: a task assigned to it provisions first. */
  needsSync: z.boolean(),
  /** Tool types its executor runs (comfyui, nerfstudio); absent or empty = any (older agents). */
  toolTypes: z.array(z.string()).optional(),
  /** Models its runtime holds loaded (or the last run used), as paths under the models root: warm placement. */
  loaded: z.array(z.string()).optional(),
});
export type AgentInfo = z.infer<typeof AgentInfoMsg>;

const epoch = z.number().int().nonnegative();

/** Messages the server sends down an agent's stream. */
export const ServerToAgentMsg = z.discriminatedUnion('type', [
  z.object({ type: z.literal('assign'), taskId: z.string(), attempt: z.number().int(), epoch, assignment: TaskAssignmentMsg, provision: z.boolean() }),
  z.object({ type: z.literal('cancel'), taskId: z.string(), attempt: z.number().int(), epoch }),
  z.object({ type: z.literal('drain') }),
  // container services: start, stop or remove an instance (the container-service actor decides)
  z.object({
    type: z.literal('container'),
    cmd: z.discriminatedUnion('op', [
      z.object({
        op: z.literal('start'),
        instanceId: z.string(),
        serviceId: z.string(),
        serviceSlug: z.string(),
        image: z.string(),
        exposedPort: z.number().int(),
        env: z.array(z.object({ name: z.string(), value: z.string() })),
        volumes: z.array(z.object({ hostPath: z.string(), containerPath: z.string() })),
        gpuCount: z.number().int(),
        healthPath: z.string(),
      }),
      z.object({ op: z.literal('stop'), instanceId: z.string() }),
      z.object({ op: z.literal('remove'), instanceId: z.string() }),
    ]),
  }),
]);
export type ServerToAgent = z.infer<typeof ServerToAgentMsg>;
