import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import type { TestNode } from '../helpers/node.js';
import { createCredential, registerUser, type TestUser } from '../helpers/identity.js';
import { loadAgentProto, type AgentMessage, type AgentServiceClient, type ServerMessage__Output } from '../../src/protocol/agent-wire.js';

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

export interface RawStream {
  call: grpc.ClientDuplexStream<AgentMessage, ServerMessage__Output>;
  inbox: ServerMessage__Output[];
  status: Promise<grpc.StatusObject>;
  next(pred: (m: ServerMessage__Output) => boolean, what: string, timeoutMs?: number): Promise<ServerMessage__Output>;
}

export function rawStream(client: AgentServiceClient, credential: string): RawStream {
  const call = client.Connect(bearer(credential));
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
