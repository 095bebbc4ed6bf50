/**
 * The cluster's ports. Each has an in-memory implementation (single node, REDIS_URL unset) and a
 * Redis implementation; one contract suite (test/cluster/*.contract.test.ts) runs against both.
 * src/cluster knows envelopes and members, not actor internals.
 */

/** One node of the cluster as its membership entry says. */
export interface Member {
  /** Unique per process incarnation of a node: `${GANTRY_NODE_ID}/${random}` (a restarted node is a new member). */
  memberId: string;
  /** The configured node name (GANTRY_NODE_ID, or the host name). */
  nodeId: string;
  /** host:port other nodes dial for node-to-node gRPC (remoting). */
  address: string;
  /** Epoch ms (Redis server clock) the member joined. */
  startedAt: number;
}

/** What membership says at one version: the live members (suspects included until declared dead). */
export interface MembershipView {
  /** Grows on every change of the member set (join, leave, declared dead); never reused. */
  version: number;
  members: readonly Member[];
  /** Members whose lease lapsed but who are not declared dead yet (still in `members`). */
  suspects: readonly string[];
}

export interface MembershipPort {
  /** Registers this member (with its lease) and resolves with the first view that contains it. */
  join(self: Member): Promise<MembershipView>;
  /** Graceful leave (SIGTERM): removes the entry at once and bumps the version. */
  leave(): Promise<void>;
  /** The newest view this node knows. */
  view(): MembershipView;
  /** Called on every new view (version grew). Returns the unsubscribe function. */
  onChange(fn: (v: MembershipView) => void): () => void;
  /**
   * Called when this member found itself declared dead (its lease lapsed: a pause, a partition):
   * the node must drop what it owns; membership re-joins it as a new member afterwards.
   */
  onEvicted(fn: (newSelf: Member) => void): () => void;
  /** Hook run before a dead member is removed from the view (the PostgreSQL fence goes here). */
  beforeRemoveDead(fn: (dead: Member) => Promise<void>): void;
  /** The node found itself fenced in PostgreSQL: same path as being found declared dead (onEvicted, then re-join). */
  evict?(reason: string): void;
  stop(): Promise<void>;
}
