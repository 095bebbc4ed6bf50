import type { Clock, TimerHandle } from '../../shared/clock.js';
import { AppError } from '../../shared/errors.js';
import type { ActorRef, ActorSystemPort, AskOptions } from '../ports.js';

/** What an actor sees of the runtime. */
export interface ActorContext {
  readonly self: ActorRef;
  readonly system: ActorSystemPort;
  readonly clock: Clock;
  readonly log: RuntimeLogger;
  /** (Re)arms a named timer that delivers msg to self; timers keep the actor active. */
  setTimer(name: string, ms: number, msg: unknown): void;
  cancelTimer(name: string): void;
  /** Passivates after the current turn (state is in PostgreSQL; the next message re-activates). */
  stop(): void;
}

export interface Actor {
  /** Loads state (from PostgreSQL) before the first message. */
  onActivate?(): Promise<void>;
  /** One mailbox turn. The return value answers an ask. */
  receive(msg: unknown): Promise<unknown>;
  onPassivate?(): Promise<void>;
}

export type ActorFactory = (id: string, ctx: ActorContext) => Actor;

export interface KindOptions {
  /** Passivate after this long without a message (and no timers). */
  idleMs?: number;
  /** Validates/normalises each message (a protocol's zod union); throws to reject. */
  parse?: (msg: unknown) => unknown;
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

interface Envelope {
  msg: unknown;
  resolve?: (v: unknown) => void;
  reject?: (e: unknown) => void;
  deadline?: number;
}

interface Activation {
  ref: ActorRef;
  actor: Actor | null;
  mailbox: Envelope[];
  running: boolean;
  timers: Map<string, TimerHandle>;
  idleTimer: TimerHandle | null;
  stopRequested: boolean;
  activated: boolean;
}

export class AskTimeoutError extends AppError {
  constructor(ref: ActorRef) {
    super('unavailable', 'actor_timeout', `${ref.kind}/${ref.id} did not answer in time`, { retryAfterS: 1 });
  }
}

const key = (r: ActorRef): string => `${r.kind}/${r.id}`;

/**
 * Virtual actors keyed by (kind, id) in this process: activated on the first message, one mailbox
 * turn at a time, passivated when idle, restarted (re-activated from PostgreSQL) after a crash.
 * A Router (cluster layer) may stand in front of it and forward refs owned by another node.
 */
export class LocalActorSystem implements ActorSystemPort {
  private kinds = new Map<string, { factory: ActorFactory; opts: KindOptions }>();
  private acts = new Map<string, Activation>();
  private stopped = false;
  /** Where tell/ask go for refs this system does not own (set by the cluster layer). */
  remote: ((ref: ActorRef) => ActorSystemPort | null) | null = null;

  constructor(
    private readonly clock: Clock,
    private readonly log: RuntimeLogger,
    private readonly metrics?: RuntimeMetrics,
  ) {}

  register(kind: string, factory: ActorFactory, opts: KindOptions = {}): void {
    if (this.kinds.has(kind)) throw new Error(`actor kind ${kind} already registered`);
    this.kinds.set(kind, { factory, opts });
  }

  tell(ref: ActorRef, msg: unknown): void {
    const r = this.remote?.(ref);
    if (r) return r.tell(ref, msg);
    this.enqueue(ref, { msg });
  }

