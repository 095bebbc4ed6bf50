/**
 * The task use cases: run a workflow, read, list, cancel, the result, and waiting for the end. The
 * faces (REST routes in src/edge/routes/tasks.ts, MCP tools in src/mcp/) decode their input, call
 * these with the caller's principal and encode the answer; every rule (validation and its 400
 * messages, team scoping, not-found, retention, idempotency) lives here once.
 */
import type { ActorSystemPort, EventBusPort, TaskEvent, TaskRecord } from '../actors/ports.js';
import { TASK, SCHEDULER } from '../actors/index.js';
import type { TeamPrincipal } from '../identity/principal.js';
import { IdempotencyKeyTaken, idempotencyKeyOf, replayOf, requestFingerprint, type StoredIdempotency } from '../domain/idempotency.js';
import type { NewTask } from '../domain/tasks/new-task.js';
import { parseSlugRef } from '../domain/workflows/records.js';
import { TASK_STATUSES } from '../domain/tasks/record.js';
import { taskView, type TaskRow, type TaskView } from '../domain/tasks/view.js';
import { collectFileKeys, resolveRunParameters, type StagedFile } from '../domain/workflows/parameters.js';
import type { WorkflowDefinition } from '../domain/workflows/schema.js';
import { badRequest, conflict, fromZodIssues, gone, invalidParameter, notFound, unavailable } from '../shared/errors.js';
import { isUuid, uuidv7 } from '../shared/ids.js';
import { paged, type PageRequest } from '../shared/pagination.js';
import { endSpan, startSpan, traceparentOfSpan } from '../shared/tracing.js';
import { z } from 'zod';

/** What the run use case needs from the workflow catalog. */
export interface WorkflowResolver {
  resolveForRun(teamId: string, ref: { id: string } | { slug: string; version?: number }): Promise<{ workflow: WorkflowDefinition; workflowId: string; workflowSlug: string; version: number; snapshotId: string | null }>;
}

/** Staged input files (the files issue implements it). */
export interface FileLookup {
  lookup(teamId: string, fileKeys: string[]): Promise<Map<string, StagedFile>>;
}

/** Turns a completed task's output into download URLs (object store). */
export interface OutputLinks {
  links(teamId: string, taskId: string, output: Record<string, unknown>): Promise<{ download_url: string | null; download_urls: Record<string, string> | null; expires_at: string | null }>;
}

/** The task store (src/persistence/task-queries.ts TaskQueries): reads, the one insert, idempotency keys of the run. */
export interface TaskStore {
  get(teamId: string, taskId: string): Promise<TaskRow | null>;
  list(teamId: string, f: { status?: string; workflowId?: string }, limit: number, offset: number): Promise<{ rows: TaskRow[]; total: number }>;
  insert(t: NewTask): Promise<TaskEvent[] & { record?: TaskRecord }>;
  idempotency: { lookup(teamId: string, key: string): Promise<StoredIdempotency | null> };
}

/** The task event bus: publishes committed events and follows one task's (this node's and, in a cluster, the others'). */
export interface TaskEventBus extends EventBusPort {
  subscribeTask(taskId: string, l: (e: TaskEvent) => void): () => void;
}

export interface TaskDeps {
  actors: ActorSystemPort;
  tasks: TaskStore;
  workflows: WorkflowResolver;
  files: FileLookup;
  outputs: OutputLinks;
  events: TaskEventBus;
  outputRetentionS: number;
  now: () => number;
  /** Whether the team has a key for the hosted provider (dispatch_target comfy_cloud); absent = none. */
  cloudConfigured?: (teamId: string, provider: string) => Promise<boolean>;
  /**
   * Why the hosted provider would refuse this staged input (its upload limits), or null: checked at
   * the run request for dispatch_target comfy_cloud (400 cloud_input_too_large).
   */
  cloudInputProblem?: (fileKey: string, what: string) => Promise<string | null>;
  /** The monthly GPU budget gate (src/app/usage.ts checkRun): throws 429 gpu_budget_exhausted; absent = no budgets. */
  checkBudget?: (p: TeamPrincipal) => Promise<void>;
}

