/**
 * comfyui: runs a resolved API-format graph on a local ComfyUI through its own HTTP + WebSocket API
 * (server.py / execution.py / main.py):
 *
 *   GET  /ws?clientId=<sid>        JSON frames {type, data}; binary frames are previews (ignored)
 *   POST /upload/image             multipart image, overwrite, type, [subfolder] -> {name, subfolder, type}
 *   POST /prompt                   {prompt, client_id} -> {prompt_id, number, node_errors}
 *                                  400 -> {error: {type, message, details, extra_info}, node_errors}
 *   POST /interrupt                optional {prompt_id} (targeted interrupt in current ComfyUI)
 *   POST /queue                    {delete: [prompt_id]} removes a still-pending prompt
 *   GET  /history/<prompt_id>      {<prompt_id>: {prompt, outputs, status: {status_str, completed, messages}, meta}}
 *   GET  /view?filename&subfolder&type
 *   GET  /system_stats
 *
 * WebSocket messages handled (all carry prompt_id except `status`):
 *   status, execution_start, execution_cached {nodes}, executing {node|null, display_node},
 *   progress {value, max, node}, executed {node, output}, execution_success,
 *   execution_error {node_id, node_type, exception_message, exception_type, traceback, ...},
 *   execution_interrupted {node_id, node_type, executed}.
 */
import { randomUUID } from 'node:crypto';
import { createWriteStream, openAsBlob } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import WebSocket from 'ws';
import { ExecutorError, type ExecContext, type ExecOutput, type ExecResult, type Executor } from './types.js';
import { contentTypeFor, isRecord } from './util.js';
import { collectFileRefs, executionErrorMessage, historyStatus, ProgressTracker as SharedTracker, promptRejection, toApiGraph, type ComfyFileRef } from '../../protocol/comfyui.js';

export { collectFileRefs, type ComfyFileRef };

