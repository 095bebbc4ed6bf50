/**
 * What carries the agent's one stream and its unary calls to the server: gRPC (`--server
 * HOST:PORT`, AgentService on the node's gRPC port) or a WebSocket on the node's HTTP port
 * (`--server ws[s]://HOST[:PORT]`, service AgentWebSocket of agent.proto: the same messages in
 * binary AgentFrame/ServerFrame frames, the unary calls as request/response frames on the socket).
 * AgentClient (client.ts) holds the session (hello, windows, credit, resends) and does not know which
 * one it talks through; a --server list may mix both kinds.
 */
import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import WebSocket from 'ws';
import { AGENT_WS_PATH, WS_CLOSE_STATUS_BASE, agentFrameCodec, loadAgentProto, type AgentMessage, type AgentServiceClient, type ServerMessage__Output } from '../protocol/agent-wire.js';
import type { PresignOutputsRequest } from '../gen/gantry/agent/v1/PresignOutputsRequest.js';
import type { PresignCheckpointRequest } from '../gen/gantry/agent/v1/PresignCheckpointRequest.js';
import type { PresignCheckpointResponse__Output } from '../gen/gantry/agent/v1/PresignCheckpointResponse.js';
import type { CommitCheckpointRequest } from '../gen/gantry/agent/v1/CommitCheckpointRequest.js';
import type { CommitCheckpointResponse__Output } from '../gen/gantry/agent/v1/CommitCheckpointResponse.js';
import type { PresignOutputsResponse__Output } from '../gen/gantry/agent/v1/PresignOutputsResponse.js';
import type { PresignInputsRequest } from '../gen/gantry/agent/v1/PresignInputsRequest.js';
import type { PresignInputsResponse__Output } from '../gen/gantry/agent/v1/PresignInputsResponse.js';
import type { SyncManifest__Output } from '../gen/gantry/agent/v1/SyncManifest.js';
import type { UnaryRequest } from '../gen/gantry/agent/v1/UnaryRequest.js';
import type { UnaryResponse__Output } from '../gen/gantry/agent/v1/UnaryResponse.js';

/** How a stream ended: a gRPC status code (0 = a clean end) and its details. */
export interface StreamStatus {
  code: grpc.status;
  details: string;
}

/** A failed unary call: the gRPC status it carries, on either transport (grpc.ServiceError has the same fields). */
export interface CallError extends Error {
  code: grpc.status;
  details: string;
}

const callError = (code: grpc.status, details: string): CallError => Object.assign(new Error(`${code} ${grpc.status[code] ?? ''}: ${details}`), { code, details });

export interface AgentStream {
  write(m: AgentMessage): void;
  /** Ends our side cleanly; the status follows once the server has closed the stream. */
  end(): void;
}

export interface AgentTransport {
  readonly kind: 'grpc' | 'ws';
  /** As given in --server (logged). */
  readonly address: string;
  /** Opens the stream; onStatus is called exactly once, when it has ended. */
  open(onData: (m: ServerMessage__Output) => void, onStatus: (st: StreamStatus) => void): AgentStream;
  presignOutputs(req: PresignOutputsRequest, deadlineMs: number): Promise<PresignOutputsResponse__Output>;
  presignCheckpoint(req: PresignCheckpointRequest, deadlineMs: number): Promise<PresignCheckpointResponse__Output>;
  commitCheckpoint(req: CommitCheckpointRequest, deadlineMs: number): Promise<CommitCheckpointResponse__Output>;
  presignInputs(req: PresignInputsRequest, deadlineMs: number): Promise<PresignInputsResponse__Output>;
  getSyncManifest(deadlineMs: number): Promise<SyncManifest__Output>;
  close(): void;
}

export interface TransportOptions {
  credential: string;
  tls?: boolean | undefined;
  caFile?: string | undefined;
}

/** `ws://` and `wss://` entries of --server are WebSocket servers; `HOST:PORT` ones gRPC. */
export const isWebSocketServer = (address: string): boolean => /^wss?:\/\//i.test(address);

