/**
 * What every MCP tool group shares: the deps (the app layer's use cases), the context of one MCP
 * request (the caller's principal, its request id), the tool-result encoding, the guard that turns
 * a use case's refusal (an AppError) into a tool error, the edge's input hygiene, and the argument
 * and output schemas more than one tool uses (the response shapes are the HTTP API's, src/app/views.ts).
 */
import { z } from 'zod';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { CallToolResult, ServerNotification, ServerRequest } from '@modelcontextprotocol/sdk/types.js';
import type { AgentUseCases } from '../app/agents.js';
import type { ContainerUseCases } from '../app/containers.js';
import type { TaskUseCases } from '../app/tasks.js';
import type { UploadUseCases } from '../app/uploads.js';
import type { WorkflowUseCases } from '../app/workflows.js';
import type { TeamPrincipal } from '../identity/principal.js';
import { AppError } from '../shared/errors.js';
import { checkJsonValue, checkPairs } from '../shared/input-hygiene.js';
import type { Logger } from '../shared/logger.js';
import { parsePage, type PageRequest } from '../shared/pagination.js';
import * as V from '../app/views.js';

export interface McpToolDeps {
  tasks: TaskUseCases;
  workflows: WorkflowUseCases;
  agents: AgentUseCases;
  uploads: UploadUseCases;
  containers: ContainerUseCases;
  /** The REST base path (/api/v1): a run's Idempotency-Key is bound to the path of its REST twin. */
  basePath: string;
  /** Reads an object of the store (task outputs for image content). */
  readObject(key: string): Promise<NodeJS.ReadableStream>;
  logger: Logger;
}

/** One MCP request's tools: bound to its caller. */
export interface ToolContext {
  server: McpServer;
  p: TeamPrincipal;
  d: McpToolDeps;
  requestId: string;
}

export type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

export const structured = (data: object, extra: CallToolResult['content'] = []): CallToolResult => ({ structuredContent: { ...data }, content: [{ type: 'text', text: JSON.stringify(data) }, ...extra] });

export const toolError = (message: string, code: string, fields: Record<string, string> = {}): CallToolResult => ({ isError: true, content: [{ type: 'text', text: JSON.stringify({ ...fields, error_message: message, error_code: code }) }] });

/** A tool body: AppErrors (the use case's refusals, REST's) become tool errors; anything else is logged and hidden. */
export const guarded =
  <A>(t: ToolContext, name: string, fn: (args: A, extra: Extra) => Promise<CallToolResult>) =>
  async (args: A, extra: Extra): Promise<CallToolResult> => {
    try {
      return await fn(args, extra);
    } catch (e) {
      if (e instanceof AppError) return toolError(e.message, e.code, e.fields);
      t.d.logger.error({ err: e, tool: name, request_id: t.requestId }, 'mcp tool failed');
      return toolError('internal error', 'internal_error');
    }
  };

/**
 * The edge's input hygiene, which an HTTP request gets before any route runs (the transport parsed
 * the JSON, not the edge): free-form path values and bodies are refused with REST's 400 when they
 * carry control characters or nest too deep.
 */
export function hygiene(params: Record<string, string>, body?: unknown): void {
  const bad = checkPairs(Object.entries(params), 'path parameter') ?? (body === undefined ? null : checkJsonValue(body));
  if (bad) throw bad;
}

/** A page of a list tool, read like REST's current_page and per_page query parameters. */
export function pageOf(a: { current_page?: number | undefined; per_page?: number | undefined }): PageRequest {
  const q = new URLSearchParams();
  if (a.current_page !== undefined) q.set('current_page', String(a.current_page));
  if (a.per_page !== undefined) q.set('per_page', String(a.per_page));
  return parsePage(q);
}

export const readOnly = { readOnlyHint: true, openWorldHint: false } as const;

export const uuid = (what: string) => z.uuid(`${what} must be a UUID`).describe(`The ${what} (a UUID).`);
export const page = {
  current_page: z.number().int().min(1).max(1_000_000).optional().describe('Page number, 1-based (default 1).'),
  per_page: z.number().int().min(1).max(100).optional().describe('Items per page, 1..100 (default 20).'),
};
export const loose = z.looseObject({});
// output shapes: the API's own (src/app/views.ts, the OpenAPI document's components), plus what only a tool adds
export const pageMeta = V.PageMeta;
export const taskSchema = V.Task;
export const workflowSchema = V.Workflow;
/** get_task_result: the TaskResult plus the output images (the first few also travel as image content). */
export const resultSchema = V.TaskResult.extend({
  images: z.array(z.object({ name: z.string(), content_type: z.string(), size: z.number().nullable(), included: z.boolean() })),
});
export const waitSchema = z.object({ task: taskSchema, timed_out: z.boolean(), waited_ms: z.number(), result: resultSchema.nullable() });
