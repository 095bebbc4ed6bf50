// One contract for the task event bus, against the in-memory bus and the Redis bus (two "nodes" on
// one Redis prefix), plus what only the Redis bus does: other nodes' events with their origin, and a
// lost message noticed as a gap (so SSE streams re-read PostgreSQL).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { LocalEventBus } from '../../src/cluster/event-bus.js';
import { RedisEventBus } from '../../src/cluster/event-bus-redis.js';
import { connectRedis, type RedisConnection } from '../../src/cluster/redis.js';
import { createLogger } from '../../src/shared/logger.js';
import { waitFor } from '../agents/helpers.js';
import type { TaskEvent } from '../../src/actors/ports.js';

const url = process.env.REDIS_URL;
const logger = createLogger('silent');
const conns: RedisConnection[] = [];
const buses: RedisEventBus[] = [];
after(async () => {
  for (const b of buses) await b.stop();
  for (const c of conns) await c.close();
});

let nextId = 1;
const ev = (taskId: string, type: TaskEvent['type'] = 'status'): TaskEvent => ({ id: nextId++, taskId, teamId: 'team-1', type, data: { task_id: taskId, status: 'running' }, createdAt: Date.now() });

/** `a` publishes; `b` is where other nodes' listeners are (the same bus for the in-memory one). */
type Make = () => Promise<{ a: LocalEventBus; b: LocalEventBus }>;

function contract(name: string, make: Make): void {
  test(`${name}: the publisher's own listeners get each event synchronously, per task and for all`, async () => {
    const { a } = await make();
    const perTask: number[] = [];
    const all: number[] = [];
    const offT = a.subscribeTask('t1', (e) => perTask.push(e.id));
    const offA = a.subscribeAll((e, origin) => {
      all.push(e.id);
      assert.ok(a.isLocal(origin), 'own events are local');
    });
    const e1 = ev('t1');
    const e2 = ev('t2');
    a.publish([e1, e2]);
    assert.deepEqual(perTask, [e1.id]);
    assert.deepEqual(all, [e1.id, e2.id]);
    offT();
    offA();
    a.publish([ev('t1')]);
    assert.equal(perTask.length, 1, 'nothing after unsubscribe');
  });

  test(`${name}: listeners elsewhere get every event once, in the publisher's order; a throwing listener harms no other`, async () => {
    const { a, b } = await make();
    const got: number[] = [];
    b.subscribeTask('t9', () => {
      throw new Error('listener bug');
    });
    b.subscribeTask('t9', (e) => got.push(e.id));
    const sent = Array.from({ length: 50 }, () => ev('t9'));
    for (let i = 0; i < sent.length; i += 5) a.publish(sent.slice(i, i + 5));
    await waitFor('all 50 delivered', () => got.length >= 50, 10_000, 5);
    assert.deepEqual(got, sent.map((e) => e.id));
  });
}

contract('in-memory bus', async () => {
  const bus = new LocalEventBus();
  return { a: bus, b: bus };
});

async function redisBus(prefix: string): Promise<RedisEventBus> {
  const conn = await connectRedis(url as string, prefix, logger);
  conns.push(conn);
  const bus = new RedisEventBus(conn, `p-${randomBytes(3).toString('hex')}`, logger);
  await bus.start();
  buses.push(bus);
  return bus;
}

if (!url) test('redis bus', { skip: 'REDIS_URL unset and no redis-server' }, () => undefined);
else {
  const pair = async (): Promise<{ a: RedisEventBus; b: RedisEventBus }> => {
    const prefix = `gantry-test:${process.pid}:${randomBytes(4).toString('hex')}:`;
    return { a: await redisBus(prefix), b: await redisBus(prefix) };
  };
  contract('redis bus', pair);

  test('redis bus: another node\'s events carry its origin (not local); the publisher does not get its own twice', async () => {
    const { a, b } = await pair();
    const onB: Array<[number, string | undefined]> = [];
    const onA: number[] = [];
    b.subscribeAll((e, origin) => onB.push([e.id, origin]));
    a.subscribeAll((e) => onA.push(e.id));
    const e = ev('t3');
    a.publish([e]);
    await waitFor('delivered on b', () => onB.length === 1, 5000, 5);
    assert.equal(onB[0]?.[1], a.origin);
    assert.equal(b.isLocal(onB[0]?.[1]), false);
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(onA, [e.id], 'once on the publisher');
  });

  test('redis bus: a lost message (a publish that never happened) is noticed as a gap before the next event is delivered', async () => {
    const { a, b } = await pair();
    const order: string[] = [];
    b.onGap(() => order.push('gap'));
    b.subscribeAll((e) => order.push(`event ${e.id}`));
    const e1 = ev('t4');
    a.publish([e1]);
    await waitFor('first delivered', () => order.length === 1, 5000, 5);
    a.dropPublishes = true; // committed, never published (the node died in between)
    a.publish([ev('t4')]);
    a.dropPublishes = false;
    const e3 = ev('t4');
    a.publish([e3]);
    await waitFor('third delivered', () => order.includes(`event ${e3.id}`), 5000, 5);
    assert.deepEqual(order, [`event ${e1.id}`, 'gap', `event ${e3.id}`], 'the gap is signalled before the newer event');
  });

  test('redis bus: a malformed message is dropped, nothing crashes', async () => {
    const { b } = await pair();
    const got: number[] = [];
    b.subscribeAll((e) => got.push(e.id));
    const conn = conns[conns.length - 1] as RedisConnection;
    await conn.client.publish(`${conn.prefix}task-events`, '{"o":"x","s":1,"e":[{"id":"nope"}]}');
    await conn.client.publish(`${conn.prefix}task-events`, 'not json');
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(got, []);
  });
}
