/**
 * comfyui: runs a resolved API-format graph on a local ComfyUI through its own HTTP + WebSocket API
 * (server.py / execution.py / main.py / comfy_execution/jobs.py):
 *
 *   GET  /ws?clientId=<sid>        JSON frames {type, data}; binary frames (4-byte big-endian type:
 *                                  1 preview image, 3 text, 4 preview with metadata) are ignored
 *   POST /upload/image             multipart image, overwrite, type, [subfolder] -> {name, subfolder, type}
 *   POST /prompt                   {prompt, client_id, prompt_id} -> {prompt_id, number, node_errors}
 *                                  200 with non-empty node_errors: invalid outputs dropped, the rest runs
 *                                  400 -> {error: {type, message, details, extra_info}, node_errors}
 *                                  409 -> {error: "prompt_id already exists"} (newer ComfyUI)
 *   POST /interrupt                {prompt_id}: interrupts that prompt only if it is the running one
 *   POST /queue                    {delete: [prompt_id]} removes a still-pending prompt
 *   GET  /queue                    {queue_running, queue_pending}: items [number, prompt_id, ...]
 *   GET  /history/<prompt_id>      {<prompt_id>: {prompt, outputs, status: {status_str, completed, messages}, meta}} or {}
 *   GET  /api/jobs/<prompt_id>     {id, status: pending|in_progress|completed|failed|cancelled}; 404 unknown (newer ComfyUI)
 *   GET  /view?filename&subfolder&type
 *   GET  /system_stats
 *
 * Correctness rules (issue 25, each proven against the stand-in in test/agent-executors/comfyui.test.ts):
 *   - submission is idempotent: the prompt_id is ours; after a timed-out POST /prompt the prompt is
 *     looked up (queue, history, jobs) before it is submitted again with the same id;
 *   - a 200 carrying node_errors is a bad_input failure: the prompt is removed (queue delete +
 *     interrupt {prompt_id}) instead of running without the dropped outputs;
 *   - the end of a prompt is read from history (an ExecutionBlocker sends execution_error while the
 *     prompt goes on; execution_success comes before history is written);
 *   - liveness: a prompt neither running, pending nor in history for livenessTimeoutMs (ComfyUI
 *     restarted, the queue was cleared, the process died) ends the attempt with a retryable tool_error;
 *   - cancel targets our prompt only (queue delete + interrupt {prompt_id}), never a body-less interrupt.
 *
 * The parts: comfyui-client.ts (the HTTP routes), comfyui-follow.ts (the run's WebSocket and the
 * following of its prompt), comfyui-outputs.ts (downloads and text outputs); the event switch, the
 * progress tracker and the output layout are shared with the cloud client (protocol/comfyui.ts).
 */
import { randomUUID } from 'node:crypto';
import type WebSocket from 'ws';
import { ExecutorError, type ExecContext, type ExecResult, type Executor } from './types.js';
import { isRecord } from './util.js';
import { ComfyClient, type ComfySystemStats } from './comfyui-client.js';
import { connectWs, MessageQueue, PromptFollower } from './comfyui-follow.js';
import { downloadOutputs, sanitize, writeTexts } from './comfyui-outputs.js';
import { collectOutputs, describeNodeErrors, mergeOutputs, ProgressTracker, promptPayload, toApiGraph, type ApiGraph, type ComfyFileRef } from '../../protocol/comfyui.js';

export type { ComfyFileRef };
export type { ComfySystemStats } from './comfyui-client.js';

export interface ComfyUIOptions {
  /** e.g. http://127.0.0.1:8188 */
  baseUrl: string;
  /** Prefix of the per-run WebSocket client id (each run gets its own socket). */
  clientId?: string;
  /** Timeout for each plain HTTP request. Default 30 s. */
  fetchTimeoutMs?: number;
  /** Timeout of one POST /prompt; on expiry the prompt is looked up by its id before a resubmission. Default 30 s. */
  submitTimeoutMs?: number;
  /** POST /prompt attempts (same prompt_id) while ComfyUI does not answer and the prompt is not found. Default 3. */
  submitAttempts?: number;
  /** Timeout for uploads and output downloads. Default 10 min. */
  transferTimeoutMs?: number;
  /** How long to wait for ComfyUI to confirm a cancel (interrupted, removed or finished). Default 15 s. */
  interruptWaitMs?: number;
  /** Poll interval for /history once the end is near or the WebSocket is gone. Default 1 s. */
  historyPollMs?: number;
  /** WebSocket connect timeout. Default 10 s. */
  wsConnectTimeoutMs?: number;
  /** Subfolder of ComfyUI's input dir for uploaded task files. Default '' (top level). */
  uploadSubfolder?: string;
  /**
   * Liveness: the attempt ends (retryable tool_error) once its prompt has been neither running,
   * pending nor in history, or ComfyUI unreachable, for this long. Default 30 s.
   */
  livenessTimeoutMs?: number;
  /** Interval of the liveness lookups while the WebSocket is up. Default 5 s (at most livenessTimeoutMs / 3). */
  livenessCheckMs?: number;
}

