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
 */
import { randomUUID } from 'node:crypto';
import { createWriteStream, openAsBlob } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import WebSocket from 'ws';
import { ExecutorError, type ExecContext, type ExecOutput, type ExecResult, type Executor } from './types.js';
import { contentTypeFor, isRecord } from './util.js';
import {
  collectOutputs,
  describeNodeErrors,
  executionErrorMessage,
  historyStatus,
  mergeOutputs,
  ProgressTracker as SharedTracker,
  promptRejection,
  toApiGraph,
  type ApiGraph,
  type ComfyFileRef,
} from '../../protocol/comfyui.js';

export type { ComfyFileRef };

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

/** Where ComfyUI has a prompt: `finished` = in history (GET /history/{id} or /api/jobs/{id}). */
export type PromptWhere = 'pending' | 'running' | 'finished' | 'unknown';

/** GET /system_stats, as ComfyUI returns it. */
export interface ComfySystemStats {
  system: {
    os: string;
    ram_total: number;
    ram_free: number;
    comfyui_version?: string;
    required_frontend_version?: string;
    python_version?: string;
    pytorch_version?: string;
    embedded_python?: boolean;
    argv?: string[];
    [k: string]: unknown;
  };
  devices: Array<{
    name: string;
    type: string;
    index: number | null;
    vram_total: number;
    vram_free: number;
    torch_vram_total: number;
    torch_vram_free: number;
    [k: string]: unknown;
  }>;
}

interface HistoryEntry {
  prompt?: unknown;
  outputs?: Record<string, unknown>;
  status?: { status_str?: string; completed?: boolean; messages?: unknown[] } | null;
  meta?: unknown;
}

type WsMessage = { type: string; data: Record<string, unknown> };
type Next = { kind: 'msg'; msg: WsMessage } | { kind: 'closed'; reason: string };

/** Minimal async queue between the ws 'message' handler and the run loop. */
class MessageQueue {
  private items: Next[] = [];
  private waiter: ((n: Next) => void) | undefined;
  private ended = false;
  push(n: Next): void {
    if (this.ended) return;
    if (n.kind === 'closed') this.ended = true;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w(n);
    } else this.items.push(n);
  }
  next(): Promise<Next> {
    const it = this.items.shift();
    if (it) return Promise.resolve(it);
    return new Promise((resolve) => {
      this.waiter = resolve;
    });
  }
}

const sanitize = (s: string): string => s.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 120);

export class ComfyUIExecutor implements Executor {
  readonly name = 'comfyui';
  readonly baseUrl: string;
  private readonly clientIdPrefix: string;
  private readonly fetchTimeoutMs: number;
  private readonly submitTimeoutMs: number;
  private readonly submitAttempts: number;
  private readonly transferTimeoutMs: number;
  private readonly interruptWaitMs: number;
  private readonly historyPollMs: number;
  private readonly wsConnectTimeoutMs: number;
  private readonly uploadSubfolder: string;
  private readonly livenessTimeoutMs: number;
  private readonly livenessCheckMs: number;
  private readonly sockets = new Set<WebSocket>();
  /** In-flight runs: abortAll() ends them (the agent's ComfyUI supervisor saw ComfyUI die). */
  private readonly inflight = new Set<(reason: string) => void>();

  constructor(opts: ComfyUIOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, '');
    this.clientIdPrefix = sanitize(opts.clientId ?? 'gantry');
    this.fetchTimeoutMs = opts.fetchTimeoutMs ?? 30_000;
    this.submitTimeoutMs = opts.submitTimeoutMs ?? 30_000;
    this.submitAttempts = Math.max(1, opts.submitAttempts ?? 3);
    this.transferTimeoutMs = opts.transferTimeoutMs ?? 600_000;
    this.interruptWaitMs = opts.interruptWaitMs ?? 15_000;
    this.historyPollMs = opts.historyPollMs ?? 1_000;
    this.wsConnectTimeoutMs = opts.wsConnectTimeoutMs ?? 10_000;
    this.uploadSubfolder = opts.uploadSubfolder ?? '';
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

  // ---------------------------------------------------------------- HTTP

