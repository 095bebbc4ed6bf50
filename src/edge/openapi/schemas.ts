/**
 * Response and event shapes of the API, as zod schemas, for the OpenAPI document. The named ones
 * become components (#/components/schemas/<Name>); the routes' own `doc` refer to them. Requests
 * are documented with the same zod schemas the routes validate with (src/domain, src/edge/routes).
 * The shapes the MCP tools answer too (Workflow, Task, TaskResult, Agent, ...) are defined once in
 * src/app/views.ts and only named here.
 *
 * Strictness: the core resources (Workflow, Task, result, errors, envelopes, events) are exact
 * objects (additionalProperties false): a field the server adds without documenting it fails the
 * response validation of the integration tests. Records the spec leaves open are loose objects
 * that name their known fields.
 */
import { z } from 'zod';
import { TOOL_TYPES, parameterDefSchema } from '../../domain/workflows/schema.js';
import * as V from '../../app/views.js';

/** Named component schemas, in document order. */
export const NAMED: Array<[z.ZodType, string]> = [];
export const named = <T extends z.ZodType>(id: string, s: T): T => {
  NAMED.push([s, id]);
  return s;
};

const ts = z.string().describe('ISO 8601 timestamp, UTC');
const uuid = z.string().describe('UUID');

export const ErrorEnvelope = named(
  'Error',
  z.object({
    error_message: z.string().describe('human-readable message'),
    error_code: z.string().describe('stable lower_snake machine code, e.g. slug_taken, invalid_parameter, team_header_missing'),
    reset_at: ts.optional().describe('gpu_budget_exhausted only: when the monthly GPU budget resets (the next calendar month, UTC)'),
  }),
);

export const PageMeta = named('PageMeta', V.PageMeta);

/** The spec's paginated envelope: `{[name]: items, page_meta}`. */
export const pageOf = V.pageOf;

export const IdResult = named('IdResult', z.object({ id: uuid }));
/** A workflow write: its id, and notes on what was accepted (extension: present only when there are some). */
export const WorkflowWriteResult = named(
  'WorkflowWriteResult',
  z.object({ id: uuid, warnings: z.array(z.object({ warning_code: z.string(), warning_message: z.string() })).optional() }),
);
/** POST /uploads/multipart/complete: the file_key shape of presign (api-decisions), with the stored key and size. */
export const MultipartCompleted = named('MultipartCompleted', z.object({ file_key: z.string(), storage_key: z.string(), file_size: z.int() }));
export const Success = named('Success', z.looseObject({ is_success: z.literal(true) }));

export const ParameterDef = named('ParameterDef', parameterDefSchema);

export const Workflow = named('Workflow', V.Workflow);

export const WorkflowExport = named(
  'WorkflowExport',
  z.looseObject({
    workflow_slug: z.string(),
    display_name: z.string(),
    workflow_json: z.record(z.string(), z.unknown()),
    parameters: z.array(z.looseObject({ key: z.string(), type: z.string() })),
    tool_type: z.enum(TOOL_TYPES),
  }),
);

export const Snapshot = named('WorkflowSnapshot', z.object({ id: uuid, workflow_id: uuid, workflow_version: z.int(), created_at: ts, snapshot_note: z.string().nullable() }));

export const TaskStatus = named('TaskStatus', V.TaskStatus);

export const TaskProgress = named('TaskProgress', V.TaskProgress);

export const Task = named('Task', V.Task);

export const RunAccepted = named('RunAccepted', V.RunAccepted);

export const TaskResult = named('TaskResult', V.TaskResult);

export const Agent = named('Agent', V.Agent);

export const TunnelStatus = named('AgentTunnel', z.object({ is_active: z.boolean(), session_id: z.string(), tunnel_url: z.string() }));

export const ContainerService = named('ContainerService', V.ContainerService);

export const ServiceOp = named('ServiceOperation', z.looseObject({ is_success: z.literal(true), service_status: z.string() }));

export const PresignedUpload = named('PresignedUpload', V.PresignedUpload);

export const StoragePresign = named('StoragePresign', z.looseObject({ storage_key: z.string(), upload_url: z.string().nullable(), upload_headers: z.record(z.string(), z.string()) }));

export const TokenPair = named('TokenPair', z.looseObject({ access_token: z.string(), refresh_token: z.string(), token_type: z.literal('Bearer'), expires_in: z.int() }));

export const PairStart = named('PairingStart', z.looseObject({ pairing_id: z.string(), user_code: z.string(), poll_secret: z.string(), expires_in: z.int(), poll_interval: z.number() }));

export const PairPoll = named(
  'PairingPoll',
  z.looseObject({
    pairing_status: z.enum(['pending', 'expired', 'confirmed']),
    device_credential: z.string().optional().describe('dk-…, once, when confirmed'),
    agent_credential: z.string().optional().describe('ak-…, once, when confirmed'),
    team_id: uuid.optional(),
  }),
);

export const UserProfile = named(
  'UserProfile',
  z.looseObject({
    id: uuid,
    first_name: z.string(),
    last_name: z.string(),
    display_name: z.string(),
    email_address: z.string(),
    team_list: z.array(z.looseObject({ id: uuid, display_name: z.string() })),
    feature_flags: z.record(z.string(), z.unknown()),
  }),
);

