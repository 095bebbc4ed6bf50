/**
 * The task tools: get_task, list_tasks, wait_for_task, get_task_result, cancel_task, and the wait
 * and result answers run_workflow_and_wait shares (src/mcp/tools-workflows.ts).
 *
 * Waiting follows the task's committed events on the event bus (TaskUseCases.waitForTask), not the
 * database. Progress events become MCP progress notifications when the request carries a
 * progressToken.
 */
import { z } from 'zod';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { WAIT_DEFAULT_S, WAIT_MAX_S, type TaskResult } from '../app/tasks.js';
import { TASK_STATUSES } from '../domain/tasks/record.js';
import { outputEntries } from '../files/outputs.js';
import { guarded, page, pageMeta, readOnly, resultSchema, structured, taskSchema, uuid, waitSchema, pageOf, type Extra, type McpToolDeps, type ToolContext } from './tool-kit.js';

/** get_task_result: images up to this size are also returned as MCP image content (at most MAX_IMAGES). */
export const IMAGE_MAX_BYTES = 1024 * 1024;
export const MAX_IMAGES = 4;
const IMAGE_TYPES = new Set(['image/png', 'image/jpeg', 'image/webp', 'image/gif']);

export const timeoutArg = z
  .number()
  .int()
  .min(1)
  .max(WAIT_MAX_S)
  .optional()
  .describe(`How long to wait, in seconds (default ${WAIT_DEFAULT_S}, at most ${WAIT_MAX_S}). On timeout the current status is returned (timed_out: true), not an error; call wait_for_task again to keep waiting. Keep it below your client's request timeout unless the client resets it on progress.`);

interface ImageNote {
  name: string;
  content_type: string;
  size: number | null;
  included: boolean;
}

/** The result use case's answer plus images small enough to show (as MCP image content). */
async function result(t: ToolContext, taskId: string): Promise<{ data: TaskResult & { images: ImageNote[] }; images: CallToolResult['content'] }> {
  const { d, p } = t;
  const r = await d.tasks.getResult(p, taskId);
  const output = r.output;
  const described = new Map<string, { content_type?: unknown; size?: unknown }>();
  if (Array.isArray(output.outputs)) for (const o of output.outputs as Array<Record<string, unknown>>) if (o && typeof o.storage_key === 'string') described.set(o.storage_key, o);
  const images: ImageNote[] = [];
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
}

/** The wait tools' answer: the task after the wait, and its result (images too) when completed. */
export async function waitOutput(t: ToolContext, taskId: string, timeoutS: number | undefined, extra: Extra, head: Record<string, unknown> = {}): Promise<CallToolResult> {
  const token = extra._meta?.progressToken;
  let last = -1;
  const onProgress = (progress: number, message: string): void => {
    if (token === undefined || progress <= last) return;
    last = progress;
    void extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress, total: 100, message } }).catch(() => undefined);
  };
  const w = await t.d.tasks.waitForTask(t.p, taskId, { timeoutS, signal: extra.signal, onProgress });
  if (w.task.task_status !== 'completed') return structured({ ...head, ...w, result: null });
  const r = await result(t, taskId);
  return structured({ ...head, ...w, result: r.data }, r.images);
}

export function registerTaskTools(t: ToolContext): void {
  const { server, d, p } = t;

  server.registerTool(
    'get_task',
    {
      title: 'Get a task',
      description: `The current state of one task (a workflow run): task_status (${TASK_STATUSES.join(', ')}), progress, error, timestamps. Does not wait; use wait_for_task to wait.`,
      inputSchema: { task_id: uuid('task id') },
      outputSchema: taskSchema.shape,
      annotations: readOnly,
    },
    guarded(t, 'get_task', async (a) => structured(await d.tasks.getTask(p, a.task_id.toLowerCase()))),
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
    guarded(t, 'list_tasks', async (a) => structured(await d.tasks.listTasks(p, pageOf(a), { status: a.task_status, workflowId: a.workflow_id }))),
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
    guarded(t, 'wait_for_task', async (a, extra) => waitOutput(t, a.task_id.toLowerCase(), a.timeout_s, extra)),
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
    guarded(t, 'get_task_result', async (a) => {
      const r = await result(t, a.task_id.toLowerCase());
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
    guarded(t, 'cancel_task', async (a) => {
      const id = a.task_id.toLowerCase();
      const r = await d.tasks.cancelTask(p, id);
      return structured({ is_success: r.is_success, task: await d.tasks.getTask(p, id) });
    }),
  );
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
