import { systemClock, type Clock } from '../shared/clock.js';

/**
 * Failed credential checks are throttled (issue 29): a well-formed `sk-`/`dk-`/`ak-` value (right
 * shape, right checksum) that names no credential costs a database lookup, so guessing is limited
 * before that lookup, per client IP and per credential prefix (the 12 characters `GET /credentials`
 * shows: a targeted guess keeps it, so many IPs guessing one prefix are limited too), over a minute
 * sliding in 10-second slots. At the limit an unknown value gets 429 `rate_limited` with
 * Retry-After and no lookup. A value that already failed is remembered (a negative cache of its
 * SHA-256, bounded, per node): repeating it is a 401 without a lookup, and counts again.
 *
 * Only lookups that found nothing count: a revoked or expired credential is a row (cached like a
 * valid one), a bad checksum never reaches the database, JWTs are verified by signature. A value
 * found in the identity cache is never throttled, so warm clients behind the same IP (a proxy) keep
 * working while the guesser is refused.
 *
 * In a cluster the counts are shared through the same Redis window counter as the request rate
 * limits (SharedWindowCounter, src/cluster/rate-limit-redis.ts): each node adds its failures every
 * `syncMs` and reads the cluster-wide counts back; while Redis is away each node counts on its own.
 */
export interface FailureWindowCounter {
  sync(deltas: ReadonlyMap<string, number>): Promise<Map<string, number>>;
}

export interface AuthFailureLimits {
  /** Failures per minute per client IP; 0 = off. */
  perIp: number;
  /** Failures per minute per credential prefix; 0 = off. */
  perPrefix: number;
  /** How long a failed value's hash is remembered (ms). */
  negativeTtlMs?: number;
  /** Hashes remembered at most (oldest dropped first). */
  negativeMax?: number;
}

const SLOT_MS = 10_000;
const SLOTS = 6;

interface Entry {
  /** Cluster-wide failures of the last minute as of the last sync (this node's synced ones included). */
  cluster: number;
  unsynced: number;
  inflight: number;
  /** This node's failures per slot (ring): the count on a single node and while Redis is away. */
  own: number[];
  ownSlot: number;
  lastUsed: number;
}

export class AuthFailureLimiter {
  private readonly entries = new Map<string, Entry>();
  private readonly negative = new Map<string, number>();
  private readonly clock: Clock;
  private readonly negativeTtlMs: number;
  private readonly negativeMax: number;
  private timer: NodeJS.Timeout | null = null;
  private syncing = false;
  private failing = false;
  /** Counters for tests and metrics. */
  readonly stats = { failures: 0, refused: 0, negativeHits: 0 };

  constructor(
    private readonly limits: AuthFailureLimits,
    private readonly o: { clock?: Clock; shared?: FailureWindowCounter; syncMs?: number; onSyncError?: (e: unknown) => void } = {},
  ) {
    this.clock = o.clock ?? systemClock;
    this.negativeTtlMs = limits.negativeTtlMs ?? 10 * 60_000;
    this.negativeMax = limits.negativeMax ?? 100_000;
  }

  start(): void {
    if (!this.o.shared) return;
    this.timer ??= setInterval(() => void this.sync(), this.o.syncMs ?? 200);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Seconds to wait when this IP or prefix is at its limit (no lookup may be made), else null. */
  refusal(ip: string, prefix: string): number | null {
    const now = this.clock.now();
    const over = (key: string, limit: number): boolean => limit > 0 && this.count(key, now) >= limit;
    if (over(`af:ip:${ip}`, this.limits.perIp) || over(`af:px:${prefix}`, this.limits.perPrefix)) {
      this.stats.refused++;
      return Math.max(1, Math.ceil((SLOT_MS - (now % SLOT_MS)) / 1000));
    }
    return null;
  }

  /** True when this hash failed recently (the caller answers 401 without a lookup). */
  knownBad(hash: string): boolean {
    const at = this.negative.get(hash);
    if (at === undefined) return false;
    if (this.clock.now() - at >= this.negativeTtlMs) {
      this.negative.delete(hash);
      return false;
    }
    this.stats.negativeHits++;
    return true;
  }

  /** A lookup found nothing (or a remembered failure was repeated): counts for the IP and the prefix. */
  failed(ip: string, prefix: string, hash: string): void {
    const now = this.clock.now();
    this.stats.failures++;
    if (this.limits.perIp > 0) this.add(`af:ip:${ip}`, now);
    if (this.limits.perPrefix > 0) this.add(`af:px:${prefix}`, now);
    if (!this.negative.has(hash)) {
      this.negative.set(hash, now);
      if (this.negative.size > this.negativeMax) {
        const oldest = this.negative.keys().next();
        if (!oldest.done) this.negative.delete(oldest.value);
      }
    }
  }

  private entry(key: string, now: number): Entry {
    let e = this.entries.get(key);
    if (!e) this.entries.set(key, (e = { cluster: 0, unsynced: 0, inflight: 0, own: new Array<number>(SLOTS).fill(0), ownSlot: Math.floor(now / SLOT_MS), lastUsed: now }));
    const slot = Math.floor(now / SLOT_MS);
    for (let s = e.ownSlot + 1; s <= slot && s <= e.ownSlot + SLOTS; s++) e.own[s % SLOTS] = 0;
    if (slot > e.ownSlot) e.ownSlot = slot;
    return e;
  }

  private count(key: string, now: number): number {
    const e = this.entries.get(key);
    if (!e) return 0;
    const entry = this.entry(key, now);
    const own = entry.own.reduce((a, b) => a + b, 0);
    if (!this.o.shared || this.failing) return own;
    return Math.max(own, entry.cluster + entry.inflight + entry.unsynced);
  }

  private add(key: string, now: number): void {
    const e = this.entry(key, now);
    e.lastUsed = now;
    e.unsynced++;
    e.own[e.ownSlot % SLOTS] = (e.own[e.ownSlot % SLOTS] ?? 0) + 1;
  }

  /** One sync with the cluster: this node's new failures out, the cluster-wide counts in. */
  async sync(): Promise<void> {
    const shared = this.o.shared;
    if (!shared || this.syncing || this.entries.size === 0) return;
    this.syncing = true;
    const now = this.clock.now();
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
        shared.sync(deltas),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error('auth failure count sync timed out')), 2000);
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