export const runBody = z
  .object({
    parameters: z.record(z.string(), z.unknown()).optional(),
    dispatch_target: z.enum(['agent', 'comfy_cloud']).optional(),
    /** 1 (highest) .. 5; default the workflow's default_priority, else 3. */
    priority: z.int('must be an integer from 1 to 5').min(1, 'must be an integer from 1 to 5').max(5, 'must be an integer from 1 to 5').optional(),
  })
  .strict();

/** The workflow to run: by id (a lower-cased UUID) or by slug reference (`slug` or `slug@version`). */
export type RunTarget = { workflowId: string } | { workflowSlug: string };

export interface RunRequest {
  target: RunTarget;
  /** The request body (runBody). */
  body: unknown;
  /** The Idempotency-Key as given (validated here), undefined when none. */
  idempotencyKey: string | undefined;
  /** Method and path of the request: with the body, the fingerprint an Idempotency-Key is bound to. */
  method: string;
  path: string;
}

export interface RunAnswer {
  status: number;
  body: Record<string, unknown>;
  /** The answer of an earlier request with the same Idempotency-Key. */
  replayed: boolean;
}

export interface TaskResult {
  task_id: string;
  task_status: string;
  download_url: string | null;
  download_urls: Record<string, string> | null;
  output: Record<string, unknown>;
  expires_at: string;
}

export interface TaskWait {
  task: TaskView;
  timed_out: boolean;
  waited_ms: number;
}

/** Waits: default and maximum of the timeout, in seconds. */
export const WAIT_DEFAULT_S = 45;
export const WAIT_MAX_S = 300;
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

type Ref = { id: string } | { slug: string; version?: number };

export class TaskUseCases {
  constructor(private readonly d: TaskDeps) {}

