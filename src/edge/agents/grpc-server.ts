/**
 * The agent gRPC server: one bidi stream per agent process (AgentService.Connect) plus unary
 * presign calls and the sync manifest (GetSyncManifest). It authenticates the ak- from call metadata, registers the agent record per
 * (team, machine_id), opens an AgentSessions session (the integration point with the agent actor)
 * and forwards what the agent says, faithfully (the actors fence stale attempts/epochs).
 *
 * It is also the session layer of the WebSocket transport (ws-transport.ts: the same protocol on
 * the HTTP port): a stream is an AgentLink (write a ServerMessage, end with a status), whatever
 * carries it; hello, windows, credit, heartbeats, tunnels, container commands and the unary calls
 * are handled here once, for both.
 *
 * Flow control: see src/protocol/agent-wire.ts and docs/api.md. Server->agent messages wait for credit
 * (the agent's window); agent->server messages are processed one at a time, in order, and returned
 * as credit once processed. An agent that exceeds our window is cut off (RESOURCE_EXHAUSTED).
 */
import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import type { AgentInfo, ServerToAgent, TaskRecord, TaskStorePort } from '../../actors/ports.js';
import type { AgentRegistration, AgentRow } from '../../persistence/agent-store.js';
import { agentInfoOf } from '../../persistence/agent-store.js';
import type { ObjectStore } from '../../storage/port.js';
import { AppError, conflict, deadlineExceeded, forbidden, invalidParameter, isAppError, unauthorized, unavailable } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { toGrpcError } from '../error-map.js';
import type { AgentSessions } from './sessions.js';
import { CreditGate, CreditReturner, DEFAULT_WINDOW, PROTOCOL_VERSION, TunnelBatcher, clampWindow, loadAgentProto, type AgentMessage__Output, type ServerMessage } from '../../protocol/agent-wire.js';
import type { TunnelFrame } from '../../gen/gantry/agent/v1/TunnelFrame.js';
import { CommitCheckpointRequest, PresignCheckpointRequest, PresignInputsRequest, PresignOutputsRequest, decodeAgentMessage, decodeRequest, type AgentStreamMessage, type HeartbeatMessage, type HelloMessage, type ResultMessage } from './wire-schema.js';
import type { PresignOutputsRequest__Output } from '../../gen/gantry/agent/v1/PresignOutputsRequest.js';
import type { PresignOutputsResponse } from '../../gen/gantry/agent/v1/PresignOutputsResponse.js';
import type { PresignInputsRequest__Output } from '../../gen/gantry/agent/v1/PresignInputsRequest.js';
import type { PresignInputsResponse } from '../../gen/gantry/agent/v1/PresignInputsResponse.js';
import type { SyncManifest as SyncManifestMsg } from '../../gen/gantry/agent/v1/SyncManifest.js';
import type { PresignCheckpointRequest__Output } from '../../gen/gantry/agent/v1/PresignCheckpointRequest.js';
import type { PresignCheckpointResponse } from '../../gen/gantry/agent/v1/PresignCheckpointResponse.js';
import type { CommitCheckpointRequest__Output } from '../../gen/gantry/agent/v1/CommitCheckpointRequest.js';
import type { CommitCheckpointResponse } from '../../gen/gantry/agent/v1/CommitCheckpointResponse.js';
import { TunnelMux, type TunnelChannel, type TunnelHandlers, type TunnelOpenInfo } from '../../gateway/tunnel.js';
import type { ContainerReportMessage } from './wire-schema.js';

/** Container services: what the agent streams say about runtimes and instances (wired to the container-service actors). */
export interface AgentContainerHooks {
  /** After hello: the runtime the agent offers, whether it exposes a tunnel, and the instances it holds. */
  hello(agentId: string, teamId: string, runtime: string, tunnel: boolean, instances: ContainerReportMessage[]): Promise<void>;
  report(agentId: string, r: ContainerReportMessage): void;
  /** The agent's stream closed on this node. */
  closed(agentId: string): void;
}

/** What the server needs from the agent records (PgAgentStore implements it). */
export interface AgentRecords {
  register(r: AgentRegistration): Promise<AgentRow>;
  heartbeat(agentId: string, stats: Record<string, unknown>): Promise<void>;
  updateInventory(agentId: string, models: string[], customNodes: string[]): Promise<void>;
  count(teamId: string): Promise<number>;
  list(teamId: string, limit: number, offset: number): Promise<{ rows: AgentRow[]; total: number }>;
}

/** The inventory needsSync compares: model paths and custom nodes as `<package_name>@<node_version>`. */
export interface SyncInventory {
  models: string[];
  customNodes: string[];
}

/** files.sync.syncManifest's shape (src/files/sync.ts): every active model and custom node of a team. */
export interface TeamSyncManifest {
  models: Array<{ id: string; model_path: string; model_type: string; size: number; sha256: string; download_url: string }>;
  custom_nodes: Array<{ id: string; package_name: string; node_version: string; inventory_name: string; size: number; sha256: string; download_url: string }>;
  expires_at: string;
}

/** The checkpoint a task's attempts share (PgTaskStore implements it). */
export interface TaskCheckpoints {
  checkpoint(taskId: string): Promise<{ key: string; step: number } | null>;
  /** Fenced by the epoch; undefined when the task is not running at it; else the key it replaced. */
  setCheckpoint(taskId: string, epoch: number, key: string, step: number): Promise<{ previous: string | null } | undefined>;
}

/** The verified ak- (identity.verifyAgentCredential); throws unauthorized AppErrors. */
export type VerifyAgentCredential = (value: string) => Promise<{ credentialId: string; teamId: string }>;