export interface ComfyUIOptions {
  /** e.g. http://127.0.0.1:8188 */
  baseUrl: string;
  /** Prefix of the per-run WebSocket client id (each run gets its own socket). */
  clientId?: string;
  /** Timeout for each plain HTTP request. Default 30 s. */
  fetchTimeoutMs?: number;
  /** Timeout for uploads and output downloads. Default 10 min. */
  transferTimeoutMs?: number;
  /** How long to wait for execution_interrupted after POST /interrupt. Default 15 s. */
  interruptWaitMs?: number;
  /** Poll interval for /history when the WebSocket is gone. Default 1 s. */
  historyPollMs?: number;
  /** WebSocket connect timeout. Default 10 s. */
  wsConnectTimeoutMs?: number;
  /** Subfolder of ComfyUI's input dir for uploaded task files. Default '' (top level). */
  uploadSubfolder?: string;
}

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
  private readonly transferTimeoutMs: number;
  private readonly interruptWaitMs: number;
  private readonly historyPollMs: number;
  private readonly wsConnectTimeoutMs: number;
  private readonly uploadSubfolder: string;
  private readonly sockets = new Set<WebSocket>();

  constructor(opts: ComfyUIOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, '');
    this.clientIdPrefix = sanitize(opts.clientId ?? 'gantry');
    this.fetchTimeoutMs = opts.fetchTimeoutMs ?? 30_000;
    this.transferTimeoutMs = opts.transferTimeoutMs ?? 600_000;
    this.interruptWaitMs = opts.interruptWaitMs ?? 15_000;
    this.historyPollMs = opts.historyPollMs ?? 1_000;
    this.wsConnectTimeoutMs = opts.wsConnectTimeoutMs ?? 10_000;
    this.uploadSubfolder = opts.uploadSubfolder ?? '';
  }

  async close(): Promise<void> {
    for (const ws of this.sockets) ws.terminate();
    this.sockets.clear();
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
    const ws = await this.connectWs(clientId, queue);
    try {
      return await this.runWithSocket(ctx, graph, clientId, queue);
    } finally {
      ws.close();
      setTimeout(() => ws.terminate(), 1000).unref();
    }
  }

  private async runWithSocket(
    ctx: ExecContext,
    graph: Record<string, { class_type: string; inputs: Record<string, unknown> }>,
    clientId: string,
    queue: MessageQueue,
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

    // 2. queue the prompt (never abort this request half-way: we would lose the prompt_id)
    const res = await this.http('/prompt', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      // partner (API) nodes read the key from extra_data.api_key_comfy_org (hidden input API_KEY_COMFY_ORG)
      body: JSON.stringify({ prompt: graph, client_id: clientId, ...(ctx.comfyOrgApiKey ? { extra_data: { api_key_comfy_org: ctx.comfyOrgApiKey } } : {}) }),
    });
    const text = await res.text();
    let body: Record<string, unknown> = {};
    try {
      const parsed = JSON.parse(text) as unknown;
      if (isRecord(parsed)) body = parsed;
    } catch {
      /* handled below */
    }
    if (!res.ok) {
      const err = body.error;
      const message = `ComfyUI rejected the workflow: ${promptRejection(body, text).message}`;
      throw new ExecutorError(res.status === 400 ? 'bad_input' : 'tool_error', message, {
        details: { status: res.status, error: err, node_errors: body.node_errors },
      });
    }
    const promptId = body.prompt_id;
    if (typeof promptId !== 'string') throw new ExecutorError('tool_error', `ComfyUI /prompt returned no prompt_id: ${text.slice(0, 200)}`);
    ctx.log('comfyui: prompt queued', { prompt_id: promptId, number: body.number, client_id: clientId });

    // 3. follow execution
    const tracker = new SharedTracker(graph, (p) => ctx.onProgress(p));
    const outcome = await this.follow(ctx, promptId, queue, tracker);
    if (outcome.kind === 'cancelled') throw new ExecutorError('cancelled', outcome.message, { details: { prompt_id: promptId } });
    if (outcome.kind === 'error') throw outcome.error;

    // 4. collect outputs from /history (fall back to what `executed` reported)
    const entry = outcome.entry ?? (await this.waitForHistory(promptId, ctx.signal, 5_000));
    const refs = collectFileRefs(entry?.outputs ?? tracker.executedOutputs);
    const outputs = await this.download(refs, ctx);
    ctx.onProgress({ progress: 1, step_current: tracker.total, step_total: tracker.total, current_node: '' });
    return { outputs };
  }

  private async follow(
    ctx: ExecContext,
    promptId: string,
    queue: MessageQueue,
    tracker: SharedTracker,
  ): Promise<
    | { kind: 'success'; entry?: HistoryEntry }
    | { kind: 'error'; error: ExecutorError }
    | { kind: 'cancelled'; message: string }
  > {
    let started = false;
    let cancelDeadline: number | undefined;
    const abortSeen = new Promise<'abort'>((resolve) => {
      if (ctx.signal.aborted) resolve('abort');
      else ctx.signal.addEventListener('abort', () => resolve('abort'), { once: true });
    });
    let pendingNext: Promise<Next> | undefined;

    const startCancel = async (): Promise<'gone' | 'interrupting'> => {
      ctx.log('comfyui: cancelling', { prompt_id: promptId, started });
      if (!started) {
        // Still queued: just remove it. Only interrupt if it slipped into running meanwhile.
        await this.http('/queue', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ delete: [promptId] }),
        }).catch(() => undefined);
        const running = await this.isRunning(promptId).catch(() => false);
        if (!running) return 'gone';
      }
      await this.http('/interrupt', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt_id: promptId }),
      }).catch((e: unknown) => ctx.log('comfyui: /interrupt failed', { error: (e as Error).message }));
      cancelDeadline = Date.now() + this.interruptWaitMs;
      return 'interrupting';
    };

    // WebSocket phase
    for (;;) {
      pendingNext ??= queue.next();
      const waiters: Promise<Next | 'abort' | 'deadline'>[] = [pendingNext];
      if (cancelDeadline === undefined) waiters.push(abortSeen);
      let deadlineTimer: NodeJS.Timeout | undefined;
      if (cancelDeadline !== undefined) {
        const ms = Math.max(0, cancelDeadline - Date.now());
        waiters.push(new Promise((r) => (deadlineTimer = setTimeout(() => r('deadline'), ms))));
      }
      const ev = await Promise.race(waiters);
      if (deadlineTimer) clearTimeout(deadlineTimer);

      if (ev === 'abort') {
        if ((await startCancel()) === 'gone') return { kind: 'cancelled', message: 'task cancelled before ComfyUI started it' };
        continue;
      }
      if (ev === 'deadline') {
        ctx.log('comfyui: no execution_interrupted before the deadline', { prompt_id: promptId });
        return { kind: 'cancelled', message: 'task cancelled (ComfyUI did not confirm the interrupt in time)' };
      }
      pendingNext = undefined;
      if (ev.kind === 'closed') {
        ctx.log('comfyui: websocket lost, polling /history', { prompt_id: promptId, reason: ev.reason });
        break;
      }
      const { type, data } = ev.msg;
      if (type === 'status' || type === 'progress_state' || type === 'feature_flags') continue;
      if (data.prompt_id !== promptId) continue;
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
            // Older ComfyUI signals the end this way (no execution_success). Status comes from history.
            const entry = await this.waitForHistory(promptId, undefined, 5_000);
            const fromHistory = outcomeFromHistory(entry, promptId);
            if (cancelDeadline !== undefined && fromHistory.kind !== 'error') return { kind: 'cancelled', message: 'task cancelled' };
            return fromHistory;
          }
          tracker.executing(String(node));
          break;
        }
        case 'progress':
          started = true;
          tracker.progress(
            typeof data.node === 'string' ? data.node : undefined,
            Number(data.value ?? 0),
            Number(data.max ?? 0),
          );
          break;
        case 'executed':
          tracker.executed(String(data.node), data.output);
          break;
        case 'execution_success':
          if (cancelDeadline !== undefined) return { kind: 'cancelled', message: 'task cancelled' };
          return { kind: 'success' };
        case 'execution_error':
          return { kind: 'error', error: errorFromExecutionError(data) };
        case 'execution_interrupted':
          return {
            kind: 'cancelled',
            message:
              cancelDeadline !== undefined
                ? 'task cancelled'
                : `ComfyUI interrupted the prompt at node ${String(data.node_id)} (${String(data.node_type)})`,
          };
        default:
          break;
      }
    }

    // Polling phase: the socket is gone; /history gets an entry once the prompt finished.
    for (;;) {
      if (ctx.signal.aborted && cancelDeadline === undefined) {
        if ((await startCancel()) === 'gone') return { kind: 'cancelled', message: 'task cancelled before ComfyUI started it' };
      }
      if (cancelDeadline !== undefined && Date.now() > cancelDeadline) {
        return { kind: 'cancelled', message: 'task cancelled (ComfyUI did not confirm the interrupt in time)' };
      }
      const entry = await this.getHistory(promptId).catch((e: unknown) => {
        ctx.log('comfyui: /history poll failed', { error: (e as Error).message });
        return undefined;
      });
      if (entry) {
        const o = outcomeFromHistory(entry, promptId);
        if (cancelDeadline !== undefined && o.kind !== 'error') return { kind: 'cancelled', message: 'task cancelled' };
        return o;
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, this.historyPollMs);
        function done(): void {
          clearTimeout(t);
          ctx.signal.removeEventListener('abort', done);
          resolve();
        }
        if (cancelDeadline === undefined) ctx.signal.addEventListener('abort', done, { once: true });
      });
    }
  }

  private async isRunning(promptId: string): Promise<boolean> {
    const q = await this.json<{ queue_running?: unknown[] }>('/queue');
    return (q.queue_running ?? []).some((item) => Array.isArray(item) && item[1] === promptId);
  }

  /** History is written by the prompt worker right after execution_success; retry briefly. */
  private async waitForHistory(promptId: string, signal: AbortSignal | undefined, maxWaitMs: number): Promise<HistoryEntry | undefined> {
    const deadline = Date.now() + maxWaitMs;
    let delay = 25;
    for (;;) {
      const entry = await this.getHistory(promptId);
      if (entry) return entry;
      if (Date.now() + delay > deadline || signal?.aborted) return undefined;
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 500);
    }
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

function prepareGraph(workflow: unknown): Record<string, { class_type: string; inputs: Record<string, unknown> }> {
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

function outcomeFromHistory(
  entry: HistoryEntry | undefined,
  promptId: string,
): { kind: 'success'; entry?: HistoryEntry } | { kind: 'error'; error: ExecutorError } | { kind: 'cancelled'; message: string } {
  if (!entry) return { kind: 'error', error: new ExecutorError('tool_error', `ComfyUI finished prompt ${promptId} but has no history for it`) };
  const st = historyStatus(entry);
  if (st.kind === 'error') return { kind: 'error', error: st.data ? errorFromExecutionError(st.data) : new ExecutorError('tool_error', `ComfyUI reported an error for prompt ${promptId}`) };
  if (st.kind === 'interrupted') return { kind: 'cancelled', message: `ComfyUI interrupted the prompt at node ${String(st.data.node_id)}` };
  return { kind: 'success', entry };
}
