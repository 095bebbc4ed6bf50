import { randomUUID } from 'node:crypto';
import { ConfigError, type Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import type { Database } from '../persistence/db.js';
import { ClusterMemberStore } from '../persistence/cluster-store.js';
import { LocalEventBus } from '../cluster/event-bus.js';
import { RedisEventBus } from '../cluster/event-bus-redis.js';
import { RedisInvalidation } from '../cluster/invalidation-redis.js';
import { connectRedis, type RedisConnection } from '../cluster/redis.js';
import { Cluster } from '../cluster/index.js';
import { createMembership } from '../cluster/membership.js';
import { RedisAgentDirectory } from '../cluster/directory.js';
import { InMemoryLeases, RedisLeases, type LeasePort } from '../cluster/leases.js';
import type { LocalActorSystem } from '../actors/runtime/system.js';
import { encodeError, decodeError } from '../actors/runtime/envelope.js';
import { envelopes, AGENT } from '../actors/index.js';
import type { Protocols } from '../actors/ports.js';
import type { AgentPresence, LocalAgentStreams } from '../edge/agents/sessions.js';
import type { Lifecycle, Participant } from './lifecycle.js';
import type { NodeSettings } from './settings.js';

/** Task events and cache invalidations: in memory on a single node, to every node over Redis in cluster mode. */
export interface ClusterBus {
  redis: RedisConnection | null;
  events: LocalEventBus;
  /** Cluster mode: the Redis event bus (its gaps make the SSE streams re-read PostgreSQL). */
  redisEvents: RedisEventBus | null;
  invalidation: RedisInvalidation | null;
}

/**
 * Cluster mode (REDIS_URL or REDIS_SENTINELS set): Redis first (a node that cannot reach it refuses to start, before
 * it owns anything), then the invalidation broadcast and the event bus, tagged with this process's id.
 */
export async function connectBus(life: Lifecycle, d: { settings: NodeSettings; prefix: string; logger: Logger }): Promise<ClusterBus> {
  const target = d.settings.redisSentinel ?? d.settings.redisUrl;
  if (!target) return { redis: null, events: new LocalEventBus(), redisEvents: null, invalidation: null };
  const { logger } = d;
  const redis = await life.open(
    () =>
      connectRedis(target, d.prefix, logger).catch((e: unknown) => {
        throw new ConfigError(`cannot reach ${typeof target === 'string' ? 'REDIS_URL' : `the Redis master ${JSON.stringify(target.master)} through REDIS_SENTINELS`}: ${(e as Error).message}`);
      }),
    (r) => r.close(),
  );
  const processId = randomUUID();
  const invalidation = new RedisInvalidation(redis, processId, logger.child({ component: 'invalidation' }));
  await life.start(invalidation);
  const redisEvents = new RedisEventBus(redis, processId, logger.child({ component: 'event-bus' }));
  await life.start(redisEvents);
  return { redis, events: redisEvents, redisEvents, invalidation };
}

/**
 * Cluster mode: membership, placement, remoting (built here, joined by `clusterJoin` once the
 * actors are registered); null on a single node. It reads this node's agent streams from the
 * sessions' table (an agent's actor lives where its stream is).
 */
export function createCluster(d: { config: Config; settings: NodeSettings; redis: RedisConnection | null; actors: LocalActorSystem<Protocols>; db: Database; streams: LocalAgentStreams; logger: Logger }): Cluster<Protocols> | null {
  const conn = d.redis;
  if (!conn) return null;
  const { config, logger } = d;
  const leaseMs = d.settings.clusterLeaseMs;
  return new Cluster<Protocols>({
    nodeId: d.settings.nodeId,
    host: d.settings.cluster.host,
    port: d.settings.cluster.port,
    advertise: config.GANTRY_CLUSTER_ADVERTISE,
    leaseMs,
    system: d.actors,
    codec: envelopes,
    errors: { encode: encodeError, decode: decodeError },
    membership: createMembership(conn, { leaseMs, logger }),
    directory: (self) => new RedisAgentDirectory(conn, self, logger),
    fence: new ClusterMemberStore(d.db),
    directoryKinds: new Set([AGENT]),
    hasLocalStream: (agentId) => d.streams.has(agentId),
    localStreams: () => d.streams.agentIds(),
    tunnelOpener: (agentId, teamId, open, h) => d.streams.openTunnel(agentId, teamId, open, h),
    logger: logger.child({ component: 'cluster' }),
  });
}

/** Joins the cluster (remoting port, member fence, membership); a node that cannot refuses to start. */
export function clusterJoin(c: Cluster<Protocols>, settings: NodeSettings): Participant {
  const { host, port } = settings.cluster;
  return {
    failure: `cannot join the cluster (cluster port ${host}:${port})`,
    start: () => c.start(),
    stop: () => c.stop(),
  };
}

/** Graceful leave, first thing after the HTTP edge drained: the other members take over this node's actors now, not after a lease. */
export function clusterLeave(c: Cluster<Protocols>): Participant {
  return { stop: () => c.leave() };
}

/** The agent directory as the sessions see it: claims and releases of this node's streams. */
export function clusterPresence(c: Cluster<Protocols>, logger: Logger): AgentPresence {
  return {
    opened: (agentId) => void c.directory.claim(agentId).catch((e: unknown) => logger.warn({ agent_id: agentId, err_message: (e as Error).message }, 'agent directory claim failed')),
    closed: (agentId) => void c.directory.release(agentId).catch(() => undefined),
    elsewhere: (agentId) => c.agentElsewhere(agentId),
  };
}

/** Cluster-wide singleton jobs run on the lease holder only (every job on a single node). */
export function createLeases(redis: RedisConnection | null, settings: NodeSettings, logger: Logger): LeasePort {
  return redis ? new RedisLeases(redis, settings.clusterLeaseMs, logger.child({ component: 'leases' })) : new InMemoryLeases();
}
