/**
 * Time is a port: actors, sweepers, rate limiters and retry schedules read it through a Clock so
 * tests can drive it with FakeClock instead of sleeping.
 */
export interface TimerHandle {
  cancel(): void;
}

export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): TimerHandle;
}

/** Node's timers hold at most 2^31-1 ms (~24.8 days); a longer delay would fire after 1 ms. */
export const MAX_TIMER_MS = 2_147_483_647;

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout(fn, ms) {
    // a longer delay (a task_timeout of weeks) is a chain of timers to the same instant
    const at = Date.now() + ms;
    let t: ReturnType<typeof setTimeout>;
    const arm = (left: number): void => {
      t = setTimeout(() => {
        const rest = at - Date.now();
        if (rest > 0 && left > MAX_TIMER_MS) arm(rest);
        else fn();
      }, Math.min(Math.max(0, left), MAX_TIMER_MS));
      t.unref?.();
    };
    arm(ms);
    return { cancel: () => clearTimeout(t) };
  },
};

/** A manual clock: time moves only when advance() is called; due timers fire in order. */
export class FakeClock implements Clock {
  private t: number;
  private seq = 0;
  private timers = new Map<number, { at: number; fn: () => void }>();

  constructor(start = Date.UTC(2026, 0, 1)) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const id = ++this.seq;
    this.timers.set(id, { at: this.t + Math.max(0, ms), fn });
    return { cancel: () => this.timers.delete(id) };
  }

  /** Moves time forward, firing each due timer at its own instant. */
  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      let nextId = -1;
      let nextAt = Infinity;
      for (const [id, tm] of this.timers) if (tm.at <= end && tm.at < nextAt) { nextAt = tm.at; nextId = id; }
      if (nextId < 0) break;
      const tm = this.timers.get(nextId);
      this.timers.delete(nextId);
      this.t = Math.max(this.t, nextAt);
      tm?.fn();
    }
    this.t = end;
  }

  pending(): number {
    return this.timers.size;
  }
}
