/**
 * The agent protocol over a WebSocket on the HTTP port (`GET /api/v1/agents/connect`): for an
 * ingress that passes WebSocket but not HTTP/2 gRPC (one HTTPS port, a corporate proxy, a
 * Kubernetes ingress). It only frames: the session layer is AgentGrpcServer's (attachStream), so
 * hello, windows and credit, heartbeats, tunnels, container commands and the unary calls behave
 * exactly as on the gRPC stream, and the agent actor cannot tell which transport carries it.
 *
 * Handshake: the ak- in `Authorization: Bearer ak-...`, verified before the upgrade (anything else
 * is answered 401 with the usual JSON error body, never upgraded). Frames: every binary message is
 * one AgentFrame (agent -> server) or ServerFrame (server -> agent) of agent.proto, encoded by the
 * serializers proto-loader built from the same definitions (agentFrameCodec). A text frame or bytes
 * that do not decode end the stream with 4003 (INVALID_ARGUMENT). The end of the stream is the
 * close: 1000 clean, else 4000 + the gRPC status code, after the ServerError that says why.
 *
 * Frames are handed to the session after uWS's message callback has returned (all frames of one
 * event-loop turn, in order, in a setImmediate): uWS corks the agent's socket while that callback
 * runs and corks one socket at a time, so a proxied response written to its client from inside the
 * callback could not be corked and went out as one send() per status line, header and body (the
 * largest cost of the node's ws path in the proxy bench's profile); the same frames handled a moment
 * later write each response in one corked send, as on the gRPC transport.
 *
 * Backpressure: what the server writes is bounded by the protocol (the agent's window for task
 * messages, each tunnel stream's byte window, WS_MAX_PENDING_CALLS answers), so uWS's send buffer
 * stays small; should a send still exceed maxBackpressure (uWS drops it), the stream ends
 * (UNAVAILABLE) and the agent reconnects and resends what was not credited, as after any break.
 */
import type uWS from 'uWebSockets.js';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from '../../shared/logger.js';
import { AppError } from '../../shared/errors.js';
import { statusLine, toHttpError } from '../error-map.js';
import { upgradeAfterAwait, type UpgradeRequest, type WebSocketHandler } from '../http.js';
import { WS_CLOSE_STATUS_BASE, WS_MAX_PENDING_CALLS, agentFrameCodec, closeReason, type AgentFrame__Output, type ServerFrame } from '../../protocol/agent-wire.js';
import type { UnaryRequest__Output } from '../../gen/gantry/agent/v1/UnaryRequest.js';
import type { UnaryResponse } from '../../gen/gantry/agent/v1/UnaryResponse.js';
import type { AgentGrpcServer, AgentIdent, AgentStreamInput, UnaryOutcome } from './grpc-server.js';

/** The result members of a response frame (one per unary call). */
type UnaryKey = 'presign_outputs' | 'presign_inputs' | 'sync_manifest' | 'presign_checkpoint' | 'commit_checkpoint';

/** uWS send(): 0 backpressure (buffered), 1 sent, 2 dropped (over maxBackpressure). */
const DROPPED = 2;

/** uWS settings of the agent route: frames up to the gRPC receive limit; a generous send buffer. */
export const AGENT_WS_OPTIONS = { maxPayloadLength: 16 * 1024 * 1024, maxBackpressure: 64 * 1024 * 1024, idleTimeout: 120 } as const;

interface AgentSocket {
  ident: AgentIdent;
  token: string;
  ip: string;
  ws: uWS.WebSocket<AgentWsUser> | null;
  input: AgentStreamInput | null;
  closed: boolean;
  pendingCalls: number;
}

/** uWS copies the userData object's own properties: the state lives behind one reference. */
export interface AgentWsUser {
  s: AgentSocket;
}

const BEARER_RE = /^Bearer\s+(\S+)\s*$/i;

