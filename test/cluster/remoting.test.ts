// Remoting and the router on real gRPC over loopback: three LocalActorSystems ("nodes") in one
// process, each with its RemotingServer, PeerPool and ClusterRouter, and a static placement.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { LocalActorSystem, type ActorContext } from '../../src/actors/runtime/system.js';
import { envelopeCodec, encodeError, decodeError } from '../../src/actors/runtime/envelope.js';
import type { ActorRef } from '../../src/actors/ports.js';
import { systemClock } from '../../src/shared/clock.js';
import { AppError } from '../../src/shared/errors.js';
import { createLogger } from '../../src/shared/logger.js';
import { PeerPool, RemotingServer } from '../../src/cluster/remoting.js';
import { ClusterRouter, MAX_HOPS } from '../../src/cluster/router.js';
import type { Member } from '../../src/cluster/ports.js';

const CounterMsg = z.discriminatedUnion('type', [
  z.object({ type: z.literal('inc'), by: z.number().int() }),
  z.object({ type: z.literal('get') }),
  z.object({ type: z.literal('refuse') }),
  z.object({ type: z.literal('hang') }),
  z.object({ type: z.literal('where') }),
]);
type CounterMsg = z.infer<typeof CounterMsg>;
interface P {
  counter: { msg: CounterMsg; replies: { inc: number; get: number; refuse: number; hang: number; where: string } };
}

const logger = createLogger('silent');
const codec = envelopeCodec<P>({ counter: CounterMsg });
const errors = { encode: encodeError, decode: decodeError };

interface TestNode {
  name: string;
  member: Member;
  sys: LocalActorSystem<P>;
  server: RemotingServer;
  peers: PeerPool;
  router: ClusterRouter<P>;
  /** ref id -> owning node name, as this node's view says */
  view: Map<string, string>;
}

const nodes: TestNode[] = [];
after(async () => {
  for (const n of nodes) {
    n.peers.closeAll();
    await n.server.stop();
    await n.sys.shutdown();
  }
});

async function node(name: string): Promise<TestNode> {
  const sys = new LocalActorSystem<P>(systemClock, logger);
  sys.register(
    'counter',
    (_id: string, ctx: ActorContext<P, 'counter'>) => {
      let n = 0;
      return {
        receive(m: CounterMsg) {
          switch (m.type) {
            case 'inc':
              n += m.by;
              return n;
            case 'get':
              return n;
            case 'refuse':
              throw new AppError('conflict', 'counter_refused', 'this counter refuses', { retryAfterS: 3 });
            case 'hang':
              ctx.deferReply();
              return undefined;
            case 'where':
              return name;
          }
        },
      };
    },
    { parse: (m) => CounterMsg.parse(m) },
  );
  const t = { name, sys, view: new Map<string, string>() } as TestNode;
  const ownerOf = (ref: ActorRef<'counter'>): Member | null => {
    const owner = t.view.get(ref.id) ?? name;
    if (owner === name) return null;
    return nodes.find((x) => x.name === owner)?.member ?? null;
  };
  t.peers = new PeerPool({ selfMember: () => name, viewVersion: () => 1, errors, logger });
  t.router = new ClusterRouter<P>({ system: sys, codec, peers: t.peers, ownerOf, logger });
  t.server = new RemotingServer({ host: '127.0.0.1', port: 0, handler: t.router.inbound, errors, logger });
  const port = await t.server.start();
  t.member = { memberId: name, nodeId: name, address: `127.0.0.1:${port}`, startedAt: Date.now() };
  t.router.install();
  nodes.push(t);
  return t;
}

const [a, b, c] = [await node('a'), await node('b'), await node('c')];
const route = (id: string, owner: string): void => {
  for (const n of nodes) n.view.set(id, owner);
};

test('tell and ask reach the owner on another node; tells from one node keep their order', async () => {
  route('k1', 'b');
  for (let i = 0; i < 500; i++) a.sys.tell({ kind: 'counter', id: 'k1' }, { type: 'inc', by: 1 });
  assert.equal(await a.sys.ask({ kind: 'counter', id: 'k1' }, { type: 'get' }), 500, 'every tell arrived before the ask (one ordered stream)');
  assert.equal(await a.sys.ask({ kind: 'counter', id: 'k1' }, { type: 'where' }), 'b');
  assert.equal(b.sys.isActive({ kind: 'counter', id: 'k1' }), true);
  assert.equal(a.sys.isActive({ kind: 'counter', id: 'k1' }), false);
});

