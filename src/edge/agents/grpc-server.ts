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
import { AppError, unavailable } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { toGrpcError } from '../error-map.js';
import { loadAgentProto, type AgentMessage__Output, type ServerMessage } from '../../protocol/agent-wire.js';
import type { PresignOutputsRequest__Output } from '../../gen/gantry/agent/v1/PresignOutputsRequest.js';
import type { PresignOutputsResponse } from '../../gen/gantry/agent/v1/PresignOutputsResponse.js';
import type { PresignInputsRequest__Output } from '../../gen/gantry/agent/v1/PresignInputsRequest.js';
import type { PresignInputsResponse } from '../../gen/gantry/agent/v1/PresignInputsResponse.js';
import type { SyncManifest as SyncManifestMsg } from '../../gen/gantry/agent/v1/SyncManifest.js';
import type { PresignCheckpointRequest__Output } from '../../gen/gantry/agent/v1/PresignCheckpointRequest.js';
import type { PresignCheckpointResponse } from '../../gen/gantry/agent/v1/PresignCheckpointResponse.js';
import type { CommitCheckpointRequest__Output } from '../../gen/gantry/agent/v1/CommitCheckpointRequest.js';
import type { CommitCheckpointResponse } from '../../gen/gantry/agent/v1/CommitCheckpointResponse.js';
import { bearer, type AgentGrpcServerOptions, type AgentIdent, type AgentLink, type AgentStreamInput, type UnaryOutcome } from './conn.js';
import { AgentStreams } from './streams.js';
import { AgentUnaryCalls } from './unary-calls.js';

export type { AgentContainerHooks, AgentRecords, SyncInventory, TeamSyncManifest, TaskCheckpoints, VerifyAgentCredential, AgentGrpcServerOptions, AgentLink, AgentStreamInput, AgentIdent, UnaryOutcome } from './conn.js';

type Call = grpc.ServerDuplexStream<AgentMessage__Output, ServerMessage>;

export class AgentGrpcServer {
  private server: grpc.Server | null = null;
  private port = 0;
  private sweepTimer: NodeJS.Timeout | null = null;
  private readonly log: Logger;
  private stopping = false;
  /** The streams of this node (both transports). */
  private readonly streams: AgentStreams;
  /** The unary calls (both transports: the WebSocket one calls them with its request frames). */
  readonly calls: AgentUnaryCalls;

  constructor(private readonly o: AgentGrpcServerOptions) {
    this.log = o.logger.child({ component: 'agent-grpc' });
    this.streams = new AgentStreams(o, this.log);
    this.calls = new AgentUnaryCalls(o, this.log, (sessionId) => this.streams.bySessionId(sessionId));
  }

  /** The bound port (after start). */
  get boundPort(): number {
    return this.port;
  }

  /** Live streams on this node. */
  connectionCount(): number {
    return this.streams.count();
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
        this.reply(cb, this.calls.callPresignOutputs(bearer(call.metadata), call.request)),
      PresignInputs: (call: grpc.ServerUnaryCall<PresignInputsRequest__Output, PresignInputsResponse>, cb: grpc.sendUnaryData<PresignInputsResponse>) =>
        this.reply(cb, this.calls.callPresignInputs(bearer(call.metadata), call.request)),
      GetSyncManifest: (call: grpc.ServerUnaryCall<unknown, SyncManifestMsg>, cb: grpc.sendUnaryData<SyncManifestMsg>) => this.reply(cb, this.calls.callGetSyncManifest(bearer(call.metadata))),
      PresignCheckpoint: (call: grpc.ServerUnaryCall<PresignCheckpointRequest__Output, PresignCheckpointResponse>, cb: grpc.sendUnaryData<PresignCheckpointResponse>) =>
        this.reply(cb, this.calls.callPresignCheckpoint(bearer(call.metadata), call.request)),
      CommitCheckpoint: (call: grpc.ServerUnaryCall<CommitCheckpointRequest__Output, CommitCheckpointResponse>, cb: grpc.sendUnaryData<CommitCheckpointResponse>) =>
        this.reply(cb, this.calls.callCommitCheckpoint(bearer(call.metadata), call.request)),
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
    this.sweepTimer = setInterval(() => this.streams.sweep(), every);
    this.sweepTimer.unref();
    this.log.info({ grpc_port: this.port, tls: Boolean(this.o.tlsCertFile), window: this.streams.window }, 'agent gRPC server listening');
    return this.port;
  }

  /** Graceful stop: tells every agent (non-fatal, they reconnect elsewhere or later), then shuts down. */
  async stop(timeoutMs = 5_000): Promise<void> {
    if (!this.server) return;
    this.stopping = true;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    this.streams.endAll();
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
    this.streams.endTransport(transport);
  }

  /** DELETE /agents/{id}: ends the agent's stream (fatal for it) and releases its tasks now. */
  kickAgent(agentId: string, code?: string, message?: string): void {
    this.streams.kickAgent(agentId, code, message);
  }

  /** After a change to a team's active models or custom nodes: a `sync` hint to its live streams here (how many were told). */
  syncHint(teamId: string): number {
    return this.streams.syncHint(teamId);
  }

  /** Hook for identity.onCredentialsRevoked: streams authenticated with these credentials end now. */
  credentialsRevoked(ids: readonly string[]): void {
    this.streams.credentialsRevoked(ids);
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
      const input = this.streams.attachStream(ident, token as string, link);
      call.on('data', (m: AgentMessage__Output) => input.data(m));
      call.on('end', () => input.halfClosed());
      call.on('cancelled', () => input.gone());
      call.on('error', () => input.gone());
      call.on('close', () => input.gone());
    }, fail);
  }


  /**
   * Opens a stream on an authenticated link (the ak- was verified by the transport: gRPC metadata
   * or the WebSocket handshake); the first message must be hello (see AgentStreams.attachStream).
   */
  attachStream(ident: AgentIdent, token: string, link: AgentLink): AgentStreamInput {
    return this.streams.attachStream(ident, token, link);
  }

  // ---------------------------------------------------------------------------------------------
  // unary

  private reply<T>(cb: grpc.sendUnaryData<T>, outcome: Promise<UnaryOutcome<T>>): void {
    void outcome.then((r) => (r.ok ? cb(null, r.value) : cb({ code: r.code, details: r.details })));
  }
}
