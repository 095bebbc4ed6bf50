/**
 * The agent end of AgentService: one stream at a time, reconnected with exponential backoff and
 * jitter; an outbound queue with explicit flow control (see wire.ts):
 *  - transitions (ack, provisioned, result, failure, status) are never dropped: they stay queued
 *    while the window is full or the stream is down, and a transition written but not yet credited
 *    by the server when the stream breaks is sent again after the next hello (the server side is
 *    idempotent on (task, attempt, epoch));
 *  - progress is coalesced per task and heartbeats/inventory per kind (latest wins).
 */
import * as grpc from '@grpc/grpc-js';
import type { Logger } from '../shared/logger.js';
import { CreditGate, CreditReturner, DEFAULT_WINDOW, TunnelBatcher, clampWindow, decodeServerMessage, tunnelMessage, type AgentMessage, type ServerCommandMsg, type ServerMessage__Output } from '../protocol/agent-wire.js';
import { transportFor, type AgentStream, type AgentTransport, type CallError, type StreamStatus } from './transport.js';
import type { Hello } from '../gen/gantry/agent/v1/Hello.js';
import type { Welcome__Output } from '../gen/gantry/agent/v1/Welcome.js';
import type { PresignOutputsRequest } from '../gen/gantry/agent/v1/PresignOutputsRequest.js';
import type { PresignOutputsResponse__Output } from '../gen/gantry/agent/v1/PresignOutputsResponse.js';
import type { PresignInputsRequest } from '../gen/gantry/agent/v1/PresignInputsRequest.js';
import type { PresignInputsResponse__Output } from '../gen/gantry/agent/v1/PresignInputsResponse.js';
import type { PresignCheckpointRequest } from '../gen/gantry/agent/v1/PresignCheckpointRequest.js';
import type { PresignCheckpointResponse__Output } from '../gen/gantry/agent/v1/PresignCheckpointResponse.js';
import type { CommitCheckpointRequest } from '../gen/gantry/agent/v1/CommitCheckpointRequest.js';
import type { SyncManifest__Output } from '../gen/gantry/agent/v1/SyncManifest.js';
import type { TunnelFrame, TunnelFrame__Output } from '../gen/gantry/agent/v1/TunnelFrame.js';

export type OutKind = 'transition' | 'progress' | 'heartbeat' | 'inventory' | 'container';

interface OutItem {
  msg: AgentMessage;
  kind: OutKind;
  /** Coalescing key (progress: per task; heartbeat/inventory: per kind). */
  key: string | null;
  /** Task this transition is about (result/failure keep the task "held" until confirmed). */
  taskRef: TaskRef | null;
  terminal: boolean;
  /** Message number in the current session once written. */
  seq: number;
}

export interface TaskRef {
  task_id: string;
  attempt: number;
  epoch: number;
}

export interface AgentClientOptions {
  /** HOST:PORT (gRPC) or ws[s]://HOST[:PORT] (WebSocket on the HTTP port); a comma-separated list may mix both. */
  server: string;
  credential: string;
  tls?: boolean;
  /** PEM CA bundle for a private CA (with tls). */
  caFile?: string | undefined;
  /** Our receive window (server->agent). */
  window?: number;
  /** Built on every (re)connect: current inventory and the tasks still held. */
  hello(): Hello;
  /** assign, cancel, drain, sync, container (after welcome), decoded by the agent-wire codec. */
  onMessage(m: ServerCommandMsg): void;
  onWelcome?(w: Welcome__Output): void;
  /** A gateway tunnel frame (outside the message window). */
  onTunnel?(f: TunnelFrame__Output): void;
  /** The stream ended (tunnel streams on it are gone). */
  onStreamDown?(): void;
  /** The server refused us for good (revoked credential, agent deleted, replaced): do not reconnect. */
  onFatal(code: string, message: string): void;
  /** Heartbeat payload (called every heartbeat interval while connected). */
  heartbeat?(): AgentMessage['heartbeat'];
  logger: Logger;
  backoffInitialMs?: number;
  backoffMaxMs?: number;
}

/** How long a unary call may keep retrying (a task's deadline, epoch ms) and what stops it early (the task's abort). */
export interface RetryUntil {
  until?: number;
  signal?: AbortSignal;
}

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** Exponential backoff with jitter: attempt 0 -> ~initial, doubling up to max; uniformly 50-100%. */
export function backoffDelay(attempt: number, initialMs: number, maxMs: number, rnd: () => number = Math.random): number {
  const exp = Math.min(maxMs, initialMs * 2 ** Math.min(attempt, 30));
  return Math.round(exp * (0.5 + rnd() * 0.5));
}

