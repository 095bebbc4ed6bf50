/**
 * What the agent server's parts share: its options and the stores it is given, the transport
 * abstraction of a stream (AgentLink, AgentStreamInput) and the state of one live stream (Conn).
 */
import type * as grpc from '@grpc/grpc-js';
import type { AgentInfo, ServerToAgent, TaskStorePort } from '../../actors/ports.js';
import type { AgentRegistration, AgentRow } from '../../domain/agents/record.js';
import type { ObjectStore } from '../../storage/port.js';
import type { AppError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import type { AgentSessions } from './sessions.js';
import type { AgentMessage__Output, CreditGate, CreditReturner, ServerMessage } from '../../protocol/agent-wire.js';
import type { TunnelMux } from '../../gateway/tunnel.js';
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
  updateInventory(agentId: string, models: string[], customNodes: string[], nodeClasses: string[]): Promise<void>;
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
export interface EndReason {
  error: AppError;
  fatal: boolean;
}

export interface Conn {
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

export const MAX_QUEUED_TO_AGENT = 10_000;

export const bearer = (md: grpc.Metadata): string | null => {
  const v = md.get('authorization')[0];
  if (typeof v !== 'string') return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(v);
  return m?.[1] ?? null;
};

