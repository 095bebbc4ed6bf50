// Singleton-job leases: in memory (one node holds every lease) and over Redis (exactly one holder
// among contenders; hand-over when the holder stops or loses the lease).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { InMemoryLeases, RedisLeases, type LeasePort } from '../../src/cluster/leases.js';
import { connectRedis, type RedisConnection } from '../../src/cluster/redis.js';
import { createLogger } from '../../src/shared/logger.js';
import { waitFor } from '../agents/helpers.js';

const url = process.env.REDIS_URL;
const logger = createLogger('silent');
const conns: RedisConnection[] = [];
after(async () => {
  for (const c of conns) await c.close();
});

class Job {
  running = false;
  starts = 0;
  start(): void {
    this.running = true;
    this.starts++;
  }
  stop(): void {
    this.running = false;
  }
}

test('in memory: the job runs at once and stops with the lease', async () => {
  const l: LeasePort = new InMemoryLeases();
  const j = new Job();
  const stop = l.hold('sweepers', j);
  assert.equal(j.running, true);
  await stop();
  assert.equal(j.running, false);
});

if (!url) test('redis leases', { skip: 'REDIS_URL unset and no redis-server' }, () => undefined);
else {
  const LEASE = 300;
  const contenders = async (n: number) => {
    const prefix = `gantry-test:${process.pid}:${randomBytes(4).toString('hex')}:`;
    const out: Array<{ leases: RedisLeases; job: Job; stop: () => Promise<void> }> = [];
    for (let i = 0; i < n; i++) {
      const conn = await connectRedis(url, prefix, logger);
      conns.push(conn);
      const leases = new RedisLeases(conn, LEASE, logger);
      const job = new Job();
      out.push({ leases, job, stop: leases.hold('sweepers', job) });
    }
    return { prefix, out };
  };

  test('redis: exactly one of three contenders runs the job; when it stops, another takes over', async () => {
    const { out } = await contenders(3);
    await waitFor('one holder', () => out.filter((c) => c.job.running).length === 1, 5000, 10);
    await new Promise((r) => setTimeout(r, LEASE * 2));
    assert.equal(out.filter((c) => c.job.running).length, 1, 'still exactly one after several renewals');
    const holder = out.find((c) => c.job.running);
    await holder?.stop();
    await waitFor('another holder', () => out.filter((c) => c !== holder && c.job.running).length === 1, LEASE * 5, 10);
    for (const c of out) await c.stop();
    assert.equal(out.filter((c) => c.job.running).length, 0);
  });

  test('redis: a holder whose lease vanished (Redis lost it, or another took it) stops its job', async () => {
    const { prefix, out } = await contenders(1);
    const c = out[0] as (typeof out)[0];
    await waitFor('holding', () => c.job.running, 5000, 10);
    await (conns[conns.length - 1] as RedisConnection).client.set(`${prefix}lease:sweepers`, 'someone-else');
    await waitFor('stopped', () => !c.job.running, LEASE * 3, 10);
    await (conns[conns.length - 1] as RedisConnection).client.del(`${prefix}lease:sweepers`);
    await waitFor('acquired again', () => c.job.running && c.job.starts === 2, LEASE * 3, 10);
    await c.stop();
  });
}