  private async http(
    p: string,
    init: RequestInit & { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<Response> {
    const timeoutMs = init.timeoutMs ?? this.fetchTimeoutMs;
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = init.signal ? AbortSignal.any([timeout, init.signal]) : timeout;
    const { timeoutMs: _t, ...rest } = init;
    try {
      return await fetch(`${this.baseUrl}${p}`, { ...rest, signal });
    } catch (err) {
      if (init.signal?.aborted) throw new ExecutorError('cancelled', 'task cancelled', { cause: err });
      if (timeout.aborted) {
        throw new ExecutorError('timeout', `ComfyUI ${rest.method ?? 'GET'} ${p.split('?')[0]} timed out after ${timeoutMs} ms`, {
          cause: err,
        });
      }
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new ExecutorError(
        'tool_error',
        `ComfyUI unreachable at ${this.baseUrl}: ${cause?.code ?? cause?.message ?? (err as Error).message}`,
        { cause: err },
      );
    }
  }

  private async json<T>(p: string, init: RequestInit & { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<T> {
    const res = await this.http(p, init);
    const text = await res.text();
    if (!res.ok) {
      throw new ExecutorError('tool_error', `ComfyUI ${init.method ?? 'GET'} ${p.split('?')[0]} returned ${res.status}: ${text.slice(0, 500)}`);
    }
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new ExecutorError('tool_error', `ComfyUI ${p.split('?')[0]} returned invalid JSON: ${text.slice(0, 200)}`);
    }
  }

  /** GET /system_stats (ComfyUI's shape). */
  async getSystemStats(): Promise<ComfySystemStats> {
    return this.json<ComfySystemStats>('/system_stats');
  }

  /** GET /history/{prompt_id} -> the entry, or undefined while the prompt has not finished. */
  async getHistory(promptId: string): Promise<HistoryEntry | undefined> {
    const all = await this.json<Record<string, HistoryEntry>>(`/history/${encodeURIComponent(promptId)}`);
    const entry = isRecord(all) ? all[promptId] : undefined;
    return isRecord(entry) ? entry : undefined;
  }

  /** POST /upload/image; returns the value to put into a LoadImage-style input. */
  async uploadImage(localPath: string, fileName: string, signal?: AbortSignal): Promise<{ name: string; subfolder: string; type: string; ref: string }> {
    const blob = await openAsBlob(localPath);
    const form = new FormData();
    form.append('image', blob as unknown as Blob, fileName);
    form.append('overwrite', 'true');
    form.append('type', 'input');
    if (this.uploadSubfolder) form.append('subfolder', this.uploadSubfolder);
    const res = await this.http('/upload/image', {
      method: 'POST',
      body: form,
      timeoutMs: this.transferTimeoutMs,
      ...(signal ? { signal } : {}),
    });
    const text = await res.text();
    if (!res.ok) throw new ExecutorError('tool_error', `ComfyUI /upload/image returned ${res.status}: ${text.slice(0, 300)}`);
    const body = JSON.parse(text) as { name?: unknown; subfolder?: unknown; type?: unknown };
    if (typeof body.name !== 'string') throw new ExecutorError('tool_error', `ComfyUI /upload/image returned no name: ${text.slice(0, 200)}`);
    const subfolder = typeof body.subfolder === 'string' ? body.subfolder : '';
    return {
      name: body.name,
      subfolder,
      type: typeof body.type === 'string' ? body.type : 'input',
      ref: subfolder ? `${subfolder}/${body.name}` : body.name,
    };
  }

  // ---------------------------------------------------------------- WebSocket

  private connectWs(clientId: string, queue: MessageQueue): Promise<WebSocket> {
    const url = `${this.baseUrl.replace(/^http/, 'ws')}/ws?clientId=${encodeURIComponent(clientId)}`;
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { handshakeTimeout: this.wsConnectTimeoutMs });
      let opened = false;
      ws.on('open', () => {
        opened = true;
        this.sockets.add(ws);
        resolve(ws);
      });
      ws.on('message', (data, isBinary) => {
        if (isBinary) return; // preview frames
        try {
          const msg = JSON.parse(data.toString()) as unknown;
          if (isRecord(msg) && typeof msg.type === 'string') {
            queue.push({ kind: 'msg', msg: { type: msg.type, data: isRecord(msg.data) ? msg.data : {} } });
          }
        } catch {
          /* not JSON: ignore */
        }
      });
      ws.on('error', (err) => {
        if (!opened) {
          reject(new ExecutorError('tool_error', `cannot connect to ComfyUI WebSocket at ${url}: ${err.message}`, { cause: err }));
        }
      });
      ws.on('close', (code) => {
        this.sockets.delete(ws);
        queue.push({ kind: 'closed', reason: `websocket closed (${code})` });
      });
    });
  }