/** The agent WebSocket URL of a `ws[s]://HOST[:PORT][/PREFIX]` server entry. */
export function agentWsUrl(address: string): string {
  const u = new URL(address);
  const prefix = u.pathname.replace(/\/+$/, '');
  if (!prefix.endsWith(AGENT_WS_PATH)) u.pathname = `${prefix}${AGENT_WS_PATH}`;
  u.search = '';
  u.hash = '';
  return u.toString();
}

export function transportFor(address: string, o: TransportOptions): AgentTransport {
  return isWebSocketServer(address) ? new WsTransport(address, o) : new GrpcTransport(address, o);
}

// -----------------------------------------------------------------------------------------------
// gRPC

class GrpcTransport implements AgentTransport {
  readonly kind = 'grpc';
  private readonly client: AgentServiceClient;
  private readonly md: grpc.Metadata;

  constructor(
    readonly address: string,
    o: TransportOptions,
  ) {
    const creds = o.tls ? grpc.credentials.createSsl(o.caFile ? readFileSync(o.caFile) : null) : grpc.credentials.createInsecure();
    const proto = loadAgentProto();
    this.client = new proto.gantry.agent.v1.AgentService(address, creds, {
      'grpc.keepalive_time_ms': 20_000,
      'grpc.keepalive_timeout_ms': 10_000,
      'grpc.keepalive_permit_without_calls': 1,
      'grpc.initial_reconnect_backoff_ms': 500,
      'grpc.max_reconnect_backoff_ms': 10_000,
    });
    this.md = new grpc.Metadata();
    this.md.set('authorization', `Bearer ${o.credential}`);
  }

  open(onData: (m: ServerMessage__Output) => void, onStatus: (st: StreamStatus) => void): AgentStream {
    const call = this.client.Connect(this.md);
    call.on('data', onData);
    call.on('error', () => undefined); // the 'status' handler decides
    let ended = false;
    call.on('status', (st: grpc.StatusObject) => {
      if (ended) return;
      ended = true;
      onStatus({ code: st.code, details: st.details });
    });
    return { write: (m) => void call.write(m), end: () => call.end() };
  }

  private unary<T>(fn: (cb: (err: grpc.ServiceError | null, res?: T) => void) => void): Promise<T> {
    return new Promise<T>((resolve, reject) => fn((err, res) => (err ? reject(err) : resolve(res as T))));
  }

  presignOutputs(req: PresignOutputsRequest, deadlineMs: number): Promise<PresignOutputsResponse__Output> {
    return this.unary((cb) => this.client.PresignOutputs(req, this.md, { deadline: Date.now() + deadlineMs }, cb));
  }

  presignInputs(req: PresignInputsRequest, deadlineMs: number): Promise<PresignInputsResponse__Output> {
    return this.unary((cb) => this.client.PresignInputs(req, this.md, { deadline: Date.now() + deadlineMs }, cb));
  }

  getSyncManifest(deadlineMs: number): Promise<SyncManifest__Output> {
    return this.unary((cb) => this.client.GetSyncManifest({}, this.md, { deadline: Date.now() + deadlineMs }, cb));
  }

  presignCheckpoint(req: PresignCheckpointRequest, deadlineMs: number): Promise<PresignCheckpointResponse__Output> {
    return this.unary((cb) => this.client.PresignCheckpoint(req, this.md, { deadline: Date.now() + deadlineMs }, cb));
  }

  commitCheckpoint(req: CommitCheckpointRequest, deadlineMs: number): Promise<CommitCheckpointResponse__Output> {
    return this.unary((cb) => this.client.CommitCheckpoint(req, this.md, { deadline: Date.now() + deadlineMs }, cb));
  }

  close(): void {
    this.client.close();
  }
}

// -----------------------------------------------------------------------------------------------
// WebSocket

/** Keepalive as the gRPC channel's: a ping every 20 s, the socket is dead without a pong within 10 s. */
const PING_EVERY_MS = 20_000;
const PONG_WITHIN_MS = 10_000;