export const ServerInfo = named(
  'ServerInfo',
  z.object({
    registration_enabled: z.boolean(),
    oauth_enabled: z.boolean(),
    oauth_providers: z.array(z.looseObject({ id: z.string(), display_name: z.string() })),
    agent_grpc_port: z.int().optional().describe("an extension: the port of this node's agent gRPC server (agents connect with --server HOST:PORT)"),
    agent_grpc_tls: z.boolean().optional().describe('an extension: the gRPC server speaks TLS (agents add --tls)'),
  }),
);

export const Team = named('Team', z.looseObject({ id: uuid, display_name: z.string() }));
export const Member = named('TeamMember', z.looseObject({ member_role: z.enum(['owner', 'admin', 'member']) }));
export const Invitation = named('Invitation', z.looseObject({ id: uuid }));
export const Credential = named('Credential', z.looseObject({ id: uuid, credential_type: z.string(), display_name: z.string(), credential_prefix: z.string() }));
export const CredentialCreated = named('CredentialCreated', z.looseObject({ id: uuid, credential_value: z.string().describe('shown once'), credential_prefix: z.string() }));
export const Model = named('Model', z.looseObject({ id: uuid, display_name: z.string(), model_type: z.string(), model_path: z.string(), model_status: z.enum(['active', 'disabled']) }));
export const CustomNode = named('CustomNode', z.looseObject({ id: uuid, display_name: z.string(), package_name: z.string() }));
export const Webhook = named('Webhook', z.looseObject({ id: uuid, display_name: z.string(), webhook_url: z.string(), webhook_events: z.array(z.enum(['task.completed', 'task.failed'])), webhook_status: z.enum(['active', 'disabled']) }));
export const WebhookDetail = named('WebhookDetail', z.looseObject({ id: uuid, display_name: z.string(), webhook_url: z.string(), signing_secret: z.string() }));
export const WebhookDelivery = named('WebhookDelivery', z.looseObject({ id: uuid }));
export const Notification = named('Notification', z.looseObject({ id: uuid }));
export const VaultCredential = named('VaultCredential', z.looseObject({ id: uuid }));

export const MultipartInitiated = named('MultipartInitiated', z.looseObject({ upload_id: z.string(), storage_key: z.string(), part_size: z.int(), part_count: z.int() }));
export const MultipartParts = named('MultipartParts', z.looseObject({ part_list: z.array(z.looseObject({ part_number: z.int(), upload_url: z.string(), upload_headers: z.record(z.string(), z.string()) })) }));

export const InvokeResult = named('InvokeResult', z.object({ status_code: z.int(), headers: z.record(z.string(), z.string()), body_base64: z.string() }));

// ---- Server-Sent Events (GET /r/tasks/{taskId}/events): the data of each event ----
export const EventStatus = named('TaskEventStatus', z.looseObject({ task_id: uuid, status: TaskStatus, timestamp: ts }));
export const EventProgress = named(
  'TaskEventProgress',
  z.looseObject({
    task_id: uuid,
    progress: z.number().min(0).max(1),
    step_current: z.int(),
    step_total: z.int(),
    current_node: z.string(),
    timestamp: ts,
    stage: z.enum(['download', 'process_data', 'train', 'export', 'upload']).optional().describe('nerfstudio'),
    message: z.string().optional().describe('nerfstudio'),
  }),
);
export const EventCompleted = named('TaskEventCompleted', z.looseObject({ task_id: uuid, status: z.literal('completed'), completed_at: ts, output: z.record(z.string(), z.unknown()) }));
export const EventFailed = named('TaskEventFailed', z.looseObject({ task_id: uuid, status: z.literal('failed'), error: z.string(), retry_task_id: uuid.nullable().optional() }));
export const EventCancelled = named('TaskEventCancelled', z.looseObject({ task_id: uuid, status: z.literal('cancelled') }));
export const EventError = named('TaskEventError', z.looseObject({ message: z.string() }));
export const TASK_EVENTS: Record<string, string> = {
  status: 'TaskEventStatus',
  progress: 'TaskEventProgress',
  completed: 'TaskEventCompleted',
  failed: 'TaskEventFailed',
  cancelled: 'TaskEventCancelled',
  error: 'TaskEventError',
};

// ---- webhook deliveries (OpenAPI `webhooks`) ----
export const WebhookPayload = named(
  'WebhookPayload',
  z.object({
    event_type: z.enum(['task.completed', 'task.failed']),
    task_id: uuid,
    task_status: z.string(),
    task_output: z.record(z.string(), z.unknown()),
    task_error: z.string().describe('empty when none'),
    timestamp: ts,
  }),
);

/** A loose JSON object (records the spec leaves open). */
export const AnyObject = z.record(z.string(), z.unknown());

export const Health = z.object({ status: z.literal('ok') });
export const Readiness = z.object({ status: z.enum(['ready', 'not_ready']), checks: z.record(z.string(), z.boolean()) });
