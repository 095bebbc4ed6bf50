// The invalidation contract (test/identity/invalidation-contract.ts) against the Redis broadcast,
// plus what only a broadcast has: acknowledgements before publish() resolves, the timeout when a
// node does not answer, and the "deaf" state while the subscription is down.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connectRedis, type RedisConnection } from '../../src/cluster/redis.js';
import { RedisInvalidation } from '../../src/cluster/invalidation-redis.js';
import { createLogger } from '../../src/shared/logger.js';
import { invalidationContract } from '../identity/invalidation-contract.js';
import { startRedisServer } from '../helpers/cluster.js';
import { waitFor } from '../agents/helpers.js';
import type { Invalidation } from '../../src/identity/invalidation.js';

const url = process.env.REDIS_URL;
const logger = createLogger('silent');
const conns: RedisConnection[] = [];
after(async () => {
  for (const c of conns) await c.close();
});

async function pair(redisUrl = url as string, ackTimeoutMs = 2000) {
  const prefix = `gantry-test:${process.pid}:${randomBytes(4).toString('hex')}:`;
  const ca = await connectRedis(redisUrl, prefix, logger);
  const cb = await connectRedis(redisUrl, prefix, logger);
  conns.push(ca, cb);
  const a = new RedisInvalidation(ca, `pa-${randomBytes(3).toString('hex')}`, logger, ackTimeoutMs);
  const b = new RedisInvalidation(cb, `pb-${randomBytes(3).toString('hex')}`, logger, ackTimeoutMs);
  await a.start();
  await b.start();
  return { a, b, close: async () => (await a.stop(), await b.stop()) };
}

if (!url) test('redis invalidation', { skip: 'REDIS_URL unset and no redis-server' }, () => undefined);
else {
  invalidationContract('redis invalidation', () => pair());

  const ev: Invalidation = { type: 'credential', ids: ['0195f0c2-7a4e-7000-8000-000000000009'] };

  test('redis invalidation: publish() resolves only after the other node applied the event', async () => {
    const { a, b, close } = await pair();
    try {
      let appliedOnB = false;
      b.subscribe(() => (appliedOnB = true));
      await a.publish(ev);
      assert.equal(appliedOnB, true, 'applied on the other node before the revoking call returned');
    } finally {
      await close();
    }
  });

  test('redis invalidation: a node that does not answer delays publish() by the ack timeout only, and is logged', async () => {
    const { a, b, close } = await pair(url, 300);
    try {
      b.frozen = true;
      const t0 = Date.now();
      await a.publish(ev);
      const took = Date.now() - t0;
      assert.ok(took >= 250 && took < 2000, `resolved after the timeout (${took} ms)`);
    } finally {
      await close();
    }
  });

  test('redis invalidation: while the subscription is down the node says it is deaf; back up, a new generation', async (t) => {
    const server = await startRedisServer();
    if (!server) return t.skip('redis-server not installed');
    try {
      const { a, close } = await pair(server.url);
      const g0 = a.state().generation;
      assert.equal(a.state().healthy, true);
      await server.stop();
      await waitFor('deaf', () => !a.state().healthy, 10_000, 20);
      await server.restart();
      await waitFor('hearing again', () => a.state().healthy, 20_000, 50);
      assert.ok(a.state().generation > g0, 'a new generation: caches start empty');
      await close();
    } finally {
      await server.stop();
    }
  });
}
