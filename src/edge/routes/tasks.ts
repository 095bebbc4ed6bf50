import { parseBody, teamPrincipalOf, uuidParam } from '../params.js';
import { z } from 'zod';
import type { ActorSystemPort } from '../../actors/ports.js';
import { TASK, SCHEDULER } from '../../actors/index.js';
import type { TaskQueries } from '../../persistence/task-queries.js';
import { IdempotencyKeyTaken, idempotencyKeyOf, replayOf, requestFingerprint } from '../../persistence/idempotency-store.js';
import { parseSlugRef } from '../../persistence/workflow-store.js';
import { taskView } from '../../domain/tasks/view.js';
import type { EventBusPort } from '../../actors/ports.js';
import { collectFileKeys, resolveRunParameters, type StagedFile } from '../../domain/workflows/parameters.js';
import type { WorkflowDefinition } from '../../domain/workflows/schema.js';
import { badRequest, conflict, gone, invalidParameter, notFound, unavailable } from '../../shared/errors.js';
import { isUuid, uuidv7 } from '../../shared/ids.js';
import { endSpan, startSpan, traceparentOfSpan } from '../../shared/tracing.js';
import { paged, parsePage } from '../../shared/pagination.js';
import { Reply, type Ctx, type RouteDef } from '../http.js';
import type { RouteDoc } from '../openapi/types.js';
import * as D from '../openapi/schemas.js';
import type { RouteAuth } from '../principal.js';

export const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };

/** What the run endpoint needs from the workflow catalog. */
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

export interface TaskRouteDeps {
  actors: ActorSystemPort;
  tasks: TaskQueries;
  workflows: WorkflowResolver;
  files: FileLookup;
  outputs: OutputLinks;
  events: EventBusPort;
  outputRetentionS: number;
  now: () => number;
  /** Whether the team has a key for the hosted provider (dispatch_target comfy_cloud); absent = none. */
  cloudConfigured?: (teamId: string, provider: string) => Promise<boolean>;
  /**
   * Why the hosted provider would refuse this staged input (its upload limits), or null: checked at
   * the run request for dispatch_target comfy_cloud (400 cloud_input_too_large).
   */
  cloudInputProblem?: (fileKey: string, what: string) => Promise<string | null>;
}

const runBody = z
  .object({
    parameters: z.record(z.string(), z.unknown()).optional(),
    dispatch_target: z.enum(['agent', 'comfy_cloud']).optional(),
  })
  .strict();

import { TASK_STATUSES as TASK_STATUS } from '../../domain/tasks/record.js';



const RUN_DOC: RouteDoc = {
  summary: 'Run a workflow',
  tags: ['runtime', 'tasks'],
  body: runBody,
  headers: { 'Idempotency-Key': 'a retry with the same key and request replays the first answer (no new task); the same key with another request is 409' },
  responses: { 202: { description: 'Accepted: the task is committed', schema: D.RunAccepted } },
  errors: [409],
};

