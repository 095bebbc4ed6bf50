/**
 * The agent wire protocol shared by both ends: the proto loader (same options as the generated
 * types in src/gen), the protocol version and the flow-control primitives. Both the agent program
 * (src/agent) and the server (src/edge/agents) import this module; it imports neither of them
 * (lint zone: src/protocol imports only src/gen and src/shared).
 */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { ProtoGrpcType } from '../gen/agent.js';

export type { AgentMessage, AgentMessage__Output } from '../gen/gantry/agent/v1/AgentMessage.js';
export type { ServerMessage, ServerMessage__Output } from '../gen/gantry/agent/v1/ServerMessage.js';
export type { AgentServiceClient, AgentServiceHandlers } from '../gen/gantry/agent/v1/AgentService.js';
import type { AgentFrame, AgentFrame__Output } from '../gen/gantry/agent/v1/AgentFrame.js';
import type { ServerFrame, ServerFrame__Output } from '../gen/gantry/agent/v1/ServerFrame.js';
import type { ServerMessage, ServerMessage__Output } from '../gen/gantry/agent/v1/ServerMessage.js';
import type { Assign__Output } from '../gen/gantry/agent/v1/Assign.js';
import type { Cancel__Output } from '../gen/gantry/agent/v1/Cancel.js';
import type { Welcome__Output } from '../gen/gantry/agent/v1/Welcome.js';
import type { ServerError__Output } from '../gen/gantry/agent/v1/ServerError.js';
import type { TunnelFrame__Output } from '../gen/gantry/agent/v1/TunnelFrame.js';
import { decodeContainerStart, encodeContainerStart, type ContainerStart } from './container-start.js';
export type { AgentFrame, AgentFrame__Output, ServerFrame, ServerFrame__Output };
export type { ContainerStart } from './container-start.js';

export const PROTO_PATH = fileURLToPath(new URL('../../proto/agent/v1/agent.proto', import.meta.url));

/** Must match the flags of `npm run gen:proto` (keepCase, longs as Number, defaults, oneofs). */
export const LOADER_OPTIONS: protoLoader.Options = { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true };

/** Wire protocol version, sent as agent_version's companion in logs and in Welcome.server_version. */
export const PROTOCOL_VERSION = 'gantry.agent.v1';

/** Default window: messages a sender may have in flight before it waits for credit. */
export const DEFAULT_WINDOW = 256;

let cached: ProtoGrpcType | null = null;
export function loadAgentProto(): ProtoGrpcType {
  if (cached) return cached;
  const def = protoLoader.loadSync(PROTO_PATH, LOADER_OPTIONS);
  cached = grpc.loadPackageDefinition(def) as unknown as ProtoGrpcType;
  return cached;
}

/** The WebSocket transport's path on the HTTP port (service AgentWebSocket in agent.proto). */
export const AGENT_WS_PATH = '/api/v1/agents/connect';

/** WebSocket close code of a stream that ended with a gRPC status: 4000 + the status code (1000 = a clean end). */
export const WS_CLOSE_STATUS_BASE = 4000;

/** Unanswered unary calls an agent may have on one socket. */
export const WS_MAX_PENDING_CALLS = 64;

/** The frame codec of the WebSocket transport: binary protobuf, one frame per WebSocket message. */
export interface AgentFrameCodec {
  encodeAgentFrame(f: AgentFrame): Buffer;
  decodeAgentFrame(b: Buffer): AgentFrame__Output;
  encodeServerFrame(f: ServerFrame): Buffer;
  decodeServerFrame(b: Buffer): ServerFrame__Output;
}

let codec: AgentFrameCodec | null = null;
/**
 * The serializers proto-loader built for AgentWebSocket.Connect from the same loaded definitions
 * and options as the gRPC transport (so a message decodes to the same object on both): no codec of
 * our own. decode* throw on bytes that are not the message.
 */
export function agentFrameCodec(): AgentFrameCodec {
  if (codec) return codec;
  const m = loadAgentProto().gantry.agent.v1.AgentWebSocket.service.Connect;
  codec = { encodeAgentFrame: m.requestSerialize, decodeAgentFrame: m.requestDeserialize, encodeServerFrame: m.responseSerialize, decodeServerFrame: m.responseDeserialize };
  return codec;
}

/** A WebSocket close reason: at most 123 bytes of UTF-8 (RFC 6455 §5.5), cut on a character boundary. */
export function closeReason(s: string): string {
  let out = s.slice(0, 123);
  while (Buffer.byteLength(out) > 123) out = out.slice(0, -1);
  return out;
}

/**
 * Receive side of the window: counts the messages this side has processed and returns them to the
 * peer as Credit, batched per I/O turn (setImmediate) or as soon as a quarter window is owed.
 */
export class CreditReturner {
  private owed = 0;
  private scheduled = false;
  private closed = false;

  constructor(
    private readonly window: number,
    private readonly sendCredit: (grant: number) => void,
  ) {}

