/**
 * The response shapes the faces share, as zod schemas: the HTTP API's OpenAPI document names them
 * as components (src/edge/openapi/schemas.ts registers each under its component name) and the MCP
 * tools declare them as their output schemas (src/mcp/), so a resource has one definition whichever
 * face answers it. The use cases (src/app/*) produce these shapes.
 *
 * Strictness: the core resources (Workflow, Task, result) are exact objects (additionalProperties
 * false); records the spec leaves open are loose objects that name their known fields.
 */
import { z } from 'zod';
import { TASK_STATUSES } from '../domain/tasks/record.js';
import { DISPATCH_TARGETS, TOOL_TYPES, WORKFLOW_STATUSES } from '../domain/workflows/schema.js';

export const ts = z.string().describe('ISO 8601 timestamp, UTC');
export const uuid = z.string().describe('UUID');

export const PageMeta = z.object({ current_page: z.int(), per_page: z.int(), total_count: z.int() });

/** The spec's paginated envelope: `{[name]: items, page_meta}`. */
export const pageOf = <T extends z.ZodType>(name: string, item: T) => z.object({ [name]: z.array(item), page_meta: PageMeta });

export const Workflow = z.object({
  id: uuid,
  workflow_slug: z.string(),
  display_name: z.string(),
  description: z.string().describe('"" when unset'),
  workflow_json: z.record(z.string(), z.unknown()).optional().describe('omitted for sk- callers'),
  parameters: z.array(z.looseObject({ key: z.string() })),
  tool_type: z.enum(TOOL_TYPES),
  required_labels: z.array(z.string()),
  task_timeout: z.int(),
  max_retries: z.int(),
  preferred_gpu: z.string().describe('"" when unset'),
  default_dispatch_target: z.enum(DISPATCH_TARGETS),
  min_vram_gb: z.number(),
  required_models: z.array(z.string()),
  default_priority: z.int().min(1).max(5).optional().describe('priority (1 highest .. 5) of runs that give none; omitted when unset (3)'),
  version: z.int(),
  workflow_status: z.enum(WORKFLOW_STATUSES),
  created_at: ts,
  updated_at: ts,
});

export const TaskStatus = z.enum(TASK_STATUSES);

export const TaskProgress = z.object({ progress: z.number(), step_current: z.int(), step_total: z.int(), current_node: z.string() });

export const Task = z.object({
  task_id: uuid,
  workflow_id: uuid,
  workflow_slug: z.string(),
  workflow_version: z.int(),
  task_status: TaskStatus,
  dispatch_target: z.enum(DISPATCH_TARGETS),
  agent_id: uuid.nullable(),
  parameters: z.record(z.string(), z.unknown()),
  progress: TaskProgress.nullable(),
  attempt: z.int(),
  parent_task_id: uuid.nullable(),
  retry_task_id: uuid.nullable(),
  task_error: z.string().nullable(),
  created_at: ts.nullable(),
  updated_at: ts.nullable(),
  queued_at: ts.nullable(),
  started_at: ts.nullable(),
  finished_at: ts.nullable(),
  waiting_reason: z.string().optional().describe("an extension, on one task's GET only: why a pending or waiting task waits, from the team scheduler's own eligibility rules (no agent online; no online agent can run it, with what the agents lack: a label, VRAM, a model, the tool type; every agent that can run it busy; a concurrency cap; a retry's backoff)"),
});

export const RunAccepted = z.object({ task_id: uuid });

export const TaskResult = z.object({
  task_id: uuid,
  task_status: z.literal('completed'),
  download_url: z.string().nullable().describe('the single primary output of agent tasks'),
  download_urls: z.record(z.string(), z.string()).nullable().describe('keyed by output identifier (cloud-dispatched tasks)'),
  output: z.record(z.string(), z.unknown()),
  expires_at: ts,
});

export const Agent = z.looseObject({
  id: uuid,
  display_name: z.string(),
  agent_status: z.enum(['online', 'busy', 'draining', 'offline']),
  labels: z.array(z.string()),
  gpu_type: z.string().nullable(),
  gpu_count: z.int(),
  vram_total_gb: z.number(),
  current_task_id: uuid.nullable(),
  system_stats: z.record(z.string(), z.unknown()).describe('reduced to {gpu_count, vram_total_gb, gpu_utilization_percent} for sk- callers'),
  last_seen_at: ts.nullable(),
  agent_version: z.string().nullable(),
});

export const ContainerService = z.looseObject({
  id: uuid,
  service_slug: z.string(),
  display_name: z.string(),
  service_type: z.enum(['deployed', 'external']),
  service_status: z.enum(['created', 'deploying', 'running', 'stopping', 'stopped', 'failed']),
  service_desc: z.string(),
  docker_image: z.string(),
  exposed_port: z.int(),
  health_path: z.string(),
  env_config: z.array(z.object({ env_name: z.string(), env_value: z.string() })),
  volume_config: z.array(z.object({ host_path: z.string(), container_path: z.string() })),
  required_labels: z.array(z.string()),
  gpu_count: z.int(),
  replica_count: z.int(),
  usage_prompt: z.string(),
  openapi_url: z.string(),
  external_url: z.string(),
  external_auth_credential_id: uuid.nullable(),
  session_affinity: z.object({ mode: z.enum(['cookie', 'header']), header_name: z.string().optional() }).nullable().describe('sticky sessions (an extension): by a cookie the gateway sets, or by a header the client sends'),
  min_replicas: z.int().nullable().optional().describe('autoscaling (an extension; null: fixed replica_count): the fewest replicas, 0 = scale to zero after idle_timeout_s'),
  max_replicas: z.int().nullable().optional().describe('autoscaling: the most replicas (set: autoscaling is on)'),
  target_inflight_per_replica: z.int().nullable().optional().describe('autoscaling: requests in flight per replica the autoscaler aims at (default 8)'),
  idle_timeout_s: z.int().nullable().optional().describe('autoscaling with min_replicas 0: seconds without a request before the last replica goes (default 300)'),
  deploy_status: z
    .looseObject({
      desired: z.int(),
      placed: z.int(),
      running: z.int(),
      healthy: z.int(),
      message: z.string(),
      draining: z.int().optional().describe('autoscaling: replicas draining (no new requests; removed once their requests in flight ended)'),
      last_cold_start_ms: z.int().nullable().optional().describe('autoscaling: the last start from zero replicas, from the request that woke the service to its first healthy replica'),
      last_cold_start_at: ts.nullable().optional(),
      rollout: z
        .object({
          state: z.enum(['rolling', 'completed', 'rolled_back']),
          from_revision: z.string().describe('the spec revision the replicas ran before the update'),
          to_revision: z.string().describe('the spec revision being rolled out'),
          updated: z.int().describe('healthy replicas running to_revision'),
          total: z.int().describe('replicas to roll'),
          message: z.string().describe('progress, or why the update was rolled back'),
        })
        .optional()
        .describe('the last rolling update (a change of image, env, port, health path or GPUs of a running service): replicas replaced one at a time; rolled_back when a new replica failed health (the spec went back to from_revision)'),
    })
    .optional(),
  created_at: ts,
  updated_at: ts,
});

export const PresignedUpload = z.looseObject({
  file_key: z.string().describe('the value of a file parameter in a run'),
  upload_url: z.string().nullable().describe('null when upload_mode is multipart (files above the single-part cap: JWT callers use /uploads/multipart/*)'),
  upload_headers: z.record(z.string(), z.string()).describe('send every header verbatim with the PUT'),
  upload_mode: z.enum(['single', 'multipart']).optional(),
});