  /**
   * Idempotency-Key: a retry with the same key and request replays the stored response (no new
   * task); the same key with another request is 409. The key is recorded in the task's insert
   * statement, so it exists exactly when its 202 was committed.
   */
  async submitRun(p: TeamPrincipal, r: RunRequest): Promise<RunAnswer> {
    const ref: Ref = 'workflowId' in r.target ? { id: r.target.workflowId } : parseSlugRef(r.target.workflowSlug);
    const key = idempotencyKeyOf(r.idempotencyKey === undefined ? {} : { 'idempotency-key': r.idempotencyKey });
    if (key === null) return this.runOnce(p, ref, r.body, null);
    const fingerprint = requestFingerprint(r.method, r.path, r.body);
    const replay = async (): Promise<RunAnswer | null> => {
      const stored = await this.d.tasks.idempotency.lookup(p.teamId, key);
      if (!stored) return null;
      return { ...replayOf(stored, fingerprint), replayed: true };
    };
    const earlier = await replay();
    if (earlier) return earlier;
    // at most twice: a key taken by a row that expired meanwhile is deleted by the lookup, then inserted anew
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.runOnce(p, ref, r.body, { key, fingerprint });
      } catch (err) {
        if (!(err instanceof IdempotencyKeyTaken)) throw err;
        // taken by a concurrent request (its statement has committed): answer as a retry of it
        const again = await replay();
        if (again) return again;
        if (attempt >= 1) throw unavailable('task_submit_failed', 'the Idempotency-Key could not be recorded; retry the request', 1);
      }
    }
  }

  private async runOnce(p: TeamPrincipal, ref: Ref, rawBody: unknown, idem: { key: string; fingerprint: string } | null): Promise<RunAnswer> {
    const d = this.d;
    const parsed = runBody.safeParse(rawBody ?? {});
    if (!parsed.success) throw fromZodIssues(parsed.error.issues);
    const body = parsed.data;
    await d.checkBudget?.(p);
    const w = await d.workflows.resolveForRun(p.teamId, ref);
    const def = w.workflow;
    const input = body.parameters ?? {};
    const keys = collectFileKeys(def.parameters, input);
    const files = keys.length ? await d.files.lookup(p.teamId, keys) : new Map<string, StagedFile>();
    const resolved = resolveRunParameters({ toolType: def.tool_type, workflowJson: def.workflow_json, parameters: def.parameters, input, files, teamId: p.teamId, now: d.now() });
    const taskId = uuidv7();
    const dispatchTarget = body.dispatch_target ?? def.default_dispatch_target;
    // hosted cloud dispatch needs the team's key for the provider: refuse rather than accept a task
    // that could never run
    if (dispatchTarget !== 'agent' && !(await d.cloudConfigured?.(p.teamId, dispatchTarget)))
      throw conflict('cloud_provider_not_configured', `dispatch_target ${dispatchTarget} needs this team's key for the provider: set it with PUT /cloud-providers/${dispatchTarget}, or run on agents (dispatch_target "agent")`);
    // the provider's upload limits (Comfy Cloud: 50 MB, 16384 px per edge, 64 MP): refused here, not after the 202
    if (dispatchTarget !== 'agent' && d.cloudInputProblem)
      for (const f of resolved.fileInputs) {
        const problem = await d.cloudInputProblem(f.fileKey, `parameters.${f.key} (${files.get(f.fileKey)?.fileName || 'file'})`);
        if (problem) throw badRequest('cloud_input_too_large', problem);
      }
    // tracing on: the submit is a span whose traceparent is stored with the row, so the spans made
    // after the 202 (scheduling, the agent's run, completion) are in this request's trace
    const span = startSpan('task submit', { attributes: { 'gantry.task.id': taskId, 'gantry.team.id': p.teamId, 'gantry.workflow.id': w.workflowId } });
    let events: TaskEvent[] & { record?: TaskRecord };
    try {
      events = await d.tasks.insert({
        traceParent: traceparentOfSpan(span),
        id: taskId,
        teamId: p.teamId,
        workflowId: w.workflowId,
        workflowSlug: w.workflowSlug,
        workflowVersion: w.version,
        snapshotId: w.snapshotId,
        dispatchTarget,
        toolType: def.tool_type,
        parameters: resolved.values,
        resolvedWorkflow: resolved.workflow,
        inputFiles: resolved.fileInputs.map((f) => ({ ...f, fileName: files.get(f.fileKey)?.fileName ?? '' })),
        maxRetries: def.max_retries,
        timeoutS: def.task_timeout,
        requiredLabels: def.required_labels,
        minVramGb: def.min_vram_gb,
        requiredModels: def.required_models,
        preferredGpu: def.preferred_gpu ?? null,
        createdByUserId: p.userId ?? null,
        createdByCredentialId: p.credentialId ?? null,
        priority: body.priority ?? def.default_priority ?? 3,
        ...(idem ? { idempotency: { key: idem.key, fingerprint: idem.fingerprint, responseStatus: 202, responseBody: { task_id: taskId } } } : {}),
      });
    } catch (e) {
      endSpan(span, e);
      throw e;
    }
    endSpan(span);
    // committed: now the scheduler may pick it up
    d.events.publish(events);
    d.actors.tell({ kind: SCHEDULER, id: p.teamId }, { type: 'task_submitted', taskId, ...(events.record ? { task: events.record } : {}) });
    return { status: 202, body: { task_id: taskId }, replayed: false };
  }

  /** The task's row; 404 task_not_found in another team or when absent. */
  private async load(p: TeamPrincipal, taskId: string): Promise<TaskRow> {
    const row = await this.d.tasks.get(p.teamId, taskId);
    if (!row) throw notFound('task', 'task_not_found');
    return row;
  }

  async getTask(p: TeamPrincipal, taskId: string): Promise<TaskView> {
    const view = taskView(await this.load(p, taskId));
    if (view.task_status !== 'pending' && view.task_status !== 'waiting') return view;
    // why it waits, as the team scheduler sees it (a best effort: without an answer, no field)
    const r = await this.d.actors.ask({ kind: SCHEDULER, id: p.teamId }, { type: 'why_waiting', taskId: view.task_id }, { deadlineMs: this.d.now() + 2000 }).catch(() => null);
    return r?.reason ? { ...view, waiting_reason: r.reason } : view;
  }

  /** The team's tasks, newest first; status and workflowId as given (400 when not a status or not a UUID). */
  async listTasks(p: TeamPrincipal, page: PageRequest, f: { status?: string | undefined; workflowId?: string | undefined }): Promise<Record<string, unknown>> {
    const { status, workflowId } = f;
    if (status !== undefined && !(TASK_STATUSES as readonly string[]).includes(status)) throw invalidParameter(`task_status: must be one of ${TASK_STATUSES.join(', ')}`);
    if (workflowId !== undefined && !isUuid(workflowId)) throw invalidParameter('workflow_id: must be a UUID');
    const r = await this.d.tasks.list(p.teamId, { status, workflowId }, page.perPage, page.offset);
    return paged('task_list', r.rows.map(taskView), page, r.total);
  }

  /** A completed task's download links: 409 before it completed, 410 once its outputs expired. */
  async getResult(p: TeamPrincipal, taskId: string): Promise<TaskResult> {
    const d = this.d;
    const row = await this.load(p, taskId);
    if (row.task_status !== 'completed') throw conflict('task_not_completed', `task is ${row.task_status}; the result exists once it is completed`);
    const finished = row.finished_at ? new Date(row.finished_at).getTime() : d.now();
    const expiresAt = finished + d.outputRetentionS * 1000;
    if (d.now() >= expiresAt) throw gone('output_expired', `task outputs are kept for ${Math.round(d.outputRetentionS / 86400)} days; they expired at ${new Date(expiresAt).toISOString()}`);
    const output = (row.output ?? {}) as Record<string, unknown>;
    const links = await d.outputs.links(row.team_id, row.id, output);
    return { task_id: row.id, task_status: row.task_status, download_url: links.download_url, download_urls: links.download_urls, output, expires_at: links.expires_at ?? new Date(expiresAt).toISOString() };
  }

  /** Asks the task's actor to cancel it (a finished task is left as it is). */
  async cancelTask(p: TeamPrincipal, taskId: string): Promise<{ is_success: true }> {
    const row = await this.load(p, taskId);
    await this.d.actors.ask({ kind: TASK, id: row.id }, { type: 'cancel' }, { deadlineMs: this.d.now() + 15_000 });
    return { is_success: true };
  }

  /**
   * Follows the task's committed events on the bus (not the database) until it is terminal, the
   * timeout (default WAIT_DEFAULT_S, at most WAIT_MAX_S), or the signal: reads the task once, sleeps
   * until a terminal event, then reads it once more. Progress events are handed to onProgress as a
   * percentage (at most 99) and a message; the end as 100 and the status.
   */
  async waitForTask(p: TeamPrincipal, taskId: string, o: { timeoutS?: number | undefined; signal: AbortSignal; onProgress?: (progress: number, message: string) => void }): Promise<TaskWait> {
    const started = Date.now();
    const notify = o.onProgress ?? ((): void => undefined);
    let wake: () => void = () => undefined;
    const woke = new Promise<void>((resolve) => (wake = resolve));
    // subscribe BEFORE reading: nothing committed after the read can be missed
    const unsub = this.d.events.subscribeTask(taskId, (e) => {
      if (e.teamId !== p.teamId) return;
      if (e.type === 'progress') {
        const v = Number(e.data.progress);
        const step = Number(e.data.step_current);
        const steps = Number(e.data.step_total);
        const node = typeof e.data.current_node === 'string' && e.data.current_node ? ` (${e.data.current_node})` : '';
        if (Number.isFinite(v)) notify(Math.min(99, Math.round(v * 100)), steps > 0 ? `step ${step}/${steps}${node}` : `running${node}`);
      } else if (TERMINAL.has(e.type) || (e.type === 'status' && TERMINAL.has(String(e.data.status)))) wake();
    });
    try {
      let task = await this.getTask(p, taskId);
      const limitMs = Math.min(o.timeoutS ?? WAIT_DEFAULT_S, WAIT_MAX_S) * 1000;
      if (!TERMINAL.has(task.task_status)) {
        let timer: NodeJS.Timeout | undefined;
        const onAbort = (): void => wake();
        o.signal.addEventListener('abort', onAbort, { once: true });
        // a caller that left while the task was read does not wait
        if (o.signal.aborted) wake();
        await Promise.race([woke, new Promise<void>((resolve) => (timer = setTimeout(resolve, limitMs)))]);
        clearTimeout(timer);
        o.signal.removeEventListener('abort', onAbort);
        task = await this.getTask(p, taskId);
      }
      const done = TERMINAL.has(task.task_status);
      if (done) notify(100, task.task_status);
      return { task, timed_out: !done, waited_ms: Date.now() - started };
    } finally {
      unsub();
    }
  }
}
