/**
 * The workflow tools: list_workflows, get_workflow (with its parameters as a JSON Schema),
 * run_workflow and run_workflow_and_wait. A run is REST's run (TaskUseCases.submitRun): the same
 * validation, and an idempotency_key is REST's Idempotency-Key of the same request.
 */
import { z } from 'zod';
import type { RunTarget } from '../app/tasks.js';
import { parametersJsonSchema } from '../domain/workflows/parameters.js';
import { TOOL_TYPES, WORKFLOW_STATUSES, type NormalizedParameterDef } from '../domain/workflows/schema.js';
import { AppError } from '../shared/errors.js';
import * as V from '../app/views.js';
import { guarded, hygiene, loose, page, pageMeta, pageOf, readOnly, structured, uuid, waitSchema, workflowSchema, type ToolContext } from './tool-kit.js';
import { timeoutArg, waitOutput } from './tools-tasks.js';
import { WAIT_DEFAULT_S, WAIT_MAX_S } from '../app/tasks.js';

const workflowRef = {
  workflow_id: uuid('workflow id').optional(),
  workflow_slug: z
    .string()
    .min(2)
    .max(112)
    .optional()
    .describe('The workflow slug, optionally pinned to a version as slug@version (e.g. sdxl-txt2img@3). Give workflow_id or workflow_slug.'),
};
const runArgs = {
  ...workflowRef,
  priority: z.number().optional().describe('1 (highest) to 5; default the workflow\'s default_priority, else 3. Higher priority runs first; waiting runs rise one level per aging interval.'),
  parameters: z
    .record(z.string(), z.unknown())
    .optional()
    .describe("Values for the workflow's parameters, keyed by parameter key. get_workflow returns parameters_schema (a JSON Schema of this object): required keys, types, min/max, options. File parameters take a file_key from create_upload."),
  idempotency_key: z
    .string()
    .min(1)
    .max(255)
    .optional()
    .describe('Optional. A retry with the same key and the same request returns the first run\'s task instead of starting another (like the Idempotency-Key header).'),
};

interface RefArgs {
  workflow_id?: string | undefined;
  workflow_slug?: string | undefined;
}

/** The workflow a tool names: its id or its slug reference (never both), and the REST path of it. */
function workflowTarget(a: RefArgs): { target: RunTarget; path: string; params: Record<string, string> } {
  if (a.workflow_id && a.workflow_slug) throw new AppError('bad_request', 'invalid_parameter', 'give workflow_id or workflow_slug, not both');
  if (a.workflow_id) return { target: { workflowId: a.workflow_id.toLowerCase() }, path: `/r/workflows/${encodeURIComponent(a.workflow_id)}`, params: { workflowId: a.workflow_id } };
  if (a.workflow_slug) return { target: { workflowSlug: a.workflow_slug }, path: `/r/workflows/slug/${encodeURIComponent(a.workflow_slug)}`, params: { workflowSlug: a.workflow_slug } };
  throw new AppError('bad_request', 'invalid_parameter', 'workflow_id or workflow_slug is required');
}

export function registerWorkflowTools(t: ToolContext): void {
  const { server, d, p } = t;

  server.registerTool(
    'list_workflows',
    {
      title: 'List workflows',
      description:
        "Lists the team's workflows (the runnable pipelines: ComfyUI graphs or nerfstudio jobs), newest first, with their parameters. Start here to find a workflow to run; call get_workflow for its parameters as a JSON Schema.",
      inputSchema: {
        ...page,
        workflow_status: z.enum(WORKFLOW_STATUSES).optional().describe('Only workflows with this status.'),
        tool_type: z.enum(TOOL_TYPES).optional().describe('Only workflows of this tool.'),
      },
      outputSchema: { workflow_list: z.array(workflowSchema), page_meta: pageMeta },
      annotations: readOnly,
    },
    guarded(t, 'list_workflows', async (a) => structured(await d.workflows.listWorkflows(p, pageOf(a), { status: a.workflow_status, toolType: a.tool_type }))),
  );

  server.registerTool(
    'get_workflow',
    {
      title: 'Get a workflow',
      description:
        'One workflow by id or slug (slug@version pins a version), with parameters_schema: a JSON Schema of the `parameters` object run_workflow takes (types, required keys, minimum/maximum, enum options, defaults, descriptions). Build a run from it.',
      inputSchema: workflowRef,
      outputSchema: { workflow: workflowSchema, parameters_schema: loose },
      annotations: readOnly,
    },
    guarded(t, 'get_workflow', async (a) => {
      const w = workflowTarget(a);
      hygiene(w.params);
      const wf = 'workflowId' in w.target ? await d.workflows.getWorkflow(p, w.target.workflowId) : await d.workflows.getWorkflowBySlug(p, w.target.workflowSlug);
      return structured({ workflow: wf, parameters_schema: parametersJsonSchema((wf.parameters ?? []) as NormalizedParameterDef[]) });
    }),
  );

  const run = async (a: RefArgs & { parameters?: Record<string, unknown> | undefined; priority?: number | undefined; idempotency_key?: string | undefined }): Promise<string> => {
    const w = workflowTarget(a);
    const body = { ...(a.parameters ? { parameters: a.parameters } : {}), ...(a.priority !== undefined ? { priority: a.priority } : {}) };
    hygiene(w.params, body);
    const r = await d.tasks.submitRun(p, { target: w.target, body, idempotencyKey: a.idempotency_key || undefined, method: 'POST', path: `${d.basePath}${w.path}/run` });
    return String(r.body.task_id);
  };

  server.registerTool(
    'run_workflow',
    {
      title: 'Run a workflow',
      description:
        "Starts a run of a workflow on the team's GPU agents and returns its task_id at once (the task is queued, not finished). Parameters are validated exactly like the REST run endpoint; a problem comes back as a tool error naming the parameter. Follow the task with wait_for_task or get_task, or use run_workflow_and_wait to start and wait in one call.",
      inputSchema: runArgs,
      outputSchema: V.RunAccepted.shape,
      annotations: { openWorldHint: false },
    },
    guarded(t, 'run_workflow', async (a) => structured({ task_id: await run(a) })),
  );

  server.registerTool(
    'run_workflow_and_wait',
    {
      title: 'Run a workflow and wait for it',
      description: `Starts a run like run_workflow, then waits for the task to finish (following its events; progress notifications are sent when the request has a progressToken). Returns the task, timed_out, and when completed the result (download URLs; small images inline). Waits at most timeout_s seconds (default ${WAIT_DEFAULT_S}, max ${WAIT_MAX_S}); on timeout the task is still running: call wait_for_task with its task_id.`,
      inputSchema: { ...runArgs, timeout_s: timeoutArg },
      outputSchema: { ...V.RunAccepted.shape, ...waitSchema.shape },
      annotations: { openWorldHint: false },
    },
    guarded(t, 'run_workflow_and_wait', async (a, extra) => {
      const taskId = await run(a);
      return waitOutput(t, taskId, a.timeout_s, extra, { task_id: taskId });
    }),
  );
}
