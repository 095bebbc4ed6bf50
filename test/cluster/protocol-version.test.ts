// The cluster protocol version (issue 33, rolling upgrades), on real gRPC over loopback with the real
// ClusterRouter and an actor system behind the RemotingServer:
//  - Hello and every envelope carry protocol_version; the receiving node answers the Hello;
//  - a node of the first release (no protocol_version on the wire) is still served;
//  - a node refuses a peer it cannot speak to with one clear log line (however often it retries);
//  - a message added in a newer protocol is ignored by this node (its ask learns why), while the same
//    undecodable message from a peer of this node's own protocol is still an error.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { z } from 'zod';
import { LocalActorSystem } from '../../src/actors/runtime/system.js';
import { envelopeCodec, encodeError, decodeError } from '../../src/actors/runtime/envelope.js';
import { systemClock } from '../../src/shared/clock.js';
import { AppError } from '../../src/shared/errors.js';
import { createLogger } from '../../src/shared/logger.js';
import { PeerPool, RemotingServer, RemotePeer } from '../../src/cluster/remoting.js';
import { ClusterRouter } from '../../src/cluster/router.js';
import { PROTOCOL_VERSION } from '../../src/cluster/protocol-version.js';
import type { Frame, Frame__Output } from '../../src/gen/gantry/cluster/v1/Frame.js';
import type { ProtoGrpcType } from '../../src/gen/remoting.js';

const Msg = z.discriminatedUnion('type', [z.object({ type: z.literal('ping') })]);
interface P {
  echo: { msg: z.infer<typeof Msg>; replies: { ping: string } };
}
const codec = envelopeCodec<P>({ echo: Msg });
const errors = { encode: encodeError, decode: decodeError };

/** Log lines of the server under test, parsed. */
const lines: Array<Record<string, unknown>> = [];
const logger = createLogger(
  'debug',
  new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split('\n')) if (l.trim()) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  }),
);

async function serverNode(minPeerProtocol?: number): Promise<{ server: RemotingServer; address: string }> {
  const sys = new LocalActorSystem<P>(systemClock, createLogger('silent'));
  sys.register('echo', () => ({ receive: () => 'pong' }), { parse: (m) => Msg.parse(m) });
  systems.push(sys);
  const peers = new PeerPool({ selfMember: () => 'server', viewVersion: () => 1, errors, logger });
  const router = new ClusterRouter<P>({ system: sys, codec, peers, ownerOf: () => null, logger });
  router.install();
  const server = new RemotingServer({ host: '127.0.0.1', port: 0, handler: router.inbound, errors, logger, selfMember: () => 'server-member', ...(minPeerProtocol ? { minPeerProtocol } : {}) });
  const port = await server.start();
  servers.push(server);
  return { server, address: `127.0.0.1:${port}` };
}
const servers: RemotingServer[] = [];
const systems: Array<LocalActorSystem<P>> = [];
after(async () => {
  for (const s of servers) await s.stop();
  for (const s of systems) await s.shutdown();
});

/** A raw Deliver stream: what a node of another release puts on the wire. */
function rawStream(address: string): { call: grpc.ClientDuplexStream<Frame, Frame__Output>; frames: Frame__Output[]; ended: Promise<grpc.StatusObject | Error> } {
  const def = protoLoader.loadSync(fileURLToPath(new URL('../../proto/cluster/v1/remoting.proto', import.meta.url)), {
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: true,
    oneofs: true,
    includeDirs: [fileURLToPath(new URL('../../proto', import.meta.url))],
  });
  const proto = grpc.loadPackageDefinition(def) as unknown as ProtoGrpcType;
  const client = new proto.gantry.cluster.v1.Remoting(address, grpc.credentials.createInsecure());
  const call = client.Deliver();
  const frames: Frame__Output[] = [];
  call.on('data', (f: Frame__Output) => frames.push(f));
  const ended = new Promise<grpc.StatusObject | Error>((resolve) => {
    call.on('status', (s: grpc.StatusObject) => resolve(s));
    call.on('error', (e: Error) => resolve(e));
  });
  after(() => {
    call.cancel();
    client.close();
  });
  return { call, frames, ended };
}

async function until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const ask = (type: string, reply: string): string => JSON.stringify({ target: { kind: 'echo', id: 'e1' }, msg: { type }, reply });

