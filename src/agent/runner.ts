/**
 * The agent's task loop: assign -> (sync, provisioned) -> ACK -> download inputs -> executor (progress) ->
 * upload outputs -> result; executor errors -> failure with the executor's message; cancel aborts
 * the executor (nothing is reported: the server already ended the task). Every message about a
 * task echoes the (attempt, epoch) its assignment carried: the epoch is the fencing token.
 */
import { mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../shared/logger.js';
import { endSpan, inSpan, markSpanError, SpanKind, startSpan, traceparentOfSpan, tracingEnabled, withActive, type Span } from '../shared/tracing.js';
import type { AgentClient, TaskRef } from './client.js';
import { ExecutorError, isExecutorError, type CheckpointStore, type ExecOutput, type Executor, type InputFile, type ProgressTick } from './executors/index.js';
import { downloadTo, uploadFile } from './transfer.js';
import { putWithRetry, type PutTarget } from './upload-retry.js';
import type { AssignMessage, ServerCommandMsg } from '../protocol/agent-wire.js';
import type { OutputFile } from '../gen/gantry/agent/v1/OutputFile.js';

export interface RunnerOptions {
  slots: number;
  /** Per-task work directories are created (and removed) under it. */
  workDir: string;
  /** Tool types the executor can run; null = any (simulate). */
  toolTypes: ReadonlySet<string> | null;
  executorName: string;
  logger: Logger;
  /**
   * An assignment with provision=true: sync the team's models and custom nodes (a sync that starts
   * after the assignment arrived) and report the inventory; resolves when done, rejects when a model
   * in requiredModels (the assignment's required_models) could not be synced. Absent: nothing to do.
   */
  provision?: (requiredModels: readonly string[]) => Promise<unknown>;
}

/** Provisioning (model/custom node sync) failed: the task fails with code download_failed. */
class ProvisionError extends Error {}

interface Running {
  ref: TaskRef;
  toolType: string;
  abort: AbortController;
  cancelled: boolean;
  shuttingDown: boolean;
  done: Promise<void>;
  progressLog: ProgressLogGate;
}

/** The server's default task timeout when the assignment says 0 (GANTRY_TASK_TIMEOUT_MAX_S's default). */
const DEFAULT_TASK_TIMEOUT_S = 86_400;
const assignedAt = new WeakMap<AssignMessage, number>();

/**
 * When the task's time is up (its assignment's timeout_s, counted from when this agent got it): the
 * calls a task makes to the server retry UNAVAILABLE until then (the server cancels it at its own
 * deadline, which aborts them sooner).
 */
function taskDeadline(a: AssignMessage): number {
  let at = assignedAt.get(a);
  if (at === undefined) assignedAt.set(a, (at = Date.now()));
  return at + (a.timeout_s > 0 ? a.timeout_s : DEFAULT_TASK_TIMEOUT_S) * 1000;
}

/** Progress is logged at most once per task every this many ms, or at once on a stage change. */
export const PROGRESS_LOG_INTERVAL_MS = 5000;

/** Decides whether a progress tick is logged: the first one, a stage change, or the interval passed. */
export class ProgressLogGate {
  private at: number | null = null;
  private stage = '';

  constructor(private readonly intervalMs = PROGRESS_LOG_INTERVAL_MS) {}

  pass(stage: string, now: number): boolean {
    if (this.at !== null && stage === this.stage && now - this.at < this.intervalMs) return false;
    this.at = now;
    this.stage = stage;
    return true;
  }
}

const safeName = (s: string, fallback: string): string => {
  const b = path.basename(s).replace(/[^A-Za-z0-9._-]/g, '_').replace(/^\.+/, '');
  return b.slice(0, 150) || fallback;
};

export class AgentRunner {
  private tasks = new Map<string, Running>();
  /**
   * Assignments that arrived while every slot was busy (the server frees a slot when it cancels a
   * task, a moment before this agent's executor has wound the cancelled run down): started in order
   * as slots free up. The server's ACK deadline bounds how long one may wait here.
   */
  private waitingForSlot: AssignMessage[] = [];
  private client: AgentClient | null = null;
  private idleWaiters: Array<() => void> = [];
  draining = false;
  /** Counters (bench, logs). */
  completed = 0;
  failed = 0;
  /** The work dir exists (made at the first task; taskDir makes it again should it be removed). */
  private workDirMade = false;

  constructor(
    private readonly executor: Executor,
    private readonly o: RunnerOptions,
  ) {}

  attach(client: AgentClient): void {
    this.client = client;
  }

  runningCount(): number {
    return this.tasks.size;
  }

  /** What the agent still holds (running, or finished but not confirmed by the server): hello.running. */
  held(): TaskRef[] {
    const out = new Map<string, TaskRef>();
    for (const t of this.tasks.values()) out.set(t.ref.task_id, t.ref);
    for (const r of this.client?.pendingTerminal() ?? []) out.set(r.task_id, r);
    return [...out.values()];
  }

  onMessage(m: ServerCommandMsg): void {
    switch (m.msg) {
      case 'assign':
        this.onAssign(m.assign);
        return;
      case 'cancel': {
        const c = m.cancel;
        if (c) this.waitingForSlot = this.waitingForSlot.filter((h) => !(h.task_id === c.task_id && h.epoch === c.epoch));
        const t = c ? this.tasks.get(c.task_id) : undefined;
        if (!t || !c || t.ref.epoch !== c.epoch || t.ref.attempt !== c.attempt) return;
        this.o.logger.info({ task_id: c.task_id }, 'task cancelled by the server');
        t.cancelled = true;
        t.abort.abort();
        return;
      }
      case 'drain':
        this.o.logger.info('drain requested by the server: finishing running tasks, taking no new ones');
        this.setDraining();
        return;
      default:
        return;
    }
  }

  setDraining(): void {
    if (this.draining) return;
    this.draining = true;
    this.client?.send({ status: { draining: true } }, 'transition');
  }

  /** Resolves true when no task runs any more, false after timeoutMs. */
  idle(timeoutMs: number): Promise<boolean> {
    if (this.tasks.size === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.idleWaiters = this.idleWaiters.filter((w) => w !== done);
        resolve(false);
      }, timeoutMs);
      const done = (): void => {
        clearTimeout(t);
        resolve(true);
      };
      this.idleWaiters.push(done);
    });
  }

  /** Graceful stop: drain, let running tasks finish within timeoutMs, then abort them ('agent shutting down'). */
  async shutdown(timeoutMs: number): Promise<void> {
    this.setDraining();
    if (await this.idle(timeoutMs)) return;
    this.o.logger.warn({ running: this.tasks.size }, 'drain timeout: aborting running tasks');
    for (const t of this.tasks.values()) {
      t.shuttingDown = true;
      t.abort.abort();
    }
    await this.idle(30_000);
  }

  private onAssign(a: AssignMessage): void {
    const ref: TaskRef = { task_id: a.task_id, attempt: a.attempt, epoch: a.epoch };
    const have = this.tasks.get(a.task_id);
    if (have) {
      // a re-delivered assignment of what we already run: ACK again (idempotent); a different epoch is ignored
      if (have.ref.epoch === a.epoch && have.ref.attempt === a.attempt) this.client?.send({ ack: ref }, 'transition', ref);
      return;
    }
    if (this.draining) {
      // not ACKed: the server hands it to another agent when this stream ends
      this.o.logger.info({ task_id: a.task_id }, 'draining: assignment not accepted');
      return;
    }
    if (this.tasks.size >= this.o.slots) {
      if (this.waitingForSlot.some((h) => h.task_id === a.task_id && h.epoch === a.epoch)) return;
      this.waitingForSlot = this.waitingForSlot.filter((h) => h.task_id !== a.task_id);
      this.o.logger.info({ task_id: a.task_id, slots: this.o.slots }, 'every slot busy: assignment held until one frees');
      this.waitingForSlot.push(a);
      return;
    }
    const t: Running = { ref, toolType: a.tool_type, abort: new AbortController(), cancelled: false, shuttingDown: false, done: Promise.resolve(), progressLog: new ProgressLogGate() };
    this.tasks.set(a.task_id, t);
    t.done = this.run(a, t).finally(() => {
      this.tasks.delete(a.task_id);
      const next = this.draining ? undefined : this.waitingForSlot.shift();
      if (next) this.onAssign(next);
      if (this.tasks.size === 0) for (const w of this.idleWaiters.splice(0)) w();
    });
  }

  private progress(ref: TaskRef, p: ProgressTick): void {
    this.logProgress(ref, p);
    this.client?.send(
      {
        progress: {
          ...ref,
          progress: p.progress,
          step_current: p.step_current,
          step_total: p.step_total,
          current_node: p.current_node,
          stage: p.stage ?? '',
          message: p.message ?? '',
        },
      },
      'progress',
      ref,
    );
  }

  /** A progress line for humans: the first tick, then at most one per interval or on a stage change. */
  private logProgress(ref: TaskRef, p: ProgressTick): void {
    const t = this.tasks.get(ref.task_id);
    if (!t || t.ref.epoch !== ref.epoch) return;
    const stage = p.stage ?? '';
    if (!t.progressLog.pass(stage, performance.now())) return;
    const percent = Math.max(0, Math.min(100, Math.round(p.progress * 1000) / 10));
    this.o.logger.info(
      { task_id: ref.task_id, attempt: ref.attempt, ...(stage ? { stage } : {}), percent, step: `${p.step_current}/${p.step_total}`, ...(p.current_node ? { node: p.current_node } : {}) },
      'task progress',
    );
  }

  /**
   * Tracing on: the run is one span, a child of the span the assignment's traceparent names (the
   * node's assigning transition), with child spans for provisioning, inputs, the executor and the
   * upload; the result or failure carries this span's traceparent back to the node.
   */
  private run(a: AssignMessage, t: Running): Promise<void> {
    if (!tracingEnabled()) return this.runTask(a, t, null);
    const span = startSpan('agent run task', {
      kind: SpanKind.CONSUMER,
      ...(a.traceparent ? { parent: a.traceparent } : {}),
      attributes: { 'gantry.task.id': a.task_id, 'gantry.task.attempt': a.attempt, 'gantry.task.epoch': Number(a.epoch), 'gantry.tool_type': a.tool_type },
    });
    return withActive(span, () => this.runTask(a, t, span)).finally(() => endSpan(span));
  }

  private async runTask(a: AssignMessage, t: Running, span: Span | null): Promise<void> {
    const traceparent = span ? (traceparentOfSpan(span) ?? '') : '';
    const c = this.client as AgentClient;
    const ref = t.ref;
    const until = taskDeadline(a);
    const log = this.o.logger.child({ task_id: ref.task_id, attempt: ref.attempt, epoch: ref.epoch });
    let dir: string | null = null;
    try {
      if (a.provision) {
        log.info('provisioning: syncing models and custom nodes first');
        await inSpan('agent provision', {}, () => this.provision(a.required_models ?? [], t.abort.signal));
        // the inventory report went out before this, on the same ordered stream
        c.send({ provisioned: ref }, 'transition', ref);
      }
      c.send({ ack: ref }, 'transition', ref);
      log.info({ tool_type: a.tool_type, provisioned: a.provision }, 'task accepted');
      if (this.o.toolTypes && !this.o.toolTypes.has(a.tool_type))
        throw new ExecutorError('bad_input', `this agent runs the ${this.o.executorName} executor and cannot run ${a.tool_type} tasks (give such workflows a label only matching agents have)`);
      dir = await this.taskDir(ref.task_id);
      const workDir = path.join(dir, 'work');
      await mkdir(workDir);
      // parsed where the assignment arrived (the agent-wire codec); a bad payload fails the task here
      if (!a.payload.ok) throw new ExecutorError('bad_input', a.payload.error);
      const { workflow, parameters } = a.payload;
      const isNerf = a.tool_type === 'nerfstudio';
      const taskDir = dir;
      const inputFiles = await inSpan('agent fetch inputs', { attributes: { 'gantry.input_files': a.input_files.length } }, () => this.fetchInputs(a, taskDir, t.abort.signal, (p) => isNerf && this.progress(ref, p)));
      const res = await inSpan('agent execute', { attributes: { 'gantry.executor': this.o.executorName } }, () => this.executor.run({
        taskId: ref.task_id,
        attempt: ref.attempt,
        toolType: a.tool_type === 'nerfstudio' ? 'nerfstudio' : 'comfyui',
        workflow,
        parameters,
        inputFiles,
        workDir,
        signal: t.abort.signal,
        ...(a.comfy_org_api_key ? { comfyOrgApiKey: a.comfy_org_api_key } : {}),
        onProgress: (p) => this.progress(ref, p),
        log: (msg, extra) => log.debug(extra ?? {}, msg),
        ...(isNerf ? { checkpoints: this.checkpointStore(a, ref) } : {}),
      }));
      if (isNerf) this.progress(ref, { progress: 0.99, step_current: 0, step_total: 0, current_node: 'upload', stage: 'upload', message: `uploading ${res.outputs.length} file(s)` });
      const outputs = await inSpan('agent upload outputs', { attributes: { 'gantry.outputs': res.outputs.length } }, () => this.upload(ref, res.outputs, t.abort.signal, until, log));
      c.dropProgress(ref.task_id);
      c.send(
        {
          result: {
            ...ref,
            storage_key: outputs[0]?.storage_key ?? '',
            storage_keys: outputs.map((o) => o.storage_key as string),
            image_count: outputs.filter((o) => (o.content_type ?? '').startsWith('image/')).length,
            outputs,
            traceparent,
          },
        },
        'transition',
        ref,
      );
      this.completed++;
      log.info({ outputs: outputs.length }, 'task completed');
    } catch (e) {
      c.dropProgress(ref.task_id);
      if (t.cancelled) {
        log.info('task stopped after cancel');
        return;
      }
      const error = t.shuttingDown ? 'agent shutting down' : isExecutorError(e) ? e.message : e instanceof Error ? e.message : String(e);
      const code = t.shuttingDown ? 'shutting_down' : e instanceof ProvisionError ? 'download_failed' : isExecutorError(e) ? e.code : 'tool_error';
      markSpanError(span, e);
      c.send({ failure: { ...ref, error, code, traceparent } }, 'transition', ref);
      this.failed++;
      log.warn({ error, code }, 'task failed');
    } finally {
      if (dir) await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    }
  }

  /** A fresh directory for the task under the work dir (made once, and again should it be removed). */
  private async taskDir(taskId: string): Promise<string> {
    const prefix = path.join(this.o.workDir, `${safeName(taskId, 'task')}-`);
    if (!this.workDirMade) {
      await mkdir(this.o.workDir, { recursive: true });
      this.workDirMade = true;
    }
    try {
      return await mkdtemp(prefix);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      await mkdir(this.o.workDir, { recursive: true });
      return mkdtemp(prefix);
    }
  }

  /** Checkpoints kept by the node across attempts (PresignCheckpoint / CommitCheckpoint). */
  private checkpointStore(a: AssignMessage, ref: TaskRef): CheckpointStore {
    const c = this.client as AgentClient;
    return {
      resumeStep: a.checkpoint_key ? a.checkpoint_step : null,
      download: async (dest, signal) => {
        const r = await c.presignCheckpoint({ ...ref, size: 0, step: 0 });
        if (!r.download_url) throw new ExecutorError('tool_error', 'the node has no checkpoint for this task any more');
        await downloadTo(r.download_url, dest, signal);
      },
      upload: async (localPath, step, signal) => {
        const size = (await stat(localPath)).size;
        const r = await c.presignCheckpoint({ ...ref, size, step });
        await uploadFile(r.upload_url, r.upload_headers, localPath, 'application/x-tar', signal);
        await c.commitCheckpoint({ ...ref, storage_key: r.storage_key, step });
      },
    };
  }

  /** Waits for a sync (abortable: a cancel does not wait for the download, which continues for the next task). */
  private async provision(requiredModels: readonly string[], signal: AbortSignal): Promise<void> {
    const p = this.o.provision ? this.o.provision(requiredModels) : Promise.resolve();
    await new Promise<void>((resolve, reject) => {
      const onAbort = (): void => reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
      if (signal.aborted) {
        p.catch(() => undefined);
        onAbort();
        return;
      }
      signal.addEventListener('abort', onAbort, { once: true });
      p.then(
        () => resolve(),
        (e: unknown) => reject(new ProvisionError(`provisioning failed: ${e instanceof Error ? e.message : String(e)}`)),
      ).finally(() => signal.removeEventListener('abort', onAbort));
    });
  }

  private async fetchInputs(a: AssignMessage, dir: string, signal: AbortSignal, onProgress: (p: ProgressTick) => void): Promise<InputFile[]> {
    const wanted = a.input_files ?? [];
    if (wanted.length === 0) return [];
    const c = this.client as AgentClient;
    onProgress({ progress: 0, step_current: 0, step_total: wanted.length, current_node: 'download', stage: 'download', message: `downloading ${wanted.length} input file(s)` });
    const res = await c.presignInputs({ task_id: a.task_id, attempt: a.attempt, epoch: a.epoch }, { until: taskDeadline(a), signal });
    const urls = new Map(res.files.map((f) => [`${f.key}\u0000${f.file_key}`, f.download_url]));
    const inDir = path.join(dir, 'inputs');
    await mkdir(inDir);
    const out: InputFile[] = [];
    let i = 0;
    for (const f of wanted) {
      const url = urls.get(`${f.key}\u0000${f.file_key}`);
      if (!url) throw new ExecutorError('bad_input', `no download URL for input ${f.key}`);
      const localPath = path.join(inDir, `${i++}-${safeName(f.file_name || f.file_key, 'input')}`);
      try {
        await downloadTo(url, localPath, signal);
      } catch (e) {
        if (signal.aborted) throw e;
        throw new ExecutorError('bad_input', `input ${f.key}: ${(e as Error).message}`);
      }
      out.push({
        key: f.key,
        fileKey: f.file_key,
        fileName: f.file_name || path.basename(f.file_key),
        localPath,
        ...(f.node_id ? { nodeId: f.node_id } : {}),
        ...(f.field ? { field: f.field } : {}),
        ...(f.target_path ? { targetPath: f.target_path } : {}),
      });
      onProgress({ progress: 0, step_current: i, step_total: wanted.length, current_node: 'download', stage: 'download', message: `downloaded ${f.key}` });
    }
    return out;
  }

  /** Presigns every output, then PUTs each, riding out a restart of the node behind its URL (putWithRetry). */
  private async upload(ref: TaskRef, files: ExecOutput[], signal: AbortSignal, until: number, log: Logger): Promise<OutputFile[]> {
    if (files.length === 0) return [];
    const c = this.client as AgentClient;
    const used = new Set<string>();
    const named = files.map((f, i) => {
      let name = safeName(f.name, `output-${i}`);
      if (used.has(name)) name = `${i}-${name}`;
      used.add(name);
      return { ...f, name };
    });
    const req = { ...ref, files: named.map((f) => ({ name: f.name, size: f.size, content_type: f.contentType })) };
    const presign = async (): Promise<Map<string, PutTarget>> =>
      new Map((await c.presignOutputs(req, { until, signal })).uploads.map((u) => [u.name, { url: u.upload_url, headers: u.upload_headers, storageKey: u.storage_key }]));
    let byName = await presign();
    const targetOf = (name: string): PutTarget => {
      const u = byName.get(name);
      if (!u) throw new ExecutorError('tool_error', `the server returned no upload URL for ${name}`);
      return u;
    };
    const out: OutputFile[] = [];
    for (const f of named) {
      let done: PutTarget;
      try {
        const put = (u: PutTarget): Promise<void> => uploadFile(u.url, u.headers, f.localPath, f.contentType, signal);
        const represign = async (): Promise<PutTarget> => {
          byName = await presign(); // fresh URLs for the files still to go too
          return targetOf(f.name);
        };
        done = await putWithRetry(targetOf(f.name), put, represign, {
          until,
          signal,
          onRetry: (r) => log.warn({ file: f.name, tries: r.tries, error: (r.error as Error).message, represign: r.verdict !== 'retry', retry_in_ms: r.retryInMs }, 'output upload failed; retrying'),
        });
      } catch (e) {
        if (signal.aborted || isExecutorError(e)) throw e;
        throw new ExecutorError('tool_error', `uploading ${f.name}: ${(e as Error).message}`);
      }
      out.push({ name: f.name, storage_key: done.storageKey, content_type: f.contentType, size: f.size });
    }
    return out;
  }
}
