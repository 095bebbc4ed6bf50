/**
 * Following one prompt on a local ComfyUI until its history confirms the end (comfyui.ts): the
 * run's own WebSocket (/ws?clientId=...) carries progress and the announced end, read by the shared
 * event switch (protocol/comfyui.ts readPromptMessage); lookups of the prompt (queue, history, jobs)
 * keep watch on its liveness and replace the socket when it is lost; a cancel removes our prompt only.
 */
import WebSocket from 'ws';
import { ExecutorError, type ExecContext } from './types.js';
import type { ComfyClient, HistoryEntry, PromptWhere } from './comfyui-client.js';
import { executionErrorMessage, historyStatus, parseWsFrame, readPromptMessage, type ComfyWsMessage, type ProgressTracker } from '../../protocol/comfyui.js';

type Next = { kind: 'msg'; msg: ComfyWsMessage } | { kind: 'closed'; reason: string };

/** Minimal async queue between the ws 'message' handler and the run loop. */
export class MessageQueue {
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

/** Opens /ws?clientId=...: its JSON messages and its close go to the queue; binary frames (previews) are dropped. */
export function connectWs(baseUrl: string, clientId: string, queue: MessageQueue, o: { connectTimeoutMs: number; sockets: Set<WebSocket> }): Promise<WebSocket> {
  const url = `${baseUrl.replace(/^http/, 'ws')}/ws?clientId=${encodeURIComponent(clientId)}`;
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { handshakeTimeout: o.connectTimeoutMs });
    let opened = false;
    ws.on('open', () => {
      opened = true;
      o.sockets.add(ws);
      resolve(ws);
    });
    ws.on('message', (data, isBinary) => {
      const msg = parseWsFrame(data, isBinary);
      if (msg) queue.push({ kind: 'msg', msg });
    });
    ws.on('error', (err) => {
      if (!opened) {
        reject(new ExecutorError('tool_error', `cannot connect to ComfyUI WebSocket at ${url}: ${err.message}`, { cause: err }));
      }
    });
    ws.on('close', (code) => {
      o.sockets.delete(ws);
      queue.push({ kind: 'closed', reason: `websocket closed (${code})` });
    });
  });
}

export type Outcome =
  | { kind: 'success'; entry: HistoryEntry; blocked: string[] }
  | { kind: 'error'; error: ExecutorError }
  | { kind: 'cancelled'; message: string };

export interface FollowOptions {
  historyPollMs: number;
  livenessTimeoutMs: number;
  livenessCheckMs: number;
  interruptWaitMs: number;
}

type Wake = Next | 'abort' | 'tick' | { abortAll: string };

/** One prompt followed until history (or a cancel, the liveness check, abortAll) ends it. */
export class PromptFollower {
  private started = false;
  private wsUp = true;
  /** End announced (execution_success / _interrupted / _error / executing null): poll history fast. */
  private endNear = false;
  private cancelDeadline: number | undefined;
  private lastSeen = Date.now();
  private lastError: Record<string, unknown> | undefined;
  private readonly blocked: string[] = [];

  constructor(
    private readonly client: ComfyClient,
    private readonly o: FollowOptions,
    private readonly ctx: ExecContext,
    private readonly promptId: string,
    private readonly queue: MessageQueue,
    private readonly tracker: ProgressTracker,
  ) {}

  async run(aborted: Promise<{ abortAll: string }>): Promise<Outcome> {
    const { ctx, promptId } = this;
    const abortSeen = new Promise<'abort'>((resolve) => {
      if (ctx.signal.aborted) resolve('abort');
      else ctx.signal.addEventListener('abort', () => resolve('abort'), { once: true });
    });
    let pendingNext: Promise<Next> | undefined;
    for (;;) {
      const waiters: Promise<Wake>[] = [aborted];
      if (this.wsUp) waiters.push((pendingNext ??= this.queue.next()));
      if (this.cancelDeadline === undefined) waiters.push(abortSeen);
      const fast = this.endNear || !this.wsUp || this.cancelDeadline !== undefined || this.lastError !== undefined;
      let ms = fast ? this.o.historyPollMs : this.o.livenessCheckMs;
      if (this.cancelDeadline !== undefined) ms = Math.min(ms, Math.max(0, this.cancelDeadline - Date.now()));
      let timer: NodeJS.Timeout | undefined;
      waiters.push(new Promise((r) => (timer = setTimeout(() => r('tick'), ms))));
      const ev = await Promise.race(waiters);
      clearTimeout(timer);

      if (typeof ev === 'object' && 'abortAll' in ev) {
        return { kind: 'error', error: new ExecutorError('tool_error', `ComfyUI run aborted: ${ev.abortAll}`, { details: { prompt_id: promptId } }) };
      }
      if (ev === 'abort') {
        if ((await this.startCancel()) === 'gone') return { kind: 'cancelled', message: 'task cancelled before ComfyUI started it' };
        continue;
      }
      const outcome = ev === 'tick' ? await this.check() : await this.take(ev);
      if (outcome) return outcome;
      if (ev !== 'tick') pendingNext = undefined;
    }
  }

