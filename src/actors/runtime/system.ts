import type { Clock, TimerHandle } from '../../shared/clock.js';
import { AppError } from '../../shared/errors.js';
import type { ActorRef, ActorSystemPort, AnyReplyOf, AskOptions, KindOf, MsgOf, ProtocolMap, ReplyOf } from '../ports.js';
import { withoutSpan } from '../../shared/tracing.js';
import type { ActorContext, ActorFactory, KindOptions, ReplyHandle, RuntimeLogger, RuntimeMetrics, Settled } from './actor.js';

export type { Actor, ActorContext, ActorFactory, KindOptions, ReplyHandle, RuntimeLogger, RuntimeMetrics, Settled } from './actor.js';

/** A message in a mailbox (kind-agnostic here: typed at tell/ask and in each actor). */
interface MsgEnvelope {
  msg: { type: string };
  resolve?: (v: unknown) => void;
  reject?: (e: unknown) => void;
  deadline?: number;
}
/** A continuation of I/O started by an earlier turn. */
interface Continuation {
  run: () => void;
  incarnation: number;
}
type MailboxItem = MsgEnvelope | Continuation;
const isContinuation = (m: MailboxItem): m is Continuation => 'run' in m;

type AnyActor = { onActivate?(): Promise<void>; receive(msg: { type: string }): unknown; onPassivate?(): Promise<void> };
type AnyFactory = (id: string, ctx: never) => AnyActor;
interface KindEntry {
  factory: AnyFactory;
  idleMs: number;
  parse?: (msg: { type: string }) => { type: string };
}

interface Activation {
  ref: ActorRef;
  actor: AnyActor | null;
  /** Grows with every new actor instance: continuations of an older one are dropped. */
  incarnation: number;
  mailbox: MailboxItem[];
  stash: MsgEnvelope[];
  /** I/O started by reenterAfter whose continuation has not been queued yet. */
  inflight: number;
  /** That I/O (shutdown lets it land before the database closes). */
  work: Set<Promise<unknown>>;
  /** Replies handed out by deferReply and not settled yet. */
  deferred: Set<ReplyHandle<unknown>>;
  /** The message of the running turn, and whether the turn took over its reply. */
  current: MsgEnvelope | null;
  taken: boolean;
  running: boolean;
  timers: Map<string, TimerHandle>;
  idleTimer: TimerHandle | null;
  stopRequested: boolean;
}

export class AskTimeoutError extends AppError {
  constructor(ref: ActorRef) {
    super('unavailable', 'actor_timeout', `${ref.kind}/${ref.id} did not answer in time`, { retryAfterS: 1 });
  }
}

const key = (r: ActorRef): string => `${r.kind}/${r.id}`;
const shuttingDown = (): AppError => new AppError('unavailable', 'shutting_down', 'node is shutting down', { retryAfterS: 1 });

/**
 * Virtual actors keyed by (kind, id) in this process: activated on the first message, one mailbox
 * turn at a time, passivated when idle, restarted (re-activated from PostgreSQL) after a crash.
 * Generic over the protocol map P (kind -> messages and replies), so it knows no actor kind.
 * A Router (cluster layer) may stand in front of it and forward refs owned by another node.
 */
export class LocalActorSystem<P extends ProtocolMap<P>> implements ActorSystemPort<P> {
  private kinds = new Map<string, KindEntry>();
  private acts = new Map<string, Activation>();
  private stopped = false;
  /** Where tell/ask go for refs this system does not own (set by the cluster layer). */
  remote: ((ref: ActorRef<KindOf<P>>) => ActorSystemPort<P> | null) | null = null;

  constructor(
    private readonly clock: Clock,
    private readonly log: RuntimeLogger,
    private readonly metrics?: RuntimeMetrics,
  ) {}

  register<K extends KindOf<P>>(kind: K, factory: ActorFactory<P, K>, opts: KindOptions<P, K> = {}): void {
    if (this.kinds.has(kind)) throw new Error(`actor kind ${kind} already registered`);
    this.kinds.set(kind, {
      factory: factory as unknown as AnyFactory,
      idleMs: opts.idleMs ?? 60_000,
      ...(opts.parse ? { parse: opts.parse as unknown as KindEntry['parse'] } : {}),
    });
  }

  /** A caller's message (its kind's parser checks it once, here). */
  tell<K extends KindOf<P>>(ref: ActorRef<K>, msg: MsgOf<P, K>): void {
    this.send(ref, msg, true);
  }

