import { ConfigError } from '../shared/config.js';

/**
 * One lifecycle participant of a module (Orleans' lifecycle participants): what it starts and
 * stops. A module with work at two points of the node's life (the cluster: it joins early and
 * leaves first) has one participant per point.
 */
export interface Participant {
  /** What failed, in the operator's one-line message (`${failure}: address already in use ...`); without it the error is passed on as it is. */
  readonly failure?: string;
  start?(): Promise<void> | void;
  /**
   * Called once, in reverse start order: at close() and after a failed start. It is called also
   * when this participant's own start failed, so it must tolerate a start that did not finish.
   */
  stop?(): Promise<void> | void;
}

/**
 * The composition root's lifecycle runner: starts the participants in the order given (the
 * dependency order: each module is created from those started before it) and stops the started
 * ones in reverse order, both for a failed start and for close(). The only cleanup path of a node.
 */
export class Lifecycle {
  private readonly started: Participant[] = [];

  /** Starts a participant now; a failure becomes the start's error (see `boot`). */
  async start(p: Participant): Promise<void> {
    this.started.push(p);
    try {
      await p.start?.();
    } catch (e) {
      throw startError(e, p.failure);
    }
  }

  /**
   * Acquires a resource (a connection, a lock, a listening port) and registers its release; nothing
   * to release when the acquisition fails. `failure` as in Participant.
   */
  async open<T>(acquire: () => Promise<T> | T, release: (t: T) => Promise<void> | void, failure?: string): Promise<T> {
    let t: T;
    try {
      t = await acquire();
    } catch (e) {
      throw startError(e, failure);
    }
    this.started.push({ stop: () => release(t) });
    return t;
  }

  /**
   * Builds the node: any error (a participant's start, an acquisition, a construction between
   * them) stops what was started, in reverse order, and is then thrown on: a ConfigError one-liner
   * for a participant's failure (main prints it and exits 78).
   */
  async boot<T>(build: () => Promise<T>): Promise<T> {
    try {
      return await build();
    } catch (e) {
      await this.stopAll().catch(() => undefined);
      throw e;
    }
  }

  /** Stops every started participant in reverse order (each once); all of them run, the first error is thrown after. */
  async stopAll(): Promise<void> {
    let first: { error: unknown } | null = null;
    for (let p = this.started.pop(); p; p = this.started.pop()) {
      try {
        await p.stop?.();
      } catch (e) {
        first ??= { error: e };
      }
    }
    if (first) throw first.error;
  }
}

/** A participant's start failure as the operator reads it (a listen that failed: the address is named). */
function startError(e: unknown, failure: string | undefined): unknown {
  if (e instanceof ConfigError || failure === undefined) return e;
  const msg = e instanceof Error ? e.message : String(e);
  return new ConfigError(/EADDRINUSE/.test(msg) ? `${failure}: address already in use (another node or process listens there)` : `${failure}: ${msg}`);
}
