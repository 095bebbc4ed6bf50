import { randomUUID } from 'node:crypto';
import { createClient, createSentinel } from 'redis';
import type { Logger } from '../shared/logger.js';

/** One node-redis client (commands) of this node; `duplicate()` it for a subscriber. */
export type Redis = ReturnType<typeof createClient>;

export interface RedisConnection {
  /** For commands (and scripts). */
  client: Redis;
  /** Every key and channel of this deployment starts with it (GANTRY_REDIS_PREFIX; tests use one per run). */
  prefix: string;
  /** A new connection for SUBSCRIBE (closed with close()). */
  subscriber(): Promise<Redis>;
  close(): Promise<void>;
}

/** A Redis behind Sentinel: the sentinels to ask, and the name of the master they monitor. */
export interface RedisSentinelTarget {
  sentinels: Array<{ host: string; port: number }>;
  master: string;
}

const reconnectStrategy = (retries: number): number => Math.min(50 * 2 ** retries, 2000);

/**
 * One connection through Sentinel (node-redis' sentinel client): it asks the sentinels for the
 * master, follows a failover to the promoted replica (commands and subscriptions move with it) and
 * emits 'topology-change'. The cluster's modules speak to a client: the sentinel client has the
 * commands they use (eval, publish, hGetAll, multi, subscribe), and the events they resync on are
 * mapped here: 'error' when the master's connection fails (the client's own), 'ready' once the new
 * master is in use after a failover. node-redis announces the new master before its connections
 * to it are up, so 'ready' waits until a message published on a private probe channel comes back
 * through this connection's subscriptions (restored together): a cache that trusts its
 * subscription again (invalidation) must not do so before it can hear invalidations.
 */
function sentinelClient(t: RedisSentinelTarget, prefix: string, log: Logger, onDown: () => void): Redis {
  const s = createSentinel({
    name: t.master,
    sentinelRootNodes: t.sentinels,
    // commands fail at once while no master is reachable, as with REDIS_URL (every caller retries)
    nodeClientOptions: { disableOfflineQueue: true, socket: { connectTimeout: 5000, reconnectStrategy } },
    sentinelClientOptions: { socket: { connectTimeout: 5000, reconnectStrategy } },
  });
  let master: string | null = null;
  let epoch = 0;
  const readyOnNewMaster = async (mine: number, now: string): Promise<void> => {
    const channel = `${prefix}sentinel-probe:${randomUUID()}`;
    let heard = false;
    const deadline = Date.now() + 120_000;
    try {
      for (let subscribed = false; !heard && mine === epoch; ) {
        if (Date.now() > deadline) {
          log.error({ master: now }, 'redis master changed, but this connection\'s subscriptions did not come back within 120 s');
          return;
        }
        try {
          if (!subscribed) {
            await s.subscribe(channel, () => (heard = true));
            subscribed = true;
          }
          await s.publish(channel, '1');
        } catch {
          /* the new master is not reachable yet */
        }
        if (!heard) await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await s.unsubscribe(channel).catch(() => undefined);
    }
    if (!heard || mine !== epoch) return;
    log.warn({ master: now }, 'redis master changed (sentinel failover)');
    s.emit('ready');
  };
  s.on('topology-change', (e: { type: string; node?: { host: string; port: number } }) => {
    if (e.type !== 'MASTER_CHANGE' || !e.node) return;
    const now = `${e.node.host}:${e.node.port}`;
    const was = master;
    master = now;
    if (was !== null && was !== now) void readyOnNewMaster(++epoch, now);
  });
  s.on('error', () => onDown());
  return s as unknown as Redis;
}

/**
 * Connects to REDIS_URL, or to the master named by REDIS_SENTINEL_MASTER through REDIS_SENTINELS.
 * node-redis reconnects on its own (backoff capped at 2 s); errors are logged without the URL (it may
 * hold a password). Resolves once the first connection is up.
 */
export async function connectRedis(target: string | RedisSentinelTarget, prefix: string, logger: Logger, connectTimeoutMs = 10_000): Promise<RedisConnection> {
  const log = logger.child({ component: 'redis' });
  const make = (): Redis => {
    if (typeof target !== 'string') {
      let down = false;
      const c = sentinelClient(target, prefix, log, () => {
        if (!down) log.warn('redis connection error (sentinel mode)');
        down = true;
      });
      c.on('ready', () => {
        if (down) log.info('redis connection restored');
        down = false;
      });
      return c;
    }
    const url = target;
    // commands fail at once while disconnected (no offline queue): every caller has its own retry
    // (heartbeats, syncs) and must not hang on an outage
    const c = createClient({ url, disableOfflineQueue: true, socket: { reconnectStrategy, connectTimeout: 5000 } });
    let down = false;
    c.on('error', (e: Error) => {
      if (!down) log.warn({ err_message: e.message }, 'redis connection error');
      down = true;
    });
    c.on('ready', () => {
      if (down) log.info('redis connection restored');
      down = false;
    });
    return c;
  };
  const client = make();
  // the first connection must come within the timeout (a node that cannot reach Redis refuses to start)
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      client.connect(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no connection within ${connectTimeoutMs} ms`)), connectTimeoutMs);
      }),
    ]);
  } catch (e) {
    client.destroy();
    throw e;
  } finally {
    clearTimeout(timer);
  }
  const subs = new Set<Redis>();
  return {
    client,
    prefix,
    async subscriber() {
      const s = make();
      await s.connect();
      subs.add(s);
      return s;
    },
    async close() {
      for (const s of subs) await s.close().catch(() => undefined);
      await client.close().catch(() => undefined);
    },
  };
}
