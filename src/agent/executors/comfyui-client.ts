/**
 * The HTTP side of a local ComfyUI, as the comfyui executor (comfyui.ts) uses it: requests with
 * their timeouts and error codes, the idempotent POST /prompt, where a prompt is (queue, history,
 * jobs), uploads, history reads and the removal of our prompt. Routes are listed in comfyui.ts.
 */
import { openAsBlob } from 'node:fs';
import { ExecutorError, type ExecContext } from './types.js';
import { isRecord } from './util.js';
import { promptRejection } from '../../protocol/comfyui.js';

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

export interface HistoryEntry {
  prompt?: unknown;
  outputs?: Record<string, unknown>;
  status?: { status_str?: string; completed?: boolean; messages?: unknown[] } | null;
  meta?: unknown;
}

export interface ComfyClientOptions {
  /** Without a trailing slash. */
  baseUrl: string;
  fetchTimeoutMs: number;
  submitTimeoutMs: number;
  submitAttempts: number;
  transferTimeoutMs: number;
  uploadSubfolder: string;
}

type RequestOptions = RequestInit & { timeoutMs?: number; signal?: AbortSignal };

export class ComfyClient {
  private jobsApi: boolean | undefined;

  constructor(readonly o: ComfyClientOptions) {}

  async http(p: string, init: RequestOptions = {}): Promise<Response> {
    const timeoutMs = init.timeoutMs ?? this.o.fetchTimeoutMs;
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = init.signal ? AbortSignal.any([timeout, init.signal]) : timeout;
    const { timeoutMs: _t, ...rest } = init;
    try {
      return await fetch(`${this.o.baseUrl}${p}`, { ...rest, signal });
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
        `ComfyUI unreachable at ${this.o.baseUrl}: ${cause?.code ?? cause?.message ?? (err as Error).message}`,
        { cause: err },
      );
    }
  }

  private async json<T>(p: string, init: RequestOptions = {}): Promise<T> {
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

  private postJson(p: string, body: unknown): Promise<Response> {
    return this.http(p, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
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

  /** History is written by the prompt worker right after execution_success; retry briefly. */
  async waitForHistory(promptId: string, maxWaitMs: number): Promise<HistoryEntry | undefined> {
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

  /** POST /upload/image; returns the value to put into a LoadImage-style input. */
  async uploadImage(localPath: string, fileName: string, signal?: AbortSignal): Promise<{ name: string; subfolder: string; type: string; ref: string }> {
    const blob = await openAsBlob(localPath);
    const form = new FormData();
    form.append('image', blob as unknown as Blob, fileName);
    form.append('overwrite', 'true');
    form.append('type', 'input');
    if (this.o.uploadSubfolder) form.append('subfolder', this.o.uploadSubfolder);
    const res = await this.http('/upload/image', {
      method: 'POST',
      body: form,
      timeoutMs: this.o.transferTimeoutMs,
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

  /**
   * POST /prompt with our prompt_id. When ComfyUI does not answer in time the request may still
   * have queued the prompt, so the id is looked up (queue, history, jobs) before each resubmission
   * with the same id; a 409 (newer server.py: the id is already known) also means an earlier
   * attempt got through. A prompt is never queued twice by us.
   */
  async submit(
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
    for (let attempt = 1; attempt <= this.o.submitAttempts; attempt++) {
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
          timeoutMs: this.o.submitTimeoutMs,
        });
        text = await res.text();
      } catch (e) {
        lastErr = e instanceof ExecutorError ? e : new ExecutorError('timeout', `ComfyUI POST /prompt: no complete answer within ${this.o.submitTimeoutMs} ms`, { cause: e });
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
    throw new ExecutorError(lastErr?.code === 'timeout' ? 'timeout' : 'tool_error', `ComfyUI did not queue the prompt after ${this.o.submitAttempts} attempt(s): ${lastErr?.message ?? 'no answer'}`);
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

  /** POST /queue {delete: [prompt_id]}: removes our prompt while it is pending. */
  deletePending(promptId: string): Promise<Response> {
    return this.postJson('/queue', { delete: [promptId] });
  }

  /**
   * POST /interrupt {prompt_id}: stops our prompt if it is the running one; never a body-less
   * interrupt, which stops whatever runs for every client.
   */
  interrupt(promptId: string): Promise<Response> {
    return this.postJson('/interrupt', { prompt_id: promptId });
  }

  /** Removes our prompt only: POST /queue {delete} (pending) + POST /interrupt {prompt_id} (running). */
  async removePrompt(ctx: ExecContext, promptId: string): Promise<void> {
    await this.deletePending(promptId).catch((e: unknown) => ctx.log('comfyui: POST /queue delete failed', { error: (e as Error).message }));
    await this.interrupt(promptId).catch((e: unknown) => ctx.log('comfyui: POST /interrupt failed', { error: (e as Error).message }));
  }
}
