/**
 * The 15 MCP tools (docs/api.md "MCP"), thin adapters over the app layer's use cases
 * (src/app/): each decodes its arguments, calls the use case with the caller's principal, and
 * encodes the answer, so every rule (validation and its 400 messages, team scoping, not-found,
 * retention, idempotency, the gateway's checks) is REST's own. A refusal becomes a tool error
 * (`isError: true`, the REST envelope as text), never a protocol error.
 *
 * The tools are registered in groups: workflows and runs (src/mcp/tools-workflows.ts), tasks
 * (src/mcp/tools-tasks.ts), agents, uploads and container services (src/mcp/tools-services.ts).
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { TeamPrincipal } from '../identity/principal.js';
import type { McpToolDeps } from './tool-kit.js';
import { registerServiceTools } from './tools-services.js';
import { registerTaskTools } from './tools-tasks.js';
import { registerWorkflowTools } from './tools-workflows.js';

export type { McpToolDeps } from './tool-kit.js';

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

export function registerTools(server: McpServer, p: TeamPrincipal, d: McpToolDeps, requestId: string): void {
  const t = { server, p, d, requestId };
  registerWorkflowTools(t);
  registerTaskTools(t);
  registerServiceTools(t);
}