  /** A caller's question (its kind's parser checks it once, here). */
  ask<K extends KindOf<P>, M extends MsgOf<P, K>>(ref: ActorRef<K>, msg: M, opts: AskOptions = {}): Promise<ReplyOf<P, K, M['type']>> {
    return this.request(ref, msg, opts, true);
  }

  /** What actors send each other: typed at compile time and not parsed again (a remote target still decodes it). */
  private readonly internal: ActorSystemPort<P> = {
    tell: (ref, msg) => this.send(ref, msg, false),
    ask: (ref, msg, opts = {}) => this.request(ref, msg, opts, false),
  };

  private send<K extends KindOf<P>>(ref: ActorRef<K>, msg: MsgOf<P, K>, parse: boolean): void {
    const r = this.remote?.(ref);
    if (r) return r.tell(ref, msg);
    this.enqueue(ref, { msg }, parse);
  }

  private request<K extends KindOf<P>, M extends MsgOf<P, K>>(ref: ActorRef<K>, msg: M, opts: AskOptions, parse: boolean): Promise<ReplyOf<P, K, M['type']>> {
    type R = ReplyOf<P, K, M['type']>;
    const r = this.remote?.(ref);
    if (r) return r.ask(ref, msg, opts);
    return new Promise<R>((resolve, reject) => {
      const deadline = opts.deadlineMs ?? this.clock.now() + 30_000;
      let settled = false;
      const timer = this.clock.setTimeout(() => {
        if (settled) return;
        settled = true;
        reject(new AskTimeoutError(ref));
      }, Math.max(0, deadline - this.clock.now()));
      this.enqueue(ref, {
        msg,
        deadline,
        resolve: (v) => {
          if (settled) return;
          settled = true;
          timer.cancel();
          resolve(v as R);
        },
        reject: (e) => {
          if (settled) return;
          settled = true;
          timer.cancel();
          reject(e);
        },
      }, parse);
    });
  }

  /** Local deliveries only (the cluster's inbound side calls this with an envelope the codec decoded: not parsed again). */
  deliverLocal<K extends KindOf<P>>(ref: ActorRef<K>, msg: MsgOf<P, K>, reply?: { resolve: (v: AnyReplyOf<P, K>) => void; reject: (e: unknown) => void; deadline?: number }): void {
    this.enqueue(ref, { msg, ...((reply ?? {}) as Omit<MsgEnvelope, 'msg'>) }, false);
  }

  /**
   * Passivates every active actor the predicate picks (cluster: actors whose owner moved to another
   * node). Each finishes its current turn and the I/O it started; its state is in PostgreSQL and the
   * new owner activates it from there. Returns how many were asked to stop.
   */
  passivateWhere(pick: (ref: ActorRef<KindOf<P>>) => boolean): number {
    let n = 0;
    for (const a of [...this.acts.values()]) {
      if (!pick(a.ref as ActorRef<KindOf<P>>)) continue;
      n++;
      a.stopRequested = true;
      if (!a.running) this.afterTurn(a);
    }
    return n;
  }

  /** Refs of the active actors (of one kind). */
  activeRefs(kind?: string): Array<ActorRef<KindOf<P>>> {
    const out: Array<ActorRef<KindOf<P>>> = [];
    for (const a of this.acts.values()) if (!kind || a.ref.kind === kind) out.push(a.ref as ActorRef<KindOf<P>>);
    return out;
  }

  isActive(ref: ActorRef): boolean {
    return this.acts.has(key(ref));
  }

  activeCount(kind?: string): number {
    if (!kind) return this.acts.size;
    let n = 0;
    for (const a of this.acts.values()) if (a.ref.kind === kind) n++;
    return n;
  }

  private enqueue(ref: ActorRef, env: MsgEnvelope, parse: boolean): void {
    if (this.stopped) {
      env.reject?.(shuttingDown());
      return;
    }
    const kind = this.kinds.get(ref.kind);
    if (!kind) {
      env.reject?.(new Error(`unknown actor kind ${ref.kind}`));
      this.log.error({ actor: key(ref) }, 'message for unknown actor kind dropped');
      return;
    }
    if (parse && kind.parse) {
      try {
        env.msg = kind.parse(env.msg);
      } catch (e) {
        this.log.warn({ actor: key(ref), err: e }, 'invalid actor message rejected');
        env.reject?.(e);
        return;
      }
    }
    let a = this.acts.get(key(ref));
    if (!a) {
      a = {
        ref: { kind: ref.kind, id: ref.id },
        actor: null,
        incarnation: 0,
        mailbox: [],
        stash: [],
        inflight: 0,
        work: new Set(),
        deferred: new Set(),
        current: null,
        taken: false,
        running: false,
        timers: new Map(),
        idleTimer: null,
        stopRequested: false,
      };
      this.acts.set(key(ref), a);
      this.metrics?.activations(ref.kind, 1);
    }
    this.push(a, env);
  }

