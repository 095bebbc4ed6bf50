import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import WebSocket from 'ws';
import type { TestNode } from '../helpers/node.js';
import { createCredential, registerUser, type TestUser } from '../helpers/identity.js';
import { AGENT_WS_PATH, WS_CLOSE_STATUS_BASE, agentFrameCodec, loadAgentProto, type AgentMessage, type AgentServiceClient, type ServerMessage__Output } from '../../src/protocol/agent-wire.js';
import type { PresignOutputsRequest } from '../../src/gen/gantry/agent/v1/PresignOutputsRequest.js';
import type { PresignOutputsResponse__Output } from '../../src/gen/gantry/agent/v1/PresignOutputsResponse.js';
import type { UnaryRequest } from '../../src/gen/gantry/agent/v1/UnaryRequest.js';
import type { UnaryResponse__Output } from '../../src/gen/gantry/agent/v1/UnaryResponse.js';

/** The two transports of the agent protocol: gRPC on the gRPC port, WebSocket on the HTTP port. */
export type AgentTransportKind = 'grpc' | 'ws';

/**
 * The transports the agent suite runs on: both, unless GANTRY_TEST_AGENT_TRANSPORTS narrows a run
 * (`grpc`, `ws` or `grpc,ws`). Tests loop over this list: one body, both transports.
 */
export const AGENT_TRANSPORTS: AgentTransportKind[] = (() => {
  const v = (process.env.GANTRY_TEST_AGENT_TRANSPORTS ?? 'grpc,ws').split(',').map((x) => x.trim()).filter(Boolean);
  for (const x of v) if (x !== 'grpc' && x !== 'ws') throw new Error(`GANTRY_TEST_AGENT_TRANSPORTS: grpc and/or ws, got ${x}`);
  return v as AgentTransportKind[];
})();

/** `gantry agent --server` for a node on a transport: HOST:PORT (gRPC port) or ws://HOST:PORT (HTTP port). */
export function agentServer(node: { grpcPort: number; httpPort: number }, transport: AgentTransportKind): string {
  return transport === 'grpc' ? `127.0.0.1:${node.grpcPort}` : `ws://127.0.0.1:${node.httpPort}`;
}

const root = fileURLToPath(new URL('../../', import.meta.url));