export interface AgentGrpcServerOptions {
  host: string;
  /** 0 = any free port (see boundPort). */
  port: number;
  /** PEM file paths; both set = TLS, neither = plaintext. */
  tlsCertFile?: string | undefined;
  tlsKeyFile?: string | undefined;
  heartbeatIntervalS: number;
  /** 0 = unlimited agents per team. */
  maxAgentsPerTeam: number;
  /** The agents row's node_id (cluster mode: this node's current member id). */
  nodeId: () => string;
  logger: Logger;
  sessions: AgentSessions;
  agents: AgentRecords;
  tasks: Pick<TaskStorePort, 'load' | 'assignment'>;
  verifyCredential: VerifyAgentCredential;
  /** Absent until the object store is wired: the presign RPCs fail with UNAVAILABLE. */
  objectStore?: ObjectStore | undefined;
  /**
   * Whether an agent with this inventory lacks an active model/custom node of its team
   * (files.sync.needsSync). Evaluated before the session opens (hello) and on every inventory
   * report, so AgentInfo.needsSync is right from the start. Absent: false.
   */
  needsSync?: (teamId: string, inventory: SyncInventory) => Promise<boolean>;
  /** The team's sync manifest (files.sync.syncManifest); absent: GetSyncManifest is UNAVAILABLE. */
  syncManifest?: (teamId: string) => Promise<TeamSyncManifest>;
  /**
   * The team's Comfy API key for partner nodes of local runs, or null (the team did not turn
   * partner_nodes_on_agents on): written into each Assign (comfy_org_api_key), never logged.
   */
  partnerKey?: (teamId: string) => Promise<string | null>;
  /** Maps a staged input's file_key to its object key (default: the file_key is the object key). */
  inputObjectKey?: (teamId: string, fileKey: string) => string;
  /** Agent->server window (default 256). */
  window?: number;
  /** Container service hooks (absent: container reports are ignored). */
  containers?: AgentContainerHooks;
  /** Checkpoints kept across attempts (absent: the checkpoint RPCs are UNAVAILABLE). */
  checkpoints?: TaskCheckpoints;
  /** How long a new stream may take to send hello. Default 10 s. */
  helloTimeoutMs?: number;
  /** Lifetime of presigned URLs. Default 3600 s. */
  presignExpiresS?: number;
  serverVersion?: string;
  now?: () => number;
}

type Call = grpc.ServerDuplexStream<AgentMessage__Output, ServerMessage>;

/** A stream as the session layer sees it, whichever transport carries it (gRPC call, WebSocket). */
export interface AgentLink {
  readonly peer: string;
  readonly transport: 'grpc' | 'ws';
  /** Writes one message; false when the transport cannot take it (the stream is gone). */
  write(m: ServerMessage): boolean;
  /** Ends the stream: with a gRPC status (an error), or null for a clean end. */
  end(status: { code: grpc.status; details: string } | null): void;
}

/** What a transport feeds into an open stream. */
export interface AgentStreamInput {
  /** One message from the agent (decoded from the transport's framing). */
  data(m: AgentMessage__Output): void;
  /** The agent ended its side cleanly. */
  halfClosed(): void;
  /** The transport is gone (reset, closed). */
  gone(): void;
}

/** The verified caller of a stream or unary call. */
export type AgentIdent = { credentialId: string; teamId: string };

/** A unary call's result (the gRPC transport answers with it; the WebSocket one frames it). */
export type UnaryOutcome<T> = { ok: true; value: T } | { ok: false; code: grpc.status; details: string };

/** Why the server ends a stream: the error (its kind gives the gRPC status through the error map) and whether the agent must not reconnect. */
interface EndReason {
  error: AppError;
  fatal: boolean;
}

interface Conn {
  seq: number;
  link: AgentLink;
  /** The ak- the stream authenticated with (re-verified on heartbeats). */
  token: string;
  credentialId: string;
  teamId: string;
  peer: string;
  agentId: string | null;
  sessionId: string | null;
  machineId: string | null;
  info: AgentInfo | null;
  /** server -> agent units */
  gate: CreditGate | null;
  queue: ServerMessage[];
  /** agent -> server units we owe back */
  credit: CreditReturner;
  /** received but not yet processed (non-credit) messages */
  inflight: number;
  chain: Promise<void>;
  openedAt: number;
  lastSeenAt: number;
  lastVerifiedAt: number;
  closed: boolean;
  /** Set before sessions.revoke so the end callback knows why. */
  pendingEnd: EndReason | null;
  /** Gateway tunnel streams on this connection (after hello). */
  tunnels: TunnelMux | null;
  /** Non-null while an assignment waits for the team's partner-node key: later messages wait behind it, in order. */
  held?: ServerToAgent[] | null;
}

const MAX_QUEUED_TO_AGENT = 10_000;

const bearer = (md: grpc.Metadata): string | null => {
  const v = md.get('authorization')[0];
  if (typeof v !== 'string') return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(v);
  return m?.[1] ?? null;
};


export class AgentGrpcServer {
  private server: grpc.Server | null = null;
  private port = 0;
  private conns = new Set<Conn>();
  private bySession = new Map<string, Conn>();
  private seq = 0;
  private sweepTimer: NodeJS.Timeout | null = null;
  private readonly window: number;
  private readonly now: () => number;
  private readonly log: Logger;
  private stopping = false;

  constructor(private readonly o: AgentGrpcServerOptions) {
    this.window = clampWindow(o.window, DEFAULT_WINDOW);
    this.now = o.now ?? Date.now;
    this.log = o.logger.child({ component: 'agent-grpc' });
  }

  /** The bound port (after start). */
  get boundPort(): number {
    return this.port;
  }

  /** Live streams on this node. */
  connectionCount(): number {
    return this.conns.size;
  }