/** What the socket said, waiting for the session: a decoded frame, a frame that is not one (why), or the close. */
type Inbound = { s: AgentSocket; f: AgentFrame__Output; bad: null } | { s: AgentSocket; f: null; bad: string } | { s: AgentSocket; f: null; bad: null };

export class AgentWebSocketTransport {
  private readonly codec = agentFrameCodec();
  private readonly log: Logger;
  /** Inbound of the current turn, in arrival order over every socket; drained by one setImmediate. */
  private inbound: Inbound[] = [];
  private drainScheduled = false;

  constructor(
    private readonly server: AgentGrpcServer,
    logger: Logger,
  ) {
    this.log = logger.child({ component: 'agent-ws' });
  }

  handler(): WebSocketHandler<AgentWsUser> {
    return {
      upgrade: (r) => void this.upgrade(r),
      open: (ws) => this.open(ws),
      message: (ws, data, isBinary) => this.message(ws.getUserData().s, data, isBinary),
      drain: () => undefined,
      close: (ws) => {
        const s = ws.getUserData().s;
        // the socket is gone now (nothing may be sent on it); the session hears it after the frames before it
        s.ws = null;
        this.enqueue({ s, f: null, bad: null });
      },
    };
  }

  private async upgrade(r: UpgradeRequest): Promise<void> {
    let aborted = false;
    r.res.onAborted(() => {
      aborted = true;
    });
    const token = BEARER_RE.exec(r.headers.authorization ?? '')?.[1] ?? null;
    try {
      if (r.method !== 'GET') throw new AppError('bad_request', 'invalid_request', 'the agent WebSocket is opened with GET');
      const ident = await this.server.authenticate(token);
      if (aborted) return;
      const s: AgentSocket = { ident, token: token as string, ip: r.ip, ws: null, input: null, closed: false, pendingCalls: 0 };
      upgradeAfterAwait<AgentWsUser>(r, { s });
    } catch (e) {
      if (aborted) return;
      const { status, body, headers, unexpected } = toHttpError(e);
      if (unexpected) this.log.error({ err: e, peer: r.ip }, 'agent WebSocket handshake failed');
      r.res.cork(() => {
        r.res.writeStatus(statusLine(status));
        r.res.writeHeader('X-Request-ID', r.requestId);
        r.res.writeHeader('Content-Type', 'application/json');
        if (status === 401) r.res.writeHeader('WWW-Authenticate', 'Bearer');
        for (const [k, v] of Object.entries(headers)) r.res.writeHeader(k, v);
        r.res.end(JSON.stringify(body), true);
      });
    }
  }

  private open(ws: uWS.WebSocket<AgentWsUser>): void {
    const s = ws.getUserData().s;
    s.ws = ws;
    s.input = this.server.attachStream(s.ident, s.token, {
      peer: `ws:${s.ip}`,
      transport: 'ws',
      write: (m) => this.send(s, { message: m }),
      end: (st) => this.close(s, st ? WS_CLOSE_STATUS_BASE + st.code : 1000, st?.details ?? ''),
    });
  }

  private message(s: AgentSocket, data: ArrayBuffer, isBinary: boolean): void {
    if (s.closed || !s.input) return;
    if (!isBinary) return this.enqueue({ s, f: null, bad: 'text frames are not part of the agent protocol: every frame is a binary AgentFrame' });
    try {
      // a copy: uWS reuses the ArrayBuffer after this callback, and decoded bytes fields are views
      this.enqueue({ s, f: this.codec.decodeAgentFrame(Buffer.from(data.slice(0))), bad: null });
    } catch {
      this.enqueue({ s, f: null, bad: 'a frame that is not an AgentFrame (agent.proto)' });
    }
  }

  private enqueue(x: Inbound): void {
    this.inbound.push(x);
    if (this.drainScheduled) return;
    this.drainScheduled = true;
    setImmediate(() => this.drain());
  }

