import { z } from 'zod';
import { INSTANCE_STATES } from '../../domain/containers/schema.js';
import { AuditNoteSchema } from '../../shared/audit.js';

const id = z.string().min(1).max(100);

export const PlacementAgentMsg = z.object({ id, labels: z.array(z.string()), gpuCount: z.number().int(), runtime: z.string(), status: z.string() });

/** Every message a container-service actor (one per service, keyed by service id) accepts. */
export const ContainerServiceMsg = z.discriminatedUnion('type', [
  // routes: a lifecycle operation (409 invalid_state when the service's state does not allow it)
  // audit: the route's audit note, written with the operation's state write (same transaction)
  z.object({ type: z.literal('op'), op: z.enum(['deploy', 'start', 'stop', 'undeploy', 'delete']), audit: AuditNoteSchema.optional() }),
  // routes: the definition changed (PUT): reload it
  z.object({ type: z.literal('changed') }),
  // an agent's stream: the state of one of its instances (on every change and in its hello)
  z.object({ type: z.literal('report'), agentId: id, instanceId: id, state: z.enum(INSTANCE_STATES), healthy: z.boolean(), error: z.string().max(20_000) }),
  // an agent's stream closed or opened on some node
  z.object({ type: z.literal('agent_down'), agentId: id }),
  // held: every instance the agent reported in its hello (of any service): the others it lost
  z.object({ type: z.literal('agent_up'), agentId: id, held: z.array(id).max(100_000) }),
  // timers and recovery: compare desired with actual and act
  z.object({ type: z.literal('tick') }),
  // autoscaling: a gateway node's load on this service since its previous report (node: its
  // cluster member id, 'local' on a single node): requests in flight per replica on that node,
  // requests waiting in its queue, the longest wait since the last report, requests started
  z.object({
    type: z.literal('load'),
    node: z.string().min(1).max(200),
    instances: z.array(z.object({ id, inflight: z.number().int().min(0).max(10_000_000) })).max(1000),
    queued: z.number().int().min(0).max(10_000_000),
    queueDelayMs: z.number().int().min(0).max(86_400_000),
    requests: z.number().int().min(0).max(1_000_000_000),
  }),
  // autoscaling: a gateway holds a request while no replica can take it (scaled to zero): start
  // one; answered once the placement it started ended, with why it could not place ('' = placed or under way)
  z.object({ type: z.literal('wake') }),
  z.object({ type: z.literal('get') }),
]);
export type ContainerServiceMsg = z.infer<typeof ContainerServiceMsg>;
export type ContainerServiceMsgType = ContainerServiceMsg['type'];

export interface ContainerServiceView {
  serviceId: string;
  status: string | null;
  instances: Array<{ id: string; agentId: string; status: string; healthy: boolean }>;
}

export interface WakeReply {
  scaleError: string;
}

export type ContainerServiceReplies = { [T in ContainerServiceMsgType]: T extends 'get' ? ContainerServiceView : T extends 'op' ? { status: string } : T extends 'wake' ? WakeReply : { ok: boolean } };

const Ok = z.object({ ok: z.boolean() });

/** Each message type's reply as a schema: a reply from another cluster node is validated with it. */
export const ContainerServiceReplySchemas: { [T in ContainerServiceMsgType]: z.ZodType<ContainerServiceReplies[T]> } = {
  get: z.object({
    serviceId: z.string(),
    status: z.string().nullable(),
    instances: z.array(z.object({ id: z.string(), agentId: z.string(), status: z.string(), healthy: z.boolean() })),
  }),
  op: z.object({ status: z.string() }),
  changed: Ok,
  report: Ok,
  agent_down: Ok,
  agent_up: Ok,
  tick: Ok,
  load: Ok,
  wake: z.object({ scaleError: z.string() }),
};
