import { systemClock, type Clock } from '../shared/clock.js';
import type { AuthLookup } from './authenticator.js';
import type { CacheInvalidationPort, Invalidation } from './invalidation.js';
import type { CredentialAuthRow, SessionAuthRow, UserAuthRow } from './store.js';
import { Lru } from '../shared/lru.js';

export interface AuthCacheOptions {
  /** Entries per map (credentials, user x team, sessions); the least recently used is evicted beyond it. */
  maxEntries: number;
  /** Backstop age of an entry (ms): invalidation is the mechanism, the TTL only bounds a missed one. 0 disables the cache. */
  ttlMs: number;
  clock?: Clock;
}

export const DEFAULT_AUTH_CACHE: Readonly<Omit<AuthCacheOptions, 'clock'>> = { maxEntries: 10_000, ttlMs: 60_000 };

/** Counters for tests and diagnostics (a warm request shows as a hit and no lookup). */
export interface AuthCacheStats {
  credentialHits: number;
  credentialLookups: number;
  userHits: number;
  userLookups: number;
  sessionHits: number;
  sessionLookups: number;
  invalidations: number;
  evictions: number;
}

const userKey = (userId: string, teamId: string | null): string => `${userId}/${teamId ?? ''}`;

/**
 * The authenticator's lookups, answered from memory when warm: a verified credential by the SHA-256
 * of its value (the key is the hash, never the secret), a user's session version plus their role
 * in the requested team, and whether an access token's session (refresh family) has ended. A warm
 * request reads no PostgreSQL at all.
 *
 * Correctness rests on invalidation, not on the TTL:
 * - every identity write that changes a cached answer publishes an Invalidation after it commits
 *   (CacheInvalidationPort); this cache drops the affected entries synchronously, so the next
 *   request on this node reads PostgreSQL again;
 * - a lookup that was in flight when any invalidation arrived is not stored (an epoch check), and
 *   in-flight lookups are not shared with requests that arrive after it: a read that began before
 *   the write committed can never repopulate the cache with the old answer;
 * - what changes with time alone (expires_at) is checked against the clock by the authenticator on
 *   every hit, so expiry needs no invalidation;
 * - only rows found are cached (an unknown hash or user, or a user who is not a member of the
 *   X-Team-ID team, always goes to the database, so garbage cannot flush good entries out), and
 *   both maps are bounded (LRU) with a TTL as the backstop for changes made outside the identity
 *   service (e.g. SQL by hand).
 */
export class CachedAuthLookup implements AuthLookup {
  readonly stats: AuthCacheStats = { credentialHits: 0, credentialLookups: 0, userHits: 0, userLookups: 0, sessionHits: 0, sessionLookups: 0, invalidations: 0, evictions: 0 };
  private readonly creds: Lru<CredentialAuthRow>;
  private readonly users: Lru<UserAuthRow & { teamId: string | null }>;
  private readonly sessions: Lru<SessionAuthRow>;
  private readonly inflightCreds = new Map<string, Promise<CredentialAuthRow | null>>();
  private readonly inflightUsers = new Map<string, Promise<UserAuthRow | null>>();
  private readonly inflightSessions = new Map<string, Promise<SessionAuthRow | null>>();
  private epoch = 0;
  private readonly clock: Clock;
  private readonly ttlMs: number;
  private readonly unsubscribe: () => void;
  private generation = -1;

  constructor(
    private readonly inner: AuthLookup,
    private readonly invalidation: CacheInvalidationPort,
    o: AuthCacheOptions = DEFAULT_AUTH_CACHE,
  ) {
    this.clock = o.clock ?? systemClock;
    this.ttlMs = Math.max(0, o.ttlMs);
    const max = Math.max(1, Math.floor(o.maxEntries));
    const evicted = (): void => {
      this.stats.evictions++;
    };
    this.creds = new Lru(max, evicted);
    this.users = new Lru(max, evicted);
    this.sessions = new Lru(max, evicted);
    this.unsubscribe = invalidation.subscribe((ev) => this.invalidate(ev));
  }

  /**
   * Cluster: the cache is only used while this node hears invalidations; when it could not (the
   * broadcast subscription is down), it is emptied and bypassed, and it starts empty again after a
   * re-subscription (what was published meanwhile was missed).
   */
  private usable(): boolean {
    const s = this.invalidation.state?.();
    if (!s) return true;
    if (!s.healthy || s.generation !== this.generation) {
      this.epoch++;
      this.inflightCreds.clear();
      this.inflightUsers.clear();
      this.inflightSessions.clear();
      this.creds.deleteWhere(() => true);
      this.users.deleteWhere(() => true);
      this.sessions.deleteWhere(() => true);
      if (!s.healthy) return false;
      this.generation = s.generation;
    }
    return true;
  }

