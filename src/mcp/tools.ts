/**
 * The 15 MCP tools (docs/api.md "MCP"). Each is a thin wrapper over the REST runtime surface: it
 * calls the runtime route's own handler (RuntimeCaller, src/mcp/runtime.ts) with the caller's
 * principal, so every rule (validation and its 400 messages, team scoping, not-found, retention,
 * the gateway's checks) is the route's. A refusal of the route becomes a tool error
 * (`isError: true`, the REST envelope as text), never a protocol error.
 *
 * Waiting (run_workflow_and_wait, wait_for_task) follows the task's committed events on the event
 * bus (the same feed as the SSE stream), not the database: it reads the task once, then sleeps until
 * a terminal event, the bounded timeout, or the client's cancellation, then reads it once more.
 * Progress events become MCP progress notifications when the request carries a progressToken.
 */
import { z } from 'zod';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { CallToolResult, ServerNotification, ServerRequest } from '@modelcontextprotocol/sdk/types.js';
import type { TaskEvent } from '../actors/ports.js';
import type { TeamPrincipal } from '../edge/principal.js';
import { INVOKE_METHODS } from '../edge/routes/gateway.js';
import { AppError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { outputEntries } from '../files/outputs.js';
import { TOOL_TYPES, WORKFLOW_STATUSES, type NormalizedParameterDef } from '../domain/workflows/schema.js';
import { TASK_STATUSES } from '../domain/tasks/record.js';
import { parametersJsonSchema } from './json-schema.js';
import type { RuntimeCaller } from './runtime.js';

/** Waits: default and maximum of timeout_s. */
export const WAIT_DEFAULT_S = 45;
export const WAIT_MAX_S = 300;
/** get_task_result: images up to this size are also returned as MCP image content (at most MAX_IMAGES). */
export const IMAGE_MAX_BYTES = 1024 * 1024;
export const MAX_IMAGES = 4;
const IMAGE_TYPES = new Set(['image/png', 'image/jpeg', 'image/webp', 'image/gif']);
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

export const TOOL_NAMES = [
  'list_workflows',
  'get_workflow',
  'run_workflow',
  'run_workflow_and_wait',
  'get_task',
  'list_tasks',
  'wait_for_task',
  'get_task_result',
  'cancel_task',
  'list_agents',
  'create_upload',
  'list_container_services',
  'get_container_service',
  'get_container_openapi',
  'invoke_container_service',
] as const;

export interface McpToolDeps {
  runtime: RuntimeCaller;
  /** The task event bus (committed events, this node's and, in a cluster, the others'). */
  bus: { subscribeTask(taskId: string, l: (e: TaskEvent) => void): () => void };
  /** GET /r/containers/{slug}'s own function (src/edge/routes/containers.ts runtimeServiceBySlug). */
  containerBySlug(teamId: string, slug: string): Promise<Record<string, unknown>>;
  /** Reads an object of the store (task outputs for image content). */
  readObject(key: string): Promise<NodeJS.ReadableStream>;
  logger: Logger;
}

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;
type Json = Record<string, unknown>;

// ---- schemas --------------------------------------------------------------------------------------

const uuid = (what: string) => z.uuid(`${what} must be a UUID`).describe(`The ${what} (a UUID).`);
const page = {
  current_page: z.number().int().min(1).max(1_000_000).optional().describe('Page number, 1-based (default 1).'),
  per_page: z.number().int().min(1).max(100).optional().describe('Items per page, 1..100 (default 20).'),
};
const pageMeta = z.object({ current_page: z.number(), per_page: z.number(), total_count: z.number() });
const loose = z.looseObject({});
const taskSchema = z.looseObject({ task_id: z.string(), task_status: z.string(), workflow_id: z.string(), progress: z.unknown(), task_error: z.string().nullable() });
const workflowSchema = z.looseObject({ id: z.string(), workflow_slug: z.string(), display_name: z.string(), parameters: z.array(loose), version: z.number() });
const resultSchema = z.looseObject({
  task_id: z.string(),
  task_status: z.string(),
  download_url: z.string().nullable(),
  download_urls: z.record(z.string(), z.string()).nullable(),
  output: loose,
  expires_at: z.string().nullable(),
  images: z.array(z.object({ name: z.string(), content_type: z.string(), size: z.number().nullable(), included: z.boolean() })),
});
const waitSchema = z.object({ task: taskSchema, timed_out: z.boolean(), waited_ms: z.number(), result: resultSchema.nullable() });
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
const timeoutArg = z
  .number()
  .int()
  .min(1)
  .max(WAIT_MAX_S)
  .optional()
  .describe(`How long to wait, in seconds (default ${WAIT_DEFAULT_S}, at most ${WAIT_MAX_S}). On timeout the current status is returned (timed_out: true), not an error; call wait_for_task again to keep waiting. Keep it below your client's request timeout unless the client resets it on progress.`);

// ---- helpers --------------------------------------------------------------------------------------

const structured = (data: Json, extra: CallToolResult['content'] = []): CallToolResult => ({ structuredContent: data, content: [{ type: 'text', text: JSON.stringify(data) }, ...extra] });

const toolError = (message: string, code: string): CallToolResult => ({ isError: true, content: [{ type: 'text', text: JSON.stringify({ error_message: message, error_code: code }) }] });

function slugRef(a: { workflow_id?: string | undefined; workflow_slug?: string | undefined }): string {
  if (a.workflow_id && a.workflow_slug) throw new AppError('bad_request', 'invalid_parameter', 'give workflow_id or workflow_slug, not both');
  if (a.workflow_id) return `/r/workflows/${encodeURIComponent(a.workflow_id)}`;
  if (a.workflow_slug) return `/r/workflows/slug/${encodeURIComponent(a.workflow_slug)}`;
  throw new AppError('bad_request', 'invalid_parameter', 'workflow_id or workflow_slug is required');
}

const taskPath = (id: string): string => `/r/tasks/${encodeURIComponent(id)}`;

export function registerTools(server: McpServer, p: TeamPrincipal, d: McpToolDeps, requestId: string): void {
  const call = async (method: 'GET' | 'POST', path: string, o: { query?: Record<string, string | number | undefined>; body?: unknown; headers?: Record<string, string> } = {}): Promise<Json> =>
    (await d.runtime.call(p, method, path, o, requestId)).body as Json;

  /** A tool body: AppErrors (the route's refusals) become tool errors; anything else is logged and hidden. */
  const guarded =
    <A>(name: string, fn: (args: A, extra: Extra) => Promise<CallToolResult>) =>
    async (args: A, extra: Extra): Promise<CallToolResult> => {
      try {
        return await fn(args, extra);
      } catch (e) {
        if (e instanceof AppError) return toolError(e.message, e.code);
        d.logger.error({ err: e, tool: name, request_id: requestId }, 'mcp tool failed');
        return toolError('internal error', 'internal_error');
      }
    };

  const readTask = async (taskId: string): Promise<Json> => call('GET', taskPath(taskId));

  /** The result route's answer plus images small enough to show (as MCP image content). */
  const result = async (taskId: string): Promise<{ data: Json; images: CallToolResult['content'] }> => {
    const r = await call('GET', `${taskPath(taskId)}/result`);
    const output = (r.output ?? {}) as Json;
    const described = new Map<string, { content_type?: unknown; size?: unknown }>();
    if (Array.isArray(output.outputs)) for (const o of output.outputs as Json[]) if (o && typeof o.storage_key === 'string') described.set(o.storage_key, o);
    const images: Array<{ name: string; content_type: string; size: number | null; included: boolean }> = [];
    const content: CallToolResult['content'] = [];
    for (const [name, key] of outputEntries(p.teamId, taskId, output).entries) {
      const meta = described.get(key);
      const type = typeof meta?.content_type === 'string' ? meta.content_type : guessType(key);
      if (!type.startsWith('image/')) continue;
      const size = typeof meta?.size === 'number' ? meta.size : null;
      let included = false;
      if (IMAGE_TYPES.has(type) && content.length < MAX_IMAGES && (size === null || size <= IMAGE_MAX_BYTES)) {
        const bytes = await readCapped(d, key, IMAGE_MAX_BYTES).catch((e: unknown) => {
          d.logger.warn({ err_message: (e as Error).message, task_id: taskId }, 'mcp: output image not readable');
          return null;
        });
        if (bytes) {
          content.push({ type: 'image', data: bytes.toString('base64'), mimeType: type });
          included = true;
        }
      }
      images.push({ name, content_type: type, size, included });
    }
    return { data: { ...r, images }, images: content };
  };

  /** Follows the task's events until it is terminal, the timeout, or the client cancels. */
  const follow = async (taskId: string, timeoutS: number | undefined, extra: Extra): Promise<{ task: Json; timed_out: boolean; waited_ms: number }> => {
    const started = Date.now();
    const token = extra._meta?.progressToken;
    let last = -1;
    const notify = (progress: number, message: string): void => {
      if (token === undefined || progress <= last) return;
      last = progress;
      void extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress, total: 100, message } }).catch(() => undefined);
    };
    let wake: () => void = () => undefined;
    const woke = new Promise<void>((resolve) => (wake = resolve));
    // subscribe BEFORE reading: nothing committed after the read can be missed
    const unsub = d.bus.subscribeTask(taskId, (e) => {
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
      let task = await readTask(taskId);
      const limitMs = Math.min(timeoutS ?? WAIT_DEFAULT_S, WAIT_MAX_S) * 1000;
      if (!TERMINAL.has(String(task.task_status))) {
        let timer: NodeJS.Timeout | undefined;
        const onAbort = (): void => wake();
        extra.signal.addEventListener('abort', onAbort, { once: true });
        await Promise.race([woke, new Promise<void>((resolve) => (timer = setTimeout(resolve, limitMs)))]);
        clearTimeout(timer);
        extra.signal.removeEventListener('abort', onAbort);
        task = await readTask(taskId);
      }
      const done = TERMINAL.has(String(task.task_status));
      if (done) notify(100, String(task.task_status));
      return { task, timed_out: !done, waited_ms: Date.now() - started };
    } finally {
      unsub();
    }
  };

  /** The wait tools' answer: the task after the wait, and its result (images too) when completed. */
  const waitOutput = async (taskId: string, timeoutS: number | undefined, extra: Extra, head: Json = {}): Promise<CallToolResult> => {
    const w = await follow(taskId, timeoutS, extra);
    if (w.task.task_status !== 'completed') return structured({ ...head, ...w, result: null });
    const r = await result(taskId);
    return structured({ ...head, ...w, result: r.data }, r.images);
  };

  const readOnly = { readOnlyHint: true, openWorldHint: false } as const;

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
    guarded('list_workflows', async (a) => structured(await call('GET', '/r/workflows', { query: a }))),
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
    guarded('get_workflow', async (a) => {
      const w = await call('GET', slugRef(a));
      return structured({ workflow: w, parameters_schema: parametersJsonSchema((w.parameters ?? []) as NormalizedParameterDef[]) });
    }),
  );

  const run = async (a: { workflow_id?: string | undefined; workflow_slug?: string | undefined; parameters?: Record<string, unknown> | undefined; idempotency_key?: string | undefined }): Promise<string> => {
    const r = await call('POST', `${slugRef(a)}/run`, { body: a.parameters ? { parameters: a.parameters } : {}, ...(a.idempotency_key ? { headers: { 'idempotency-key': a.idempotency_key } } : {}) });
    return String(r.task_id);
  };

  server.registerTool(
    'run_workflow',
    {
      title: 'Run a workflow',
      description:
        "Starts a run of a workflow on the team's GPU agents and returns its task_id at once (the task is queued, not finished). Parameters are validated exactly like the REST run endpoint; a problem comes back as a tool error naming the parameter. Follow the task with wait_for_task or get_task, or use run_workflow_and_wait to start and wait in one call.",
      inputSchema: runArgs,
      outputSchema: { task_id: z.string() },
      annotations: { openWorldHint: false },
    },
    guarded('run_workflow', async (a) => structured({ task_id: await run(a) })),
  );

  server.registerTool(
    'run_workflow_and_wait',
    {
      title: 'Run a workflow and wait for it',
      description: `Starts a run like run_workflow, then waits for the task to finish (following its events; progress notifications are sent when the request has a progressToken). Returns the task, timed_out, and when completed the result (download URLs; small images inline). Waits at most timeout_s seconds (default ${WAIT_DEFAULT_S}, max ${WAIT_MAX_S}); on timeout the task is still running: call wait_for_task with its task_id.`,
      inputSchema: { ...runArgs, timeout_s: timeoutArg },
      outputSchema: { task_id: z.string(), ...waitSchema.shape },
      annotations: { openWorldHint: false },
    },
    guarded('run_workflow_and_wait', async (a, extra) => {
      const taskId = await run(a);
      return waitOutput(taskId, a.timeout_s, extra, { task_id: taskId });
    }),
  );

  server.registerTool(
    'get_task',
    {
      title: 'Get a task',
      description: `The current state of one task (a workflow run): task_status (${TASK_STATUSES.join(', ')}), progress, error, timestamps. Does not wait; use wait_for_task to wait.`,
      inputSchema: { task_id: uuid('task id') },
      outputSchema: taskSchema.shape,
      annotations: readOnly,
    },
    guarded('get_task', async (a) => structured(await readTask(a.task_id))),
  );

  server.registerTool(
    'list_tasks',
    {
      title: 'List tasks',
      description: "The team's tasks (workflow runs), newest first, optionally filtered by status or workflow.",
      inputSchema: {
        ...page,
        task_status: z.enum(TASK_STATUSES).optional().describe('Only tasks in this status.'),
        workflow_id: uuid('workflow id').optional(),
      },
      outputSchema: { task_list: z.array(taskSchema), page_meta: pageMeta },
      annotations: readOnly,
    },
    guarded('list_tasks', async (a) => structured(await call('GET', '/r/tasks', { query: a }))),
  );

  server.registerTool(
    'wait_for_task',
    {
      title: 'Wait for a task',
      description: `Waits until a task is completed, failed or cancelled, at most timeout_s seconds (default ${WAIT_DEFAULT_S}, max ${WAIT_MAX_S}), following its events (progress notifications when the request has a progressToken). Returns the task, timed_out, and when completed its result (download URLs; small images inline). A timeout is not an error: call again to keep waiting. A failed task that is retried names its next attempt in retry_task_id: wait for that one.`,
      inputSchema: { task_id: uuid('task id'), timeout_s: timeoutArg },
      outputSchema: waitSchema.shape,
      annotations: readOnly,
    },
    guarded('wait_for_task', async (a, extra) => waitOutput(a.task_id, a.timeout_s, extra)),
  );

  server.registerTool(
    'get_task_result',
    {
      title: 'Get a task result',
      description: `The result of a completed task: download_url (the primary output) and download_urls (every output by name), presigned and time-limited (expires_at), plus the raw output record. Output images of at most ${IMAGE_MAX_BYTES} bytes (PNG, JPEG, WebP, GIF; the first ${MAX_IMAGES}) are also returned as image content so you can see them. A task that is not completed is a tool error.`,
      inputSchema: { task_id: uuid('task id') },
      outputSchema: resultSchema.shape,
      annotations: readOnly,
    },
    guarded('get_task_result', async (a) => {
      const r = await result(a.task_id);
      return structured(r.data, r.images);
    }),
  );

  server.registerTool(
    'cancel_task',
    {
      title: 'Cancel a task',
      description: 'Cancels a task that has not finished (a running task is stopped on its agent). Cancelling a finished task changes nothing. Returns the task as it is after the cancel.',
      inputSchema: { task_id: uuid('task id') },
      outputSchema: { is_success: z.boolean(), task: taskSchema },
      annotations: { destructiveHint: true, idempotentHint: true, openWorldHint: false },
    },
    guarded('cancel_task', async (a) => {
      const r = await call('POST', `${taskPath(a.task_id)}/cancel`);
      return structured({ is_success: r.is_success === true, task: await readTask(a.task_id) });
    }),
  );

  server.registerTool(
    'list_agents',
    {
      title: 'List agents',
      description: "The team's GPU agents (the machines that run tasks): status (online, busy, draining, offline), GPU type, VRAM in GB, labels, and reduced system stats.",
      inputSchema: page,
      outputSchema: { agent_list: z.array(loose), page_meta: pageMeta },
      annotations: readOnly,
    },
    guarded('list_agents', async (a) => structured(await call('GET', '/r/agents', { query: a }))),
  );

  server.registerTool(
    'create_upload',
    {
      title: 'Create an upload',
      description:
        'Stages an input file for a run (an image for an img2img workflow, a video for nerfstudio...). Returns the presign triple: file_key (pass it as the value of a file parameter), upload_url and upload_headers (PUT the file bytes there with exactly those headers, before the URL expires at upload_expires_at). Staged files are kept for one day.',
      inputSchema: {
        file_name: z.string().min(1).max(255).describe('The file name, e.g. photo.png.'),
        file_size: z.number().int().min(1).describe('The exact size of the file in bytes.'),
        content_type: z.string().min(1).max(255).describe('The MIME type, e.g. image/png.'),
      },
      outputSchema: { file_key: z.string(), upload_url: z.string().nullable(), upload_headers: z.record(z.string(), z.string()), upload_expires_at: z.string().nullable(), expires_at: z.string() },
      annotations: { openWorldHint: false },
    },
    guarded('create_upload', async (a) => structured(await call('POST', '/r/files/presign', { body: a }))),
  );

  server.registerTool(
    'list_container_services',
    {
      title: 'List container services',
      description: "The team's container services (long-running HTTP services on the GPU agents, or external APIs): slug, status (only running services answer), and openapi_url when the service publishes an OpenAPI document. Call them with invoke_container_service.",
      inputSchema: page,
      outputSchema: { container_list: z.array(loose), page_meta: pageMeta },
      annotations: readOnly,
    },
    guarded('list_container_services', async (a) => structured(await call('GET', '/r/containers', { query: a }))),
  );

  const slugArg = z.string().min(1).max(100).describe('The container service slug (from list_container_services).');

  server.registerTool(
    'get_container_service',
    {
      title: 'Get a container service',
      description: 'One container service by slug: status, type, instances, openapi_url.',
      inputSchema: { service_slug: slugArg },
      outputSchema: { id: z.string(), service_slug: z.string() },
      annotations: readOnly,
    },
    guarded('get_container_service', async (a) => structured(await d.containerBySlug(p.teamId, a.service_slug))),
  );

  /** A gateway refusal (not running, no healthy instance, tunnel failure) as a clear tool error. */
  const viaGateway = async <T>(slug: string, fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (e) {
      if (!(e instanceof AppError)) throw e;
      if (e.code === 'service_not_running') throw new AppError(e.kind, e.code, `${e.message}: it must be deployed and running before it can be called (the gateway is not available for it)`);
      if (e.kind === 'unavailable' || e.kind === 'bad_gateway' || e.kind === 'deadline_exceeded')
        throw new AppError(e.kind, e.code, `container service ${slug} is not available through the gateway right now: ${e.message}`);
      throw e;
    }
  };

  const invoke = (slug: string, body: Json): Promise<Json> => viaGateway(slug, () => call('POST', `/r/invoke/${encodeURIComponent(slug)}`, { body }));

  server.registerTool(
    'get_container_openapi',
    {
      title: "Get a container service's OpenAPI document",
      description: "Fetches the service's OpenAPI document (its openapi_url, through the gateway) so you can see which paths, methods and bodies invoke_container_service can send. The service must be running.",
      inputSchema: { service_slug: slugArg },
      outputSchema: { service_slug: z.string(), openapi_url: z.string(), status_code: z.number(), openapi: z.unknown() },
      annotations: readOnly,
    },
    guarded('get_container_openapi', async (a) => {
      const svc = await d.containerBySlug(p.teamId, a.service_slug);
      const url = typeof svc.openapi_url === 'string' ? svc.openapi_url : '';
      if (!url) return toolError(`container service ${a.service_slug} declares no openapi_url`, 'openapi_not_declared');
      const r = await invoke(a.service_slug, { method: 'GET', path: url, headers: { accept: 'application/json' } });
      const text = Buffer.from(String(r.body_base64 ?? ''), 'base64').toString('utf8');
      const status = Number(r.status_code);
      if (status < 200 || status > 299) return toolError(`the service answered ${status} for ${url}: ${text.slice(0, 500)}`, 'openapi_unavailable');
      let doc: unknown;
      try {
        doc = JSON.parse(text);
      } catch {
        doc = text;
      }
      return structured({ service_slug: a.service_slug, openapi_url: url, status_code: status, openapi: doc });
    }),
  );

  server.registerTool(
    'invoke_container_service',
    {
      title: 'Call a container service',
      description:
        "Sends one HTTP request to a running container service through the gateway (like POST /r/invoke/{slug}) and returns its status, headers and body. Give the body as body_json (sent as application/json), body_text, or body_base64 (binary), at most one. The response body is returned as body_text when it is text or JSON, else only as body_base64. Use get_container_openapi to learn the service's paths.",
      inputSchema: {
        service_slug: slugArg,
        method: z.enum(INVOKE_METHODS).describe('The HTTP method.'),
        path: z.string().min(1).max(8192).describe('The path (and query) inside the service, starting with /, e.g. /v1/generate?fast=1.'),
        headers: z.record(z.string(), z.string()).optional().describe('Request headers for the service (Gantry\'s own credential is never forwarded).'),
        body_json: z.unknown().optional().describe('A JSON body (sets content-type: application/json unless headers say otherwise).'),
        body_text: z.string().optional().describe('A text body.'),
        body_base64: z.string().optional().describe('A binary body, base64.'),
      },
      outputSchema: { status_code: z.number(), headers: z.record(z.string(), z.string()), body_text: z.string().nullable(), body_base64: z.string() },
      annotations: { openWorldHint: true },
    },
    guarded('invoke_container_service', async (a) => {
      const given = [a.body_json !== undefined, a.body_text !== undefined, a.body_base64 !== undefined].filter(Boolean).length;
      if (given > 1) return toolError('give at most one of body_json, body_text, body_base64', 'invalid_parameter');
      const headers: Record<string, string> = { ...(a.headers ?? {}) };
      let body: string | undefined = a.body_base64;
      if (a.body_json !== undefined) {
        body = Buffer.from(JSON.stringify(a.body_json)).toString('base64');
        if (!Object.keys(headers).some((k) => k.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
      } else if (a.body_text !== undefined) body = Buffer.from(a.body_text).toString('base64');
      const r = await invoke(a.service_slug, { method: a.method, path: a.path, headers, ...(body !== undefined ? { body_base64: body } : {}) });
      const hs = (r.headers ?? {}) as Record<string, string>;
      const raw = Buffer.from(String(r.body_base64 ?? ''), 'base64');
      const ct = hs['content-type'] ?? '';
      const textual = /^(text\/|application\/([\w.+-]*\+)?(json|xml|yaml|javascript|x-www-form-urlencoded))/i.test(ct) || (ct === '' && isUtf8(raw));
      return structured({ status_code: Number(r.status_code), headers: hs, body_text: textual && isUtf8(raw) ? raw.toString('utf8') : null, body_base64: String(r.body_base64 ?? '') });
    }),
  );
}

function isUtf8(b: Buffer): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(b);
    return true;
  } catch {
    return false;
  }
}

function guessType(key: string): string {
  const ext = key.slice(key.lastIndexOf('.') + 1).toLowerCase();
  return { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', webp: 'image/webp', gif: 'image/gif' }[ext] ?? 'application/octet-stream';
}

async function readCapped(d: McpToolDeps, key: string, max: number): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  const s = await d.readObject(key);
  for await (const c of s) {
    const b = typeof c === 'string' ? Buffer.from(c) : Buffer.from(c as Uint8Array);
    size += b.length;
    if (size > max) {
      (s as { destroy?: () => void }).destroy?.();
      return null;
    }
    chunks.push(b);
  }
  return Buffer.concat(chunks);
}