  private push(a: Activation, item: MailboxItem): void {
    a.mailbox.push(item);
    this.metrics?.depth(a.ref.kind, 1);
    a.idleTimer?.cancel();
    a.idleTimer = null;
    // turns run outside the sender's trace context (a message's span parent is explicit, never inherited)
    if (!a.running) void withoutSpan(() => this.drain(a));
  }

  private context(a: Activation): ActorContext<P, KindOf<P>> {
    const turnOnly = (what: string): MsgEnvelope => {
      if (!a.current) throw new Error(`${what} outside a message turn`);
      return a.current;
    };
    return {
      self: a.ref as ActorRef<KindOf<P>>,
      system: this.internal,
      clock: this.clock,
      log: this.log,
      setTimer: (name, ms, msg) => {
        a.timers.get(name)?.cancel();
        a.timers.set(
          name,
          this.clock.setTimeout(() => {
            a.timers.delete(name);
            this.enqueue(a.ref, { msg }, false);
          }, ms),
        );
      },
      cancelTimer: (name) => {
        a.timers.get(name)?.cancel();
        a.timers.delete(name);
      },
      stop: () => {
        a.stopRequested = true;
      },
      reenterAfter: <T>(work: Promise<T>, then: (r: Settled<T>) => void) => {
        const incarnation = a.incarnation;
        a.inflight++;
        const back = (r: Settled<T>): void => {
          a.inflight--;
          if (this.stopped || this.acts.get(key(a.ref)) !== a || a.incarnation !== incarnation || !a.actor) {
            // the actor crashed, passivated or the node stopped: its continuation is moot
            if (a.stopRequested && !a.running) this.afterTurn(a);
            return;
          }
          this.push(a, { incarnation, run: () => then(r) });
        };
        const tracked = work.then(
          (value) => back({ ok: true, value }),
          (error: unknown) => back({ ok: false, error }),
        );
        a.work.add(tracked);
        void tracked.finally(() => a.work.delete(tracked));
      },
      stash: () => {
        const env = turnOnly('stash()');
        a.taken = true;
        a.stash.push(env);
      },
      unstashAll: () => {
        if (a.stash.length === 0) return;
        const back = a.stash.splice(0);
        a.mailbox.unshift(...back);
        this.metrics?.depth(a.ref.kind, back.length);
      },
      deferReply: () => {
        const env = turnOnly('deferReply()');
        a.taken = true;
        const h: ReplyHandle<unknown> = {
          resolve: (v) => {
            a.deferred.delete(h);
            env.resolve?.(v);
          },
          reject: (e) => {
            a.deferred.delete(h);
            env.reject?.(e);
          },
        };
        a.deferred.add(h);
        return h;
      },
    };
  }

  /**
   * Crash or passivation: stashed messages go back to the mailbox, unanswered deferred replies fail
   * with why() (built only when there is one: an error's stack capture per passivated task showed in P4's profile).
   */
  private release(a: Activation, why: () => unknown): void {
    if (a.stash.length > 0) {
      const back = a.stash.splice(0);
      a.mailbox.unshift(...back);
      this.metrics?.depth(a.ref.kind, back.length);
    }
    if (a.deferred.size > 0) {
      const e = why();
      for (const h of [...a.deferred]) h.reject(e);
      a.deferred.clear();
    }
    for (const t of a.timers.values()) t.cancel();
    a.timers.clear();
    a.actor = null;
  }

  /** One turn (a message or a continuation); a throw other than an AppError is a crash. */
  private turn(a: Activation, actor: AnyActor, item: MailboxItem): void {
    const t0 = performance.now();
    const env = isContinuation(item) ? null : item;
    a.current = env;
    a.taken = false;
    try {
      if (env) {
        const out = actor.receive(env.msg);
        if (!a.taken) env.resolve?.(out);
      } else (item as Continuation).run();
      this.metrics?.turn(a.ref.kind, performance.now() - t0, true);
    } catch (e) {
      this.metrics?.turn(a.ref.kind, performance.now() - t0, false);
      if (env && !a.taken) env.reject?.(e);
      if (!(e instanceof AppError)) {
        // a crash: drop the in-memory state; the next message re-activates from PostgreSQL
        this.log.error({ actor: key(a.ref), err: e }, 'actor crashed; restarting from persisted state');
        this.release(a, () => new AppError('unavailable', 'actor_restarted', `${a.ref.kind}/${a.ref.id} restarted`, { retryAfterS: 1 }));
      }
    } finally {
      a.current = null;
    }
  }