/** Polls fn until it returns a truthy value or the deadline passes (then throws with the last value). */
export async function waitFor<T>(what: string, fn: () => Promise<T | null | undefined | false> | T | null | undefined | false, timeoutMs = 15_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export interface TeamSetup {
  user: TestUser;
  ak: { id: string; value: string };
  sk: { id: string; value: string };
}

export async function setupTeam(t: TestNode): Promise<TeamSetup> {
  const user = await registerUser(t.http);
  const ak = await createCredential(t.http, user, 'agent');
  const sk = await createCredential(t.http, user, 'integration');
  return { user, ak, sk };
}

export async function createWorkflow(t: TestNode, s: TeamSetup, workflowJson: Record<string, unknown>, over: Record<string, unknown> = {}): Promise<string> {
  const r = await t.http.post(
    '/workflows',
    { workflow_slug: `wf-${Math.random().toString(36).slice(2, 10)}`, display_name: 'agent test', workflow_json: workflowJson, parameters: [{ key: 'prompt', node_id: '6', field: 'text' }], max_retries: 0, ...over },
    { token: s.user.accessToken, team: s.user.teamId },
  );
  if (r.status !== 200) throw new Error(`POST /workflows: ${r.status} ${r.text}`);
  return r.body.id as string;
}

export async function runWorkflow(t: TestNode, s: TeamSetup, workflowId: string, parameters: Record<string, unknown> = {}): Promise<string> {
  const r = await t.http.post(`/r/workflows/${workflowId}/run`, { parameters }, { token: s.sk.value });
  if (r.status !== 202) throw new Error(`run: ${r.status} ${r.text}`);
  return r.body.task_id as string;
}

export async function getTask(t: TestNode, s: TeamSetup, taskId: string): Promise<Record<string, any>> {
  const r = await t.http.get(`/r/tasks/${taskId}`, { token: s.sk.value });
  if (r.status !== 200) throw new Error(`GET task: ${r.status} ${r.text}`);
  return r.body;
}

export function waitTask(t: TestNode, s: TeamSetup, taskId: string, pred: (task: Record<string, any>) => boolean, what: string, timeoutMs = 20_000): Promise<Record<string, any>> {
  return waitFor(`task ${taskId}: ${what}`, async () => {
    const task = await getTask(t, s, taskId);
    return pred(task) ? task : null;
  }, timeoutMs, 100);
}

export async function agentsOf(t: TestNode, s: TeamSetup): Promise<Array<Record<string, any>>> {
  const r = await t.http.get('/agents?per_page=100', { token: s.user.accessToken, team: s.user.teamId });
  if (r.status !== 200) throw new Error(`GET /agents: ${r.status} ${r.text}`);
  return r.body.agent_list;
}

/** A tiny ComfyUI API graph (the stand-in runs it; simulate ignores it). */
export function tinyGraph(steps = 4, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    '3': { class_type: 'KSampler', inputs: { seed: 42, steps, cfg: 7, sampler_name: 'euler', scheduler: 'normal', denoise: 1, model: ['4', 0], positive: ['6', 0], negative: ['7', 0], latent_image: ['5', 0] } },
    '4': { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'v1-5-pruned-emaonly.safetensors' } },
    '5': { class_type: 'EmptyLatentImage', inputs: { width: 64, height: 64, batch_size: 1 } },
    '6': { class_type: 'CLIPTextEncode', inputs: { text: 'a lighthouse', clip: ['4', 1] } },
    '7': { class_type: 'CLIPTextEncode', inputs: { text: 'watermark', clip: ['4', 1] } },
    '8': { class_type: 'VAEDecode', inputs: { samples: ['3', 0], vae: ['4', 2] } },
    '9': { class_type: 'SaveImage', inputs: { filename_prefix: 'gantry', images: ['8', 0] } },
    ...extra,
  };
}

export interface AgentProcess {
  proc: ChildProcess;
  lines: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  waitLine(pred: (line: Record<string, any>) => boolean, what: string, timeoutMs?: number): Promise<Record<string, any>>;
  kill(sig?: NodeJS.Signals): void;
}

export const tmpDir = (p: string): string => mkdtempSync(join(tmpdir(), p));

/** `node bin/gantry.mjs agent ...` as a child process; its JSON log lines are collected. */
export function spawnAgent(args: string[], env: Record<string, string> = {}): AgentProcess {
  const proc = spawn(process.execPath, [join(root, 'bin/gantry.mjs'), 'agent', ...args], { cwd: root, env: { ...process.env, LOG_LEVEL: 'debug', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  const waiters: Array<{ pred: (l: Record<string, any>) => boolean; resolve: (l: Record<string, any>) => void }> = [];
  let buf = '';
  const onChunk = (c: Buffer): void => {
    buf += c.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      lines.push(line);
      if (process.env.AGENT_TEST_LOG) process.stderr.write(`[agent ${proc.pid}] ${line}\n`);
      let j: Record<string, any>;
      try {
        j = JSON.parse(line) as Record<string, any>;
      } catch {
        j = { msg: line };
      }
      for (const w of [...waiters])
        if (w.pred(j)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(j);
        }
    }
  };
  proc.stdout?.on('data', onChunk);
  proc.stderr?.on('data', onChunk);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    proc,
    lines,
    exited,
    waitLine(pred, what, timeoutMs = 20_000) {
      for (const l of lines) {
        try {
          const j = JSON.parse(l) as Record<string, any>;
          if (pred(j)) return Promise.resolve(j);
        } catch {
          /* not json */
        }
      }
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`agent ${proc.pid}: no log line for ${what} in ${timeoutMs} ms; last lines:\n${lines.slice(-15).join('\n')}`)), timeoutMs);
        waiters.push({ pred, resolve: (l) => (clearTimeout(t), resolve(l)) });
      });
    },
    kill(sig: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(sig);
    },
  };
}