export class ComfyUIExecutor implements Executor {
  readonly name = 'comfyui';
  readonly baseUrl: string;
  private readonly client: ComfyClient;
  private readonly clientIdPrefix: string;
  private readonly interruptWaitMs: number;
  private readonly historyPollMs: number;
  private readonly wsConnectTimeoutMs: number;
  private readonly livenessTimeoutMs: number;
  private readonly livenessCheckMs: number;
  private readonly sockets = new Set<WebSocket>();
  /** In-flight runs: abortAll() ends them (the agent's ComfyUI supervisor saw ComfyUI die). */
  private readonly inflight = new Set<(reason: string) => void>();
  /** The model files the last run's graph loads (warm placement: ComfyUI keeps them cached). */
  private lastModels: string[] = [];

  loaded(): string[] {
    return this.lastModels;
  }

  constructor(opts: ComfyUIOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, '');
    this.client = new ComfyClient({
      baseUrl: this.baseUrl,
      fetchTimeoutMs: opts.fetchTimeoutMs ?? 30_000,
      submitTimeoutMs: opts.submitTimeoutMs ?? 30_000,
      submitAttempts: Math.max(1, opts.submitAttempts ?? 3),
      transferTimeoutMs: opts.transferTimeoutMs ?? 600_000,
      uploadSubfolder: opts.uploadSubfolder ?? '',
    });
    this.clientIdPrefix = sanitize(opts.clientId ?? 'gantry');
    this.interruptWaitMs = opts.interruptWaitMs ?? 15_000;
    this.historyPollMs = opts.historyPollMs ?? 1_000;
    this.wsConnectTimeoutMs = opts.wsConnectTimeoutMs ?? 10_000;
    this.livenessTimeoutMs = opts.livenessTimeoutMs ?? 30_000;
    this.livenessCheckMs = Math.max(10, Math.min(opts.livenessCheckMs ?? 5_000, Math.floor(this.livenessTimeoutMs / 3)));
  }

  async close(): Promise<void> {
    for (const ws of this.sockets) ws.terminate();
    this.sockets.clear();
  }

  /**
   * Ends every in-flight run with a retryable tool_error naming `reason` (e.g. the supervisor saw
   * the ComfyUI process exit). The runs stop following their prompts; nothing is sent to ComfyUI.
   */
  abortAll(reason: string): number {
    const n = this.inflight.size;
    for (const abort of [...this.inflight]) abort(reason);
    return n;
  }

  /** GET /system_stats (ComfyUI's shape). */
  getSystemStats(): Promise<ComfySystemStats> {
    return this.client.getSystemStats();
  }

  async run(ctx: ExecContext): Promise<ExecResult> {
    const graph = prepareGraph(ctx.workflow);
    this.lastModels = modelsOfGraph(graph);
    if (ctx.signal.aborted) throw new ExecutorError('cancelled', 'task cancelled');
    const clientId = `${this.clientIdPrefix}-${randomUUID().replace(/-/g, '')}`;
    const queue = new MessageQueue();
    let abortAll: ((reason: string) => void) | undefined;
    const aborted = new Promise<{ abortAll: string }>((resolve) => {
      abortAll = (reason) => resolve({ abortAll: reason });
    });
    this.inflight.add(abortAll!);
    let ws: WebSocket | undefined;
    try {
      ws = await connectWs(this.baseUrl, clientId, queue, { connectTimeoutMs: this.wsConnectTimeoutMs, sockets: this.sockets });
      return await this.runWithSocket(ctx, graph, clientId, queue, aborted);
    } finally {
      this.inflight.delete(abortAll!);
      if (ws) {
        const sock = ws;
        sock.close();
        setTimeout(() => sock.terminate(), 1000).unref();
      }
    }
  }

  private async runWithSocket(
    ctx: ExecContext,
    graph: ApiGraph,
    clientId: string,
    queue: MessageQueue,
    aborted: Promise<{ abortAll: string }>,
  ): Promise<ExecResult> {
    // 1. file parameters -> /upload/image, rewrite the graph input
    for (const f of ctx.inputFiles) {
      if (f.nodeId === undefined || f.field === undefined) continue;
      const node = graph[f.nodeId];
      if (!node) throw new ExecutorError('bad_input', `file parameter "${f.key}" targets node ${f.nodeId}, which is not in the workflow`);
      const up = await this.client.uploadImage(f.localPath, `${sanitize(ctx.taskId)}_${sanitize(f.fileName)}`, ctx.signal);
      node.inputs[f.field] = up.ref;
      ctx.log('comfyui: uploaded input', { key: f.key, node: f.nodeId, field: f.field, ref: up.ref });
    }
    if (ctx.signal.aborted) throw new ExecutorError('cancelled', 'task cancelled');

    // 2. queue the prompt under our own id (idempotent: see ComfyClient.submit); our client id
    // sends its messages to our socket
    const sub = await this.client.submit(ctx, promptPayload(graph, randomUUID(), { clientId, comfyOrgApiKey: ctx.comfyOrgApiKey }));
    const promptId = sub.promptId;
    ctx.log('comfyui: prompt queued', { prompt_id: promptId, number: sub.number, client_id: clientId, recovered: sub.recovered });
    if (isRecord(sub.nodeErrors) && Object.keys(sub.nodeErrors).length > 0) {
      // execution.py validate_prompt: invalid output nodes are dropped ("Output will be ignored")
      // and the rest would run; a task must not silently lose outputs, so the prompt goes.
      await this.client.removePrompt(ctx, promptId);
      const nodes = describeNodeErrors(sub.nodeErrors);
      throw new ExecutorError('bad_input', `ComfyUI refused output node(s) ${Object.keys(sub.nodeErrors).join(', ')}: ${nodes}`, {
        details: { prompt_id: promptId, node_errors: sub.nodeErrors },
      });
    }

    // 3. follow execution until history confirms the end
    const tracker = new ProgressTracker(graph, (p) => ctx.onProgress(p));
    const follower = new PromptFollower(
      this.client,
      { historyPollMs: this.historyPollMs, livenessTimeoutMs: this.livenessTimeoutMs, livenessCheckMs: this.livenessCheckMs, interruptWaitMs: this.interruptWaitMs },
      ctx,
      promptId,
      queue,
      tracker,
    );
    const outcome = await follower.run(aborted);
    if (outcome.kind === 'cancelled') throw new ExecutorError('cancelled', outcome.message, { details: { prompt_id: promptId } });
    if (outcome.kind === 'error') throw outcome.error;

    // 4. outputs: history (cached nodes included) merged with what `executed` reported
    const found = collectOutputs(mergeOutputs(outcome.entry.outputs, tracker.executedOutputs));
    const outputs = await downloadOutputs(this.client, found.files, ctx);
    outputs.push(...(await writeTexts(found.texts, ctx, new Set(outputs.map((o) => o.name)))));
    if (outcome.blocked.length > 0) ctx.log('comfyui: some nodes were blocked', { prompt_id: promptId, blocked: outcome.blocked });
    ctx.onProgress({ progress: 1, step_current: tracker.total, step_total: tracker.total, current_node: '' });
    return { outputs };
  }
}

function prepareGraph(workflow: unknown): ApiGraph {
  const g = toApiGraph(workflow);
  if (!g.ok) throw new ExecutorError('bad_input', g.error);
  return g.graph;
}

/** Loader inputs and the models directory their value is relative to. */
const LOADER_INPUTS: Readonly<Record<string, string>> = { ckpt_name: 'checkpoints', unet_name: 'diffusion_models', vae_name: 'vae', lora_name: 'loras', clip_name: 'clip', control_net_name: 'controlnet' };

/** The model paths (under the models root) a graph's loader nodes name, e.g. checkpoints/sd15.safetensors. */
export function modelsOfGraph(graph: ApiGraph): string[] {
  const out = new Set<string>();
  for (const node of Object.values(graph)) {
    const inputs = (node as { inputs?: unknown }).inputs;
    if (!inputs || typeof inputs !== 'object') continue;
    for (const [k, v] of Object.entries(inputs as Record<string, unknown>)) {
      const dir = LOADER_INPUTS[k];
      if (dir && typeof v === 'string' && v && out.size < 32) out.add(`${dir}/${v.replace(/\\/g, '/')}`);
    }
  }
  return [...out];
}
