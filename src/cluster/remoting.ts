/**
 * Node-to-node remoting over gRPC (proto/cluster/v1/remoting.proto): one long-lived bidi stream per
 * (sending node, receiving node) carries envelopes one way and the replies to asks the other way.
 * The payloads are the typed envelope/error codecs' JSON; this module moves strings and correlates
 * replies, the router (router.ts) decides where an envelope goes and decodes it.
 *
 * Delivery is at most once: when a stream breaks, the asks waiting on it fail with a retryable
 * `unavailable` error and tells in flight may be lost; the actors' own timers and PostgreSQL-based
 * recovery cover that, exactly as they cover a node crash.
 */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { randomUUID } from 'node:crypto';
import type { ProtoGrpcType } from '../gen/remoting.js';
import type { Frame, Frame__Output } from '../gen/gantry/cluster/v1/Frame.js';
import type { RemotingClient } from '../gen/gantry/cluster/v1/Remoting.js';
import { AppError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { endSpan, SpanKind, startSpan, traceparentOf, tracingEnabled, withActive } from '../shared/tracing.js';
import type { TunnelChunk, TunnelChunk__Output } from '../gen/gantry/cluster/v1/TunnelChunk.js';
import type { OpenTunnel, TunnelChannel, TunnelHandlers, TunnelOpenInfo } from '../gateway/tunnel.js';
import { openRemoteTunnel, serveTunnel } from './tunnel.js';
import { MIN_PEER_PROTOCOL, PROTOCOL_VERSION, peerProtocol } from './protocol-version.js';

const PROTO_PATH = fileURLToPath(new URL('../../proto/cluster/v1/remoting.proto', import.meta.url));
/** The flags of `npm run gen:proto`. */
const LOADER_OPTIONS: protoLoader.Options = { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true, includeDirs: [fileURLToPath(new URL('../../proto', import.meta.url))] };

let proto: ProtoGrpcType | null = null;
function loadProto(): ProtoGrpcType {
  proto ??= grpc.loadPackageDefinition(protoLoader.loadSync(PROTO_PATH, LOADER_OPTIONS)) as unknown as ProtoGrpcType;
  return proto;
}

/** An envelope as remoting hands it to the router. */
export interface InboundEnvelope {
  json: string;
  hops: number;
  viewVersion: number;
  fromMember: string;
}

/**
 * What the receiving side does with an envelope: null for a tell (nothing to answer), or the reply
 * id and a promise of the reply value (rejected with an AppError for an error reply).
 */
export type InboundHandler = (env: InboundEnvelope) => { replyId: string; result: Promise<unknown> } | null;

/** Error codec functions (the actors' one error codec), injected so that this module stays kind-agnostic. */
export interface ErrorCodec {
  encode(e: unknown): string;
  decode(json: string): AppError;
}

/** A message a newer peer sent that this version does not know (added after it): ignored. */
const unsupportedMessage = (v: number): AppError =>
  new AppError('unavailable', 'unsupported_message', `this node speaks cluster protocol ${PROTOCOL_VERSION} and does not know this message of protocol ${v}; retry on an upgraded node`, { retryAfterS: 1 });

const unreachable = (member: string, why: string): AppError => new AppError('unavailable', 'node_unreachable', `cluster node ${member} is unreachable (${why})`, { retryAfterS: 1 });

// ---------------------------------------------------------------------------------------------
// Server

export class RemotingServer {
  private server: grpc.Server | null = null;
  private readonly calls = new Set<grpc.ServerDuplexStream<Frame__Output, Frame>>();
  /** Envelopes received (metrics/tests). */
  received = 0;
  /** Envelopes of a newer protocol that this node could not decode and ignored (metrics/tests). */
  ignoredNewer = 0;
  /** Peers already named in a refusal line: (member, protocol) once each. */
  private readonly refusedLogged = new Set<string>();
  /** Envelopes delivered from peers of an older protocol (a rolling upgrade in progress). */
  fromOlder = 0;
  /** Older peers already named in an info line: (member, protocol) once each. */
  private readonly olderLogged = new Set<string>();
  constructor(
    /**
     * tunnelOpener: opens other nodes' forwarded gateway tunnels on this node's agent streams (none: refused).
     * selfMember: this node's member id, sent back in the answering Hello. minPeerProtocol: the oldest
     * protocol a caller may speak (default MIN_PEER_PROTOCOL; a test raises it to see the refusal).
     */
    private readonly o: { host: string; port: number; handler: InboundHandler; errors: ErrorCodec; logger: Logger; tunnelOpener?: OpenTunnel; selfMember?: () => string; minPeerProtocol?: number },
  ) {}

  async start(): Promise<number> {
    const server = new grpc.Server({ 'grpc.keepalive_time_ms': 10_000, 'grpc.keepalive_timeout_ms': 5_000, 'grpc.max_receive_message_length': 16 * 1024 * 1024 });
    server.addService(loadProto().gantry.cluster.v1.Remoting.service, {
      Deliver: (call: grpc.ServerDuplexStream<Frame__Output, Frame>) => this.onCall(call),
      Tunnel: (call: grpc.ServerDuplexStream<TunnelChunk__Output, TunnelChunk>) => serveTunnel(call, this.o.tunnelOpener ?? null, this.o.logger),
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync(`${this.o.host}:${this.o.port}`, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    this.server = server;
    return port;
  }

  private onCall(call: grpc.ServerDuplexStream<Frame__Output, Frame>): void {
    this.calls.add(call);
    let from = '?';
    let open = true;
    let peerVersion = 1;
    const done = (): void => {
      open = false;
      this.calls.delete(call);
    };
    call.on('error', done);
    call.on('close', done);
    call.on('end', () => {
      done();
      call.end();
    });
    call.on('data', (f: Frame__Output) => {
      if (f.hello) {
        from = f.hello.member_id;
        peerVersion = peerProtocol(f.hello.protocol_version);
        const min = this.o.minPeerProtocol ?? MIN_PEER_PROTOCOL;
        if (peerVersion < min) {
          // one clear line per (peer, version), then the stream ends with FAILED_PRECONDITION
          const key = `${from}/${peerVersion}`;
          if (!this.refusedLogged.has(key)) {
            this.refusedLogged.add(key);
            this.o.logger.error({ peer: from, peer_protocol: peerVersion, protocol: PROTOCOL_VERSION, min_peer_protocol: min }, `remoting: refusing node ${from}: it speaks cluster protocol ${peerVersion}, this node needs ${min} or newer (upgrade it; rolling from that release is not supported)`);
          }
          open = false;
          call.emit('error', { code: grpc.status.FAILED_PRECONDITION, details: `cluster protocol ${peerVersion} is not supported by this node (protocol ${PROTOCOL_VERSION}, oldest peer ${min})` });
          return;
        }
        call.write({ hello: { member_id: this.o.selfMember?.() ?? '', view_version: 0, protocol_version: PROTOCOL_VERSION } });
        return;
      }
      const e = f.envelope;
      if (!e) return;
      this.received++;
      let out: ReturnType<InboundHandler>;
      // tracing on: the delivery is a span in the sender's trace (the envelope's traceparent), and
      // what the handler starts (a local delivery, a forward) runs inside it
      const span = tracingEnabled() ? startSpan('remoting deliver', { kind: SpanKind.CONSUMER, parent: e.traceparent || null, attributes: { 'gantry.cluster.from': from, 'gantry.cluster.hops': e.hops } }) : null;
      try {
        out = withActive(span, () => this.o.handler({ json: e.json, hops: e.hops, viewVersion: e.view_version, fromMember: from }));
        endSpan(span);
      } catch (err) {
        endSpan(span, err);
        const replyId = replyIdOf(e.json);
        const sender = Math.max(peerVersion, peerProtocol(e.protocol_version));
        if (sender > PROTOCOL_VERSION) {
          // a message added after this node's version (rolling upgrade): ignored; its ask learns why
          this.ignoredNewer++;
          this.o.logger.debug({ from, peer_protocol: sender, err_message: (err as Error).message }, 'remoting: ignored a message of a newer protocol');
          if (replyId && open) call.write({ reply: { reply_id: replyId, error_json: this.o.errors.encode(unsupportedMessage(sender)) } });
          return;
        }
        // an undecodable envelope: its ask (if we can tell) gets the error, a tell is dropped
        this.o.logger.warn({ from, err_message: (err as Error).message }, 'remoting: envelope rejected');
        if (replyId && open) call.write({ reply: { reply_id: replyId, error_json: this.o.errors.encode(err) } });
        return;
      }
      if (peerVersion < PROTOCOL_VERSION) {
        // a rolling upgrade in progress: one line per (peer, version) that this node serves it
        this.fromOlder++;
        const key = `${from}/${peerVersion}`;
        if (!this.olderLogged.has(key)) {
          this.olderLogged.add(key);
          this.o.logger.info({ peer: from, peer_protocol: peerVersion, protocol: PROTOCOL_VERSION }, 'remoting: serving a node of an older cluster protocol');
        }
      }
      if (!out) return;
      const { replyId, result } = out;
      result.then(
        (v) => {
          if (open) call.write({ reply: { reply_id: replyId, ok_json: JSON.stringify(v ?? null) } });
        },
        (err: unknown) => {
          if (open) call.write({ reply: { reply_id: replyId, error_json: this.o.errors.encode(err) } });
        },
      );
    });
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = null;
    if (!s) return;
    for (const c of this.calls) c.end();
    await new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        s.forceShutdown();
        resolve();
      }, 2000);
      s.tryShutdown(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }
}

function replyIdOf(json: string): string | null {
  try {
    const v = JSON.parse(json) as { reply?: unknown };
    return typeof v.reply === 'string' ? v.reply : null;
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// Client side: one peer per remote member

interface PendingAsk {
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
  timer: NodeJS.Timeout;
}

/** The stream to one remote member; reconnects lazily on the next send after a failure. */
export class RemotePeer {
  private client: RemotingClient | null = null;
  private call: grpc.ClientDuplexStream<Frame, Frame__Output> | null = null;
  private readonly pending = new Map<string, PendingAsk>();
  private closed = false;
  /** Envelopes sent (metrics/tests). */
  sent = 0;
  /** The protocol the peer answered with (1 until its Hello arrives; a first-release node sends none). */
  peerProtocol = 1;
  private olderLogged = false;

  constructor(
    readonly memberId: string,
    readonly address: string,
    private readonly o: { selfMember: () => string; viewVersion: () => number; errors: ErrorCodec; logger: Logger },
  ) {}

  /** A gateway tunnel stream to the agent whose stream this peer holds. */
  openTunnel(agentId: string, teamId: string, open: TunnelOpenInfo, h: TunnelHandlers): TunnelChannel | null {
    if (this.closed) return null;
    return openRemoteTunnel(this.clientOf(), agentId, teamId, open, h);
  }

  private clientOf(): RemotingClient {
    this.client ??= new (loadProto().gantry.cluster.v1.Remoting)(this.address, grpc.credentials.createInsecure(), {
      'grpc.keepalive_time_ms': 10_000,
      'grpc.keepalive_timeout_ms': 5_000,
      'grpc.max_receive_message_length': 16 * 1024 * 1024,
      'grpc.initial_reconnect_backoff_ms': 200,
      'grpc.max_reconnect_backoff_ms': 2000,
    });
    return this.client;
  }

  private stream(): grpc.ClientDuplexStream<Frame, Frame__Output> {
    if (this.call) return this.call;
    if (this.closed) throw unreachable(this.memberId, 'closed');
    const call = this.clientOf().Deliver();
    this.call = call;
    const broken = (why: string): void => {
      if (this.call !== call) return;
      this.call = null;
      this.failPending(why);
    };
    call.on('data', (f: Frame__Output) => {
      if (f.hello) {
        this.peerProtocol = peerProtocol(f.hello.protocol_version);
        return;
      }
      const r = f.reply;
      if (!r) return;
      const p = this.pending.get(r.reply_id);
      if (!p) return;
      this.pending.delete(r.reply_id);
      clearTimeout(p.timer);
      if (this.peerProtocol < PROTOCOL_VERSION && !this.olderLogged) {
        // an older node answered (no Hello back): a rolling upgrade in progress, once per stream owner
        this.olderLogged = true;
        this.o.logger.info({ peer: this.memberId, peer_protocol: this.peerProtocol, protocol: PROTOCOL_VERSION }, 'remoting: a node of an older cluster protocol answered');
      }
      if (r.result === 'error_json') p.reject(this.o.errors.decode(r.error_json ?? ''));
      else {
        let v: unknown;
        try {
          v = JSON.parse(r.ok_json ?? 'null') as unknown;
        } catch {
          p.reject(new AppError('internal', 'internal_error', 'bad reply from a cluster node'));
          return;
        }
        p.resolve(v);
      }
    });
    call.on('error', (e: Error) => broken(e.message));
    call.on('end', () => broken('stream ended'));
    call.write({ hello: { member_id: this.o.selfMember(), view_version: this.o.viewVersion(), protocol_version: PROTOCOL_VERSION } });
    return call;
  }

  private failPending(why: string): void {
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      clearTimeout(p.timer);
      p.reject(unreachable(this.memberId, why));
    }
  }

  /** A tell: fire and forget (at most once). */
  tell(json: string, hops: number): void {
    try {
      this.stream().write({ envelope: { json, hops, view_version: this.o.viewVersion(), traceparent: traceparentOf() ?? '', protocol_version: PROTOCOL_VERSION } });
      this.sent++;
    } catch (e) {
      this.o.logger.debug({ member: this.memberId, err_message: (e as Error).message }, 'remoting: tell dropped');
    }
  }

  /**
   * An ask: `json` is an envelope whose `reply` is `replyId`. Resolves with the reply value; rejects
   * with the remote AppError, or `unavailable` when the deadline passes or the stream breaks.
   */
  ask(json: string, replyId: string, hops: number, deadlineMs: number, what: string): Promise<unknown> {
    return new Promise((resolve, reject) => {
      let call: grpc.ClientDuplexStream<Frame, Frame__Output>;
      try {
        call = this.stream();
      } catch (e) {
        reject(e);
        return;
      }
      const timer = setTimeout(
        () => {
          if (this.pending.delete(replyId)) reject(new AppError('unavailable', 'actor_timeout', `${what} did not answer in time`, { retryAfterS: 1 }));
        },
        Math.max(0, deadlineMs - Date.now()),
      );
      this.pending.set(replyId, { resolve, reject, timer });
      call.write({ envelope: { json, hops, view_version: this.o.viewVersion(), traceparent: traceparentOf() ?? '', protocol_version: PROTOCOL_VERSION } });
      this.sent++;
    });
  }

  close(): void {
    this.closed = true;
    this.failPending('peer closed');
    this.call?.end();
    this.call = null;
    this.client?.close();
    this.client = null;
  }
}

/** Peers by member id; a member that left or died is closed when the view drops it. */
export class PeerPool {
  private readonly peers = new Map<string, RemotePeer>();

  constructor(private readonly o: { selfMember: () => string; viewVersion: () => number; errors: ErrorCodec; logger: Logger }) {}

  get(memberId: string, address: string): RemotePeer {
    let p = this.peers.get(memberId);
    if (!p || p.address !== address) {
      p?.close();
      p = new RemotePeer(memberId, address, this.o);
      this.peers.set(memberId, p);
    }
    return p;
  }

  /** Closes the peers of members no longer in the view. */
  retain(memberIds: ReadonlySet<string>): void {
    for (const [id, p] of this.peers)
      if (!memberIds.has(id)) {
        p.close();
        this.peers.delete(id);
      }
  }

  closeAll(): void {
    for (const p of this.peers.values()) p.close();
    this.peers.clear();
  }
}

export const newReplyId = (): string => randomUUID();