test('Hello is answered with this node\'s protocol; a first-release peer (no version on the wire) is served', async () => {
  const { address, server } = await serverNode();
  const old = rawStream(address);
  // protocol 1's frames: no protocol_version in the Hello nor in the envelope
  old.call.write({ hello: { member_id: 'old-node', view_version: 1 } });
  old.call.write({ envelope: { json: ask('ping', 'r1'), hops: 0, view_version: 1 } });
  await until(() => old.frames.some((f) => f.reply?.reply_id === 'r1'), 'the reply to the old node');
  const hello = old.frames.find((f) => f.hello)?.hello;
  assert.equal(hello?.protocol_version, PROTOCOL_VERSION);
  assert.equal(hello?.member_id, 'server-member');
  assert.equal(JSON.parse(old.frames.find((f) => f.reply)?.reply?.ok_json ?? 'null'), 'pong');
  assert.equal(server.fromOlder, 1, 'counted as served for a node of an older protocol');

  // this release's client learns the server's protocol from the answering Hello
  const peer = new RemotePeer('server', address, { selfMember: () => 'me', viewVersion: () => 1, errors, logger });
  assert.equal(await peer.ask(ask('ping', 'r2'), 'r2', 0, Date.now() + 5000, 'ping'), 'pong');
  assert.equal(peer.peerProtocol, PROTOCOL_VERSION);
  peer.close();
});

test('a node refuses a peer it cannot speak to, with one log line however often the peer retries', async () => {
  const { address } = await serverNode(PROTOCOL_VERSION + 1);
  lines.length = 0;
  const peer = new RemotePeer('server', address, { selfMember: () => 'too-old', viewVersion: () => 1, errors, logger: createLogger('silent') });
  for (let i = 0; i < 3; i++) {
    await assert.rejects(peer.ask(ask('ping', `x${i}`), `x${i}`, 0, Date.now() + 5000, 'ping'), (e: unknown) => {
      assert.ok(e instanceof AppError);
      assert.equal(e.kind, 'unavailable');
      assert.match(e.message, new RegExp(`cluster protocol ${PROTOCOL_VERSION} is not supported`));
      return true;
    });
  }
  const refusals = lines.filter((l) => typeof l.msg === 'string' && l.msg.startsWith('remoting: refusing node too-old'));
  assert.equal(refusals.length, 1, JSON.stringify(lines));
  assert.equal(refusals[0]?.level, 'error');
  assert.equal(refusals[0]?.peer_protocol, PROTOCOL_VERSION);
  peer.close();
});

test('a message added in a newer protocol is ignored (the ask learns why); the same from this protocol is an error', async () => {
  const { server, address } = await serverNode();
  lines.length = 0;
  const newer = rawStream(address);
  newer.call.write({ hello: { member_id: 'newer-node', view_version: 1, protocol_version: PROTOCOL_VERSION + 1 } });
  newer.call.write({ envelope: { json: ask('future_message', 'n1'), hops: 0, view_version: 1, protocol_version: PROTOCOL_VERSION + 1 } });
  // and the stream keeps working for what this node knows
  newer.call.write({ envelope: { json: ask('ping', 'n2'), hops: 0, view_version: 1, protocol_version: PROTOCOL_VERSION + 1 } });
  await until(() => newer.frames.filter((f) => f.reply).length === 2, 'both replies');
  const r1 = newer.frames.find((f) => f.reply?.reply_id === 'n1')?.reply;
  const err = decodeError(r1?.error_json ?? '');
  assert.equal(err.code, 'unsupported_message');
  assert.equal(JSON.parse(newer.frames.find((f) => f.reply?.reply_id === 'n2')?.reply?.ok_json ?? 'null'), 'pong');
  assert.equal(server.ignoredNewer, 1);
  assert.equal(lines.filter((l) => l.msg === 'remoting: envelope rejected').length, 0, 'not logged as a rejection');

  const same = rawStream(address);
  same.call.write({ hello: { member_id: 'same-node', view_version: 1, protocol_version: PROTOCOL_VERSION } });
  same.call.write({ envelope: { json: ask('future_message', 's1'), hops: 0, view_version: 1, protocol_version: PROTOCOL_VERSION } });
  await until(() => same.frames.some((f) => f.reply?.reply_id === 's1'), 'the error reply');
  assert.notEqual(decodeError(same.frames.find((f) => f.reply)?.reply?.error_json ?? '').code, 'unsupported_message');
  assert.equal(lines.filter((l) => l.msg === 'remoting: envelope rejected').length, 1);
  assert.equal(server.ignoredNewer, 1);
});
