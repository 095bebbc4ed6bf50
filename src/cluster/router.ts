/**
 * The cluster router: stands in front of this node's LocalActorSystem (its `remote` hook) and sends
 * messages for actors owned by another member over remoting, with the typed envelope codec. On the
 * receiving side it decodes each envelope with the target kind's schema, and delivers it locally when
 * this node owns the target by its own (possibly newer) view, or re-routes it once more to the owner
 * it knows (bounded hops, so nodes whose views disagree for a moment cannot bounce a message forever:
 * past the bound the message is delivered here, and PostgreSQL's fences keep that correct).
 */
import type { LocalActorSystem } from '../actors/runtime/system.js';
import type { EnvelopeCodec } from '../actors/runtime/envelope.js';
import type { ActorRef, ActorSystemPort, AskOptions, KindOf, MsgOf, ProtocolMap, ReplyOf } from '../actors/ports.js';
import type { Logger } from '../shared/logger.js';
import { newReplyId, type InboundEnvelope, type InboundHandler, type PeerPool } from './remoting.js';
import type { Member } from './ports.js';

/** At most this many re-routes after the first hop. */
export const MAX_HOPS = 2;

export interface RouterOptions<P extends ProtocolMap<P>> {
  system: LocalActorSystem<P>;
  codec: EnvelopeCodec<P>;
  peers: PeerPool;
  /** The owner of a ref, or null when it is this node. */
  ownerOf(ref: ActorRef<KindOf<P>>): Member | null;
  logger: Logger;
  now?: () => number;
}

export class ClusterRouter<P extends ProtocolMap<P>> {
  private readonly now: () => number;
  /** Envelopes sent to, received from, and re-routed for other members (metrics/tests). */
  readonly stats = { sent: 0, received: 0, rerouted: 0, deliveredLocally: 0 };

  constructor(private readonly o: RouterOptions<P>) {
    this.now = o.now ?? Date.now;
  }

  /** Installs the router in front of the local system. */
  install(): void {
    this.o.system.remote = (ref) => {
      const owner = this.o.ownerOf(ref);
      return owner ? this.portTo(owner) : null;
    };
  }

  private portTo(owner: Member): ActorSystemPort<P> {
    const peer = this.o.peers.get(owner.memberId, owner.address);
    const codec = this.o.codec;
    const stats = this.stats;
    const now = this.now;
    return {
      tell<K extends KindOf<P>>(ref: ActorRef<K>, msg: MsgOf<P, K>): void {
        stats.sent++;
        peer.tell(codec.encode({ target: ref, msg }), 0);
      },
      ask<K extends KindOf<P>, M extends MsgOf<P, K>>(ref: ActorRef<K>, msg: M, opts: AskOptions = {}): Promise<ReplyOf<P, K, M['type']>> {
        stats.sent++;
        const reply = newReplyId();
        const deadline = opts.deadlineMs ?? now() + 30_000;
        // the remote answer is validated at this boundary, with the kind's reply schema for this message type
        return peer.ask(codec.encode({ target: ref, msg, deadline_ms: deadline, reply }), reply, 0, deadline, `${ref.kind}/${ref.id}`).then((v) => codec.decodeReply(ref.kind, msg.type, v));
      },
    };
  }

  /** The remoting server's handler. */
  readonly inbound: InboundHandler = (e: InboundEnvelope) => {
    this.stats.received++;
    const env = this.o.codec.decode(e.json); // throws a bad_request AppError: remoting answers the ask with it
    const target = env.target as ActorRef<KindOf<P>>;
    const owner = e.hops < MAX_HOPS ? this.o.ownerOf(target) : null;
    if (owner) {
      // not ours by our view: the sender's view is older (or ours is); one more hop
      this.stats.rerouted++;
      const peer = this.o.peers.get(owner.memberId, owner.address);
      if (env.reply === undefined) {
        peer.tell(e.json, e.hops + 1);
        return null;
      }
      return { replyId: env.reply, result: peer.ask(e.json, env.reply, e.hops + 1, env.deadline_ms ?? this.now() + 30_000, `${target.kind}/${target.id}`) };
    }
    this.stats.deliveredLocally++;
    if (env.reply === undefined) {
      this.o.system.deliverLocal(target, env.msg as MsgOf<P, KindOf<P>>);
      return null;
    }
    const result = new Promise<unknown>((resolve, reject) =>
      this.o.system.deliverLocal(target, env.msg as MsgOf<P, KindOf<P>>, { resolve, reject, ...(env.deadline_ms !== undefined ? { deadline: env.deadline_ms } : {}) }),
    );
    return { replyId: env.reply, result };
  };
}