export class AgentClient {
  /** What carries the stream to the current server (gRPC or WebSocket: the session below does not care). */
  private transport: AgentTransport;
  /** The servers to connect to (`--server a:1,b:2`: the nodes of a cluster); the agent fails over to the next when its stream ends. */
  private readonly servers: string[];
  private serverIndex = 0;
  private readonly window: number;
  private call: AgentStream | null = null;
  private gate: CreditGate | null = null;
  private credit: CreditReturner | null = null;
  private queue: OutItem[] = [];
  /** Written in this session, not yet credited (transitions only are kept). */
  private unconfirmed: OutItem[] = [];
  private written = 0;
  private attempt = 0;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private closing = false;
  private fatal = false;
  private connectedWaiters: Array<() => void> = [];
  private flushWaiters: Array<() => void> = [];
  sessionId: string | null = null;
  agentId: string | null = null;
  heartbeatIntervalS = 10;
  /** Number of completed (re)connections. */
  connects = 0;

  constructor(private readonly o: AgentClientOptions) {
    this.servers = o.server.split(',').map((s) => s.trim()).filter(Boolean);
    this.transport = this.transportFor(this.servers[0] ?? o.server);
    this.window = clampWindow(o.window, DEFAULT_WINDOW);
  }

  private transportFor(address: string): AgentTransport {
    return transportFor(address, { credential: this.o.credential, tls: this.o.tls, caFile: this.o.caFile });
  }

  /** The transport of the current server: grpc or ws. */
  get transportKind(): AgentTransport['kind'] {
    return this.transport.kind;
  }

  /** The server this agent talks to now. */
  get server(): string {
    return this.servers[this.serverIndex] ?? this.o.server;
  }

  get connected(): boolean {
    return this.sessionId !== null;
  }

  start(): void {
    this.connect();
  }