  /** Hands the turn's inbound to the sessions, outside any uWS callback (see the module comment). */
  private drain(): void {
    this.drainScheduled = false;
    const batch = this.inbound;
    this.inbound = [];
    for (const { s, f, bad } of batch) {
      if (f === null && bad === null) {
        s.closed = true;
        s.input?.gone();
      } else if (s.closed || !s.input) continue;
      else if (bad !== null) this.protocolError(s, bad);
      else if (f.frame === 'message') {
        if (f.message) s.input.data(f.message);
      } else if (f.frame === 'request' && f.request) this.request(s, f.request);
      // no frame member we know (a newer agent): ignored
    }
  }

  /** A unary call on the socket: answered in a response frame with its request_id. */
  private request(s: AgentSocket, rq: UnaryRequest__Output): void {
    const id = rq.request_id;
    if (s.pendingCalls >= WS_MAX_PENDING_CALLS) {
      this.answer(s, id, { ok: false, code: grpc.status.RESOURCE_EXHAUSTED, details: `more than ${WS_MAX_PENDING_CALLS} unanswered calls on this socket` }, 'presign_outputs');
      return;
    }
    s.pendingCalls++;
    const done = <K extends UnaryKey>(p: Promise<UnaryOutcome<NonNullable<UnaryResponse[K]>>>, key: K): void => {
      void p.then((r) => {
        s.pendingCalls--;
        this.answer(s, id, r, key);
      });
    };
    switch (rq.call) {
      case 'presign_outputs':
        if (rq.presign_outputs) return done(this.server.calls.callPresignOutputs(s.token, rq.presign_outputs), 'presign_outputs');
        break;
      case 'presign_inputs':
        if (rq.presign_inputs) return done(this.server.calls.callPresignInputs(s.token, rq.presign_inputs), 'presign_inputs');
        break;
      case 'presign_checkpoint':
        if (rq.presign_checkpoint) return done(this.server.calls.callPresignCheckpoint(s.token, rq.presign_checkpoint), 'presign_checkpoint');
        break;
      case 'commit_checkpoint':
        if (rq.commit_checkpoint) return done(this.server.calls.callCommitCheckpoint(s.token, rq.commit_checkpoint), 'commit_checkpoint');
        break;
      case 'get_sync_manifest':
        return done(this.server.calls.callGetSyncManifest(s.token), 'sync_manifest');
      default:
        break;
    }
    s.pendingCalls--;
    this.answer(s, id, { ok: false, code: grpc.status.UNIMPLEMENTED, details: 'no call this server knows' }, 'presign_outputs');
  }

  private answer<K extends UnaryKey>(s: AgentSocket, id: number, r: UnaryOutcome<NonNullable<UnaryResponse[K]>>, key: K): void {
    const response: UnaryResponse = r.ok ? { request_id: id, [key]: r.value } : { request_id: id, error: { status: r.code, details: r.details } };
    this.send(s, { response });
  }

  private send(s: AgentSocket, f: ServerFrame): boolean {
    const ws = s.ws;
    if (s.closed || !ws) return false;
    if (ws.send(this.codec.encodeServerFrame(f), true, false) !== DROPPED) return true;
    this.log.warn({ peer: s.ip, buffered: ws.getBufferedAmount() }, 'agent WebSocket send buffer full; ending the stream');
    // the session layer ends the stream (the agent reconnects and resends what was not credited)
    s.input?.gone();
    this.close(s, WS_CLOSE_STATUS_BASE + grpc.status.UNAVAILABLE, 'the agent is not reading');
    return false;
  }

  /** A frame the protocol does not allow: the stream ends as an invalid message would on gRPC. */
  private protocolError(s: AgentSocket, why: string): void {
    this.send(s, { message: { error: { code: 'invalid_message', message: why, fatal: false } } });
    s.input?.gone();
    this.close(s, WS_CLOSE_STATUS_BASE + grpc.status.INVALID_ARGUMENT, why);
  }

  private close(s: AgentSocket, code: number, reason: string): void {
    const ws = s.ws;
    if (s.closed || !ws) return;
    s.closed = true;
    ws.end(code, closeReason(reason));
  }
}
