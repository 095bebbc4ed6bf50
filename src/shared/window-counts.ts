import { systemClock, type Clock } from './clock.js';

/**
 * The shared side of cluster-wide counts (src/cluster/rate-limit-redis.ts): adds this node's
 * counts per key to the current 10-second slot and answers the cluster-wide count of each key over
 * the last minute (all nodes, this one included).
 */
export interface SharedWindowCounter {
  sync(deltas: ReadonlyMap<string, number>): Promise<Map<string, number>>;
}

/** The window is a minute sliding in slots of this length. */
export const WINDOW_SLOT_MS = 10_000;
const SLOTS = 6;

interface Entry {
  /** Cluster-wide count of the last minute as of the last sync (this node's synced ones included). */
  cluster: number;
  /** This node's count since the last sync. */
  unsynced: number;
  /** Sent in the sync in flight. */
  inflight: number;
  lastUsed: number;
  /** This node's own count per slot of the last minute (ring): the count on a single node and while the shared counter is away. */
  own: number[];
  /** The slot (ms / WINDOW_SLOT_MS) own[ownSlot % SLOTS] holds. */
  ownSlot: number;
}

/**
 * Counts per key over a minute sliding in 10-second slots, decided on this node without a round
 * trip: the count is the cluster's count of the last minute (as of the last sync) plus this node's
 * since. Every `syncMs` the node adds its counts to the shared counter and reads the cluster-wide
 * counts back. The overshoot is bounded by what the other nodes count within one sync interval (and,
 * for a key a node has not seen yet, by its first interval). Without a shared counter (a single node),
 * and while it is unreachable, each node counts on its own window of its own events (fail open: at
 * most N per node); the counts of the outage are not sent later. Keys idle for two minutes are dropped.
 * Used by the request rate limits (src/edge/rate-limits.ts) and the failed-credential limiter
 * (src/identity/failure-limit.ts).
 */
export class WindowCounts {
  private readonly entries = new Map<string, Entry>();
  private timer: NodeJS.Timeout | null = null;
  private syncing = false;
  private failing = false;

  constructor(
    private readonly o: {
      counter?: SharedWindowCounter | undefined;
      clock?: Clock | undefined;
      syncMs?: number | undefined;
      /** Named in the sync timeout's error. */
      what: string;
      /** Called once when the shared counter becomes unreachable. */
      onSyncError?: ((e: unknown) => void) | undefined;
    },
  ) {}

  start(): void {
    if (!this.o.counter) return;
    this.timer ??= setInterval(() => void this.sync(), this.o.syncMs ?? 100);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  now(): number {
    return (this.o.clock ?? systemClock).now();
  }

  /** The key's count over the last minute (see the class comment). */
  count(key: string, now = this.now()): number {
    const e = this.entries.get(key);
    if (!e) return 0;
    slide(e, now);
    const own = e.own.reduce((a, b) => a + b, 0);
    if (!this.o.counter || this.failing) return own;
    return Math.max(own, e.cluster + e.inflight + e.unsynced);
  }

  /** Counts one event of the key. */
  add(key: string, now = this.now()): void {
    let e = this.entries.get(key);
    if (!e) this.entries.set(key, (e = { cluster: 0, unsynced: 0, inflight: 0, lastUsed: now, own: new Array<number>(SLOTS).fill(0), ownSlot: Math.floor(now / WINDOW_SLOT_MS) }));
    slide(e, now);
    e.lastUsed = now;
    e.unsynced++;
    e.own[e.ownSlot % SLOTS] = (e.own[e.ownSlot % SLOTS] ?? 0) + 1;
  }

  /** Seconds until the oldest slot leaves the window (the next slot boundary), at least 1. */
  retryAfterS(now = this.now()): number {
    return Math.max(1, Math.ceil((WINDOW_SLOT_MS - (now % WINDOW_SLOT_MS)) / 1000));
  }

  /** One sync: this node's deltas out, the cluster's counts in. */
  async sync(): Promise<void> {
    const counter = this.o.counter;
    if (!counter || this.syncing || this.entries.size === 0) return;
    this.syncing = true;
    const now = this.now();
    const deltas = new Map<string, number>();
    for (const [k, e] of this.entries) {
      if (e.unsynced === 0 && now - e.lastUsed > 120_000) {
        this.entries.delete(k);
        continue;
      }
      deltas.set(k, e.unsynced);
      e.inflight = e.unsynced;
      e.unsynced = 0;
    }
    try {
      let timer: NodeJS.Timeout | undefined;
      const counts = await Promise.race([
        counter.sync(deltas),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`${this.o.what} sync timed out`)), 2000);
        }),
      ]).finally(() => clearTimeout(timer));
      for (const [k, n] of counts) {
        const e = this.entries.get(k);
        if (!e) continue;
        e.cluster = n;
        e.inflight = 0;
      }
      this.failing = false;
    } catch (err) {
      // unreachable: this node counts on its own window; what was in flight is dropped, not sent again later
      for (const k of deltas.keys()) {
        const e = this.entries.get(k);
        if (e) e.inflight = 0;
      }
      if (!this.failing) this.o.onSyncError?.(err);
      this.failing = true;
    } finally {
      this.syncing = false;
    }
  }
}

/** Clears the slots that left the window since the entry was last touched. */
function slide(e: Entry, now: number): void {
  const slot = Math.floor(now / WINDOW_SLOT_MS);
  for (let s = e.ownSlot + 1; s <= slot && s <= e.ownSlot + SLOTS; s++) e.own[s % SLOTS] = 0;
  if (slot > e.ownSlot) e.ownSlot = slot;
}