/** A raw gRPC client on the agent service (for protocol-level tests). */
export function rawClient(port: number): AgentServiceClient {
  const proto = loadAgentProto();
  return new proto.gantry.agent.v1.AgentService(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
}

export const bearer = (v: string): grpc.Metadata => {
  const md = new grpc.Metadata();
  md.set('authorization', `Bearer ${v}`);
  return md;
};

/** A raw stream on either transport: write messages, see what arrives, and how it ended (a gRPC status; on WebSocket from the close code). */
export interface RawStream {
  call: { write(m: AgentMessage): void; cancel(): void; on(ev: 'data', fn: (m: ServerMessage__Output) => void): unknown };
  inbox: ServerMessage__Output[];
  status: Promise<{ code: grpc.status; details: string }>;
  next(pred: (m: ServerMessage__Output) => boolean, what: string, timeoutMs?: number): Promise<ServerMessage__Output>;
  /** PresignOutputs on this stream's transport (gRPC: a unary call with the credential; WebSocket: a request frame on this socket). */
  presignOutputs(req: PresignOutputsRequest): Promise<PresignOutputsResponse__Output>;
  /** The HTTP status of a refused WebSocket handshake (gRPC: always null). */
  httpStatus: Promise<number | null>;
}

/** The agent protocol's raw endpoints on a node, on one transport (protocol-level tests). */
export interface RawAgentEndpoint {
  open(credential: string | null): RawStream;
  close(): void;
}

export function rawEndpoint(node: { grpcPort: number; httpPort: number }, transport: AgentTransportKind): RawAgentEndpoint {
  if (transport === 'ws') return { open: (cred) => rawWsStream(node.httpPort, cred), close: () => undefined };
  const client = rawClient(node.grpcPort);
  return { open: (cred) => rawStream(client, cred), close: () => client.close() };
}

/** A raw WebSocket stream on the HTTP port (binary AgentFrame/ServerFrame frames). */
export function rawWsStream(httpPort: number, credential: string | null): RawStream {
  const codec = agentFrameCodec();
  const ws = new WebSocket(`ws://127.0.0.1:${httpPort}${AGENT_WS_PATH}`, credential ? { headers: { authorization: `Bearer ${credential}` } } : {});
  const early: Buffer[] = [];
  const inbox: ServerMessage__Output[] = [];
  const listeners: Array<(m: ServerMessage__Output) => void> = [];
  const waiters: Array<{ pred: (m: ServerMessage__Output) => boolean; resolve: (m: ServerMessage__Output) => void }> = [];
  const calls = new Map<number, (r: UnaryResponse__Output) => void>();
  let nextId = 0;
  let settleHttp: (s: number | null) => void = () => undefined;
  const httpStatus = new Promise<number | null>((r) => (settleHttp = r));
  let settleStatus: (s: { code: grpc.status; details: string }) => void = () => undefined;
  let ended: { code: grpc.status; details: string; http: number | null; wsCode?: number } | null = null;
  const status = new Promise<{ code: grpc.status; details: string }>((r) => (settleStatus = r));
  void status.then(async (st) => (ended = { ...st, http: await httpStatus }));
  ws.on('close', (code: number) => void status.then(() => ended && (ended.wsCode = code)));
  ws.on('unexpected-response', (_req, res) => {
    settleHttp(res.statusCode ?? 0);
    const chunks: Buffer[] = [];
    res.on('data', (c: Buffer) => chunks.push(c));
    res.on('end', () => {
      const code = res.statusCode === 401 ? grpc.status.UNAUTHENTICATED : grpc.status.UNAVAILABLE;
      settleStatus({ code, details: Buffer.concat(chunks).toString('utf8') });
      ws.terminate();
    });
  });
  ws.on('open', () => {
    settleHttp(null);
    for (const b of early.splice(0)) ws.send(b);
  });
  ws.on('message', (data: Buffer) => {
    const f = codec.decodeServerFrame(data);
    if (f.frame === 'response' && f.response) {
      calls.get(f.response.request_id)?.(f.response);
      calls.delete(f.response.request_id);
      return;
    }
    const m = f.message;
    if (!m) return;
    inbox.push(m);
    for (const l of listeners) l(m);
    for (const w of [...waiters])
      if (w.pred(m)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(m);
      }
  });
  ws.on('error', () => undefined);
  ws.on('close', (code: number, reason: Buffer) => {
    settleHttp(null);
    settleStatus({ code: code === 1000 ? grpc.status.OK : code > WS_CLOSE_STATUS_BASE && code < WS_CLOSE_STATUS_BASE + 100 ? code - WS_CLOSE_STATUS_BASE : grpc.status.UNAVAILABLE, details: reason.toString('utf8') });
  });
  const sendFrame = (b: Buffer): void => {
    if (ws.readyState === WebSocket.OPEN) ws.send(b);
    else if (ws.readyState === WebSocket.CONNECTING) early.push(b);
  };
  const unary = (req: Omit<UnaryRequest, 'request_id'>): Promise<UnaryResponse__Output> => {
    const id = ++nextId;
    return new Promise((resolve) => {
      calls.set(id, resolve);
      sendFrame(codec.encodeAgentFrame({ request: { ...req, request_id: id } }));
    });
  };
  return {
    call: {
      write: (m) => sendFrame(codec.encodeAgentFrame({ message: m })),
      cancel: () => ws.terminate(),
      on: (_ev, fn) => listeners.push(fn),
    },
    inbox,
    status,
    httpStatus,
    next(pred, what, timeoutMs = 10_000) {
      const have = inbox.find(pred);
      if (have) return Promise.resolve(have);
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`raw ws stream: no ${what} in ${timeoutMs} ms; inbox: ${JSON.stringify(inbox.map((m) => m.msg))}; ended: ${JSON.stringify(ended)}`)), timeoutMs);
        waiters.push({ pred, resolve: (m) => (clearTimeout(t), resolve(m)) });
      });
    },
    async presignOutputs(req) {
      const r = await unary({ presign_outputs: req });
      if (r.result === 'error') throw Object.assign(new Error(r.error?.details ?? ''), { code: r.error?.status ?? grpc.status.UNKNOWN, details: r.error?.details ?? '' });
      return r.presign_outputs as PresignOutputsResponse__Output;
    },
  };
}

