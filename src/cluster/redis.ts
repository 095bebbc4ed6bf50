import { createClient } from 'redis';
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

/**
 * Connects to REDIS_URL. node-redis reconnects on its own (backoff capped at 2 s); errors are logged
 * without the URL (it may hold a password). Resolves once the first connection is up.
 */
export async function connectRedis(url: string, prefix: string, logger: Logger, connectTimeoutMs = 10_000): Promise<RedisConnection> {
  const log = logger.child({ component: 'redis' });
  const make = (): Redis => {
    // commands fail at once while disconnected (no offline queue): every caller has its own retry
    // (heartbeats, syncs) and must not hang on an outage
    const c = createClient({ url, disableOfflineQueue: true, socket: { reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, 2000), connectTimeout: 5000 } });
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