  // ---------------------------------------------------------------- run

  async run(ctx: ExecContext): Promise<ExecResult> {
    const graph = prepareGraph(ctx.workflow);
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
      ws = await this.connectWs(clientId, queue);
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

  /**
   * The POST /prompt body, built in this one place: our client id (messages come to our socket) and
   * our prompt_id (server.py post_prompt honours a client-chosen canonical UUID), so that a
   * resubmission after a lost answer can be recognised.
   */
  protected promptBody(ctx: ExecContext, graph: ApiGraph, clientId: string, promptId: string): Record<string, unknown> {
    return {
      prompt: graph,
      client_id: clientId,
      prompt_id: promptId,
      // partner (API) nodes read the key from extra_data.api_key_comfy_org (hidden input API_KEY_COMFY_ORG)
      ...(ctx.comfyOrgApiKey ? { extra_data: { api_key_comfy_org: ctx.comfyOrgApiKey } } : {}),
    };
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
      const up = await this.uploadImage(f.localPath, `${sanitize(ctx.taskId)}_${sanitize(f.fileName)}`, ctx.signal);
      node.inputs[f.field] = up.ref;
      ctx.log('comfyui: uploaded input', { key: f.key, node: f.nodeId, field: f.field, ref: up.ref });
    }
    if (ctx.signal.aborted) throw new ExecutorError('cancelled', 'task cancelled');

    // 2. queue the prompt under our own id (idempotent: see submit)
    const sub = await this.submit(ctx, this.promptBody(ctx, graph, clientId, randomUUID()));
    const promptId = sub.promptId;
    ctx.log('comfyui: prompt queued', { prompt_id: promptId, number: sub.number, client_id: clientId, recovered: sub.recovered });
    if (isRecord(sub.nodeErrors) && Object.keys(sub.nodeErrors).length > 0) {
      // execution.py validate_prompt: invalid output nodes are dropped ("Output will be ignored")
      // and the rest would run; a task must not silently lose outputs, so the prompt goes.
      await this.removePrompt(ctx, promptId);
      const nodes = describeNodeErrors(sub.nodeErrors);
      throw new ExecutorError('bad_input', `ComfyUI refused output node(s) ${Object.keys(sub.nodeErrors).join(', ')}: ${nodes}`, {
        details: { prompt_id: promptId, node_errors: sub.nodeErrors },
      });
    }

    // 3. follow execution until history confirms the end
    const tracker = new SharedTracker(graph, (p) => ctx.onProgress(p));
    const outcome = await this.follow(ctx, promptId, queue, tracker, aborted);
    if (outcome.kind === 'cancelled') throw new ExecutorError('cancelled', outcome.message, { details: { prompt_id: promptId } });
    if (outcome.kind === 'error') throw outcome.error;

    // 4. outputs: history (cached nodes included) merged with what `executed` reported
    const found = collectOutputs(mergeOutputs(outcome.entry.outputs, tracker.executedOutputs));
    const outputs = await this.download(found.files, ctx);
    outputs.push(...(await this.writeTexts(found.texts, ctx, new Set(outputs.map((o) => o.name)))));
    if (outcome.blocked.length > 0) ctx.log('comfyui: some nodes were blocked', { prompt_id: promptId, blocked: outcome.blocked });
    ctx.onProgress({ progress: 1, step_current: tracker.total, step_total: tracker.total, current_node: '' });
    return { outputs };
  }

