import type { Clock } from '../shared/clock.js';
import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import type { Database } from '../persistence/db.js';
import { OpsQueries } from '../persistence/ops-queries.js';
import type { RedisConnection } from '../cluster/redis.js';
import { RedisWindowCounter } from '../cluster/rate-limit-redis.js';
import { HttpEdge, type HttpServerHandle } from '../edge/http.js';
import { createRateLimits, SharedRateLimits, type RequestRateLimits } from '../edge/rate-limits.js';
import { NodeMetrics } from '../edge/metrics.js';
import type { Identity } from '../identity/index.js';
import { LocalObjectStore, type ObjectStore } from '../storage/index.js';
import type { Lifecycle, Participant } from './lifecycle.js';
import type { NodeSettings, PublicUrl } from './settings.js';

/** Operator/autoscaler metrics: PostgreSQL-derived gauges (cached per scrape) and this node's own. */
export function createNodeMetrics(d: { config: Config; db: Database; sseStreams: () => number; agentStreams: () => number }): NodeMetrics {
  return new NodeMetrics({ ops: new OpsQueries(d.db), cacheMs: d.config.GANTRY_METRICS_CACHE_MS, sseStreams: d.sseStreams, agentStreams: d.agentStreams });
}

/** Rate limits: per node on its own, cluster-wide over Redis (a shared sliding window, synced while started). */
export function createRequestLimits(d: { config: Config; redis: RedisConnection | null; clock: Clock; logger: Logger }): { rateLimits: RequestRateLimits | null; participant: Participant } {
  const { config, clock, logger } = d;
  const limitSettings = {
    runtimePerCredential: config.GANTRY_RATE_LIMIT_RUNTIME_PER_MIN,
    runtimePerTeam: config.GANTRY_RATE_LIMIT_RUNTIME_TEAM_PER_MIN,
    managementPerCredential: config.GANTRY_RATE_LIMIT_MANAGEMENT_PER_MIN,
    managementPerTeam: config.GANTRY_RATE_LIMIT_MANAGEMENT_TEAM_PER_MIN,
  };
  const sharedLimits = d.redis
    ? new SharedRateLimits(limitSettings, '/api/v1', new RedisWindowCounter(d.redis), { clock, onSyncError: (e) => logger.warn({ err_message: (e as Error).message }, 'rate limits: Redis unreachable; counting per node until it is back') })
    : null;
  const rateLimits = sharedLimits ? (sharedLimits.enabled() ? sharedLimits : null) : createRateLimits(limitSettings, '/api/v1', clock);
  return {
    rateLimits,
    participant: {
      start() {
        if (rateLimits === sharedLimits) sharedLimits?.start();
      },
      stop: () => sharedLimits?.stop(),
    },
  };
}

/** The HTTP edge (its routes are mounted by routes.ts before it listens). */
export function createEdge(d: { settings: NodeSettings; identity: Identity; rateLimits: RequestRateLimits | null; metrics: NodeMetrics; logger: Logger }): HttpEdge {
  const { http } = d.settings;
  const metrics = d.metrics;
  return new HttpEdge({
    host: http.host,
    port: http.port,
    basePath: '/api/v1',
    maxBodyBytes: d.settings.maxBodyBytes,
    logger: d.logger,
    authenticator: d.identity.authenticator,
    rateLimits: d.rateLimits,
    observe: (route, status, seconds) => metrics.observeRequest(route, status, seconds),
  });
}

/**
 * The edge listens (a node that cannot refuses to start); the public URL's port is known from
 * here. Stopped first: in-flight requests get the shutdown budget minus what closing the rest
 * needs, so the whole stop stays within GANTRY_SHUTDOWN_TIMEOUT_MS.
 */
export async function listen(life: Lifecycle, d: { edge: HttpEdge; config: Config; settings: NodeSettings; publicUrl: PublicUrl; objectStore: ObjectStore; logger: Logger }): Promise<{ http: HttpServerHandle; baseUrl: string }> {
  const { http } = d.settings;
  const budgetMs = Math.max(0, d.config.GANTRY_SHUTDOWN_TIMEOUT_MS - 2000);
  const handle = await life.open(
    () => d.edge.listen(),
    (h) => h.shutdown(budgetMs),
    `cannot listen on HTTP ${http.host}:${http.port}`,
  );
  d.publicUrl.bound(handle.port);
  if (d.objectStore instanceof LocalObjectStore) d.objectStore.setPublicBaseUrl(d.publicUrl.raw());
  const baseUrl = `http://127.0.0.1:${handle.port}/api/v1`;
  d.logger.info({ http_port: handle.port, base_url: baseUrl }, 'listening');
  return { http: handle, baseUrl };
}
