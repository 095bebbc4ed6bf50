/**
 * Ports the actors talk to. Actor code imports only these interfaces (and src/shared); the
 * persistence, cluster and edge layers implement them, and src/main.ts wires them together.
 */
import type { Clock } from '../shared/clock.js';

/** Address of an actor: never a JS object reference, so a remote node can stand behind it. */
export interface ActorRef {
  readonly kind: string;
  readonly id: string;
}

export interface AskOptions {
  /** Absolute deadline in ms (clock time). */
  deadlineMs?: number;
}

/** How callers reach actors, wherever they live (this node or another). */
export interface ActorSystemPort {
  tell(ref: ActorRef, msg: unknown): void;
  ask<R = unknown>(ref: ActorRef, msg: unknown, opts?: AskOptions): Promise<R>;
}

export interface RuntimePorts {
  clock: Clock;
}