  /**
   * POST /prompt with our prompt_id. When ComfyUI does not answer in time the request may still
   * have queued the prompt, so the id is looked up (queue, history, jobs) before each resubmission
   * with the same id; a 409 (newer server.py: the id is already known) also means an earlier
   * attempt got through. A prompt is never queued twice by us.
   */
  private async submit(
    ctx: ExecContext,
    body: Record<string, unknown>,
  ): Promise<{ promptId: string; number: unknown; nodeErrors: unknown; recovered: boolean }> {
    const promptId = String(body.prompt_id);
    const payload = JSON.stringify(body);
    let lastErr: ExecutorError | undefined;
    const found = async (): Promise<boolean> => {
      const where = await this.locate(promptId).catch(() => undefined);
      ctx.log('comfyui: looked up the prompt after an unanswered POST /prompt', { prompt_id: promptId, where: where ?? 'unreachable' });
      return where !== undefined && where !== 'unknown';
    };
    for (let attempt = 1; attempt <= this.submitAttempts; attempt++) {
      if (attempt > 1 && (await found())) return { promptId, number: undefined, nodeErrors: {}, recovered: true };
      if (ctx.signal.aborted) throw new ExecutorError('cancelled', 'task cancelled');
      let res: Response;
      let text: string;
      try {
        // never aborted by a cancel half-way: the prompt could be queued with no one to remove it
        res = await this.http('/prompt', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: payload,
          timeoutMs: this.submitTimeoutMs,
        });
        text = await res.text();
      } catch (e) {
        lastErr = e instanceof ExecutorError ? e : new ExecutorError('timeout', `ComfyUI POST /prompt: no complete answer within ${this.submitTimeoutMs} ms`, { cause: e });
        ctx.log('comfyui: POST /prompt got no answer', { prompt_id: promptId, attempt, error: lastErr.message });
        continue;
      }
      let parsed: Record<string, unknown> = {};
      try {
        const v = JSON.parse(text) as unknown;
        if (isRecord(v)) parsed = v;
      } catch {
        /* handled below */
      }
      if (res.status === 409 && attempt > 1) return { promptId, number: undefined, nodeErrors: {}, recovered: true };
      if (!res.ok) {
        const message = `ComfyUI rejected the workflow: ${promptRejection(parsed, text).message}`;
        throw new ExecutorError(res.status === 400 ? 'bad_input' : 'tool_error', message, {
          details: { status: res.status, error: parsed.error, node_errors: parsed.node_errors },
        });
      }
      const id = parsed.prompt_id;
      if (typeof id !== 'string') throw new ExecutorError('tool_error', `ComfyUI /prompt returned no prompt_id: ${text.slice(0, 200)}`);
      return { promptId: id, number: parsed.number, nodeErrors: parsed.node_errors, recovered: false };
    }
    if (await found()) return { promptId, number: undefined, nodeErrors: {}, recovered: true };
    throw new ExecutorError(lastErr?.code === 'timeout' ? 'timeout' : 'tool_error', `ComfyUI did not queue the prompt after ${this.submitAttempts} attempt(s): ${lastErr?.message ?? 'no answer'}`);
  }

  /**
   * Where ComfyUI has the prompt. GET /api/jobs/{id} (comfy_execution/jobs.py get_job: history,
   * then running, then pending; 404 {"error": "Job not found"}) when the server has it, otherwise
   * GET /queue then GET /history/{id} (in that order: a prompt moves from running to history).
   */
  async locate(promptId: string): Promise<PromptWhere> {
    if (this.jobsApi !== false) {
      const res = await this.http(`/api/jobs/${encodeURIComponent(promptId)}`);
      const text = await res.text();
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        body = undefined;
      }
      if (res.ok && isRecord(body) && typeof body.status === 'string') {
        this.jobsApi = true;
        if (body.status === 'pending') return 'pending';
        if (body.status === 'in_progress') return 'running';
        return 'finished';
      }
      if (res.status === 404 && isRecord(body) && typeof body.error === 'string') {
        this.jobsApi = true;
        return 'unknown';
      }
      if (res.status === 404) this.jobsApi = false; // an older ComfyUI: no jobs route
    }
    const q = await this.json<{ queue_running?: unknown[]; queue_pending?: unknown[] }>('/queue');
    const has = (items: unknown[] | undefined): boolean => (items ?? []).some((item) => Array.isArray(item) && item[1] === promptId);
    if (has(q.queue_running)) return 'running';
    if (has(q.queue_pending)) return 'pending';
    return (await this.getHistory(promptId)) ? 'finished' : 'unknown';
  }

  private jobsApi: boolean | undefined;

  /** Removes our prompt only: POST /queue {delete} (pending) + POST /interrupt {prompt_id} (running). */
  private async removePrompt(ctx: ExecContext, promptId: string): Promise<void> {
    await this.http('/queue', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ delete: [promptId] }),
    }).catch((e: unknown) => ctx.log('comfyui: POST /queue delete failed', { error: (e as Error).message }));
    await this.http('/interrupt', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt_id: promptId }),
    }).catch((e: unknown) => ctx.log('comfyui: POST /interrupt failed', { error: (e as Error).message }));
  }

  private async follow(
    ctx: ExecContext,
    promptId: string,
    queue: MessageQueue,
    tracker: SharedTracker,
    aborted: Promise<{ abortAll: string }>,
  ): Promise<Outcome> {
    let started = false;
    let wsUp = true;
    /** End announced (execution_success / _interrupted / _error / executing null): poll history fast. */
    let endNear = false;
    let cancelDeadline: number | undefined;
    let lastSeen = Date.now();
    let lastError: Record<string, unknown> | undefined;
    const blocked: string[] = [];
    const abortSeen = new Promise<'abort'>((resolve) => {
      if (ctx.signal.aborted) resolve('abort');
      else ctx.signal.addEventListener('abort', () => resolve('abort'), { once: true });
    });
    let pendingNext: Promise<Next> | undefined;

    const finish = (entry: HistoryEntry): Outcome => {
      const o = outcomeFromHistory(entry, promptId, cancelDeadline !== undefined);
      return o.kind === 'success' ? { ...o, blocked } : o;
    };
    /** A cancel: our prompt only (never a body-less interrupt, which stops whatever runs for every client). */
    const startCancel = async (): Promise<'gone' | 'waiting'> => {
      ctx.log('comfyui: cancelling', { prompt_id: promptId, started });
      await this.http('/queue', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ delete: [promptId] }),
      }).catch(() => undefined);
      cancelDeadline = Date.now() + this.interruptWaitMs;
      const where = await this.locate(promptId).catch(() => undefined);
      if (where === 'unknown') return 'gone';
      if (where === 'running' || where === undefined) {
        await this.http('/interrupt', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ prompt_id: promptId }),
        }).catch((e: unknown) => ctx.log('comfyui: /interrupt failed', { error: (e as Error).message }));
      }
      return 'waiting';
    };

    for (;;) {
      const waiters: Promise<Next | 'abort' | 'tick' | { abortAll: string }>[] = [aborted];
      if (wsUp) waiters.push((pendingNext ??= queue.next()));
      if (cancelDeadline === undefined) waiters.push(abortSeen);
      const fast = endNear || !wsUp || cancelDeadline !== undefined || lastError !== undefined;
      let ms = fast ? this.historyPollMs : this.livenessCheckMs;
      if (cancelDeadline !== undefined) ms = Math.min(ms, Math.max(0, cancelDeadline - Date.now()));
      let timer: NodeJS.Timeout | undefined;
      waiters.push(new Promise((r) => (timer = setTimeout(() => r('tick'), ms))));
      const ev = await Promise.race(waiters);
      clearTimeout(timer);

      if (typeof ev === 'object' && 'abortAll' in ev) {
        return { kind: 'error', error: new ExecutorError('tool_error', `ComfyUI run aborted: ${ev.abortAll}`, { details: { prompt_id: promptId } }) };
      }
      if (ev === 'abort') {
        if ((await startCancel()) === 'gone') return { kind: 'cancelled', message: 'task cancelled before ComfyUI started it' };
        continue;
      }
      if (ev === 'tick') {
        if (cancelDeadline !== undefined && Date.now() >= cancelDeadline) {
          ctx.log('comfyui: the cancel was not confirmed before the deadline', { prompt_id: promptId });
          return { kind: 'cancelled', message: 'task cancelled (ComfyUI did not confirm the interrupt in time)' };
        }
        let where: PromptWhere | undefined;
        let why = '';
        try {
          where = await this.locate(promptId);
        } catch (e) {
          why = (e as Error).message;
        }
        if (where === 'finished') {
          const entry = await this.getHistory(promptId).catch(() => undefined);
          if (entry) return finish(entry);
        } else if (where === 'running' || where === 'pending') {
          lastSeen = Date.now();
          if (where === 'running') started = true;
          continue;
        }
        if (where === 'unknown' && cancelDeadline !== undefined) return { kind: 'cancelled', message: 'task cancelled' };
        const missingFor = Date.now() - lastSeen;
        if (missingFor >= this.livenessTimeoutMs) {
          const cause =
            where === undefined
              ? `ComfyUI at ${this.baseUrl} has been unreachable for ${Math.round(missingFor / 1000)} s (${why}); the process died or restarted`
              : `ComfyUI lost prompt ${promptId}: it has been neither running, pending nor in history for ${Math.round(missingFor / 1000)} s (ComfyUI restarted, or another client cleared the queue or history)`;
          ctx.log('comfyui: liveness check failed', { prompt_id: promptId, where: where ?? 'unreachable' });
          return { kind: 'error', error: new ExecutorError('tool_error', cause, { details: { prompt_id: promptId, where: where ?? 'unreachable' } }) };
        }
        continue;
      }
      pendingNext = undefined;
      if (ev.kind === 'closed') {
        ctx.log('comfyui: websocket lost, polling', { prompt_id: promptId, reason: ev.reason });
        wsUp = false;
        continue;
      }
      const { type, data } = ev.msg;
      if (type === 'status' || type === 'progress_state' || type === 'feature_flags') continue;
      if (data.prompt_id !== promptId) continue;
      lastSeen = Date.now();
      switch (type) {
        case 'execution_start':
          started = true;
          break;
        case 'execution_cached':
          started = true;
          tracker.cached(Array.isArray(data.nodes) ? data.nodes.map(String) : []);
          break;
        case 'executing': {
          started = true;
          const node = data.node;
          if (node === null || node === undefined) {
            // main.py prompt_worker: sent after task_done wrote the history entry
            const entry = await this.waitForHistory(promptId, 5_000).catch(() => undefined);
            if (entry) return finish(entry);
            endNear = true;
            break;
          }
          tracker.executing(String(node), typeof data.display_node === 'string' ? data.display_node : undefined);
          break;
        }
        case 'progress':
          started = true;
          tracker.progress(typeof data.node === 'string' ? data.node : undefined, Number(data.value ?? 0), Number(data.max ?? 0));
          break;
        case 'executed':
          tracker.executed(String(data.node), data.output);
          break;
        case 'execution_success':
        case 'execution_interrupted': {
          // execution.py: sent before main.py's task_done writes history; read the outcome there
          endNear = true;
          const entry = await this.getHistory(promptId).catch(() => undefined);
          if (entry) return finish(entry);
          break;
        }
        case 'execution_error':
          // Either the prompt failed (history records it) or an ExecutionBlocker with a message
          // stopped one branch (execution_block_cb: sent while the prompt goes on, not in history).
          lastError = data;
          if (data.exception_type === 'ExecutionBlocked') blocked.push(`node ${String(data.node_id)}: ${String(data.exception_message ?? '')}`);
          break;
        default:
          break;
      }
    }
  }

  /** History is written by the prompt worker right after execution_success; retry briefly. */
  private async waitForHistory(promptId: string, maxWaitMs: number): Promise<HistoryEntry | undefined> {
    const deadline = Date.now() + maxWaitMs;
    let delay = 10;
    for (;;) {
      const entry = await this.getHistory(promptId);
      if (entry) return entry;
      if (Date.now() + delay > deadline) return undefined;
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 250);
    }
  }

  /** Text results become .txt outputs (`<node>_text.txt`, numbered when a node has several). */
  private async writeTexts(texts: Array<{ node: string; text: string }>, ctx: ExecContext, used: Set<string>): Promise<ExecOutput[]> {
    if (texts.length === 0) return [];
    const dir = path.join(ctx.workDir, 'outputs');
    await mkdir(dir, { recursive: true });
    const out: ExecOutput[] = [];
    for (const t of texts) {
      const stem = `${sanitize(t.node)}_text`;
      let name = `${stem}.txt`;
      for (let i = 2; used.has(name); i++) name = `${stem}_${i}.txt`;
      used.add(name);
      const localPath = path.join(dir, name);
      const bytes = Buffer.from(t.text, 'utf8');
      await writeFile(localPath, bytes);
      out.push({ name, localPath, contentType: 'text/plain', size: bytes.length });
    }
    return out;
  }

  private async download(refs: ComfyFileRef[], ctx: ExecContext): Promise<ExecOutput[]> {
    const dir = path.join(ctx.workDir, 'outputs');
    await mkdir(dir, { recursive: true });
    const used = new Set<string>();
    const outputs: ExecOutput[] = [];
    for (const ref of refs) {
      let name = path.basename(ref.filename);
      if (used.has(name)) {
        const ext = path.extname(name);
        let i = 1;
        while (used.has(`${name.slice(0, name.length - ext.length)}_${i}${ext}`)) i++;
        name = `${name.slice(0, name.length - ext.length)}_${i}${ext}`;
      }
      used.add(name);
      const qs = new URLSearchParams({ filename: ref.filename, subfolder: ref.subfolder, type: ref.type });
      const res = await this.http(`/view?${qs.toString()}`, { timeoutMs: this.transferTimeoutMs, signal: ctx.signal });
      if (!res.ok || !res.body) {
        throw new ExecutorError('tool_error', `ComfyUI /view ${ref.type}/${ref.subfolder ? `${ref.subfolder}/` : ''}${ref.filename} returned ${res.status}`);
      }
      const localPath = path.join(dir, name);
      let size = 0;
      const body = Readable.fromWeb(res.body as unknown as NodeReadableStream<Uint8Array>);
      body.on('data', (c: Buffer) => (size += c.length));
      try {
        await pipeline(body, createWriteStream(localPath));
      } catch (err) {
        await rm(localPath, { force: true });
        if (ctx.signal.aborted) throw new ExecutorError('cancelled', 'task cancelled');
        throw new ExecutorError('tool_error', `downloading ${ref.filename} from ComfyUI failed: ${(err as Error).message}`, { cause: err });
      }
      const headerType = res.headers.get('content-type')?.split(';')[0]?.trim();
      const contentType = headerType && headerType !== 'application/octet-stream' ? headerType : contentTypeFor(name);
      outputs.push({ name, localPath, contentType, size });
    }
    return outputs;
  }
}

