/**
 * What actors and their hosts see of the runtime (system.ts implements it): the actor interface,
 * its context (timers, reenterAfter, stash, deferred replies) and the runtime's logger and metrics.
 */
import type { Clock } from '../../shared/clock.js';
import type { ActorRef, ActorSystemPort, AnyReplyOf, KindOf, MsgOf, ProtocolMap } from '../ports.js';

/** The outcome of I/O started by a turn, handed to its continuation. */
export type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

/** The reply of an ask answered after its turn (see ActorContext.deferReply). */
export interface ReplyHandle<R> {
  resolve(v: R): void;
  reject(e: unknown): void;
}

/** What an actor of kind K sees of the runtime. */
export interface ActorContext<P extends ProtocolMap<P>, K extends KindOf<P>> {
  readonly self: ActorRef<K>;
  readonly system: ActorSystemPort<P>;
  readonly clock: Clock;
  readonly log: RuntimeLogger;
  /** (Re)arms a named timer that delivers msg to self; timers keep the actor active. */
  setTimer(name: string, ms: number, msg: MsgOf<P, K>): void;
  cancelTimer(name: string): void;
  /**
   * Passivates once the current turn has ended and no I/O started with reenterAfter is pending
   * (state is in PostgreSQL; the next message re-activates).
   */
  stop(): void;
  /**
   * Proto.Actor's ReenterAfter: the turn starts I/O and returns; when the promise settles, `then`
   * runs as a later turn of this same activation (one turn at a time, so it may touch state). It is
   * dropped if the actor crashed or passivated meanwhile. Pending I/O keeps the actor active.
   */
  reenterAfter<T>(work: Promise<T>, then: (r: Settled<T>) => void): void;
  /** Akka's stash: sets the current message (and its reply) aside until unstashAll(). */
  stash(): void;
  /** Puts every stashed message back at the front of the mailbox, in arrival order. */
  unstashAll(): void;
  /** The current message is answered later through the handle (the turn's return value is ignored). */
  deferReply(): ReplyHandle<AnyReplyOf<P, K>>;
}

/**
 * One actor. receive() is one mailbox turn and is synchronous: a turn never awaits I/O (it starts
 * it with ctx.reenterAfter). The return value answers an ask, unless the turn stashed the message
 * or deferred its reply.
 */
export interface Actor<P extends ProtocolMap<P>, K extends KindOf<P>> {
  /** Loads state (from PostgreSQL) before the first message. */
  onActivate?(): Promise<void>;
  receive(msg: MsgOf<P, K>): AnyReplyOf<P, K> | undefined;
  onPassivate?(): Promise<void>;
}

export type ActorFactory<P extends ProtocolMap<P>, K extends KindOf<P>> = (id: string, ctx: ActorContext<P, K>) => Actor<P, K>;

export interface KindOptions<P extends ProtocolMap<P>, K extends KindOf<P>> {
  /** Passivate after this long without a message (and no timers, no pending I/O). */
  idleMs?: number;
  /**
   * Validates/normalises a message as it enters this process's actors from a caller (the kind's zod
   * union; throws to reject). Messages actors send each other (ctx.system), their timers and remote
   * deliveries (decoded by the envelope codec with the same schema) are not parsed again.
   */
  parse?: (msg: MsgOf<P, K>) => MsgOf<P, K>;
}

export interface RuntimeLogger {
  info(o: object, m?: string): void;
  warn(o: object, m?: string): void;
  error(o: object, m?: string): void;
  debug(o: object, m?: string): void;
}

export interface RuntimeMetrics {
  turn(kind: string, ms: number, ok: boolean): void;
  depth(kind: string, delta: number): void;
  activations(kind: string, delta: number): void;
}
