/**
 * The run endpoints and the task API of the runtime surface. The use cases are src/app/tasks.ts;
 * these routes decode the request (path, query, body, Idempotency-Key) and encode the answer.
 */
import { teamPrincipalOf, uuidParam } from '../params.js';
import { z } from 'zod';
import { runBody, type RunTarget, type TaskUseCases } from '../../app/tasks.js';
import { TASK_STATUSES as TASK_STATUS } from '../../domain/tasks/record.js';
import { parsePage } from '../../shared/pagination.js';
import { Reply, type Ctx, type RouteDef } from '../http.js';
import type { RouteDoc } from '../openapi/types.js';
import * as D from '../openapi/schemas.js';
import type { RouteAuth } from '../principal.js';

export const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };

const RUN_DOC: RouteDoc = {
  summary: 'Run a workflow',
  tags: ['runtime', 'tasks'],
  body: runBody,
  headers: { 'Idempotency-Key': 'a retry with the same key and request replays the first answer (no new task); the same key with another request is 409' },
  responses: { 202: { description: 'Accepted: the task is committed', schema: D.RunAccepted } },
  errors: [409],
};

export function taskRoutes(tasks: TaskUseCases): RouteDef[] {
  /** Idempotency-Key: a replayed answer says so in `Idempotent-Replayed: true`. */
  const run = async (c: Ctx, target: RunTarget): Promise<Reply> => {
    const r = await tasks.submitRun(teamPrincipalOf(c), { target, body: c.body, idempotencyKey: c.headers['idempotency-key'], method: c.method, path: c.path });
    return new Reply(r.status, r.body, r.replayed ? { 'idempotent-replayed': 'true' } : {});
  };

  return [
    { method: 'POST', path: '/r/workflows/{workflowId}/run', auth: RUNTIME, doc: RUN_DOC, handler: async (c) => run(c, { workflowId: uuidParam(c, 'workflowId') }) },
    { method: 'POST', path: '/r/workflows/slug/{workflowSlug}/run', auth: RUNTIME, doc: { ...RUN_DOC, summary: 'Run a workflow by slug (slug@version pins a snapshot)' }, handler: async (c) => run(c, { workflowSlug: c.params.workflowSlug ?? '' }) },
    {
      method: 'GET',
      path: '/r/tasks',
      doc: { summary: 'List tasks', tags: ['runtime', 'tasks'], paged: true, query: z.object({ task_status: z.enum(TASK_STATUS).optional(), workflow_id: z.uuid().optional() }), responses: { 200: D.pageOf('task_list', D.Task) } },
      auth: RUNTIME,
      handler: async (c) => tasks.listTasks(teamPrincipalOf(c), parsePage(c.query), { status: c.query.get('task_status') ?? undefined, workflowId: c.query.get('workflow_id') ?? undefined }),
    },
    { method: 'GET', path: '/r/tasks/{taskId}', auth: RUNTIME, doc: { summary: 'Get a task', tags: ['runtime', 'tasks'], responses: { 200: D.Task } }, handler: async (c) => tasks.getTask(teamPrincipalOf(c), uuidParam(c, 'taskId')) },
    {
      method: 'GET',
      path: '/r/tasks/{taskId}/result',
      doc: { summary: 'Get a completed task\'s result (download links)', tags: ['runtime', 'tasks'], responses: { 200: D.TaskResult }, errors: [409, 410] },
      auth: RUNTIME,
      handler: async (c) => tasks.getResult(teamPrincipalOf(c), uuidParam(c, 'taskId')),
    },
    {
      method: 'POST',
      path: '/r/tasks/{taskId}/cancel',
      doc: { summary: 'Cancel a task that is not terminal', tags: ['runtime', 'tasks'], responses: { 200: D.Success }, errors: [409] },
      auth: RUNTIME,
      handler: async (c) => tasks.cancelTask(teamPrincipalOf(c), uuidParam(c, 'taskId')),
    },
  ];
}