  ask<R = unknown>(ref: ActorRef, msg: unknown, opts: AskOptions = {}): Promise<R> {
    const r = this.remote?.(ref);
    if (r) return r.ask<R>(ref, msg, opts);
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
      });
    });
  }

  /** Local deliveries only (the cluster's inbound side calls this). */
  deliverLocal(ref: ActorRef, msg: unknown, reply?: { resolve: (v: unknown) => void; reject: (e: unknown) => void; deadline?: number }): void {
    this.enqueue(ref, { msg, ...(reply ?? {}) });
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

  private enqueue(ref: ActorRef, env: Envelope): void {
    if (this.stopped) {
      env.reject?.(new AppError('unavailable', 'shutting_down', 'node is shutting down', { retryAfterS: 1 }));
      return;
    }
    const kind = this.kinds.get(ref.kind);
    if (!kind) {
      env.reject?.(new Error(`unknown actor kind ${ref.kind}`));
      this.log.error({ actor: key(ref) }, 'message for unknown actor kind dropped');
      return;
    }
    if (kind.opts.parse) {
      try {
        env.msg = kind.opts.parse(env.msg);
      } catch (e) {
        this.log.warn({ actor: key(ref), err: e }, 'invalid actor message rejected');
        env.reject?.(e);
        return;
      }
    }
    let a = this.acts.get(key(ref));
    if (!a) {
      a = { ref: { kind: ref.kind, id: ref.id }, actor: null, mailbox: [], running: false, timers: new Map(), idleTimer: null, stopRequested: false, activated: false };
      this.acts.set(key(ref), a);
      this.metrics?.activations(ref.kind, 1);
    }
    a.mailbox.push(env);
    this.metrics?.depth(ref.kind, 1);
    a.idleTimer?.cancel();
    a.idleTimer = null;
    if (!a.running) void this.drain(a);
  }

  private context(a: Activation): ActorContext {
    return {
      self: a.ref,
      system: this,
      clock: this.clock,
      log: this.log,
      setTimer: (name, ms, msg) => {
        a.timers.get(name)?.cancel();
        a.timers.set(
          name,
          this.clock.setTimeout(() => {
            a.timers.delete(name);
            this.tell(a.ref, msg);
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
    };
  }

  private async drain(a: Activation): Promise<void> {
    a.running = true;
    const kind = this.kinds.get(a.ref.kind);
    if (!kind) return;
    while (a.mailbox.length > 0) {
      if (this.acts.get(key(a.ref)) !== a) break;
      if (!a.actor) {
        a.actor = kind.factory(a.ref.id, this.context(a));
        try {
          await a.actor.onActivate?.();
          a.activated = true;
        } catch (e) {
          this.log.error({ actor: key(a.ref), err: e }, 'actor activation failed');
          const env = a.mailbox.shift();
          this.metrics?.depth(a.ref.kind, -1);
          env?.reject?.(e);
          a.actor = null;
          continue;
        }
      }
      const env = a.mailbox.shift() as Envelope;
      this.metrics?.depth(a.ref.kind, -1);
      if (env.deadline !== undefined && env.deadline < this.clock.now()) {
        env.reject?.(new AskTimeoutError(a.ref));
        continue;
      }
      const t0 = performance.now();
      try {
        const out = await a.actor.receive(env.msg);
        this.metrics?.turn(a.ref.kind, performance.now() - t0, true);
        env.resolve?.(out);
      } catch (e) {
        this.metrics?.turn(a.ref.kind, performance.now() - t0, false);
        env.reject?.(e);
        if (!(e instanceof AppError)) {
          // a crash: drop the in-memory state; the next message re-activates from PostgreSQL
          this.log.error({ actor: key(a.ref), err: e }, 'actor crashed; restarting from persisted state');
          for (const t of a.timers.values()) t.cancel();
          a.timers.clear();
          a.actor = null;
        }
      }
      if (a.stopRequested) {
        await this.passivate(a);
        return;
      }
    }
    a.running = false;
    this.armIdle(a, kind.opts.idleMs ?? 60_000);
  }

  private armIdle(a: Activation, idleMs: number): void {
    if (this.acts.get(key(a.ref)) !== a) return;
    a.idleTimer?.cancel();
    a.idleTimer = this.clock.setTimeout(() => {
      if (a.running || a.mailbox.length > 0) return;
      if (a.timers.size > 0) return this.armIdle(a, idleMs);
      void this.passivate(a);
    }, idleMs);
  }

  private async passivate(a: Activation): Promise<void> {
    a.running = true;
    for (const t of a.timers.values()) t.cancel();
    a.timers.clear();
    a.idleTimer?.cancel();
    try {
      await a.actor?.onPassivate?.();
    } catch (e) {
      this.log.warn({ actor: key(a.ref), err: e }, 'passivation hook failed');
    }
    a.actor = null;
    a.stopRequested = false;
    if (a.mailbox.length > 0) {
      // messages arrived during passivation: reactivate
      void this.drain(a);
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
      for (const env of a.mailbox.splice(0)) env.reject?.(new AppError('unavailable', 'shutting_down', 'node is shutting down', { retryAfterS: 1 }));
      for (const t of a.timers.values()) t.cancel();
      a.idleTimer?.cancel();
    }
    await Promise.all(all.map(async (a) => a.actor?.onPassivate?.().catch(() => undefined)));
    this.acts.clear();
  }
}