  /** Resolves once a session is up (or rejects after timeoutMs). */
  whenConnected(timeoutMs = 30_000): Promise<void> {
    if (this.connected) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('not connected to the server')), timeoutMs);
      this.connectedWaiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  /**
   * Writes a gateway tunnel frame now, outside the message window (tunnel streams have their own
   * byte windows); false when no session is up.
   */
  sendTunnel(f: TunnelFrame): boolean {
    if (!this.call || !this.sessionId) return false;
    this.tunnelBatch.push(f);
    return true;
  }

  /** Frames ready in one event-loop turn go out as one message (see TunnelBatcher). */
  private readonly tunnelBatch = new TunnelBatcher<TunnelFrame>((frames) => {
    const call = this.call;
    if (!call || !this.sessionId) return;
    call.write(tunnelMessage(frames));
  });

  /** Queues a message (see the class comment for what is coalesced). */
  send(msg: AgentMessage, kind: OutKind, taskRef: TaskRef | null = null): void {
    const terminal = msg.result !== undefined || msg.failure !== undefined;
    // container reports are state: the latest per instance wins (and hello carries them all again)
    const key = kind === 'progress' ? `p:${taskRef?.task_id ?? ''}` : kind === 'container' ? `c:${msg.container?.instance_id ?? ''}` : kind === 'heartbeat' || kind === 'inventory' ? kind : null;
    if (key !== null) {
      const i = this.queue.findIndex((q) => q.key === key);
      if (i >= 0) {
        (this.queue[i] as OutItem).msg = msg; // latest wins, in place
        return;
      }
    }
    this.queue.push({ msg, kind, key, taskRef, terminal, seq: 0 });
    this.pump();
  }

  /** Tasks whose result/failure has not been confirmed by the server yet (still "held" for hello). */
  pendingTerminal(): TaskRef[] {
    return [...this.unconfirmed, ...this.queue].filter((q) => q.terminal && q.taskRef).map((q) => q.taskRef as TaskRef);
  }

  /** Drops queued progress for a task (after its result is queued, progress is meaningless). */
  dropProgress(taskId: string): void {
    this.queue = this.queue.filter((q) => q.key !== `p:${taskId}`);
  }

  /** Resolves true once every queued transition has been confirmed by the server (false on timeout). */
  flushed(timeoutMs: number): Promise<boolean> {
    if (this.isFlushed()) return Promise.resolve(true);
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.flushWaiters = this.flushWaiters.filter((w) => w !== done);
        resolve(false);
      }, timeoutMs);
      const done = (): void => {
        clearTimeout(t);
        resolve(true);
      };
      this.flushWaiters.push(done);
    });
  }

  private isFlushed(): boolean {
    return this.unconfirmed.length === 0 && !this.queue.some((q) => q.kind === 'transition');
  }

  /** o.until / o.signal: the task's deadline and abort (a blip of the server's database is outlasted, see unary). */
  async presignOutputs(req: Omit<PresignOutputsRequest, 'session_id'>, o: RetryUntil = {}): Promise<PresignOutputsResponse__Output> {
    return this.unary((sid, t) => t.presignOutputs({ ...req, session_id: sid }, 30_000), o);
  }

  async presignInputs(req: Omit<PresignInputsRequest, 'session_id'>, o: RetryUntil = {}): Promise<PresignInputsResponse__Output> {
    return this.unary((sid, t) => t.presignInputs({ ...req, session_id: sid }, 30_000), o);
  }

  /** Checkpoint URLs (nerfstudio resume): PUT for this attempt's checkpoint of `step` (size > 0), GET of the remembered one. */
  async presignCheckpoint(req: Omit<PresignCheckpointRequest, 'session_id'>): Promise<PresignCheckpointResponse__Output> {
    return this.unary((sid, t) => t.presignCheckpoint({ ...req, session_id: sid }, 30_000));
  }

  /** The node remembers the uploaded checkpoint for the task's next attempts. */
  async commitCheckpoint(req: Omit<CommitCheckpointRequest, 'session_id'>): Promise<void> {
    await this.unary((sid, t) => t.commitCheckpoint({ ...req, session_id: sid }, 30_000));
  }

  /** The team's sync manifest (every active model and custom node, presigned download URLs). */
  async getSyncManifest(): Promise<SyncManifest__Output> {
    return this.unary((_sid, t) => t.getSyncManifest(60_000));
  }

  /**
   * Unary call with the current session id, on the current server's transport, retried with backoff
   * (250 ms doubling to 5 s, jittered) while the answer is UNAVAILABLE or DEADLINE_EXCEEDED: a
   * reconnect, or the server's database being away (`database_unavailable`: a restart, a failover).
   * With o.until (a task's deadline) it retries until then, so a database blip shorter than the
   * task's time left never fails the task; without, 5 tries. o.signal (the task's abort: cancel,
   * timeout) stops it at once.
   */
  private async unary<T>(fn: (sessionId: string, t: AgentTransport) => Promise<T>, o: RetryUntil = {}): Promise<T> {
    let lastErr: unknown = null;
    const more = (i: number): boolean => (o.until === undefined ? i < 5 : i === 0 || Date.now() < o.until);
    for (let i = 0; more(i); i++) {
      if (o.signal?.aborted) throw o.signal.reason instanceof Error ? o.signal.reason : new Error('aborted');
      await this.whenConnected(o.until === undefined ? 60_000 : Math.max(1_000, o.until - Date.now()));
      try {
        return await fn(this.sessionId as string, this.transport);
      } catch (e) {
        lastErr = e;
        const code = (e as CallError).code;
        if (code !== grpc.status.UNAVAILABLE && code !== grpc.status.DEADLINE_EXCEEDED) throw e;
        if ((e as CallError).details?.includes('object store')) throw e;
        const wait = backoffDelay(i, 250, 5_000);
        if (o.until !== undefined && Date.now() + wait >= o.until) break;
        if (i === 0 || i % 5 === 0) this.o.logger.warn({ code: grpc.status[code], details: (e as CallError).details, attempt: i + 1, retry_in_ms: wait }, 'server call unavailable; retrying');
        await abortableSleep(wait, o.signal);
      }
    }
    throw lastErr;
  }

  /** Ends the stream cleanly (half-close) and stops reconnecting. */
  async close(): Promise<void> {
    this.closing = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    const call = this.call;
    if (call) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 2_000);
        this.statusWaiters.push(() => {
          clearTimeout(t);
          resolve();
        });
        call.end();
      });
    }
    this.teardown();
    this.transport.close();
  }

  /** close() waits for the current stream's end through these. */
  private statusWaiters: Array<() => void> = [];

  // ---------------------------------------------------------------------------------------------

  private connect(): void {
    if (this.closing || this.fatal) return;
    let serverError: { code: string; message: string; fatal: boolean } | null = null;
    const onData = (raw: ServerMessage__Output): void => {
      if (this.call !== call) return; // an abandoned stream
      // every message is decoded once, by the agent-wire codec, before anything looks at it
      const m = decodeServerMessage(raw);
      switch (m.msg) {
        case 'welcome':
          this.onWelcome(m.welcome);
          return;
        case 'credit':
          this.gate?.grant(m.grant);
          this.confirm();
          this.pump();
          return;
        case 'error':
          serverError = { code: m.error.code, message: m.error.message, fatal: m.error.fatal };
          return;
        case 'tunnels':
          // outside the window: no credit for it
          for (const f of m.frames) this.o.onTunnel?.(f);
          return;
        default:
          try {
            this.o.onMessage(m);
          } finally {
            this.credit?.processed();
          }
      }
    };
    const onStatus = (st: StreamStatus): void => {
      for (const w of this.statusWaiters.splice(0)) w();
      const wasCurrent = this.call === call;
      if (wasCurrent) this.teardown();
      if (this.closing || !wasCurrent) return;
      const se = serverError as { code: string; message: string; fatal: boolean } | null;
      if (st.code === grpc.status.UNAUTHENTICATED || se?.fatal) {
        this.fatal = true;
        this.o.onFatal(se?.code || grpc.status[st.code] || 'unauthenticated', se?.message || st.details);
        return;
      }
      // several servers (a cluster's nodes): try the next one at once, back off only after a full round
      const n = this.servers.length;
      const failed = this.attempt++;
      const delay = n > 1 && (failed + 1) % n !== 0 ? 100 : backoffDelay(Math.floor(failed / Math.max(1, n)), this.o.backoffInitialMs ?? 500, this.o.backoffMaxMs ?? 30_000);
      const from = this.server;
      if (n > 1) {
        this.serverIndex = (this.serverIndex + 1) % n;
        this.transport.close();
        this.transport = this.transportFor(this.server);
      }
      this.o.logger.warn({ code: grpc.status[st.code], details: st.details, server_error: se?.code, retry_in_ms: delay, server: from, next_server: this.server }, 'agent stream ended; reconnecting');
      this.reconnectTimer = setTimeout(() => this.connect(), delay);
    };
    const call = this.transport.open(onData, onStatus);
    this.call = call;
    call.write({ hello: { ...this.o.hello(), window: this.window } });
  }

  private onWelcome(w: Welcome__Output): void {
    this.sessionId = w.session_id;
    this.agentId = w.agent_id;
    this.heartbeatIntervalS = Math.max(1, w.heartbeat_interval_s || 10);
    this.gate = new CreditGate(clampWindow(w.window));
    this.credit = new CreditReturner(this.window, (grant) => this.call?.write({ credit: { grant } }));
    this.written = 0;
    this.attempt = 0;
    this.connects++;
    this.o.logger.info({ agent_id: w.agent_id, session_id: w.session_id, heartbeat_interval_s: this.heartbeatIntervalS, server: this.server, transport: this.transport.kind }, 'connected to the server');
    this.o.onWelcome?.(w);
    const hb = this.o.heartbeat;
    if (hb) {
      const beat = (): void => {
        const m = hb();
        if (m) this.send({ heartbeat: m }, 'heartbeat');
      };
      beat();
      this.heartbeatTimer = setInterval(beat, this.heartbeatIntervalS * 1000);
    }
    for (const w2 of this.connectedWaiters.splice(0)) w2();
    this.pump();
  }

  /** Writes queued messages while the window allows. */
  private pump(): void {
    const call = this.call;
    if (!call || !this.gate || !this.sessionId) return;
    while (this.queue.length > 0 && this.gate.take()) {
      const item = this.queue.shift() as OutItem;
      item.seq = ++this.written;
      if (item.kind === 'transition') this.unconfirmed.push(item);
      call.write(item.msg);
    }
  }

  /** Drops transitions the server has processed (credited). */
  private confirm(): void {
    if (!this.gate) return;
    const done = this.gate.grantedTotal;
    if (this.unconfirmed.length) this.unconfirmed = this.unconfirmed.filter((u) => u.seq > done);
    if (this.isFlushed()) for (const w of this.flushWaiters.splice(0)) w();
  }

  private teardown(): void {
    const wasUp = this.sessionId !== null;
    this.tunnelBatch.clear();
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = null;
    this.credit?.close();
    this.credit = null;
    this.gate = null;
    this.call = null;
    this.sessionId = null;
    // transitions not credited go first again, in their original order; the rest keeps its order
    if (this.unconfirmed.length) {
      this.queue = [...this.unconfirmed.map((u) => ({ ...u, seq: 0 })), ...this.queue];
      this.unconfirmed = [];
    }
    if (wasUp) this.o.onStreamDown?.();
  }
}
