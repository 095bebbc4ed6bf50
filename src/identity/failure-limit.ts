import { systemClock, type Clock } from '../shared/clock.js';
import { WindowCounts, type SharedWindowCounter } from '../shared/window-counts.js';

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
 * limits (WindowCounts over SharedWindowCounter, src/cluster/rate-limit-redis.ts): each node adds its
 * failures every `syncMs` and reads the cluster-wide counts back; while Redis is away each node
 * counts on its own.
 */
export type FailureWindowCounter = SharedWindowCounter;

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

export class AuthFailureLimiter {
  private readonly counts: WindowCounts;
  private readonly negative = new Map<string, number>();
  private readonly clock: Clock;
  private readonly negativeTtlMs: number;
  private readonly negativeMax: number;
  /** Counters for tests and metrics. */
  readonly stats = { failures: 0, refused: 0, negativeHits: 0 };

  constructor(
    private readonly limits: AuthFailureLimits,
    private readonly o: { clock?: Clock; shared?: FailureWindowCounter; syncMs?: number; onSyncError?: (e: unknown) => void } = {},
  ) {
    this.clock = o.clock ?? systemClock;
    this.negativeTtlMs = limits.negativeTtlMs ?? 10 * 60_000;
    this.negativeMax = limits.negativeMax ?? 100_000;
    this.counts = new WindowCounts({ counter: o.shared, clock: this.clock, syncMs: o.syncMs ?? 200, onSyncError: o.onSyncError, what: 'auth failure count' });
  }

  start(): void {
    this.counts.start();
  }

  stop(): void {
    this.counts.stop();
  }

  /** One sync with the cluster: this node's new failures out, the cluster-wide counts in. */
  sync(): Promise<void> {
    return this.counts.sync();
  }

  /** Seconds to wait when this IP or prefix is at its limit (no lookup may be made), else null. */
  refusal(ip: string, prefix: string): number | null {
    const now = this.clock.now();
    const over = (key: string, limit: number): boolean => limit > 0 && this.counts.count(key, now) >= limit;
    if (over(`af:ip:${ip}`, this.limits.perIp) || over(`af:px:${prefix}`, this.limits.perPrefix)) {
      this.stats.refused++;
      return this.counts.retryAfterS(now);
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
    if (this.limits.perIp > 0) this.counts.add(`af:ip:${ip}`, now);
    if (this.limits.perPrefix > 0) this.counts.add(`af:px:${prefix}`, now);
    if (!this.negative.has(hash)) {
      this.negative.set(hash, now);
      if (this.negative.size > this.negativeMax) {
        const oldest = this.negative.keys().next();
        if (!oldest.done) this.negative.delete(oldest.value);
      }
    }
  }
}
