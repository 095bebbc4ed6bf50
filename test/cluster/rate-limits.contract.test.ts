// One contract for request rate limits, run against the per-node buckets and the cluster-wide shared
// window over Redis; then what only the shared one does: three nodes on one Redis admit the limit in
// total, and a node that loses Redis keeps limiting on its own.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { MemoryRateLimits, SharedRateLimits, type RequestRateLimits, type RateLimitSettings } from '../../src/edge/rate-limits.js';
import { RedisWindowCounter } from '../../src/cluster/rate-limit-redis.js';
import { connectRedis, type RedisConnection } from '../../src/cluster/redis.js';
import { createLogger } from '../../src/shared/logger.js';
import { startRedisServer } from '../helpers/cluster.js';
import type { Principal } from '../../src/identity/principal.js';
import { FakeClock, type Clock } from '../../src/shared/clock.js';

const url = process.env.REDIS_URL;
const logger = createLogger('silent');
const conns: RedisConnection[] = [];
after(async () => {
  for (const c of conns) await c.close();
});
const BASE = '/api/v1';
const RUN = `${BASE}/r/workflows/w/run`;
const MGMT = `${BASE}/workflows`;
const who = (teamId: string, credentialId: string): Principal => ({ kind: 'integration', teamId, credentialId }) as unknown as Principal;
const settings: RateLimitSettings = { runtimePerCredential: 3, runtimePerTeam: 5, managementPerCredential: 4, managementPerTeam: 0 };

async function shared(s: RateLimitSettings, redisUrl = url as string, prefix = `gantry-test:${process.pid}:${randomBytes(4).toString('hex')}:`, clock?: Clock) {
  const conn = await connectRedis(redisUrl, prefix, logger);
  conns.push(conn);
  const errors: unknown[] = [];
  const l = new SharedRateLimits(s, BASE, new RedisWindowCounter(conn), { onSyncError: (e) => errors.push(e), ...(clock ? { clock } : {}) });
  return { limits: l as RequestRateLimits, settle: () => l.sync(), errors, prefix };
}

type Make = () => Promise<{ limits: RequestRateLimits; settle: () => Promise<void> }>;
function contract(name: string, make: Make): void {
  test(`${name}: a credential gets its limit, then 429 with Retry-After; another credential is separate`, async () => {
    const { limits, settle } = await make();
    const team = `t-${randomBytes(3).toString('hex')}`;
    for (let i = 0; i < 3; i++) {
      assert.equal(limits.take(who(team, 'c1'), RUN), null, `request ${i + 1} allowed`);
      await settle();
    }
    const r = limits.take(who(team, 'c1'), RUN);
    assert.equal(r?.scope, 'credential');
    assert.equal(r?.limit, 3);
    assert.ok((r?.retryAfterS ?? 0) >= 1);
    assert.equal(limits.take(who(team, 'c2'), RUN), null, 'another credential has its own');
  });

  test(`${name}: the team limit caps all its credentials; a refused request takes nothing from the team`, async () => {
    const { limits, settle } = await make();
    const team = `t-${randomBytes(3).toString('hex')}`;
    let allowed = 0;
    for (let i = 0; i < 6; i++) {
      if (limits.take(who(team, 'c1'), RUN) === null) allowed++; // 3 allowed, 3 refused (credential)
      await settle();
    }
    assert.equal(allowed, 3);
    for (let i = 0; i < 3; i++) {
      if (limits.take(who(team, 'c2'), RUN) === null) allowed++;
      await settle();
    }
    assert.equal(allowed, 5, 'the team had 5: the refused ones did not count');
    assert.equal(limits.take(who(team, 'c3'), RUN)?.scope, 'team');
  });

  test(`${name}: the runtime and management surfaces are limited separately; no principal, no limit`, async () => {
    const { limits, settle } = await make();
    const team = `t-${randomBytes(3).toString('hex')}`;
    for (let i = 0; i < 3; i++) assert.equal(limits.take(who(team, 'c1'), RUN), null);
    await settle();
    for (let i = 0; i < 4; i++) assert.equal(limits.take(who(team, 'c1'), MGMT), null);
    await settle();
    assert.notEqual(limits.take(who(team, 'c1'), MGMT), null);
    assert.equal(limits.take(null, RUN), null);
  });
}

contract('in-memory buckets', async () => ({ limits: new MemoryRateLimits(settings, BASE), settle: async () => undefined }));

if (!url) test('shared window over Redis', { skip: 'REDIS_URL unset and no redis-server' }, () => undefined);
else {
  contract('shared window over Redis', () => shared(settings));

  test('three nodes on one Redis admit the team limit in total (within one sync interval of each other)', async () => {
    const s: RateLimitSettings = { runtimePerCredential: 0, runtimePerTeam: 30, managementPerCredential: 0, managementPerTeam: 0 };
    const a = await shared(s);
    const b = await shared(s, url, a.prefix);
    const c = await shared(s, url, a.prefix);
    const nodes = [a, b, c];
    let admitted = 0;
    for (let round = 0; round < 30; round++) {
      // each node takes one request (with no sync between them: the worst case within an interval)
      for (const [i, n] of nodes.entries()) if (n.limits.take(who('team-x', `c${i}`), RUN) === null) admitted++;
      await Promise.all(nodes.map((n) => n.settle()));
    }
    assert.ok(admitted >= 30 && admitted <= 32, `admitted ${admitted} of 90 with a cluster-wide limit of 30`);
    const refusal = a.limits.take(who('team-x', 'c9'), RUN);
    assert.equal(refusal?.scope, 'team');
    assert.ok((refusal?.retryAfterS ?? 0) >= 1);
  });

  test('a node that loses Redis keeps limiting on its own window (and says so once), which slides as the minute passes', async (t) => {
    const server = await startRedisServer();
    if (!server) return t.skip('redis-server not installed');
    try {
      // the node's clock drives its own window (Redis' TIME only matters while Redis is there)
      const clock = new FakeClock(Date.now());
      const n = await shared(settings, server.url, undefined, clock);
      const team = 'team-y';
      assert.equal(n.limits.take(who(team, 'c1'), RUN), null);
      await n.settle();
      await server.stop();
      assert.equal(n.limits.take(who(team, 'c1'), RUN), null);
      await n.settle();
      await n.settle();
      assert.equal(n.errors.length, 1, 'the outage is reported once');
      assert.equal(n.limits.take(who(team, 'c1'), RUN), null);
      await n.settle();
      assert.equal(n.limits.take(who(team, 'c1'), RUN)?.scope, 'credential', 'still limited: 3 per credential');
      // fail open per node, not closed: a minute later (Redis still away) the credential's window has slid
      clock.advance(61_000);
      await n.settle();
      for (let i = 0; i < 3; i++) assert.equal(n.limits.take(who(team, 'c1'), RUN), null, `after a minute, request ${i + 1} allowed again`);
      assert.equal(n.limits.take(who(team, 'c1'), RUN)?.scope, 'credential', 'and limited again at 3');
      assert.equal(n.errors.length, 1, 'still reported once');
    } finally {
      await server.stop();
    }
  });
}
