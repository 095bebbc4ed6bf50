import { rateLimited } from '../shared/errors.js';
import { systemClock, type Clock } from '../shared/clock.js';

export interface BucketSpec {
  /** Burst size (tokens when full). */
  capacity: number;
  /** Tokens added per second. */
  refillPerS: number;
}

/**
 * In-memory token buckets keyed by (route, client ip). Per node: behind a load balancer each node
 * limits on its own, which bounds brute force without a shared store. Idle full buckets are pruned.
 */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private lastPrune = 0;

  constructor(
    private readonly specs: Record<string, BucketSpec>,
    private readonly clock: Clock = systemClock,
  ) {}

  /** Takes one token or throws 429 rate_limited with Retry-After (seconds until one token is back). */
  take(route: string, key: string): void {
    const spec = this.specs[route];
    if (!spec) return;
    const now = this.clock.now();
    this.prune(now);
    const id = `${route}\u0000${key}`;
    const b = this.buckets.get(id) ?? { tokens: spec.capacity, at: now };
    const tokens = Math.min(spec.capacity, b.tokens + ((now - b.at) / 1000) * spec.refillPerS);
    if (tokens < 1) {
      this.buckets.set(id, { tokens, at: now });
      const waitS = (1 - tokens) / spec.refillPerS;
      throw rateLimited(Math.max(1, Math.ceil(waitS)), `too many ${route} requests; retry later`);
    }
    this.buckets.set(id, { tokens: tokens - 1, at: now });
  }

  private prune(now: number): void {
    if (now - this.lastPrune < 60_000) return;
    this.lastPrune = now;
    for (const [id, b] of this.buckets) {
      const spec = this.specs[id.slice(0, id.indexOf('\u0000'))];
      if (!spec || b.tokens + ((now - b.at) / 1000) * spec.refillPerS >= spec.capacity) this.buckets.delete(id);
    }
  }

  size(): number {
    return this.buckets.size;
  }
}

/** `perMinute` requests per minute, all of them available as a burst. */
export const perMinute = (n: number): BucketSpec => ({ capacity: n, refillPerS: n / 60 });