  processed(n = 1): void {
    if (this.closed) return;
    this.owed += n;
    if (this.owed >= Math.max(1, Math.floor(this.window / 4))) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  flush(): void {
    if (this.closed || this.owed === 0) return;
    const n = this.owed;
    this.owed = 0;
    this.sendCredit(n);
  }

  close(): void {
    this.closed = true;
  }
}

/**
 * Send side of the window: `available` units; every non-credit message takes one, Credit from the
 * peer returns them (never above the window). `grantedTotal` counts every unit the peer returned,
 * i.e. how many of our messages it has processed in this session (used to confirm transitions).
 */
export class CreditGate {
  available: number;
  grantedTotal = 0;

  constructor(readonly window: number) {
    this.available = window;
  }

  take(): boolean {
    if (this.available <= 0) return false;
    this.available--;
    return true;
  }

  grant(n: number): void {
    if (!Number.isFinite(n) || n <= 0) return;
    this.grantedTotal += n;
    this.available = Math.min(this.window, this.available + n);
  }
}

/** Clamps a peer-announced window to something sane. */
export const clampWindow = (w: number | undefined, def = DEFAULT_WINDOW): number => (w && Number.isFinite(w) && w > 0 ? Math.min(Math.max(Math.floor(w), 4), 4096) : def);

/**
 * Tunnel frames go out in batches: every frame a side has ready in one event-loop turn travels in
 * one stream message (a `tunnels` batch; a lone frame as `tunnel`), so the per-message cost of the
 * gRPC stream is paid once per turn under load, not once per frame. A batch is flushed early once
 * it holds BATCH_MAX_BYTES of payload (messages stay well under the 4 MiB receive default).
 */
type Sized = { length: number } | null | undefined;

/** The stream message carrying a batch: a lone frame as `tunnel`, several as `tunnels`. */
export function tunnelMessage<F>(frames: F[]): { tunnel: F } | { tunnels: { frames: F[] } } {
  const [first, ...rest] = frames;
  return first !== undefined && rest.length === 0 ? { tunnel: first } : { tunnels: { frames } };
}

export class TunnelBatcher<F extends { data?: { data?: Sized } | null; open?: { body?: Sized } | null; head?: { body?: Sized } | null; ws?: { data?: Sized } | null }> {
  static readonly BATCH_MAX_BYTES = 1024 * 1024;
  private pending: F[] = [];
  private bytes = 0;
  private scheduled = false;

  constructor(private readonly write: (frames: F[]) => void) {}