// ------------------------------------------------------------------ helpers

type Outcome =
  | { kind: 'success'; entry: HistoryEntry; blocked: string[] }
  | { kind: 'error'; error: ExecutorError }
  | { kind: 'cancelled'; message: string };

function prepareGraph(workflow: unknown): ApiGraph {
  const g = toApiGraph(workflow);
  if (!g.ok) throw new ExecutorError('bad_input', g.error);
  return g.graph;
}

function errorFromExecutionError(data: Record<string, unknown>): ExecutorError {
  return new ExecutorError('tool_error', executionErrorMessage(data), {
    details: {
      node_id: data.node_id,
      node_type: data.node_type,
      exception_type: data.exception_type,
      exception_message: data.exception_message,
      traceback: data.traceback,
    },
  });
}

/** The outcome a history entry records (main.py task_done: status {status_str, completed, messages}). */
function outcomeFromHistory(entry: HistoryEntry, promptId: string, cancelling: boolean): Outcome {
  const st = historyStatus(entry);
  if (st.kind === 'error') {
    return { kind: 'error', error: st.data ? errorFromExecutionError(st.data) : new ExecutorError('tool_error', `ComfyUI reported an error for prompt ${promptId}`) };
  }
  if (st.kind === 'interrupted') {
    if (cancelling) return { kind: 'cancelled', message: 'task cancelled' };
    // someone else's body-less POST /interrupt (or ComfyUI itself) stopped our prompt: retryable
    return {
      kind: 'error',
      error: new ExecutorError('tool_error', `ComfyUI interrupted prompt ${promptId} at node ${String(st.data.node_id)} (${String(st.data.node_type)}); the task did not ask for it`),
    };
  }
  if (cancelling) return { kind: 'cancelled', message: 'task cancelled' };
  return { kind: 'success', entry, blocked: [] };
}
