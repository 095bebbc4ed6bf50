import { systemClock, type Clock } from '../shared/clock.js';
import { WindowCounts, type SharedWindowCounter } from '../shared/window-counts.js';
import type { Principal } from './principal.js';

/**
 * Request rate limits per credential and per team, separately for the runtime surface
 * (`/api/v1/r/...`) and the management surface (every other authenticated route).
 *
 * This is a port: the edge only sees RequestRateLimits. The in-memory implementation below limits
 * per node (behind a load balancer each node keeps its own buckets); a shared implementation
 * (Redis) can replace it without touching the edge.
 */
export type Surface = 'runtime' | 'management';

/** A refusal: what the edge sends with its 429. */
export interface RateLimitRefusal {
  /** Which bucket refused. */
  scope: 'credential' | 'team';
  /** That bucket's requests per minute (RateLimit-Limit). */
  limit: number;
  /** Seconds until the next request is allowed (Retry-After). */
  retryAfterS: number;
  /** Seconds until that bucket is full again (RateLimit-Reset). */
  resetS: number;
}

export interface RequestRateLimits {
  /** Takes one token from the caller's buckets on the request's surface, or returns the refusal. Null principal: not limited. */
  take(principal: Principal | null, path: string): RateLimitRefusal | null;
}

export interface RateLimitSettings {
  /** Requests per minute; 0 = off. The full minute is available as a burst. */
  runtimePerCredential: number;
  runtimePerTeam: number;
  managementPerCredential: number;
  managementPerTeam: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

interface TeamEntry {
  team: Bucket | null;
  /** Keyed by credential id (sk-, dk-, ak-). */
  credentials: Map<string, Bucket>;
  /** JWT callers: keyed by user id (the entry is already per team). */
  users: Map<string, Bucket>;
}

const PRUNE_EVERY_MS = 60_000;

/**
 * Token buckets for one surface: a map per team holding the team's bucket and its callers'
 * buckets, so a request is two map lookups and no allocation once its buckets exist. A request
 * must find a token in both buckets; a refused request takes none (a throttled credential does
 * not drain its team).
 */
class SurfaceBuckets {
  private readonly teams = new Map<string, TeamEntry>();
  private readonly perCredRate: number;
  private readonly perTeamRate: number;
  private lastPrune: number;

  constructor(
    private readonly perCredential: number,
    private readonly perTeam: number,
    private readonly clock: Clock,
  ) {
    // tokens per ms; waits are computed from the per-minute limit (exact integers for whole tokens)
    this.perCredRate = perCredential / 60_000;
    this.perTeamRate = perTeam / 60_000;
    this.lastPrune = clock.now();
  }

  take(p: Principal): RateLimitRefusal | null {
    const now = this.clock.now();
    if (now - this.lastPrune >= PRUNE_EVERY_MS) this.prune(now);
    // JWT calls outside a team (e.g. /users/me) share the '' entry, which has no team bucket
    const teamId = p.teamId ?? '';
    let e = this.teams.get(teamId);
    if (e === undefined) {
      e = { team: null, credentials: new Map(), users: new Map() };
      this.teams.set(teamId, e);
    }
    let cred: Bucket | null = null;
    if (this.perCredential > 0) {
      const key = p.credentialId ?? p.userId;
      if (key !== undefined) {
        const m = p.credentialId !== undefined ? e.credentials : e.users;
        cred = m.get(key) ?? null;
        if (cred === null) {
          cred = { tokens: this.perCredential, at: now };
          m.set(key, cred);
        } else refill(cred, now, this.perCredential, this.perCredRate);
      }
    }
    let team: Bucket | null = null;
    if (this.perTeam > 0 && teamId !== '') {
      team = e.team;
      if (team === null) team = e.team = { tokens: this.perTeam, at: now };
      else refill(team, now, this.perTeam, this.perTeamRate);
    }
    if (cred !== null && cred.tokens < 1) return refusal('credential', cred, this.perCredential);
    if (team !== null && team.tokens < 1) return refusal('team', team, this.perTeam);
    if (cred !== null) cred.tokens -= 1;
    if (team !== null) team.tokens -= 1;
    return null;
  }

  /** Drops buckets that are full again (an idle caller costs nothing); amortised over a minute of requests. */
  private prune(now: number): void {
    this.lastPrune = now;
    for (const [id, e] of this.teams) {
      for (const [k, b] of e.credentials) if (isFull(b, now, this.perCredential, this.perCredRate)) e.credentials.delete(k);
      for (const [k, b] of e.users) if (isFull(b, now, this.perCredential, this.perCredRate)) e.users.delete(k);
      if (e.team !== null && isFull(e.team, now, this.perTeam, this.perTeamRate)) e.team = null;
      if (e.team === null && e.credentials.size === 0 && e.users.size === 0) this.teams.delete(id);
    }
  }

  size(): number {
    let n = 0;
    for (const e of this.teams.values()) n += e.credentials.size + e.users.size + (e.team === null ? 0 : 1);
    return n;
  }
}

function refill(b: Bucket, now: number, capacity: number, perMs: number): void {
  if (now > b.at) {
    b.tokens = Math.min(capacity, b.tokens + (now - b.at) * perMs);
    b.at = now;
  }
}

function isFull(b: Bucket, now: number, capacity: number, perMs: number): boolean {
  return b.tokens + (now - b.at) * perMs >= capacity;
}

/** Whole seconds, at least 1; a float a hair above an integer (refill rounding) counts as that integer. */
const ceilSeconds = (s: number): number => Math.max(1, Math.ceil(s - 1e-9));

function refusal(scope: 'credential' | 'team', b: Bucket, limit: number): RateLimitRefusal {
  return {
    scope,
    limit,
    retryAfterS: ceilSeconds(((1 - b.tokens) * 60) / limit),
    resetS: ceilSeconds(((limit - b.tokens) * 60) / limit),
  };
}

/** The per-node, in-memory implementation. */
export class MemoryRateLimits implements RequestRateLimits {
  private readonly runtime: SurfaceBuckets | null;
  private readonly management: SurfaceBuckets | null;
  private readonly runtimePrefix: string;