/** An HTTP answer to the handshake as the gRPC status the gRPC transport would have ended with. */
const statusOfHttp = (status: number): grpc.status =>
  status === 401 ? grpc.status.UNAUTHENTICATED : status === 403 ? grpc.status.PERMISSION_DENIED : status === 429 ? grpc.status.RESOURCE_EXHAUSTED : status === 404 ? grpc.status.UNIMPLEMENTED : grpc.status.UNAVAILABLE;

interface PendingCall {
  resolve(r: UnaryResponse__Output): void;
  reject(e: CallError): void;
  timer: NodeJS.Timeout;
}

class WsTransport implements AgentTransport {
  readonly kind = 'ws';
  private readonly url: string;
  private readonly ca: Buffer | undefined;
  private readonly codec = agentFrameCodec();
  /** The socket of the current stream (unary calls travel on it). */
  private ws: WebSocket | null = null;
  private pending = new Map<number, PendingCall>();
  private nextId = 0;

  constructor(
    readonly address: string,
    private readonly o: TransportOptions,
  ) {
    this.url = agentWsUrl(address);
    this.ca = o.caFile ? readFileSync(o.caFile) : undefined;
  }

  open(onData: (m: ServerMessage__Output) => void, onStatus: (st: StreamStatus) => void): AgentStream {
    const ws = new WebSocket(this.url, {
      headers: { authorization: `Bearer ${this.o.credential}` },
      perMessageDeflate: false,
      maxPayload: 16 * 1024 * 1024,
      handshakeTimeout: 10_000,
      ...(this.ca ? { ca: this.ca } : {}),
    });
    ws.binaryType = 'nodebuffer';
    this.ws = ws;
    const early: Buffer[] = [];
    let ended = false;
    let pingTimer: NodeJS.Timeout | null = null;
    let pongTimer: NodeJS.Timeout | null = null;
    const finish = (st: StreamStatus): void => {
      if (pingTimer) clearInterval(pingTimer);
      if (pongTimer) clearTimeout(pongTimer);
      if (this.ws === ws) {
        this.ws = null;
        this.failPending(grpc.status.UNAVAILABLE, 'the agent WebSocket closed');
      }
      if (ended) return;
      ended = true;
      onStatus(st);
    };
    // the handshake refused (401 for a bad ak-, 503 while the node stops): the node's JSON error says why
    ws.on('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        let details = `HTTP ${res.statusCode ?? 0} on the WebSocket handshake`;
        try {
          const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { error_message?: unknown };
          if (typeof body.error_message === 'string') details = body.error_message;
        } catch {
          /* not our JSON (a proxy's page) */
        }
        finish({ code: statusOfHttp(res.statusCode ?? 0), details });
        ws.terminate();
      });
      res.on('error', () => undefined);
    });
    ws.on('open', () => {
      for (const b of early.splice(0)) ws.send(b);
      pingTimer = setInterval(() => {
        if (pongTimer) return;
        pongTimer = setTimeout(() => ws.terminate(), PONG_WITHIN_MS);
        ws.ping();
      }, PING_EVERY_MS);
    });
    ws.on('pong', () => {
      if (pongTimer) clearTimeout(pongTimer);
      pongTimer = null;
    });
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (!isBinary) return;
      let f;
      try {
        f = this.codec.decodeServerFrame(data);
      } catch {
        ws.close(WS_CLOSE_STATUS_BASE + grpc.status.INVALID_ARGUMENT, 'a frame that is not a ServerFrame');
        return;
      }
      if (f.frame === 'message' && f.message) onData(f.message);
      else if (f.frame === 'response' && f.response) this.settle(f.response);
    });
    // 'close' follows and decides; the error says why a socket closed without a close frame
    let lastError = '';
    ws.on('error', (e: Error) => {
      lastError = e.message;
    });
    ws.on('close', (code: number, reason: Buffer) => {
      const details = reason.toString('utf8') || (lastError ? `${lastError} (${code})` : '');
      if (code === 1000) finish({ code: grpc.status.OK, details });
      else if (code > WS_CLOSE_STATUS_BASE && code < WS_CLOSE_STATUS_BASE + 100) finish({ code: code - WS_CLOSE_STATUS_BASE, details });
      else finish({ code: grpc.status.UNAVAILABLE, details: details || `the agent WebSocket closed (${code})` });
    });
    const send = (b: Buffer): void => {
      if (ws.readyState === WebSocket.OPEN) ws.send(b);
      else if (ws.readyState === WebSocket.CONNECTING) early.push(b);
    };
    return {
      write: (m) => send(this.codec.encodeAgentFrame({ message: m })),
      end: () => {
        if (ws.readyState === WebSocket.OPEN) ws.close(1000, 'the agent is closing');
        else ws.terminate();
      },
    };
  }

  private settle(r: UnaryResponse__Output): void {
    const p = this.pending.get(r.request_id);
    if (!p) return;
    this.pending.delete(r.request_id);
    clearTimeout(p.timer);
    if (r.result === 'error') p.reject(callError(r.error?.status ?? grpc.status.UNKNOWN, r.error?.details ?? ''));
    else p.resolve(r);
  }

  private failPending(code: grpc.status, details: string): void {
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(callError(code, details));
    }
    this.pending.clear();
  }

  /** A unary call as a request frame on the current socket. */
  private call(req: Omit<UnaryRequest, 'request_id'>, deadlineMs: number): Promise<UnaryResponse__Output> {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) return Promise.reject(callError(grpc.status.UNAVAILABLE, 'no open agent WebSocket'));
    this.nextId = this.nextId >= 0xffff_fffe ? 1 : this.nextId + 1;
    const id = this.nextId;
    return new Promise<UnaryResponse__Output>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(callError(grpc.status.DEADLINE_EXCEEDED, 'Deadline exceeded'));
      }, deadlineMs);
      this.pending.set(id, { resolve, reject, timer });
      ws.send(this.codec.encodeAgentFrame({ request: { ...req, request_id: id } }));
    });
  }

  async presignOutputs(req: PresignOutputsRequest, deadlineMs: number): Promise<PresignOutputsResponse__Output> {
    const r = await this.call({ presign_outputs: req }, deadlineMs);
    if (!r.presign_outputs) throw callError(grpc.status.INTERNAL, 'the server answered another call');
    return r.presign_outputs;
  }

  async presignInputs(req: PresignInputsRequest, deadlineMs: number): Promise<PresignInputsResponse__Output> {
    const r = await this.call({ presign_inputs: req }, deadlineMs);
    if (!r.presign_inputs) throw callError(grpc.status.INTERNAL, 'the server answered another call');
    return r.presign_inputs;
  }

  async getSyncManifest(deadlineMs: number): Promise<SyncManifest__Output> {
    const r = await this.call({ get_sync_manifest: {} }, deadlineMs);
    if (!r.sync_manifest) throw callError(grpc.status.INTERNAL, 'the server answered another call');
    return r.sync_manifest;
  }

  async presignCheckpoint(req: PresignCheckpointRequest, deadlineMs: number): Promise<PresignCheckpointResponse__Output> {
    const r = await this.call({ presign_checkpoint: req }, deadlineMs);
    if (!r.presign_checkpoint) throw callError(grpc.status.INTERNAL, 'the server answered another call');
    return r.presign_checkpoint;
  }

  async commitCheckpoint(req: CommitCheckpointRequest, deadlineMs: number): Promise<CommitCheckpointResponse__Output> {
    const r = await this.call({ commit_checkpoint: req }, deadlineMs);
    if (!r.commit_checkpoint) throw callError(grpc.status.INTERNAL, 'the server answered another call');
    return r.commit_checkpoint;
  }

  close(): void {
    this.failPending(grpc.status.CANCELLED, 'the agent is closing');
    this.ws?.terminate();
    this.ws = null;
  }
}