  async start(): Promise<number> {
    const proto = loadAgentProto();
    const server = new grpc.Server({
      'grpc.keepalive_permit_without_calls': 1,
      'grpc.http2.min_ping_interval_without_data_ms': 5_000,
      'grpc.keepalive_time_ms': 60_000,
      'grpc.keepalive_timeout_ms': 20_000,
      'grpc.max_receive_message_length': 16 * 1024 * 1024,
    });
    server.addService(proto.gantry.agent.v1.AgentService.service, {
      Connect: (call: Call) => this.onConnect(call),
      PresignOutputs: (call: grpc.ServerUnaryCall<PresignOutputsRequest__Output, PresignOutputsResponse>, cb: grpc.sendUnaryData<PresignOutputsResponse>) =>
        this.unary(call.metadata, cb, (ident) => this.presignOutputs(ident, call.request)),
      PresignInputs: (call: grpc.ServerUnaryCall<PresignInputsRequest__Output, PresignInputsResponse>, cb: grpc.sendUnaryData<PresignInputsResponse>) =>
        this.unary(call.metadata, cb, (ident) => this.presignInputs(ident, call.request)),
      GetSyncManifest: (call: grpc.ServerUnaryCall<unknown, SyncManifestMsg>, cb: grpc.sendUnaryData<SyncManifestMsg>) => this.unary(call.metadata, cb, (ident) => this.getSyncManifest(ident)),
      PresignCheckpoint: (call: grpc.ServerUnaryCall<PresignCheckpointRequest__Output, PresignCheckpointResponse>, cb: grpc.sendUnaryData<PresignCheckpointResponse>) =>
        this.unary(call.metadata, cb, (ident) => this.presignCheckpoint(ident, call.request)),
      CommitCheckpoint: (call: grpc.ServerUnaryCall<CommitCheckpointRequest__Output, CommitCheckpointResponse>, cb: grpc.sendUnaryData<CommitCheckpointResponse>) =>
        this.unary(call.metadata, cb, (ident) => this.commitCheckpoint(ident, call.request)),
    });
    let creds: grpc.ServerCredentials;
    if (this.o.tlsCertFile && this.o.tlsKeyFile) {
      creds = grpc.ServerCredentials.createSsl(null, [{ cert_chain: readFileSync(this.o.tlsCertFile), private_key: readFileSync(this.o.tlsKeyFile) }], false);
    } else if (this.o.tlsCertFile || this.o.tlsKeyFile) {
      throw new Error('GANTRY_GRPC_TLS_CERT and GANTRY_GRPC_TLS_KEY must be set together');
    } else creds = grpc.ServerCredentials.createInsecure();
    const host = this.o.host.includes(':') && !this.o.host.startsWith('[') ? `[${this.o.host}]` : this.o.host;
    this.port = await new Promise<number>((resolve, reject) => server.bindAsync(`${host}:${this.o.port}`, creds, (err, port) => (err ? reject(err) : resolve(port))));
    this.server = server;
    const every = Math.max(250, Math.min(5_000, (this.o.heartbeatIntervalS * 1000) / 2));
    this.sweepTimer = setInterval(() => this.sweep(), every);
    this.sweepTimer.unref();
    this.log.info({ grpc_port: this.port, tls: Boolean(this.o.tlsCertFile), window: this.window }, 'agent gRPC server listening');
    return this.port;
  }