  constructor(s: RateLimitSettings, basePath: string, clock: Clock = systemClock) {
    this.runtime = s.runtimePerCredential > 0 || s.runtimePerTeam > 0 ? new SurfaceBuckets(s.runtimePerCredential, s.runtimePerTeam, clock) : null;
    this.management = s.managementPerCredential > 0 || s.managementPerTeam > 0 ? new SurfaceBuckets(s.managementPerCredential, s.managementPerTeam, clock) : null;
    this.runtimePrefix = `${basePath}/r/`;
  }

  /** True when any limit is configured (the edge skips the call entirely otherwise). */
  enabled(): boolean {
    return this.runtime !== null || this.management !== null;
  }

  take(principal: Principal | null, path: string): RateLimitRefusal | null {
    if (principal === null) return null;
    const b = path.startsWith(this.runtimePrefix) ? this.runtime : this.management;
    return b === null ? null : b.take(principal);
  }

  /** Live buckets (tests, metrics). */
  size(): number {
    return (this.runtime?.size() ?? 0) + (this.management?.size() ?? 0);
  }
}

/** The 429 body and headers for a refusal (IETF draft RateLimit-* fields plus Retry-After). */
export function refusalResponse(r: RateLimitRefusal): { body: { error_message: string; error_code: string }; headers: Record<string, string> } {
  return {
    body: { error_message: `${r.scope} rate limit of ${r.limit} requests per minute exceeded; retry after ${r.retryAfterS} s`, error_code: 'rate_limited' },
    headers: {
      'Retry-After': String(r.retryAfterS),
      'RateLimit-Limit': String(r.limit),
      'RateLimit-Remaining': '0',
      'RateLimit-Reset': String(r.resetS),
      'RateLimit-Policy': `${r.limit};w=60;scope=${r.scope}`,
    },
  };
}

/** Built from the configuration; null when every limit is 0 (the default), so the edge does no work at all. */
export function createRateLimits(s: RateLimitSettings, basePath: string, clock: Clock = systemClock): MemoryRateLimits | null {
  const l = new MemoryRateLimits(s, basePath, clock);
  return l.enabled() ? l : null;
}

// ---------------------------------------------------------------------------------------------
// Cluster-wide: a shared sliding window over Redis

/**
 * Limits that hold across the cluster: each key (per credential, per team, per surface) is a
 * WindowCounts key (src/shared/window-counts.ts: a minute sliding in 10-second slots, synced with
 * the shared counter every `syncMs`; per node while Redis is unreachable). A request is decided on
 * this node without a round trip, and the window has the in-memory buckets' semantics: a minute's
 * worth of requests, refilled as the minute passes.
 */
export class SharedRateLimits implements RequestRateLimits {
  private readonly runtimePrefix: string;
  private readonly counts: WindowCounts;

  constructor(
    private readonly s: RateLimitSettings,
    basePath: string,
    counter: SharedWindowCounter,
    o: { clock?: Clock; syncMs?: number; onSyncError?: (e: unknown) => void } = {},
  ) {
    this.runtimePrefix = `${basePath}/r/`;
    this.counts = new WindowCounts({ counter, clock: o.clock, syncMs: o.syncMs, onSyncError: o.onSyncError, what: 'rate limit' });
  }

  enabled(): boolean {
    return this.s.runtimePerCredential > 0 || this.s.runtimePerTeam > 0 || this.s.managementPerCredential > 0 || this.s.managementPerTeam > 0;
  }

  start(): void {
    this.counts.start();
  }

  stop(): void {
    this.counts.stop();
  }

  /** One sync with the shared counter (also run every syncMs after start()). */
  sync(): Promise<void> {
    return this.counts.sync();
  }

  take(p: Principal | null, path: string): RateLimitRefusal | null {
    if (p === null) return null;
    const runtime = path.startsWith(this.runtimePrefix);
    const surface = runtime ? 'r' : 'm';
    const perCred = runtime ? this.s.runtimePerCredential : this.s.managementPerCredential;
    const perTeam = runtime ? this.s.runtimePerTeam : this.s.managementPerTeam;
    const now = this.counts.now();
    const teamId = p.teamId ?? '';
    const who = p.credentialId ?? p.userId;
    const credKey = perCred > 0 && who !== undefined ? `${surface}:c:${teamId}:${who}` : null;
    const teamKey = perTeam > 0 && teamId !== '' ? `${surface}:t:${teamId}` : null;
    // the window slides in 10-second slots: the oldest slot leaves it at the next boundary
    if (credKey && this.counts.count(credKey, now) >= perCred) return { scope: 'credential', limit: perCred, retryAfterS: this.counts.retryAfterS(now), resetS: 60 };
    if (teamKey && this.counts.count(teamKey, now) >= perTeam) return { scope: 'team', limit: perTeam, retryAfterS: this.counts.retryAfterS(now), resetS: 60 };
    if (credKey) this.counts.add(credKey, now);
    if (teamKey) this.counts.add(teamKey, now);
    return null;
  }
}
