// Traces across nodes: a remoting envelope carries the sender's W3C traceparent, so the delivery on
// the receiving node is a span in the sender's trace (two LocalActorSystems with their real
// RemotingServer/PeerPool/ClusterRouter over gRPC on loopback, one in-memory span exporter).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import { LocalActorSystem } from '../../src/actors/runtime/system.js';
import { envelopeCodec, encodeError, decodeError } from '../../src/actors/runtime/envelope.js';
import type { ActorRef } from '../../src/actors/ports.js';
import { systemClock } from '../../src/shared/clock.js';
import { createLogger } from '../../src/shared/logger.js';
import { PeerPool, RemotingServer } from '../../src/cluster/remoting.js';
import { ClusterRouter } from '../../src/cluster/router.js';
import type { Member } from '../../src/cluster/ports.js';
import { startTracing } from '../../src/shared/tracing-sdk.js';
import { endSpan, startSpan, withActive } from '../../src/shared/tracing.js';

const Msg = z.discriminatedUnion('type', [z.object({ type: z.literal('where') })]);
type Msg = z.infer<typeof Msg>;
interface P {
  echo: { msg: Msg; replies: { where: string } };
}
const logger = createLogger('silent');
const codec = envelopeCodec<P>({ echo: Msg });
const errors = { encode: encodeError, decode: decodeError };
const exporter = new InMemorySpanExporter();
const tracing = startTracing({ serviceName: 'remoting-test', exporter });

interface N {
  name: string;
  member: Member;
  sys: LocalActorSystem<P>;
  server: RemotingServer;
  peers: PeerPool;
}
const nodes: N[] = [];
after(async () => {
  for (const n of nodes) {
    n.peers.closeAll();
    await n.server.stop();
    await n.sys.shutdown();
  }
  await tracing.shutdown();
});

async function node(name: string, owner: string): Promise<N> {
  const sys = new LocalActorSystem<P>(systemClock, logger);
  sys.register('echo', () => ({ receive: () => name }), { parse: (m) => Msg.parse(m) });
  const ownerOf = (_ref: ActorRef<'echo'>): Member | null => (owner === name ? null : (nodes.find((x) => x.name === owner)?.member ?? null));
  const peers = new PeerPool({ selfMember: () => name, viewVersion: () => 1, errors, logger });
  const router = new ClusterRouter<P>({ system: sys, codec, peers, ownerOf, logger });
  const server = new RemotingServer({ host: '127.0.0.1', port: 0, handler: router.inbound, errors, logger });
  const port = await server.start();
  router.install();
  const n: N = { name, sys, server, peers, member: { memberId: name, nodeId: name, address: `127.0.0.1:${port}`, startedAt: Date.now() } };
  nodes.push(n);
  return n;
}

test('an ask to an actor on another node: the delivery span there is a child of the caller\'s span', async () => {
  const a = await node('a', 'b');
  await node('b', 'b');
  const caller = startSpan('caller');
  assert.ok(caller);
  const where = await withActive(caller, () => a.sys.ask({ kind: 'echo', id: 'x' }, { type: 'where' }));
  endSpan(caller);
  assert.equal(where, 'b', 'answered on node b');
  const delivered = exporter.getFinishedSpans().filter((s) => s.name === 'remoting deliver');
  assert.equal(delivered.length, 1);
  const d = delivered[0];
  assert.equal(d?.spanContext().traceId, caller.spanContext().traceId, 'same trace on the receiving node');
  assert.equal(d?.parentSpanContext?.spanId, caller.spanContext().spanId, 'parented on the sender\'s active span');
  assert.equal(d?.attributes['gantry.cluster.from'], 'a');

  // without an active span nothing is carried: the delivery starts its own trace
  await a.sys.ask({ kind: 'echo', id: 'y' }, { type: 'where' });
  const second = exporter.getFinishedSpans().filter((s) => s.name === 'remoting deliver')[1];
  assert.equal(second?.parentSpanContext, undefined);
});
