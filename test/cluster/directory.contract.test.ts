// The agent directory (which member holds each agent's stream), in memory and over Redis: claims
// with growing epochs, release only by the holder, replicas on other nodes, re-assert after data loss.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { InMemoryAgentDirectory, InMemoryDirectoryTable, RedisAgentDirectory, type AgentDirectoryPort } from '../../src/cluster/directory.js';
import { connectRedis, type RedisConnection } from '../../src/cluster/redis.js';
import { createLogger } from '../../src/shared/logger.js';
import { waitFor } from '../agents/helpers.js';

const url = process.env.REDIS_URL;
const logger = createLogger('silent');
const conns: RedisConnection[] = [];
const dirs: AgentDirectoryPort[] = [];
after(async () => {
  for (const d of dirs) await d.stop();
  for (const c of conns) await c.close();
});

type Make = () => Promise<{ a: AgentDirectoryPort; b: AgentDirectoryPort; settle: () => Promise<void> }>;

function contract(name: string, make: Make): void {
  test(`${name}: a claim is seen with its member; a later claim elsewhere wins with a higher epoch`, async () => {
    const { a, b, settle } = await make();
    const e1 = await a.claim('agent-1');
    await settle();
    assert.equal(b.lookup('agent-1')?.memberId, a.lookup('agent-1')?.memberId);
    const e2 = await b.claim('agent-1');
    assert.ok(e2 > e1, 'epochs grow');
    await settle();
    assert.equal(a.lookup('agent-1')?.epoch, e2);
    assert.equal(a.lookup('agent-1')?.memberId, b.lookup('agent-1')?.memberId);
  });

  test(`${name}: only the holder's release removes the entry`, async () => {
    const { a, b, settle } = await make();
    await a.claim('agent-2');
    await b.claim('agent-2');
    await settle();
    await a.release('agent-2'); // a no longer holds it
    await settle();
    assert.ok(b.lookup('agent-2'));
    await b.release('agent-2');
    await settle();
    assert.equal(a.lookup('agent-2'), null);
    assert.equal(b.lookup('agent-2'), null);
  });

  test(`${name}: re-assert claims what is missing and leaves another member's entry alone`, async () => {
    const { a, b, settle } = await make();
    await b.claim('agent-3');
    await settle();
    await a.reassert(['agent-4']);
    await settle();
    assert.ok(a.lookup('agent-4'));
    assert.ok(b.lookup('agent-4'));
    assert.equal(a.lookup('agent-3')?.memberId, b.lookup('agent-3')?.memberId);
  });
}

contract('in-memory directory', async () => {
  const table = new InMemoryDirectoryTable();
  return { a: new InMemoryAgentDirectory('n1/a', table), b: new InMemoryAgentDirectory('n2/b', table), settle: async () => undefined };
});

if (!url) test('redis directory', { skip: 'REDIS_URL unset and no redis-server' }, () => undefined);
else {
  const pair = async (): Promise<{ a: RedisAgentDirectory; b: RedisAgentDirectory; settle: () => Promise<void>; prefix: string }> => {
    const prefix = `gantry-test:${process.pid}:${randomBytes(4).toString('hex')}:`;
    const make = async (member: string): Promise<RedisAgentDirectory> => {
      const conn = await connectRedis(url, prefix, logger);
      conns.push(conn);
      const d = new RedisAgentDirectory(conn, () => member, logger);
      await d.start();
      dirs.push(d);
      return d;
    };
    const a = await make('n1/a');
    const b = await make('n2/b');
    // replicas follow pub/sub: settle = a round trip through Redis for both subscribers
    const settle = async (): Promise<void> => {
      await new Promise((r) => setTimeout(r, 50));
    };
    return { a, b, settle, prefix };
  };
  contract('redis directory', pair);

  test('redis directory: after Redis lost the entries, re-assert restores them and the replicas follow', async () => {
    const { a, b, prefix } = await pair();
    await a.claim('agent-9');
    await waitFor('b sees it', () => b.lookup('agent-9')?.memberId === 'n1/a', 2000, 10);
    await (conns[0] as RedisConnection).client.del(`${prefix}agent-dir`);
    await a.reassert(['agent-9']);
    await waitFor('b sees the new claim', () => (b.lookup('agent-9')?.epoch ?? 0) > 1, 2000, 10);
    assert.equal(b.lookup('agent-9')?.memberId, 'n1/a');
  });
}
