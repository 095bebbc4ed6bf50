/**
 * Cluster mode (REDIS_URL set): one object that joins this node to the cluster and keeps it there.
 *
 *   membership (Redis, versioned view) ──> placement (rendezvous over live members)
 *        │                                    │
 *        │ new view: passivate moved actors,  └─> router (LocalActorSystem.remote): tell/ask to
 *        │ recover owned ones (main.ts)            the owner over remoting (gRPC streams)
 *        └─ member declared dead: fenced in PostgreSQL first (cluster_members), then removed
 *
 * The agent directory (agent -> member holding its stream) routes the agent kind. Everything here
 * only saves work: correctness stays with PostgreSQL's fences (task state + lease epoch, and the
 * member fence on every write of a node in cluster mode).
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { LocalActorSystem } from '../actors/runtime/system.js';
import type { EnvelopeCodec } from '../actors/runtime/envelope.js';
import type { ActorRef, KindOf, ProtocolMap } from '../actors/ports.js';
import type { Logger } from '../shared/logger.js';
import type { Member, MembershipPort, MembershipView } from './ports.js';
import { Placement } from './placement.js';
import { PeerPool, RemotingServer, type ErrorCodec } from './remoting.js';
import { ClusterRouter } from './router.js';
import type { AgentDirectoryPort } from './directory.js';
import type { OpenTunnel, TunnelChannel, TunnelHandlers, TunnelOpenInfo } from '../gateway/tunnel.js';

export type { Member, MembershipPort, MembershipView } from './ports.js';

/** The PostgreSQL side of membership (src/persistence/cluster-store.ts). */
export interface MemberFence {
  register(m: { memberId: string; nodeId: string; address: string }): Promise<void>;
  fence(memberId: string): Promise<void>;
  isFenced(memberId: string): Promise<boolean>;
  fenceAbsent(live: readonly string[], minAgeMs: number): Promise<string[]>;
  /** The agents whose stream this node holds, registered under its old member id, move to the new one. */
  rehome(oldMemberId: string, newMemberId: string): Promise<void>;
}

export interface ClusterOptions<P extends ProtocolMap<P>> {
  nodeId: string | undefined;
  host: string;
  port: number;
  advertise: string | undefined;
  leaseMs: number;
  system: LocalActorSystem<P>;
  codec: EnvelopeCodec<P>;
  errors: ErrorCodec;
  membership: MembershipPort;
  directory: (memberId: () => string) => AgentDirectoryPort;
  fence: MemberFence;
  /** Kinds placed by the agent directory (the actor lives where its stream is) instead of hashing. */
  directoryKinds: ReadonlySet<string>;
  /** A local stream of this agent exists (its actor is here). */
  hasLocalStream(agentId: string): boolean;
  /** Agents whose stream this node holds (re-asserted in the directory after Redis lost its data). */
  localStreams(): string[];
  /** Opens other nodes' forwarded gateway tunnels on this node's agent streams. */
  tunnelOpener: OpenTunnel;
  logger: Logger;
}

export const newMemberId = (nodeId: string): string => `${nodeId}/${randomBytes(4).toString('hex')}`;

export class Cluster<P extends ProtocolMap<P>> {
  private selfMember!: Member;
  private placement!: Placement;
  private currentView: MembershipView = { version: 0, members: [], suspects: [] };
  readonly peers: PeerPool;
  readonly router: ClusterRouter<P>;
  readonly server: RemotingServer;
  directory!: AgentDirectoryPort;
  private readonly viewListeners = new Set<(v: MembershipView, self: Member) => void>();
  private readonly evictListeners = new Set<(oldSelf: Member, newSelf: Member) => void>();
  private fenceTimer: NodeJS.Timeout | null = null;
  private stopped = false;
  readonly nodeId: string;
  grpcPort = 0;

