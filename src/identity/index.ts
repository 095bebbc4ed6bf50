import type { Config } from '../shared/config.js';
import { systemClock, type Clock } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import type { Database } from '../persistence/db.js';
import { GantryAuthenticator, LastUsedTracker, type AgentIdentity } from './authenticator.js';
import { IdentityStore } from './store.js';
import { JwtService, loadSigningKey, type SigningKeyRing } from './tokens.js';
import { Mailer } from './mailer.js';
import { RateLimiter, perMinute, type BucketSpec } from './rate-limit.js';
import { IdentityService } from './service.js';
import { CachedAuthLookup, DEFAULT_AUTH_CACHE, type AuthCacheOptions } from './auth-cache.js';
import { InMemoryInvalidation, type CacheInvalidationPort } from './invalidation.js';
import { AuthFailureLimiter, type FailureWindowCounter } from './failure-limit.js';

export { GantryAuthenticator, LastUsedTracker, type AgentIdentity, type AuthLookup } from './authenticator.js';
export { IdentityService } from './service.js';
export { IdentityStore } from './store.js';
export { JwtService } from './tokens.js';
export { RateLimiter, perMinute } from './rate-limit.js';
export { AuthFailureLimiter, type FailureWindowCounter } from './failure-limit.js';
export { maskEmail, parseCredential, generateCredential } from './credentials.js';
export { CachedAuthLookup, DEFAULT_AUTH_CACHE, type AuthCacheOptions, type AuthCacheStats } from './auth-cache.js';
export { InMemoryInvalidation, InvalidationSchema, encodeInvalidation, decodeInvalidation, type CacheInvalidationPort, type Invalidation } from './invalidation.js';
export { ROLE_RANK, type Principal, type PrincipalKind, type TeamPrincipal, type TeamRole, type RouteAuth, type AuthRequest, type Authenticator } from './principal.js';

export interface IdentityOptions {
  config: Config;
  db: Database;
  logger: Logger;
  /** Resolved data directory (the generated JWT key lives there). */
  dataDir: string;
  /** Override of the rate-limit buckets (routes: login, register, forgot, pair_start, pair_confirm, refresh). */
  limits?: Record<string, BucketSpec>;
  /** last_used_at flush period. */
  lastUsedFlushMs?: number;
  /** The node's clock: credential expiry, cache TTL and last_used_at read it (default: system time). */
  clock?: Clock;
  /** Token signing keys shared through PostgreSQL (signing-keys.ts); ignored when GANTRY_JWT_PRIVATE_KEY is set. Absent: the key file in the data dir. */
  keyring?: SigningKeyRing;
  /** Where identity writes publish cache invalidations (default: in memory, this node only). */
  invalidation?: CacheInvalidationPort;
  /** Credential/membership cache bounds (default DEFAULT_AUTH_CACHE; ttlMs 0 turns it off). */
  authCache?: Omit<AuthCacheOptions, 'clock'>;
  /** Cluster: the shared window counter failed credential checks are counted in (default: this node only). */
  failureCounter?: FailureWindowCounter;
}

export interface Identity {
  authenticator: GantryAuthenticator;
  service: IdentityService;
  store: IdentityStore;
  jwt: JwtService;
  mailer: Mailer;
  lastUsed: LastUsedTracker;
  /** The in-memory cache of verified credentials and users' team roles (stats for tests and diagnostics). */
  authCache: CachedAuthLookup;
  /** The port identity writes publish invalidations on (the cluster layer broadcasts it). */
  invalidation: CacheInvalidationPort;
  /** Throttles well-formed credential values that name nothing (per IP and prefix). */
  failures: AuthFailureLimiter;
  /** For the agent gRPC stream: verifies an ak- value (checksum, then lookup by hash); throws 401 AppErrors. */
  verifyAgentCredential(value: string): Promise<AgentIdentity>;
  /** Called with the ids of revoked credentials (device revoke, DELETE /credentials, team deletion), fed by the invalidation port; returns the unsubscribe. */
  onCredentialsRevoked(cb: (ids: string[]) => void): () => void;
  start(): void;
  /** Flushes last_used_at and stops the outbox sender; call before closing the database. */
  stop(): Promise<void>;
}

/** Builds the identity module (composition root calls this once per node). */
export function createIdentity(o: IdentityOptions): Identity {
  const c = o.config;
  const store = new IdentityStore(o.db);
  const useRing = o.keyring && !c.GANTRY_JWT_PRIVATE_KEY;
  const key = useRing ? null : loadSigningKey(c.GANTRY_JWT_PRIVATE_KEY, o.dataDir, o.logger);
  const jwt = new JwtService(key, { issuer: c.GANTRY_JWT_ISSUER, audience: c.GANTRY_JWT_AUDIENCE, ttlS: c.GANTRY_ACCESS_TOKEN_TTL_S, ...(useRing && o.keyring ? { keyring: o.keyring } : {}) });
  const clock = o.clock ?? systemClock;
  const lastUsed = new LastUsedTracker(store, o.logger, o.lastUsedFlushMs ?? 30_000);
  const invalidation = o.invalidation ?? new InMemoryInvalidation((e) => o.logger.warn({ err: e }, 'cache invalidation subscriber failed'));
  const authCache = new CachedAuthLookup(store, invalidation, { ...DEFAULT_AUTH_CACHE, ...o.authCache, clock });
  const failures = new AuthFailureLimiter(
    { perIp: c.GANTRY_AUTH_FAILURE_LIMIT_PER_MIN, perPrefix: c.GANTRY_AUTH_FAILURE_PREFIX_LIMIT_PER_MIN },
    { clock, ...(o.failureCounter ? { shared: o.failureCounter } : {}), onSyncError: (e) => o.logger.warn({ err_message: (e as Error).message }, 'auth failure limits: Redis unreachable; counting per node until it is back') },
  );
  const authenticator = new GantryAuthenticator(authCache, jwt, lastUsed, clock, failures);
  const mailer = new Mailer(store, { smtpUrl: c.SMTP_URL, from: c.GANTRY_MAIL_FROM, logger: o.logger });
  const n = c.GANTRY_AUTH_RATE_LIMIT_PER_MIN;
  const limiter = new RateLimiter(
    o.limits ?? {
      login: perMinute(n),
      register: perMinute(n),
      forgot: perMinute(n),
      pair_start: perMinute(n),
      pair_confirm: perMinute(n),
      refresh: perMinute(Math.max(n, 60)),
    },
  );
  const service = new IdentityService({ config: c, store, jwt, mailer, limiter, lastUsed, logger: o.logger, pollIntervalS: c.GANTRY_PAIRING_POLL_INTERVAL_S, invalidation });
  let sweepTimer: NodeJS.Timeout | null = null;
  return {
    authenticator,
    service,
    store,
    jwt,
    mailer,
    lastUsed,
    authCache,
    invalidation,
    failures,
    verifyAgentCredential: (v) => authenticator.verifyAgentCredential(v),
    onCredentialsRevoked: (cb) => service.onCredentialsRevoked(cb),
    start() {
      lastUsed.start();
      failures.start();
      mailer.start();
      sweepTimer = setInterval(() => {
        store.sweep(new Date()).catch((e: unknown) => o.logger.warn({ err: e }, 'identity sweep failed'));
      }, 3_600_000);
      sweepTimer.unref();
    },
    async stop() {
      if (sweepTimer) clearInterval(sweepTimer);
      sweepTimer = null;
      failures.stop();
      await mailer.stop();
      await lastUsed.stop();
      authCache.close();
    },
  };
}