  /** Graceful stop: tells every agent (non-fatal, they reconnect elsewhere or later), then shuts down. */
  async stop(timeoutMs = 5_000): Promise<void> {
    if (!this.server) return;
    this.stopping = true;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    for (const c of [...this.conns]) this.endConn(c, { error: unavailable('server_shutting_down', 'the server is shutting down; reconnect'), fatal: false });
    const server = this.server;
    this.server = null;
    await new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, timeoutMs);
      t.unref();
      server.tryShutdown(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  /**
   * Ends the streams one transport carries (non-fatal: the agents reconnect, to another node of
   * their --server list or here later): the HTTP edge's shutdown ends the WebSocket ones this way
   * before it closes its sockets.
   */
  endTransport(transport: AgentLink['transport']): void {
    for (const c of [...this.conns]) if (c.link.transport === transport) this.endConn(c, { error: unavailable('server_shutting_down', 'the server is shutting down; reconnect'), fatal: false });
  }

  /** DELETE /agents/{id}: ends the agent's stream (fatal for it) and releases its tasks now. */
  kickAgent(agentId: string, code = 'agent_deleted', message = 'this agent was deleted by a team admin'): void {
    const reason: EndReason = { error: new AppError('not_found', code, message), fatal: true };
    for (const c of this.conns) if (c.agentId === agentId) c.pendingEnd = reason;
    this.o.sessions.revoke(agentId);
    // a stream still in hello (no session yet) ends too
    for (const c of [...this.conns]) if (c.agentId === agentId) this.endConn(c, reason);
  }

  /**
   * After a change to a team's active models or custom nodes (files onRegistryChange): every live
   * stream of the team on this node gets a `sync` hint (the agent fetches the manifest now rather
   * than at its next periodic check). Returns how many streams were told.
   */
  syncHint(teamId: string): number {
    let n = 0;
    for (const c of this.conns) if (c.teamId === teamId && c.sessionId && !c.closed && this.send(c, { sync: {} })) n++;
    return n;
  }

  /** Opens a gateway tunnel stream on the agent's stream on this node; null when it has none here. */
  openTunnel(agentId: string, teamId: string, open: TunnelOpenInfo, h: TunnelHandlers): TunnelChannel | null {
    for (const c of this.conns) if (c.agentId === agentId && c.teamId === teamId && c.sessionId && !c.closed && c.tunnels) return c.tunnels.open(open, h);
    return null;
  }

  /** Hook for identity.onCredentialsRevoked: streams authenticated with these credentials end now. */
  credentialsRevoked(ids: readonly string[]): void {
    const set = new Set(ids);
    for (const c of [...this.conns]) if (set.has(c.credentialId)) this.revokeConn(c);
  }

  private revokeConn(c: Conn): void {
    const reason: EndReason = { error: unauthorized('credential_revoked', 'this agent credential has been revoked'), fatal: true };
    if (c.agentId && c.sessionId) {
      c.pendingEnd = reason;
      this.o.sessions.revoke(c.agentId);
    }
    this.endConn(c, reason);
  }

  // ---------------------------------------------------------------------------------------------
  // stream

  /** Whether new streams are refused (the node is stopping). */
  get isStopping(): boolean {
    return this.stopping;
  }

  /** Verifies a stream's or call's ak- (`Authorization: Bearer ak-...`); throws unauthorized AppErrors. */
  async authenticate(token: string | null): Promise<AgentIdent> {
    if (this.stopping) throw unavailable('server_shutting_down', 'the server is shutting down');
    if (!token) throw new AppError('unauthorized', 'credential_missing', 'authorization: Bearer ak-... is required');
    return this.o.verifyCredential(token);
  }

  private onConnect(call: Call): void {
    const token = bearer(call.metadata);
    const peer = call.getPeer();
    const fail = (e: unknown): void => {
      const g = toGrpcError(e);
      if (g.unexpected) this.log.error({ err: e, peer }, 'agent stream setup failed');
      call.emit('error', { code: g.code, details: g.details });
    };
    this.authenticate(token).then((ident) => {
      if (call.cancelled || this.stopping) {
        if (!call.cancelled) fail(unavailable('server_shutting_down', 'the server is shutting down'));
        return;
      }
      const link: AgentLink = {
        peer,
        transport: 'grpc',
        write: (m) => {
          // bounded by the window: the grpc-js write buffer never holds more than `window` messages
          call.write(m);
          return true;
        },
        end: (st) => {
          if (st) call.emit('error', { code: st.code, details: st.details });
          else call.end();
        },
      };
      const input = this.attachStream(ident, token as string, link);
      call.on('data', (m: AgentMessage__Output) => input.data(m));
      call.on('end', () => input.halfClosed());
      call.on('cancelled', () => input.gone());
      call.on('error', () => input.gone());
      call.on('close', () => input.gone());
    }, fail);
  }

  /**
   * Opens a stream on an authenticated link (the ak- was verified by the transport: gRPC metadata
   * or the WebSocket handshake); the first message must be hello. The transport feeds the returned
   * input; everything else (session, window, credit, tunnels) is the same for every transport.
   */
  attachStream(ident: AgentIdent, token: string, link: AgentLink): AgentStreamInput {
    const now = this.now();
    const conn: Conn = {
      seq: ++this.seq,
      link,
      token,
      credentialId: ident.credentialId,
      teamId: ident.teamId,
      peer: link.peer,
      agentId: null,
      sessionId: null,
      machineId: null,
      info: null,
      gate: null,
      queue: [],
      credit: new CreditReturner(this.window, (grant) => this.write(conn, { credit: { grant } })),
      inflight: 0,
      chain: Promise.resolve(),
      openedAt: now,
      lastSeenAt: now,
      lastVerifiedAt: now,
      closed: false,
      pendingEnd: null,
      tunnels: null,
    };
    this.conns.add(conn);
    return {
      data: (m) => this.onData(conn, m),
      halfClosed: () => this.endConn(conn, null),
      gone: () => this.dropConn(conn),
    };
  }

  private onData(c: Conn, raw: AgentMessage__Output): void {
    if (c.closed) return;
    c.lastSeenAt = this.now();
    // tunnel frames are outside the message window (each tunnel stream has its own byte window)
    // and are not ordered with task messages: straight to their stream
    if (raw.msg === 'tunnel') {
      if (raw.tunnel) c.tunnels?.onFrame(raw.tunnel);
      return;
    }
    if (raw.msg === 'tunnels') {
      for (const f of raw.tunnels?.frames ?? []) c.tunnels?.onFrame(f);
      return;
    }
    // every message is decoded by the one schema (wire-schema.ts) before anything looks at it
    const d = decodeAgentMessage(raw);
    if (d.ok && d.msg.msg === 'credit') {
      c.gate?.grant(d.msg.credit.grant);
      this.flushQueue(c);
      return;
    }
    const windowed = raw.msg !== 'hello' && raw.msg !== 'credit';
    if (windowed) {
      c.inflight++;
      if (c.inflight > this.window) {
        this.endConn(c, { error: new AppError('rate_limited', 'window_exceeded', `more than ${this.window} messages in flight without credit`), fatal: false });
        return;
      }
    }
    // a message that does not decode ends the stream in order, after what arrived before it
    c.chain = c.chain
      .then(() => {
        if (c.closed) return undefined;
        if (!d.ok) throw d.error;
        return this.handle(c, d.msg);
      })
      .catch((e: unknown) => {
        // the database away for a moment (a restart, a failover) ends no live session: a heartbeat or
        // inventory not recorded is sent again, task reports go through the actors (which retry);
        // only a hello that cannot register the agent ends its stream (the agent reconnects)
        if (c.agentId && isAppError(e) && e.code === 'database_unavailable') {
          this.log.debug({ agent_id: c.agentId, msg: d.ok ? d.msg.msg : 'undecodable' }, 'agent message not recorded: database unavailable; stream kept');
          return;
        }
        const g = toGrpcError(e);
        if (g.unexpected) this.log.error({ err: e, agent_id: c.agentId }, 'agent message handling failed');
        this.endConn(c, { error: isAppError(e) ? e : new AppError('internal', 'internal_error', 'internal error'), fatal: isAppError(e) && e.kind === 'unauthorized' });
      })
      .finally(() => {
        if (windowed) {
          c.inflight--;
          c.credit.processed();
        }
      });
  }

  private async handle(c: Conn, m: AgentStreamMessage): Promise<void> {
    if (m.msg === 'hello') {
      if (c.agentId) throw invalidParameter('hello: already received on this stream');
      return this.onHello(c, m.hello);
    }
    if (!c.agentId || !c.sessionId) throw invalidParameter('the first message on the stream must be hello');
    const agentId = c.agentId;
    const sessionId = c.sessionId;
    switch (m.msg) {
      case 'heartbeat':
        await this.onHeartbeat(c, m.heartbeat);
        return;
      case 'ack':
        this.o.sessions.fromAgent(agentId, sessionId, m.ack);
        return;
      case 'provisioned':
        this.o.sessions.fromAgent(agentId, sessionId, m.provisioned);
        return;
      case 'progress':
        this.o.sessions.fromAgent(agentId, sessionId, m.progress);
        return;
      case 'result': {
        const r = m.result;
        const t = { taskId: r.task_id, attempt: r.attempt, epoch: r.epoch };
        const out = this.outputOf(c.teamId, t.taskId, r);
        if (typeof out === 'string') this.o.sessions.fromAgent(agentId, sessionId, { type: 'failed', ...t, error: out, ...(r.traceparent ? { traceparent: r.traceparent } : {}) });
        else this.o.sessions.fromAgent(agentId, sessionId, { type: 'finished', ...t, output: out, ...(r.traceparent ? { traceparent: r.traceparent } : {}) });
        return;
      }
      case 'failure':
        this.o.sessions.fromAgent(agentId, sessionId, m.failure);
        return;
      case 'inventory': {
        const { models, custom_nodes: nodes } = m.inventory;
        await this.o.agents.updateInventory(agentId, models, nodes);
        if (c.info) {
          const needsSync = await this.needsSync(c.teamId, models, nodes);
          c.info = { ...this.currentInfo(c), models, needsSync };
          this.o.sessions.update(agentId, sessionId, c.info);
        }
        return;
      }
      case 'status': {
        if (c.info) {
          c.info = { ...this.currentInfo(c), draining: m.status.draining };
          this.o.sessions.update(agentId, sessionId, c.info);
        }
        return;
      }
      case 'container':
        this.o.containers?.report(agentId, m.container);
        return;
      case 'credit': // handled on arrival (onData)
      case undefined: // no member we know (a newer agent): ignored, still credited
        return;
    }
  }

  private async onHello(c: Conn, h: HelloMessage): Promise<void> {
    const machineId = h.machine_id;
    const { labels, gpus, models, custom_nodes: customNodes, slots } = h;
    const max = this.o.maxAgentsPerTeam;
    if (max > 0 && (await this.o.agents.count(c.teamId)) >= max) {
      const existing = await this.o.agents.list(c.teamId, Math.max(max, 1) + 1000, 0);
      if (!existing.rows.some((r) => r.machineId === machineId))
        throw new AppError('rate_limited', 'agent_quota_exceeded', `this team already has ${existing.total} agent(s), the maximum is ${max} (GANTRY_MAX_AGENTS); delete an agent or raise the quota`);
    }
    const row = await this.o.agents.register({
      teamId: c.teamId,
      machineId,
      displayName: h.display_name.trim() || machineId,
      labels,
      gpus,
      models,
      customNodes,
      slots,
      agentVersion: h.agent_version || 'unknown',
      credentialId: c.credentialId,
      nodeId: this.o.nodeId(),
    });
    // before the session opens: the first AgentInfo the scheduler sees already says whether a task
    // sent to this agent must provision first
    const needsSync = await this.needsSync(c.teamId, models, customNodes);
    if (c.closed) return;
    const info: AgentInfo = { ...agentInfoOf(row), draining: h.draining, needsSync };
    c.agentId = row.id;
    c.machineId = machineId;
    c.info = info;
    c.gate = new CreditGate(clampWindow(h.window));
    const running = h.running;
    const sessionId = this.o.sessions.open(
      row.id,
      info,
      (msg) => this.deliver(c, msg),
      (reason) => this.endConn(c, c.pendingEnd ?? this.reasonOf(reason)),
      running,
    );
    c.sessionId = sessionId;
    this.bySession.set(sessionId, c);
    const batch = new TunnelBatcher<TunnelFrame>((frames) => this.write(c, frames.length === 1 ? { tunnel: frames[0] as TunnelFrame } : { tunnels: { frames } }));
    c.tunnels = new TunnelMux((f) => {
      if (c.closed) return false;
      batch.push(f);
      return true;
    });
    if (this.o.containers) await this.o.containers.hello(row.id, c.teamId, h.container_runtime, h.tunnel, h.containers);
    // welcome is outside the window
    this.write(c, {
      welcome: { agent_id: row.id, session_id: sessionId, heartbeat_interval_s: this.o.heartbeatIntervalS, window: this.window, team_id: c.teamId, server_version: this.o.serverVersion ?? PROTOCOL_VERSION },
    });
    this.log.info({ agent_id: row.id, machine_id: machineId, session_id: sessionId, peer: c.peer, transport: c.link.transport, running: running.length, slots }, 'agent connected');
  }

  /** needsSync for an inventory; true when the check fails (a needless sync is harmless, a skipped one is not). */
  private async needsSync(teamId: string, models: string[], customNodes: string[]): Promise<boolean> {
    if (!this.o.needsSync) return false;
    try {
      return await this.o.needsSync(teamId, { models, customNodes });
    } catch (e) {
      this.log.warn({ err: e, team_id: teamId }, 'needsSync check failed; assuming the agent must sync');
      return true;
    }
  }

  /** The session's current AgentInfo (its needsSync may have been recomputed since c.info was set). */
  private currentInfo(c: Conn): AgentInfo {
    const s = c.agentId ? this.o.sessions.session(c.agentId) : null;
    return s && s.sessionId === c.sessionId ? s.info : (c.info as AgentInfo);
  }

  private reasonOf(reason: string): EndReason {
    if (reason.startsWith('replaced')) return { error: conflict('session_replaced', 'another connection with the same machine_id took over this agent'), fatal: true };
    return { error: forbidden('session_revoked', reason), fatal: true };
  }

  private async onHeartbeat(c: Conn, hb: HeartbeatMessage): Promise<void> {
    const agentId = c.agentId as string;
    const now = this.now();
    // revocation/expiry take effect on the next heartbeat even without the revoke hook (other nodes)
    if (now - c.lastVerifiedAt >= this.o.heartbeatIntervalS * 1000 - 50) {
      c.lastVerifiedAt = now;
      try {
        await this.o.verifyCredential(c.token);
      } catch (e) {
        if (isAppError(e) && e.kind === 'unauthorized') {
          this.revokeConn(c);
          return;
        }
        throw e;
      }
    }
    // the schema already bounded and normalised every field
    await this.o.agents.heartbeat(agentId, { ...hb, reported_at: new Date(now).toISOString() });
  }

  /** The task output the actors store, or an error string when the agent reported keys it may not use. */
  private outputOf(teamId: string, taskId: string, r: ResultMessage): Record<string, unknown> | string {
    const prefix = `teams/${teamId}/outputs/${taskId}/`;
    const outputs = r.outputs;
    const keys = [...new Set([r.storage_key, ...r.storage_keys, ...outputs.map((o) => o.storage_key)].filter(Boolean))];
    if (keys.some((k) => !k.startsWith(prefix))) return `the agent reported outputs outside this task's storage prefix (${prefix})`;
    const primary = r.storage_key || outputs[0]?.storage_key || '';
    const storageKeys = r.storage_keys.length ? r.storage_keys : outputs.map((o) => o.storage_key);
    return {
      ...r.extra_json,
      ...(primary ? { storage_key: primary } : {}),
      storage_keys: storageKeys,
      image_count: r.image_count,
      outputs,
    };
  }

  // ---------------------------------------------------------------------------------------------
  // server -> agent

  private deliver(c: Conn, msg: ServerToAgent): boolean {
    if (c.closed || !c.gate) return false;
    if (c.held) {
      c.held.push(msg);
      return true;
    }
    const lookup = this.o.partnerKey;
    if (msg.type === 'assign' && msg.assignment.toolType === 'comfyui' && lookup) {
      // the team's Comfy API key for partner nodes (only when the team turned it on; only ComfyUI
      // runs have partner nodes), read for this message only; like a queued send, the assignment
      // counts as delivered now
      c.held = [];
      void lookup(c.teamId)
        .catch((e: unknown) => {
          this.log.warn({ team_id: c.teamId, task_id: msg.taskId, err_message: e instanceof Error ? e.message : String(e) }, 'partner-node key lookup failed: assignment sent without it');
          return null;
        })
        .then((key) => {
          const rest = c.held ?? [];
          c.held = null;
          if (!c.closed && c.gate) this.send(c, this.serverMessage(msg, key ?? ''));
          for (const m of rest) this.deliver(c, m);
        });
      return true;
    }
    return this.send(c, this.serverMessage(msg, ''));
  }

  /** The wire form of a server -> agent message (comfyOrgApiKey: Assign.comfy_org_api_key, '' = none). */
  private serverMessage(msg: ServerToAgent, comfyOrgApiKey: string): ServerMessage {
    let out: ServerMessage;
    switch (msg.type) {
      case 'assign': {
        const a = msg.assignment;
        out = {
          assign: {
            task_id: msg.taskId,
            attempt: msg.attempt,
            epoch: msg.epoch,
            tool_type: a.toolType,
            workflow_json: JSON.stringify(a.workflow ?? null),
            parameters_json: JSON.stringify(a.parameters ?? {}),
            input_files: a.inputFiles.map((f) => ({ key: f.key, file_key: f.fileKey, file_name: f.fileName, node_id: f.nodeId ?? '', field: f.field ?? '', target_path: f.targetPath ?? '' })),
            timeout_s: a.timeoutS,
            provision: msg.provision,
            required_models: a.requiredModels ?? [],
            traceparent: a.traceParent ?? '',
            comfy_org_api_key: comfyOrgApiKey,
            checkpoint_key: a.checkpoint?.key ?? '',
            checkpoint_step: a.checkpoint?.step ?? 0,
          },
        };
        break;
      }
      case 'cancel':
        out = { cancel: { task_id: msg.taskId, attempt: msg.attempt, epoch: msg.epoch } };
        break;
      case 'drain':
        out = { drain: {} };
        break;
      case 'container': {
        const cmd = msg.cmd;
        if (cmd.op === 'start')
          out = {
            container: {
              start: {
                instance_id: cmd.instanceId,
                service_id: cmd.serviceId,
                service_slug: cmd.serviceSlug,
                image: cmd.image,
                exposed_port: cmd.exposedPort,
                env: cmd.env,
                volumes: cmd.volumes.map((v) => ({ host_path: v.hostPath, container_path: v.containerPath })),
                gpu_count: cmd.gpuCount,
                health_path: cmd.healthPath,
              },
            },
          };
        else out = { container: cmd.op === 'stop' ? { stop: cmd.instanceId } : { remove: cmd.instanceId } };
        break;
      }
    }
    return out;
  }

  /** A window-consuming message: written now when credit allows, else queued. */
  private send(c: Conn, out: ServerMessage): boolean {
    if (c.closed || !c.gate) return false;
    if (c.queue.length === 0 && c.gate.take()) return this.write(c, out);
    if (c.queue.length >= MAX_QUEUED_TO_AGENT) {
      this.endConn(c, { error: new AppError('rate_limited', 'agent_not_reading', 'the agent stopped returning credit'), fatal: false });
      return false;
    }
    c.queue.push(out);
    return true;
  }

  private flushQueue(c: Conn): void {
    while (!c.closed && c.gate && c.queue.length > 0 && c.gate.take()) this.write(c, c.queue.shift() as ServerMessage);
  }

  private write(c: Conn, m: ServerMessage): boolean {
    if (c.closed) return false;
    try {
      return c.link.write(m);
    } catch {
      return false;
    }
  }

  // ---------------------------------------------------------------------------------------------
  // lifecycle

  /** Ends the stream (reason null = the agent half-closed: a clean OK end). */
  private endConn(c: Conn, reason: EndReason | null): void {
    if (c.closed) return;
    const g = reason ? toGrpcError(reason.error) : null;
    // credit owed for what was processed goes out before the end (whether a transport delivers the
    // batched grant before it must not depend on how the agent's messages were split into reads)
    c.credit.flush();
    if (reason && g) {
      this.write(c, { error: { code: g.errorCode, message: g.details, fatal: reason.fatal } });
      this.log.info({ agent_id: c.agentId, session_id: c.sessionId, code: g.errorCode }, 'agent stream ended by the server');
    }
    this.dropConn(c);
    try {
      c.link.end(g ? { code: g.code, details: g.details } : null);
    } catch {
      /* the call is already gone */
    }
  }

  /** Forgets the stream; its session is closed (the agent actor starts the grace period). */
  private dropConn(c: Conn): void {
    if (!c.closed) {
      c.closed = true;
      c.credit.close();
      c.queue.length = 0;
    }
    if (!this.conns.delete(c)) return;
    c.tunnels?.closeAll('agent_disconnected', 'the agent stream ended');
    if (c.sessionId) this.bySession.delete(c.sessionId);
    if (c.agentId && c.sessionId) this.o.containers?.closed(c.agentId);
    if (c.agentId && c.sessionId) {
      this.o.sessions.close(c.agentId, c.sessionId);
      this.log.info({ agent_id: c.agentId, session_id: c.sessionId }, 'agent disconnected');
    }
  }

  private sweep(): void {
    const now = this.now();
    const dead = this.o.heartbeatIntervalS * 3 * 1000;
    const helloTimeout = this.o.helloTimeoutMs ?? 10_000;
    for (const c of [...this.conns]) {
      if (!c.agentId && now - c.openedAt > helloTimeout)
        this.endConn(c, { error: deadlineExceeded('hello_timeout', `no hello within ${helloTimeout} ms`), fatal: false });
      else if (c.agentId && now - c.lastSeenAt > dead)
        this.endConn(c, { error: unavailable('heartbeat_missed', `no message for ${Math.round((now - c.lastSeenAt) / 1000)} s (3 heartbeat intervals)`), fatal: false });
    }
  }

  // ---------------------------------------------------------------------------------------------
  // unary

  private unary<T>(md: grpc.Metadata, cb: grpc.sendUnaryData<T>, fn: (ident: AgentIdent) => Promise<T>): void {
    void this.runUnary(bearer(md), fn).then((r) => (r.ok ? cb(null, r.value) : cb({ code: r.code, details: r.details })));
  }

  /** A unary call with its ak- verified first (both transports: the WebSocket one checks the socket's ak- on every call). */
  private async runUnary<T>(token: string | null, fn: (ident: AgentIdent) => Promise<T>): Promise<UnaryOutcome<T>> {
    try {
      if (!token) throw new AppError('unauthorized', 'credential_missing', 'authorization: Bearer ak-... is required');
      return { ok: true, value: await fn(await this.o.verifyCredential(token)) };
    } catch (e) {
      const g = toGrpcError(e);
      if (g.unexpected) this.log.error({ err: e }, 'agent unary call failed');
      return { ok: false, code: g.code, details: g.details };
    }
  }

  /** PresignOutputs on another transport (the WebSocket's request frames). */
  callPresignOutputs(token: string, req: PresignOutputsRequest__Output): Promise<UnaryOutcome<PresignOutputsResponse>> {
    return this.runUnary(token, (ident) => this.presignOutputs(ident, req));
  }

  /** PresignInputs on another transport. */
  callPresignInputs(token: string, req: PresignInputsRequest__Output): Promise<UnaryOutcome<PresignInputsResponse>> {
    return this.runUnary(token, (ident) => this.presignInputs(ident, req));
  }

  /** PresignCheckpoint on another transport. */
  callPresignCheckpoint(token: string, req: PresignCheckpointRequest__Output): Promise<UnaryOutcome<PresignCheckpointResponse>> {
    return this.runUnary(token, (ident) => this.presignCheckpoint(ident, req));
  }

  /** CommitCheckpoint on another transport. */
  callCommitCheckpoint(token: string, req: CommitCheckpointRequest__Output): Promise<UnaryOutcome<CommitCheckpointResponse>> {
    return this.runUnary(token, (ident) => this.commitCheckpoint(ident, req));
  }

  /** GetSyncManifest on another transport. */
  callGetSyncManifest(token: string): Promise<UnaryOutcome<SyncManifestMsg>> {
    return this.runUnary(token, (ident) => this.getSyncManifest(ident));
  }

  /** The task, if this session's agent holds it at this attempt and epoch. */
  private async heldTask(ident: { teamId: string }, req: { session_id: string; task_id: string; attempt: number; epoch: number }): Promise<{ conn: Conn; task: TaskRecord }> {
    const conn = this.bySession.get(req.session_id);
    if (!conn || conn.closed || conn.teamId !== ident.teamId || !conn.agentId) throw unavailable('session_not_connected', 'no live agent stream with this session_id on this node; reconnect and retry');
    const task = await this.o.tasks.load(req.task_id);
    const ok =
      task !== null &&
      task.teamId === ident.teamId &&
      task.agentId === conn.agentId &&
      task.attempt === req.attempt &&
      task.leaseEpoch === req.epoch &&
      (task.status === 'queued' || task.status === 'provisioning' || task.status === 'running');
    if (!ok || !task) throw new AppError('precondition_failed', 'task_not_held', 'this agent does not hold that task at this attempt and epoch');
    return { conn, task };
  }

  private store(): ObjectStore {
    if (!this.o.objectStore) throw unavailable('object_store_unavailable', 'the object store is not configured on this node');
    return this.o.objectStore;
  }

  private async presignOutputs(ident: { credentialId: string; teamId: string }, raw: PresignOutputsRequest__Output): Promise<PresignOutputsResponse> {
    const store = this.store();
    const req = decodeRequest(PresignOutputsRequest, raw);
    const { task } = await this.heldTask(ident, req);
    const uploads = [];
    for (const f of req.files) {
      const key = `teams/${task.teamId}/outputs/${task.id}/${task.attempt}/${f.name}`;
      const p = await store.presignPut(key, { contentLength: f.size, contentType: f.content_type, expiresInS: this.o.presignExpiresS ?? 3600 });
      uploads.push({ name: f.name, storage_key: key, upload_url: p.url, upload_headers: p.headers, expires_at_ms: p.expiresAt });
    }
    return { uploads };
  }

  /** One checkpoint key per attempt and step (objects are write-once), under the task's output prefix (swept with its outputs). */
  private checkpointKey(task: TaskRecord, step: number): string {
    return `teams/${task.teamId}/outputs/${task.id}/checkpoints/${task.attempt}/step-${step}.tar`;
  }

  private async presignCheckpoint(ident: { credentialId: string; teamId: string }, raw: PresignCheckpointRequest__Output): Promise<PresignCheckpointResponse> {
    if (!this.o.checkpoints) throw new AppError('precondition_failed', 'checkpoints_unavailable', 'checkpoints are not kept on this node');
    const store = this.store();
    const req = decodeRequest(PresignCheckpointRequest, raw);
    const { task } = await this.heldTask(ident, req);
    const expiresInS = this.o.presignExpiresS ?? 3600;
    const out: PresignCheckpointResponse = { storage_key: '', upload_url: '', upload_headers: {}, download_url: '', step: 0 };
    if (req.size > 0) {
      const key = this.checkpointKey(task, req.step);
      const p = await store.presignPut(key, { contentLength: req.size, contentType: 'application/x-tar', expiresInS });
      Object.assign(out, { storage_key: key, upload_url: p.url, upload_headers: p.headers });
    }
    const have = await this.o.checkpoints.checkpoint(task.id);
    // only a key of this team's outputs is ever signed (it was checked when committed)
    if (have && have.key.startsWith(`teams/${task.teamId}/outputs/`)) Object.assign(out, { download_url: await store.presignGet(have.key, { expiresInS }), step: have.step });
    return out;
  }

  private async commitCheckpoint(ident: { credentialId: string; teamId: string }, raw: CommitCheckpointRequest__Output): Promise<CommitCheckpointResponse> {
    if (!this.o.checkpoints) throw new AppError('precondition_failed', 'checkpoints_unavailable', 'checkpoints are not kept on this node');
    const store = this.store();
    const req = decodeRequest(CommitCheckpointRequest, raw);
    const { task } = await this.heldTask(ident, req);
    const key = this.checkpointKey(task, req.step);
    if (req.storage_key !== key) throw invalidParameter(`storage_key: must be the key PresignCheckpoint gave (${key})`);
    if (!(await store.head(key))) throw new AppError('precondition_failed', 'checkpoint_not_uploaded', 'the checkpoint was not uploaded to its storage_key');
    const r = await this.o.checkpoints.setCheckpoint(task.id, task.leaseEpoch, key, req.step);
    if (!r) throw new AppError('precondition_failed', 'task_not_held', 'this agent does not hold that task at this attempt and epoch');
    // bounded: the checkpoint it replaces (an earlier attempt's) is deleted
    if (r.previous && r.previous !== key && r.previous.startsWith(`teams/${task.teamId}/outputs/`)) {
      await store.delete(r.previous).catch((e: unknown) => this.log.warn({ err: e, task_id: task.id }, 'could not delete the replaced checkpoint'));
    }
    return {};
  }

  private async getSyncManifest(ident: { credentialId: string; teamId: string }): Promise<SyncManifestMsg> {
    if (!this.o.syncManifest) throw unavailable('sync_unavailable', 'model sync is not configured on this node');
    const m = await this.o.syncManifest(ident.teamId);
    const expires = Date.parse(m.expires_at);
    return {
      models: m.models.map((x) => ({ id: x.id, model_path: x.model_path, model_type: x.model_type, size: x.size, sha256: x.sha256, download_url: x.download_url })),
      custom_nodes: m.custom_nodes.map((x) => ({
        id: x.id,
        package_name: x.package_name,
        node_version: x.node_version,
        inventory_name: x.inventory_name,
        size: x.size,
        sha256: x.sha256,
        download_url: x.download_url,
      })),
      expires_at_ms: Number.isFinite(expires) ? expires : 0,
    };
  }

  private async presignInputs(ident: { credentialId: string; teamId: string }, raw: PresignInputsRequest__Output): Promise<PresignInputsResponse> {
    const { task } = await this.heldTask(ident, decodeRequest(PresignInputsRequest, raw));
    const a = await this.o.tasks.assignment(task.id);
    const inputs = a?.inputFiles ?? [];
    if (inputs.length === 0) return { files: [] };
    const store = this.store();
    const keyOf = this.o.inputObjectKey ?? ((_team: string, fileKey: string) => fileKey);
    const files = [];
    for (const f of inputs) {
      const url = await store.presignGet(keyOf(task.teamId, f.fileKey), { expiresInS: this.o.presignExpiresS ?? 3600 });
      files.push({ key: f.key, file_key: f.fileKey, file_name: f.fileName, download_url: url });
    }
    return { files };
  }
}