  private async drain(a: Activation): Promise<void> {
    a.running = true;
    const kind = this.kinds.get(a.ref.kind);
    if (!kind) return;
    while (a.mailbox.length > 0) {
      if (this.acts.get(key(a.ref)) !== a) break;
      const head = a.mailbox[0] as MailboxItem;
      if (isContinuation(head)) {
        a.mailbox.shift();
        this.metrics?.depth(a.ref.kind, -1);
        if (a.actor && head.incarnation === a.incarnation) this.turn(a, a.actor, head);
      } else {
        if (!a.actor) {
          a.actor = kind.factory(a.ref.id, this.context(a) as never);
          a.incarnation++;
          try {
            await a.actor.onActivate?.();
          } catch (e) {
            this.log.error({ actor: key(a.ref), err: e }, 'actor activation failed');
            const env = a.mailbox.shift() as MsgEnvelope | undefined;
            if (env) this.metrics?.depth(a.ref.kind, -1);
            env?.reject?.(e);
            a.actor = null;
            continue;
          }
          // the activation awaited its loads: shutdown may have emptied the mailbox meanwhile
          continue;
        }
        const env = a.mailbox.shift() as MsgEnvelope;
        this.metrics?.depth(a.ref.kind, -1);
        if (env.deadline !== undefined && env.deadline < this.clock.now()) {
          env.reject?.(new AskTimeoutError(a.ref));
          continue;
        }
        this.turn(a, a.actor, env);
      }
      if (a.stopRequested && a.inflight === 0) {
        await this.passivate(a);
        return;
      }
      // turns are synchronous: yield between them, so what the callers tell meanwhile (a burst)
      // is in the mailbox before the next turn (and one busy actor cannot hold the event loop)
      if (a.mailbox.length > 0) await null;
    }
    a.running = false;
    this.afterTurn(a);
  }

  /** With an empty mailbox: passivate when asked to and nothing is pending, else arm the idle timer. */
  private afterTurn(a: Activation): void {
    if (a.running || this.acts.get(key(a.ref)) !== a) return;
    if (a.stopRequested && a.inflight === 0) {
      void this.passivate(a);
      return;
    }
    this.armIdle(a, this.kinds.get(a.ref.kind)?.idleMs ?? 60_000);
  }

  private armIdle(a: Activation, idleMs: number): void {
    if (this.acts.get(key(a.ref)) !== a) return;
    a.idleTimer?.cancel();
    a.idleTimer = this.clock.setTimeout(() => {
      if (a.running || a.mailbox.length > 0) return;
      if (a.timers.size > 0 || a.inflight > 0 || a.stash.length > 0) return this.armIdle(a, idleMs);
      void this.passivate(a);
    }, idleMs);
  }

  private async passivate(a: Activation): Promise<void> {
    a.running = true;
    a.idleTimer?.cancel();
    const actor = a.actor;
    this.release(a, () => new AppError('unavailable', 'actor_passivated', `${a.ref.kind}/${a.ref.id} passivated`, { retryAfterS: 1 }));
    try {
      await actor?.onPassivate?.();
    } catch (e) {
      this.log.warn({ actor: key(a.ref), err: e }, 'passivation hook failed');
    }
    a.stopRequested = false;
    if (a.mailbox.length > 0) {
      // messages arrived during passivation: reactivate
      void withoutSpan(() => this.drain(a));
      return;
    }
    if (this.acts.get(key(a.ref)) === a) {
      this.acts.delete(key(a.ref));
      this.metrics?.activations(a.ref.kind, -1);
    }
    a.running = false;
  }

  /** Stops delivering; passivates every actor (bounded by the caller). */
  async shutdown(): Promise<void> {
    this.stopped = true;
    const all = [...this.acts.values()];
    for (const a of all) {
      for (const item of [...a.mailbox.splice(0), ...a.stash.splice(0)]) if (!isContinuation(item)) item.reject?.(shuttingDown());
      for (const h of [...a.deferred]) h.reject(shuttingDown());
      for (const t of a.timers.values()) t.cancel();
      a.idleTimer?.cancel();
    }
    // I/O already started (e.g. an agent's last status write) lands; its continuations are dropped
    await Promise.allSettled(all.flatMap((a) => [...a.work]));
    await Promise.all(all.map(async (a) => a.actor?.onPassivate?.().catch(() => undefined)));
    this.acts.clear();
  }
}