  constructor(private readonly o: ClusterOptions<P>) {
    this.nodeId = o.nodeId ?? hostname();
    this.peers = new PeerPool({ selfMember: () => this.selfMember.memberId, viewVersion: () => this.currentView.version, errors: o.errors, logger: o.logger });
    this.router = new ClusterRouter<P>({ system: o.system, codec: o.codec, peers: this.peers, ownerOf: (ref) => this.ownerOf(ref), logger: o.logger });
    this.server = new RemotingServer({ host: o.host, port: o.port, handler: this.router.inbound, errors: o.errors, logger: o.logger, tunnelOpener: o.tunnelOpener, selfMember: () => this.memberId ?? '' });
  }

  get self(): Member {
    return this.selfMember;
  }

  get memberId(): string | null {
    return this.selfMember?.memberId ?? null;
  }

  view(): MembershipView {
    return this.currentView;
  }

  /** Where a ref lives: null = this node. */
  ownerOf(ref: ActorRef<KindOf<P>>): Member | null {
    if (this.o.directoryKinds.has(ref.kind)) {
      if (this.o.hasLocalStream(ref.id)) return null;
      const e = this.directory.lookup(ref.id);
      if (!e || e.memberId === this.selfMember.memberId) return null;
      return this.placement.member(e.memberId);
    }
    const owner = this.placement.owner(ref.kind, ref.id);
    return owner && owner.memberId !== this.selfMember.memberId ? owner : null;
  }

  /** True when this node owns the ref by its current view. */
  owns(ref: ActorRef<KindOf<P>>): boolean {
    return this.ownerOf(ref) === null;
  }

  /** Opens a gateway tunnel on the node holding the agent's stream (null when none does). */
  openRemoteTunnel(agentId: string, teamId: string, open: TunnelOpenInfo, h: TunnelHandlers): TunnelChannel | null {
    const e = this.directory.lookup(agentId);
    if (!e || e.memberId === this.selfMember.memberId) return null;
    const m = this.placement.member(e.memberId);
    if (!m) return null;
    return this.peers.get(m.memberId, m.address).openTunnel(agentId, teamId, open, h);
  }

  /** Another member holds this agent's stream (by the directory and the live view). */
  agentElsewhere(agentId: string): boolean {
    const e = this.directory.lookup(agentId);
    return !!e && e.memberId !== this.selfMember.memberId && this.placement.member(e.memberId) !== null;
  }

  onView(fn: (v: MembershipView, self: Member) => void): void {
    this.viewListeners.add(fn);
  }

  /** This node was declared dead (a pause, a partition) and re-joined as a new member. */
  onEvicted(fn: (oldSelf: Member, newSelf: Member) => void): void {
    this.evictListeners.add(fn);
  }

  /** Starts remoting, registers the member in PostgreSQL, joins membership and installs the router. */
  async start(): Promise<void> {
    this.grpcPort = await this.server.start();
    const address = this.o.advertise ?? `${this.o.host === '0.0.0.0' || this.o.host === '::' ? hostname() : this.o.host}:${this.grpcPort}`;
    this.selfMember = { memberId: newMemberId(this.nodeId), nodeId: this.nodeId, address, startedAt: Date.now() };
    await this.o.fence.register(this.selfMember);
    this.directory = this.o.directory(() => this.selfMember.memberId);
    await this.directory.start();
    const m = this.o.membership;
    m.beforeRemoveDead(async (dead) => {
      await this.o.fence.fence(dead.memberId);
      this.o.logger.warn({ member: dead.memberId, address: dead.address }, 'cluster member declared dead: fenced in PostgreSQL');
    });
    m.onChange((v) => this.applyView(v));
    m.onEvicted((newSelf) => this.evicted(newSelf));
    this.placement = new Placement({ version: 0, members: [this.selfMember], suspects: [] });
    const v = await m.join(this.selfMember);
    this.applyView(v);
    this.router.install();
    this.watchFence();
    this.o.logger.info({ member: this.selfMember.memberId, address, members: v.members.length, view_version: v.version }, 'joined the cluster');
  }