test('an AppError crosses the wire through the one error codec (kind, code, message, retry_after_s)', async () => {
  route('k2', 'c');
  await assert.rejects(a.sys.ask({ kind: 'counter', id: 'k2' }, { type: 'refuse' }), (e: unknown) => {
    assert.ok(e instanceof AppError);
    assert.equal(e.kind, 'conflict');
    assert.equal(e.code, 'counter_refused');
    assert.equal(e.retryAfterS, 3);
    return true;
  });
});

test('the deadline crosses the wire: an ask the remote actor never answers fails at its deadline', async () => {
  route('k3', 'b');
  const t0 = Date.now();
  await assert.rejects(a.sys.ask({ kind: 'counter', id: 'k3' }, { type: 'hang' }, { deadlineMs: Date.now() + 300 }), (e: unknown) => e instanceof AppError && e.kind === 'unavailable');
  const took = Date.now() - t0;
  assert.ok(took >= 280 && took < 3000, `failed at the deadline (${took} ms)`);
});

test('a message reaching a node that no longer owns the target is re-routed with that node\'s newer view', async () => {
  // a still thinks b owns k4; b (newer view) knows c does
  for (const n of nodes) n.view.set('k4', 'c');
  a.view.set('k4', 'b');
  const before = b.router.stats.rerouted;
  assert.equal(await a.sys.ask({ kind: 'counter', id: 'k4' }, { type: 'where' }), 'c');
  a.sys.tell({ kind: 'counter', id: 'k4' }, { type: 'inc', by: 5 });
  // same path (a -> b -> c, ordered streams): the ask sees the tell
  assert.equal(await a.sys.ask({ kind: 'counter', id: 'k4' }, { type: 'get' }), 5);
  assert.ok(b.router.stats.rerouted >= 2, 'b forwarded the ask and the tell');
  assert.ok(b.router.stats.rerouted > before);
});

test('views that disagree cannot bounce a message forever: after MAX_HOPS it is delivered where it is', async () => {
  // a -> b -> c -> b ...: every node thinks the next one owns it
  a.view.set('k5', 'b');
  b.view.set('k5', 'c');
  c.view.set('k5', 'b');
  const where = await a.sys.ask({ kind: 'counter', id: 'k5' }, { type: 'where' });
  assert.ok(['b', 'c'].includes(where));
  assert.ok(MAX_HOPS >= 1);
});

test('an envelope that does not decode is refused with the codec\'s error (the message never reaches an actor)', async () => {
  route('k6', 'b');
  const peer = a.peers.get(b.member.memberId, b.member.address);
  await assert.rejects(peer.ask(JSON.stringify({ target: { kind: 'counter', id: 'k6' }, msg: { type: 'inc', by: 'x' }, reply: 'r1' }), 'r1', 0, Date.now() + 2000, 'counter/k6'), (e: unknown) => e instanceof AppError && e.code === 'invalid_message');
  await assert.rejects(peer.ask(JSON.stringify({ target: { kind: 'nope', id: 'k6' }, msg: {}, reply: 'r2' }), 'r2', 0, Date.now() + 2000, 'nope/k6'), (e: unknown) => e instanceof AppError && e.code === 'unknown_actor_kind');
  assert.equal(await a.sys.ask({ kind: 'counter', id: 'k6' }, { type: 'get' }), 0);
});

test('a peer that is down fails asks at once with a retryable unavailable error', async () => {
  const d = await node('d');
  route('k7', 'd');
  assert.equal(await a.sys.ask({ kind: 'counter', id: 'k7' }, { type: 'where' }), 'd');
  await d.server.stop();
  await assert.rejects(a.sys.ask({ kind: 'counter', id: 'k7' }, { type: 'get' }, { deadlineMs: Date.now() + 5000 }), (e: unknown) => e instanceof AppError && e.kind === 'unavailable');
});