  private finish(entry: HistoryEntry): Outcome {
    const o = outcomeFromHistory(entry, this.promptId, this.cancelDeadline !== undefined);
    return o.kind === 'success' ? { ...o, blocked: this.blocked } : o;
  }

  /** A cancel: our prompt only (never a body-less interrupt, which stops whatever runs for every client). */
  private async startCancel(): Promise<'gone' | 'waiting'> {
    const { ctx, promptId } = this;
    ctx.log('comfyui: cancelling', { prompt_id: promptId, started: this.started });
    await this.client.deletePending(promptId).catch(() => undefined);
    this.cancelDeadline = Date.now() + this.o.interruptWaitMs;
    const where = await this.client.locate(promptId).catch(() => undefined);
    if (where === 'unknown') return 'gone';
    if (where === 'running' || where === undefined) {
      await this.client.interrupt(promptId).catch((e: unknown) => ctx.log('comfyui: /interrupt failed', { error: (e as Error).message }));
    }
    return 'waiting';
  }

  /** A timer tick: the cancel deadline, then where ComfyUI has the prompt (finished, alive, or lost for too long). */
  private async check(): Promise<Outcome | undefined> {
    const { ctx, promptId } = this;
    if (this.cancelDeadline !== undefined && Date.now() >= this.cancelDeadline) {
      ctx.log('comfyui: the cancel was not confirmed before the deadline', { prompt_id: promptId });
      return { kind: 'cancelled', message: 'task cancelled (ComfyUI did not confirm the interrupt in time)' };
    }
    let where: PromptWhere | undefined;
    let why = '';
    try {
      where = await this.client.locate(promptId);
    } catch (e) {
      why = (e as Error).message;
    }
    if (where === 'finished') {
      const entry = await this.client.getHistory(promptId).catch(() => undefined);
      if (entry) return this.finish(entry);
    } else if (where === 'running' || where === 'pending') {
      this.lastSeen = Date.now();
      if (where === 'running') this.started = true;
      return undefined;
    }
    if (where === 'unknown' && this.cancelDeadline !== undefined) return { kind: 'cancelled', message: 'task cancelled' };
    const missingFor = Date.now() - this.lastSeen;
    if (missingFor < this.o.livenessTimeoutMs) return undefined;
    const cause =
      where === undefined
        ? `ComfyUI at ${this.client.o.baseUrl} has been unreachable for ${Math.round(missingFor / 1000)} s (${why}); the process died or restarted`
        : `ComfyUI lost prompt ${promptId}: it has been neither running, pending nor in history for ${Math.round(missingFor / 1000)} s (ComfyUI restarted, or another client cleared the queue or history)`;
    ctx.log('comfyui: liveness check failed', { prompt_id: promptId, where: where ?? 'unreachable' });
    return { kind: 'error', error: new ExecutorError('tool_error', cause, { details: { prompt_id: promptId, where: where ?? 'unreachable' } }) };
  }

  /** A socket message (read by the shared event switch) or the socket's close. */
  private async take(next: Next): Promise<Outcome | undefined> {
    const { ctx, promptId } = this;
    if (next.kind === 'closed') {
      ctx.log('comfyui: websocket lost, polling', { prompt_id: promptId, reason: next.reason });
      this.wsUp = false;
      return undefined;
    }
    const ev = readPromptMessage(next.msg, promptId, this.tracker);
    if (ev === null) return undefined;
    this.lastSeen = Date.now();
    switch (ev.kind) {
      case 'step':
        if (ev.started) this.started = true;
        return undefined;
      case 'idle': {
        this.started = true;
        // main.py prompt_worker: sent after task_done wrote the history entry
        const entry = await this.client.waitForHistory(promptId, 5_000).catch(() => undefined);
        if (entry) return this.finish(entry);
        this.endNear = true;
        return undefined;
      }
      case 'success':
      case 'interrupted': {
        // execution.py: sent before main.py's task_done writes history; read the outcome there
        this.endNear = true;
        const entry = await this.client.getHistory(promptId).catch(() => undefined);
        return entry ? this.finish(entry) : undefined;
      }
      case 'error':
        // Either the prompt failed (history records it) or an ExecutionBlocker with a message
        // stopped one branch (execution_block_cb: sent while the prompt goes on, not in history).
        this.lastError = ev.data;
        if (ev.data.exception_type === 'ExecutionBlocked') this.blocked.push(`node ${String(ev.data.node_id)}: ${String(ev.data.exception_message ?? '')}`);
        return undefined;
      case 'other':
        return undefined;
    }
  }
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