export function taskRoutes(d: TaskRouteDeps): RouteDef[] {
  /**
   * Idempotency-Key: a retry with the same key and request replays the stored response (no new
   * task); the same key with another request is 409. The key is recorded in the task's insert
   * statement, so it exists exactly when its 202 was committed.
   */
  const run = async (c: Ctx, ref: { id: string } | { slug: string; version?: number }): Promise<Reply> => {
    const p = teamPrincipalOf(c);
    const key = idempotencyKeyOf(c.headers);
    if (key === null) return runOnce(c, ref, null);
    const fingerprint = requestFingerprint(c.method, c.path, c.body);
    const replay = async (): Promise<Reply | null> => {
      const stored = await d.tasks.idempotency.lookup(p.teamId, key);
      if (!stored) return null;
      const r = replayOf(stored, fingerprint);
      return new Reply(r.status, r.body, { 'idempotent-replayed': 'true' });
    };
    const earlier = await replay();
    if (earlier) return earlier;
    // at most twice: a key taken by a row that expired meanwhile is deleted by the lookup, then inserted anew
    for (let attempt = 0; ; attempt++) {
      try {
        return await runOnce(c, ref, { key, fingerprint });
      } catch (err) {
        if (!(err instanceof IdempotencyKeyTaken)) throw err;
        // taken by a concurrent request (its statement has committed): answer as a retry of it
        const again = await replay();
        if (again) return again;
        if (attempt >= 1) throw unavailable('task_submit_failed', 'the Idempotency-Key could not be recorded; retry the request', 1);
      }
    }
  };

  const runOnce = async (c: Ctx, ref: { id: string } | { slug: string; version?: number }, idem: { key: string; fingerprint: string } | null): Promise<Reply> => {
    const p = teamPrincipalOf(c);
    const body = parseBody(runBody, c.body);
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
    let events: Awaited<ReturnType<TaskQueries['insert']>>;
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
    return new Reply(202, { task_id: taskId });
  };

  const loadTask = async (c: Ctx) => {
    const id = uuidParam(c, 'taskId');
    const row = await d.tasks.get(teamPrincipalOf(c).teamId, id);
    if (!row) throw notFound('task', 'task_not_found');
    return row;
  };

  return [
    { method: 'POST', path: '/r/workflows/{workflowId}/run', auth: RUNTIME, doc: RUN_DOC, handler: async (c) => run(c, { id: uuidParam(c, 'workflowId') }) },
    { method: 'POST', path: '/r/workflows/slug/{workflowSlug}/run', auth: RUNTIME, doc: { ...RUN_DOC, summary: 'Run a workflow by slug (slug@version pins a snapshot)' }, handler: async (c) => run(c, parseSlugRef(c.params.workflowSlug ?? '')) },
    {
      method: 'GET',
      path: '/r/tasks',
      doc: { summary: 'List tasks', tags: ['runtime', 'tasks'], paged: true, query: z.object({ task_status: z.enum(TASK_STATUS).optional(), workflow_id: z.uuid().optional() }), responses: { 200: D.pageOf('task_list', D.Task) } },
      auth: RUNTIME,
      handler: async (c) => {
        const pg = parsePage(c.query);
        const status = c.query.get('task_status') ?? undefined;
        if (status !== undefined && !(TASK_STATUS as readonly string[]).includes(status)) throw invalidParameter(`task_status: must be one of ${TASK_STATUS.join(', ')}`);
        const workflowId = c.query.get('workflow_id') ?? undefined;
        if (workflowId !== undefined && !isUuid(workflowId)) throw invalidParameter('workflow_id: must be a UUID');
        const r = await d.tasks.list(teamPrincipalOf(c).teamId, { status, workflowId }, pg.perPage, pg.offset);
        return paged('task_list', r.rows.map(taskView), pg, r.total);
      },
    },
    { method: 'GET', path: '/r/tasks/{taskId}', auth: RUNTIME, doc: { summary: 'Get a task', tags: ['runtime', 'tasks'], responses: { 200: D.Task } }, handler: async (c) => taskView(await loadTask(c)) },
    {
      method: 'GET',
      path: '/r/tasks/{taskId}/result',
      doc: { summary: 'Get a completed task\'s result (download links)', tags: ['runtime', 'tasks'], responses: { 200: D.TaskResult }, errors: [409, 410] },
      auth: RUNTIME,
      handler: async (c) => {
        const row = await loadTask(c);
        if (row.task_status !== 'completed') throw conflict('task_not_completed', `task is ${row.task_status}; the result exists once it is completed`);
        const finished = row.finished_at ? new Date(row.finished_at).getTime() : d.now();
        const expiresAt = finished + d.outputRetentionS * 1000;
        if (d.now() >= expiresAt) throw gone('output_expired', `task outputs are kept for ${Math.round(d.outputRetentionS / 86400)} days; they expired at ${new Date(expiresAt).toISOString()}`);
        const output = (row.output ?? {}) as Record<string, unknown>;
        const links = await d.outputs.links(row.team_id, row.id, output);
        return { task_id: row.id, task_status: row.task_status, download_url: links.download_url, download_urls: links.download_urls, output, expires_at: links.expires_at ?? new Date(expiresAt).toISOString() };
      },
    },
    {
      method: 'POST',
      path: '/r/tasks/{taskId}/cancel',
      doc: { summary: 'Cancel a task that is not terminal', tags: ['runtime', 'tasks'], responses: { 200: D.Success }, errors: [409] },
      auth: RUNTIME,
      handler: async (c) => {
        const row = await loadTask(c);
        await d.actors.ask({ kind: TASK, id: row.id }, { type: 'cancel' }, { deadlineMs: d.now() + 15_000 });
        return { is_success: true };
      },
    },
  ];
}