  push(f: F): void {
    this.pending.push(f);
    this.bytes += 64 + (f.data?.data?.length ?? 0) + (f.open?.body?.length ?? 0) + (f.head?.body?.length ?? 0) + (f.ws?.data?.length ?? 0);
    if (this.bytes >= TunnelBatcher.BATCH_MAX_BYTES) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  flush(): void {
    if (this.pending.length === 0) return;
    const frames = this.pending;
    this.pending = [];
    this.bytes = 0;
    this.write(frames);
  }

  clear(): void {
    this.pending = [];
    this.bytes = 0;
  }
}

// ---------------------------------------------------------------------------------------------
// server -> agent messages: encoded once on the node, decoded once on the agent

/**
 * A resolved workflow as it travels to the agent: the workflow's workflow_json (a JSON object: a
 * ComfyUI API graph or a nerfstudio spec, see src/domain/workflows) with the parameter values injected.
 */
export type WorkflowJson = Record<string, unknown>;

/** What an agent needs to run a task (the node reads it with the assigning transition). */
export interface TaskAssignment {
  taskId: string;
  attempt: number;
  toolType: 'comfyui' | 'nerfstudio';
  workflow: WorkflowJson;
  parameters: Record<string, unknown>;
  inputFiles: Array<{ key: string; fileKey: string; fileName: string; nodeId?: string; field?: string; targetPath?: string }>;
  timeoutS: number;
  /** The workflow's required_models: provisioning fails only when one of these cannot be synced. */
  requiredModels?: string[];
  /** W3C traceparent the agent's span of the run is parented on (tracing on; absent or null otherwise). */
  traceParent?: string | null;
  /** The latest checkpoint an earlier attempt uploaded (nerfstudio resume); absent or null: none. */
  checkpoint?: { key: string; step: number } | null;
}

/** A container command: start an instance, or stop/remove one. */
export type ContainerCommand = ({ op: 'start' } & ContainerStart) | { op: 'stop'; instanceId: string } | { op: 'remove'; instanceId: string };

/** What the node sends down an agent's stream (the agent actor's ServerToAgent has this shape). */
export type ServerCommand =
  | { type: 'assign'; taskId: string; attempt: number; epoch: number; assignment: TaskAssignment; provision: boolean }
  | { type: 'cancel'; taskId: string; attempt: number; epoch: number }
  | { type: 'drain' }
  | { type: 'container'; cmd: ContainerCommand };

/** The wire form of a server -> agent command (comfyOrgApiKey: Assign.comfy_org_api_key, '' = none). */
export function encodeServerCommand(msg: ServerCommand, comfyOrgApiKey: string): ServerMessage {
  switch (msg.type) {
    case 'assign': {
      const a = msg.assignment;
      return {
        assign: {
          task_id: msg.taskId,
          attempt: msg.attempt,
          epoch: msg.epoch,
          tool_type: a.toolType,
          workflow_json: JSON.stringify(a.workflow),
          parameters_json: JSON.stringify(a.parameters),
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
    }
    case 'cancel':
      return { cancel: { task_id: msg.taskId, attempt: msg.attempt, epoch: msg.epoch } };
    case 'drain':
      return { drain: {} };
    case 'container': {
      const cmd = msg.cmd;
      if (cmd.op === 'start') return { container: { start: encodeContainerStart(cmd) } };
      return { container: cmd.op === 'stop' ? { stop: cmd.instanceId } : { remove: cmd.instanceId } };
    }
  }
}

/** The assignment's JSON payloads, parsed once where the agent receives it; a bad one fails the task when it runs. */
export type AssignPayload = { ok: true; workflow: WorkflowJson; parameters: Record<string, unknown> } | { ok: false; error: string };

/** An Assign as the agent handles it: the wire fields plus its parsed payload. */
export interface AssignMessage extends Assign__Output {
  payload: AssignPayload;
}

/** Every server -> agent message, by the oneof member that is set (tunnel and tunnels are both `tunnels`). */
export type ServerMsg =
  | { msg: 'welcome'; welcome: Welcome__Output }
  | { msg: 'assign'; assign: AssignMessage }
  | { msg: 'cancel'; cancel: Cancel__Output }
  | { msg: 'drain' }
  | { msg: 'credit'; grant: number }
  | { msg: 'error'; error: ServerError__Output }
  | { msg: 'sync' }
  | { msg: 'container'; container: ContainerCommand }
  | { msg: 'tunnels'; frames: TunnelFrame__Output[] }
  /** No member we know is set (a newer server's message). */
  | { msg: 'unknown' };

/** What the agent program handles (the stream client keeps welcome, credit, error and tunnel frames): each is credited once processed. */
export type ServerCommandMsg = Exclude<ServerMsg, { msg: 'welcome' | 'credit' | 'error' | 'tunnels' }>;

const isJsonObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Parses an Assign's workflow_json and parameters_json: both must be JSON objects. */
function assignPayload(a: Assign__Output): AssignPayload {
  let workflow: unknown;
  let parameters: unknown;
  try {
    workflow = JSON.parse(a.workflow_json || 'null');
    parameters = JSON.parse(a.parameters_json || '{}');
  } catch {
    return { ok: false, error: 'the assignment carried invalid JSON' };
  }
  if (!isJsonObject(workflow)) return { ok: false, error: 'the assignment carried no workflow (workflow_json must be a JSON object)' };
  if (!isJsonObject(parameters)) return { ok: false, error: 'the assignment carried invalid parameters (parameters_json must be a JSON object)' };
  return { ok: true, workflow, parameters };
}

const UNKNOWN: ServerMsg = { msg: 'unknown' };

/** The agent's one decoder of what the server says on its stream (a member set without its body counts as unknown). */
export function decodeServerMessage(m: ServerMessage__Output): ServerMsg {
  switch (m.msg) {
    case 'welcome':
      return m.welcome ? { msg: 'welcome', welcome: m.welcome } : UNKNOWN;
    case 'assign':
      return m.assign ? { msg: 'assign', assign: { ...m.assign, payload: assignPayload(m.assign) } } : UNKNOWN;
    case 'cancel':
      return m.cancel ? { msg: 'cancel', cancel: m.cancel } : UNKNOWN;
    case 'drain':
      return { msg: 'drain' };
    case 'credit':
      return { msg: 'credit', grant: m.credit?.grant ?? 0 };
    case 'error':
      return m.error ? { msg: 'error', error: m.error } : UNKNOWN;
    case 'sync':
      return { msg: 'sync' };
    case 'container': {
      const c = m.container;
      if (c?.cmd === 'start' && c.start) return { msg: 'container', container: { op: 'start', ...decodeContainerStart(c.start) } };
      if (c?.cmd === 'stop') return { msg: 'container', container: { op: 'stop', instanceId: c.stop ?? '' } };
      if (c?.cmd === 'remove') return { msg: 'container', container: { op: 'remove', instanceId: c.remove ?? '' } };
      return UNKNOWN;
    }
    case 'tunnel':
      return m.tunnel ? { msg: 'tunnels', frames: [m.tunnel] } : UNKNOWN;
    case 'tunnels':
      return { msg: 'tunnels', frames: m.tunnels?.frames ?? [] };
    case undefined:
      return UNKNOWN;
  }
}
