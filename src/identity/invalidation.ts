import { z } from 'zod';

/**
 * What changed in identity data that in-memory caches may hold (verified credentials, users'
 * session versions and team roles). Every identity write that changes an answer the authenticator
 * could have cached publishes one of these after its transaction commits. Events are small plain
 * JSON (ids only, never a secret or a hash) so a cluster implementation can broadcast them as is.
 *
 * - credential: these credentials were revoked (or otherwise changed);
 * - membership: the user's membership or role in the team changed (added, removed, role changed,
 *   ownership transferred);
 * - user: something about the user every session depends on changed (password reset bumps the
 *   session version; account removal);
 * - team: the team was deleted (its members and credentials went with it);
 * - session: these login sessions (refresh families, the `sid` of access tokens) ended: logout or
 *   refresh-token reuse;
 * - workflow: a workflow changed (the workflow cache's heads, cluster-wide);
 * - container: a team's container services changed (the gateway's routing tables);
 * - budget: a team's GPU budgets changed (the run gate's budget presence cache).
 */
const uuidish = z.string().min(1).max(64);

export const InvalidationSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('credential'), ids: z.array(uuidish).min(1).max(10_000) }),
  z.strictObject({ type: z.literal('membership'), teamId: uuidish, userId: uuidish }),
  z.strictObject({ type: z.literal('user'), userId: uuidish }),
  z.strictObject({ type: z.literal('team'), teamId: uuidish }),
  z.strictObject({ type: z.literal('session'), ids: z.array(uuidish).min(1).max(10_000) }),
  // not identity data, the same port: a workflow changed (update, delete; null = a slug was created),
  // so other nodes' workflow caches drop its head (and its versions when deleted)
  z.strictObject({ type: z.literal('workflow'), workflowId: uuidish.nullable(), dropVersions: z.boolean() }),
  // a team's container services or instances changed: gateway routing tables reload it
  z.strictObject({ type: z.literal('container'), teamId: uuidish }),
  // a team's GPU budgets were set or removed: the run gate's presence caches drop the team
  z.strictObject({ type: z.literal('budget'), teamId: uuidish }),
]);

export type Invalidation = z.infer<typeof InvalidationSchema>;

/** Serialises an event for a wire (what a broadcast implementation sends). */
export function encodeInvalidation(ev: Invalidation): string {
  return JSON.stringify(InvalidationSchema.parse(ev));
}

/** Decodes an event from a wire; throws on anything that is not a valid event. */
export function decodeInvalidation(json: string): Invalidation {
  return InvalidationSchema.parse(JSON.parse(json));
}

/**
 * The port caches are invalidated through. publish() delivers the event to every subscriber on this
 * node synchronously, before it returns (so the writer's next request already sees the change), and
 * a cluster implementation also forwards it to the other nodes (delivered there asynchronously: the
 * cross-node bound is that broadcast's latency).
 */
export interface CacheInvalidationPort {
  /**
   * Applies the event on this node synchronously; a cluster implementation also broadcasts it and
   * its promise resolves once every other node has applied it (bounded by a timeout).
   */
  publish(ev: Invalidation): void | Promise<void>;
  /**
   * Cluster: whether this node hears other nodes' invalidations right now, and a generation that
   * grows on every (re)subscription. A cache is bypassed while not healthy and cleared when the
   * generation changes (what was published meanwhile was missed). Absent: always healthy.
   */
  state?(): { healthy: boolean; generation: number };
  /** Returns the unsubscribe function. */
  subscribe(fn: (ev: Invalidation) => void): () => void;
}

/** Single node: an in-process fan-out. A throwing subscriber does not stop the others. */
export class InMemoryInvalidation implements CacheInvalidationPort {
  private readonly subscribers = new Set<(ev: Invalidation) => void>();

  constructor(private readonly onError: (err: unknown) => void = () => undefined) {}

  publish(ev: Invalidation): void {
    const checked = InvalidationSchema.parse(ev);
    for (const fn of [...this.subscribers]) {
      try {
        fn(checked);
      } catch (e) {
        this.onError(e);
      }
    }
  }

  subscribe(fn: (ev: Invalidation) => void): () => void {
    // a wrapper per call: subscribing the same function twice gives two independent subscriptions
    const own = (ev: Invalidation): void => fn(ev);
    this.subscribers.add(own);
    return () => {
      this.subscribers.delete(own);
    };
  }
}