  async credentialByHash(hash: string): Promise<CredentialAuthRow | null> {
    if (!this.usable()) return this.inner.credentialByHash(hash);
    const hit = this.creds.get(hash, this.clock.now(), this.ttlMs);
    if (hit) {
      this.stats.credentialHits++;
      return hit;
    }
    return this.load(this.inflightCreds, hash, () => this.inner.credentialByHash(hash), (row) => this.creds.set(hash, row, this.clock.now()), () => this.stats.credentialLookups++);
  }

  cachedCredential(hash: string): CredentialAuthRow | undefined {
    if (!this.usable()) return undefined;
    const hit = this.creds.get(hash, this.clock.now(), this.ttlMs);
    if (hit) this.stats.credentialHits++;
    return hit;
  }

  async userAuth(userId: string, teamId: string | null): Promise<UserAuthRow | null> {
    if (!this.usable()) return this.inner.userAuth(userId, teamId);
    const key = userKey(userId, teamId);
    const hit = this.users.get(key, this.clock.now(), this.ttlMs);
    if (hit) {
      this.stats.userHits++;
      return hit;
    }
    return this.load(
      this.inflightUsers,
      key,
      () => this.inner.userAuth(userId, teamId),
      (row) => {
        // "not a member of the team asked for" is not kept: any X-Team-ID would otherwise fill the LRU
        if (teamId === null || row.member_role !== null) this.users.set(key, Object.freeze({ ...row, teamId }), this.clock.now());
      },
      () => this.stats.userLookups++,
    );
  }

  /** An ended session is final, so both answers are kept; an unknown family id is not (always read). */
  async sessionAuth(sessionId: string): Promise<SessionAuthRow | null> {
    if (!this.usable()) return this.inner.sessionAuth(sessionId);
    const hit = this.sessions.get(sessionId, this.clock.now(), this.ttlMs);
    if (hit) {
      this.stats.sessionHits++;
      return hit;
    }
    return this.load(this.inflightSessions, sessionId, () => this.inner.sessionAuth(sessionId), (row) => this.sessions.set(sessionId, row, this.clock.now()), () => this.stats.sessionLookups++);
  }

  flushLastUsed(entries: Array<[string, Date]>): Promise<void> {
    return this.inner.flushLastUsed(entries);
  }

  /** Drops what the event makes stale (synchronously: the next request reads PostgreSQL). */
  invalidate(ev: Invalidation): void {
    this.stats.invalidations++;
    this.epoch++;
    // lookups started before this point may hold the old answer: later requests must not join them
    this.inflightCreds.clear();
    this.inflightUsers.clear();
    this.inflightSessions.clear();
    switch (ev.type) {
      case 'credential': {
        const ids = new Set(ev.ids);
        this.creds.deleteWhere((_k, r) => ids.has(r.id));
        return;
      }
      case 'membership':
        // device credentials carry their user's role in their team
        this.creds.deleteWhere((_k, r) => r.team_id === ev.teamId && r.user_id === ev.userId);
        this.users.deleteWhere((_k, u) => u.id === ev.userId && u.teamId === ev.teamId);
        return;
      case 'user':
        this.creds.deleteWhere((_k, r) => r.user_id === ev.userId);
        this.users.deleteWhere((_k, u) => u.id === ev.userId);
        this.sessions.deleteWhere((_k, x) => x.user_id === ev.userId);
        return;
      case 'team':
        this.creds.deleteWhere((_k, r) => r.team_id === ev.teamId);
        this.users.deleteWhere((_k, u) => u.teamId === ev.teamId);
        return;
      case 'session': {
        const ids = new Set(ev.ids);
        this.sessions.deleteWhere((k) => ids.has(k));
        return;
      }
      case 'workflow':
      case 'container':
      case 'budget':
        return; // not identity data (the workflow cache, the gateway and the run gate listen to them)
    }
  }

  /** Entries held (credentials, user x team, sessions). */
  size(): { credentials: number; users: number; sessions: number } {
    return { credentials: this.creds.map.size, users: this.users.map.size, sessions: this.sessions.map.size };
  }

  clear(): void {
    this.epoch++;
    this.inflightCreds.clear();
    this.inflightUsers.clear();
    this.inflightSessions.clear();
    this.creds.clear();
    this.users.clear();
    this.sessions.clear();
  }

  close(): void {
    this.unsubscribe();
    this.clear();
  }

  /**
   * One database read per key at a time (concurrent misses share it), stored only when no
   * invalidation arrived while it ran. With ttlMs 0 every call reads the database.
   */
  private async load<V extends object>(inflight: Map<string, Promise<V | null>>, key: string, read: () => Promise<V | null>, store: (v: V) => void, counted: () => void): Promise<V | null> {
    if (this.ttlMs === 0) {
      counted();
      return read();
    }
    const shared = inflight.get(key);
    if (shared) return shared;
    counted();
    const epoch = this.epoch;
    const p: Promise<V | null> = read()
      .then((v) => {
        if (v && epoch === this.epoch) store(Object.freeze(v));
        return v;
      })
      .finally(() => {
        if (inflight.get(key) === p) inflight.delete(key);
      });
    inflight.set(key, p);
    return p;
  }
}
