// One membership contract, in memory (a table shared in-process) and over Redis: joins and leaves are
// seen by every member; a crashed member is declared dead after two leases, with the fence hook run
// before the removal; a paused member is evicted and re-joins as a new member.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { InMemoryMembership, InMemoryMembershipTable, RedisMembership } from '../../src/cluster/membership.js';
import { connectRedis, type RedisConnection } from '../../src/cluster/redis.js';
import { createLogger } from '../../src/shared/logger.js';
import { waitFor } from '../agents/helpers.js';
import type { Member } from '../../src/cluster/ports.js';

const url = process.env.REDIS_URL;
const logger = createLogger('silent');
const LEASE = 300;
const conns: RedisConnection[] = [];
type Node = InMemoryMembership | RedisMembership;
const all: Node[] = [];
after(async () => {
  for (const n of all) await n.stop();
  for (const c of conns) await c.close();
});

const member = (name: string): Member => ({ memberId: `${name}/${randomBytes(3).toString('hex')}`, nodeId: name, address: `${name}:1`, startedAt: Date.now() });
type Make = () => Promise<() => Promise<Node>>;
const ids = (n: Node): string[] => n.view().members.map((m) => m.memberId);

function contract(name: string, makeCluster: Make): void {
  test(`${name}: joins are seen by every member, with a growing version`, async () => {
    const node = await makeCluster();
    const a = await node();
    const ma = member('a');
    await a.join(ma);
    assert.deepEqual(ids(a), [ma.memberId]);
    const v1 = a.view().version;
    const b = await node();
    const mb = member('b');
    await b.join(mb);
    await waitFor('a sees b', () => ids(a).includes(mb.memberId), 2000, 10);
    assert.ok(a.view().version > v1);
    assert.ok(ids(b).includes(ma.memberId));
  });

  test(`${name}: a graceful leave is seen at once (not after a lease)`, async () => {
    const node = await makeCluster();
    const a = await node();
    const b = await node();
    const mb = member('b');
    await a.join(member('a'));
    await b.join(mb);
    await waitFor('a sees b', () => ids(a).includes(mb.memberId), 2000, 10);
    const t0 = Date.now();
    await b.leave();
    await waitFor('a drops b', () => !ids(a).includes(mb.memberId), LEASE, 5);
    assert.ok(Date.now() - t0 < LEASE);
  });

  test(`${name}: a crashed member is declared dead after two leases, its fence hook run first`, async () => {
    const node = await makeCluster();
    const fenced: string[] = [];
    const survivors: Node[] = [];
    for (const n of ['a', 'b']) {
      const x = await node();
      x.beforeRemoveDead(async (d) => void fenced.push(d.memberId));
      await x.join(member(n));
      survivors.push(x);
    }
    const c = await node();
    const mc = member('c');
    await c.join(mc);
    await waitFor('all see c', () => survivors.every((s) => ids(s).includes(mc.memberId)), 2000, 10);
    await c.stop(); // no leave: a crash
    await waitFor('c declared dead', () => survivors.every((s) => !ids(s).includes(mc.memberId)), LEASE * 8, 10);
    // the hook (the PostgreSQL fence, idempotent) ran before the removal, for the dead member only;
    // two survivors sweeping at the same moment may both run it, only one removal wins the CAS
    assert.ok(fenced.length >= 1 && fenced.length <= 2, `fence hook calls: ${fenced.length}`);
    assert.ok(fenced.every((id) => id === mc.memberId));
  });

  test(`${name}: a paused member is evicted when it resumes and re-joins as a new member`, async () => {
    const node = await makeCluster();
    const a = await node();
    await a.join(member('a'));
    const p = await node();
    const mp = member('p');
    const evicted: Member[] = [];
    p.onEvicted((fresh) => evicted.push(fresh));
    await p.join(mp);
    await waitFor('a sees p', () => ids(a).includes(mp.memberId), 2000, 10);
    p.suspendHeartbeats();
    await waitFor('p declared dead', () => !ids(a).includes(mp.memberId), LEASE * 8, 10);
    p.resumeHeartbeats();
    await waitFor('p evicted', () => evicted.length === 1, LEASE * 4, 10);
    const fresh = evicted[0] as Member;
    assert.notEqual(fresh.memberId, mp.memberId);
    assert.equal(fresh.nodeId, 'p');
    await waitFor('a sees the new member', () => ids(a).includes(fresh.memberId) && !ids(a).includes(mp.memberId), LEASE * 4, 10);
  });
}

contract('in-memory membership', async () => {
  const table = new InMemoryMembershipTable();
  return async () => {
    const n = new InMemoryMembership(table, { leaseMs: LEASE });
    all.push(n);
    return n;
  };
});

if (!url) test('redis membership', { skip: 'REDIS_URL unset and no redis-server' }, () => undefined);
else
  contract('redis membership', async () => {
    const prefix = `gantry-test:${process.pid}:${randomBytes(4).toString('hex')}:`;
    return async () => {
      const conn = await connectRedis(url, prefix, logger);
      conns.push(conn);
      const n = new RedisMembership(conn, { leaseMs: LEASE, logger });
      all.push(n);
      return n;
    };
  });