  private applyView(v: MembershipView): void {
    if (this.stopped || v.version <= this.currentView.version) return;
    const before = this.currentView;
    this.currentView = v;
    this.placement = new Placement(v);
    this.peers.retain(new Set(v.members.map((x) => x.memberId)));
    if (before.members.length !== v.members.length || before.members.some((x, i) => x.memberId !== v.members[i]?.memberId))
      this.o.logger.info({ view_version: v.version, members: v.members.map((x) => x.memberId), suspects: v.suspects }, 'cluster membership changed');
    // the actors whose owner is another member now finish their turn and passivate (state is in PostgreSQL)
    const moved = this.o.system.passivateWhere((ref) => !this.o.directoryKinds.has(ref.kind) && !this.owns(ref));
    if (moved > 0) this.o.logger.info({ moved }, 'actors passivated: their owner moved');
    // Redis may have lost the directory (restart, FLUSHALL): streams held here are claimed again
    void this.directory.reassert(this.o.localStreams()).catch((e: unknown) => this.o.logger.warn({ err_message: (e as Error).message }, 'agent directory re-assert failed'));
    // members that died with no survivor to declare them dead (the whole cluster was down, Redis lost
    // its data) still look alive in PostgreSQL: the first member of the view fences those absent from
    // this view AND from the view two leases later (a live member missing for a moment, e.g. right after
    // Redis restarted, re-registers within a heartbeat)
    if (v.members[0]?.memberId === this.selfMember.memberId) {
      const absentCheck = setTimeout(() => {
        if (this.stopped) return;
        // fence only what neither view had: a member in either is alive
        const live = new Set([...v.members.map((x) => x.memberId), ...this.currentView.members.map((x) => x.memberId)]);
        void this.o.fence
          .fenceAbsent([...live], 3 * this.o.leaseMs)
          .then((ids) => ids.length > 0 && this.o.logger.warn({ members: ids }, 'fenced cluster members absent from the view'))
          .catch(() => undefined);
      }, 2 * this.o.leaseMs);
      absentCheck.unref();
    }
    for (const fn of this.viewListeners) fn(v, this.selfMember);
  }

  private evicted(newSelf: Member): void {
    const old = this.selfMember;
    this.o.logger.error({ member: old.memberId, new_member: newSelf.memberId }, 'this node was declared dead by the cluster (paused or partitioned); dropping what it owned and re-joining');
    this.selfMember = newSelf;
    // everything this node ran belongs to others now; its writes as the old member are fenced
    this.o.system.passivateWhere((ref) => !this.o.directoryKinds.has(ref.kind));
    // the new member's row first (its writes are fenced without it), then the agent streams held here
    // are registered under it; then the listeners (main.ts re-announces the agents)
    void this.o.fence
      .register(newSelf)
      .then(() => this.o.fence.rehome(old.memberId, newSelf.memberId))
      .then(() => {
        for (const fn of this.evictListeners) fn(old, newSelf);
      })
      .catch((e: unknown) => this.o.logger.warn({ err_message: (e as Error).message }, 'cluster member re-registration failed'));
  }

  /** A member fenced in PostgreSQL (declared dead while it was away) drops everything and re-joins. */
  private watchFence(): void {
    const period = Math.max(200, Math.floor(this.o.leaseMs / 2));
    this.fenceTimer = setInterval(() => {
      const me = this.selfMember.memberId;
      void this.o.fence
        .isFenced(me)
        .then((f) => {
          if (f && !this.stopped && this.selfMember.memberId === me) this.o.membership.evict?.('fenced in PostgreSQL');
        })
        .catch(() => undefined);
    }, period);
    this.fenceTimer.unref();
  }

  /** Graceful leave (SIGTERM): the others take over at once. */
  async leave(): Promise<void> {
    if (this.stopped) return;
    await this.o.membership.leave().catch(() => undefined);
    await this.o.fence.fence(this.selfMember.memberId).catch(() => undefined);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.fenceTimer) clearInterval(this.fenceTimer);
    await this.o.membership.stop().catch(() => undefined);
    await this.directory?.stop();
    this.peers.closeAll();
    await this.server.stop();
  }
}