export function rawStream(client: AgentServiceClient, credential: string | null): RawStream {
  const call = credential === null ? client.Connect() : client.Connect(bearer(credential));
  const inbox: ServerMessage__Output[] = [];
  const waiters: Array<{ pred: (m: ServerMessage__Output) => boolean; resolve: (m: ServerMessage__Output) => void }> = [];
  call.on('data', (m: ServerMessage__Output) => {
    inbox.push(m);
    for (const w of [...waiters])
      if (w.pred(m)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(m);
      }
  });
  call.on('error', () => undefined);
  const status = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
  return {
    call,
    inbox,
    status,
    httpStatus: Promise.resolve(null),
    presignOutputs: (req) => new Promise((resolve, reject) => client.PresignOutputs(req, bearer(credential ?? ''), (e, r) => (e ? reject(e) : resolve(r as PresignOutputsResponse__Output)))),
    next(pred, what, timeoutMs = 10_000) {
      const have = inbox.find(pred);
      if (have) return Promise.resolve(have);
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`raw stream: no ${what} in ${timeoutMs} ms; inbox: ${JSON.stringify(inbox.map((m) => m.msg))}`)), timeoutMs);
        waiters.push({ pred, resolve: (m) => (clearTimeout(t), resolve(m)) });
      });
    },
  };
}

export const hello = (machineId: string, over: Record<string, unknown> = {}): AgentMessage => ({
  hello: { machine_id: machineId, agent_version: 'test', display_name: machineId, labels: [], gpus: [{ name: 'NVIDIA RTX 4090', vram_gb: 24 }], models: [], custom_nodes: [], slots: 1, running: [], executor: 'simulate', window: 64, ...over },
});
