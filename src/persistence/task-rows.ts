/**
 * The `tasks` and `task_events` rows as the task stores read them (the columns of each query, typed
 * as the drivers return them; see rows.ts) and their mapping to the actors' types.
 */
import { isRecord, jsonArrayOf, jsonObject, jsonStrings, type PgBigint, type PgTimestamp } from './rows.js';
import { ts } from './sql.js';
import type { TaskAssignment, TaskEvent, TaskEventType, TaskRecord, TaskStatus } from '../actors/ports.js';

/** TASK_COLS of a `tasks` row (also inside json_agg / row_to_json: timestamps as text there). */
export interface TaskRecordRow {
  id: string;
  team_id: string;
  task_status: TaskStatus;
  attempt: number;
  max_retries: number;
  lease_epoch: number;
  agent_id: string | null;
  dispatch_target: TaskRecord['dispatchTarget'];
  tool_type: TaskRecord['toolType'];
  task_timeout_s: number;
  required_labels: unknown;
  min_vram_gb: number;
  required_models: unknown;
  preferred_gpu: string | null;
  seq: PgBigint;
  started_at: PgTimestamp | null;
  created_at: PgTimestamp;
  parent_task_id: string | null;
  retry_task_id: string | null;
  not_before: PgTimestamp | null;
  trace_parent: string | null;
  priority: number;
  created_by_user_id: string | null;
  created_by_credential_id: string | null;
  workflow_id: string;
  workflow_version: number;
}

/** ASSIGNMENT_COLS: absent (a single transition) or null (the batch) when the transition did not assign. */
export interface AssignmentCols {
  resolved_workflow?: unknown;
  parameters?: unknown;
  input_files?: unknown;
  checkpoint_key?: string | null;
  checkpoint_step?: number | null;
}

/** What rowToAssignment reads: the assignment columns and the record columns an assignment carries. */
export type AssignmentRow = Pick<TaskRecordRow, 'id' | 'attempt' | 'tool_type' | 'task_timeout_s' | 'required_models' | 'trace_parent'> & AssignmentCols;

/** A row of batchSql's `u` (inside json_agg): the batch row index, whether it assigned, the record and assignment columns. */
export type BatchTaskRow = TaskRecordRow & AssignmentCols & { i: number; with_assignment: boolean };

/** A `task_events` row (select *, RETURNING * or inside json_agg). */
export interface TaskEventRow {
  id: PgBigint;
  task_id: string;
  team_id: string;
  event_type: TaskEventType;
  payload: unknown;
  created_at: PgTimestamp;
}

export function rowToTask(r: TaskRecordRow): TaskRecord {
  return {
    id: r.id,
    teamId: r.team_id,
    status: r.task_status,
    attempt: Number(r.attempt),
    maxRetries: Number(r.max_retries),
    leaseEpoch: Number(r.lease_epoch),
    agentId: r.agent_id ?? null,
    dispatchTarget: r.dispatch_target,
    toolType: r.tool_type,
    timeoutS: Number(r.task_timeout_s),
    requiredLabels: jsonStrings(r.required_labels),
    minVramGb: Number(r.min_vram_gb ?? 0),
    requiredModels: jsonStrings(r.required_models),
    preferredGpu: r.preferred_gpu ?? null,
    seq: Number(r.seq),
    startedAt: ts(r.started_at),
    createdAt: ts(r.created_at) ?? 0,
    parentTaskId: r.parent_task_id ?? null,
    retryTaskId: r.retry_task_id ?? null,
    notBefore: ts(r.not_before),
    traceParent: r.trace_parent ?? null,
    priority: Number(r.priority ?? 3),
    submitter: r.created_by_credential_id ?? r.created_by_user_id ?? null,
    workflowKey: r.workflow_id ? `${r.workflow_id}@${Number(r.workflow_version)}` : null,
  };
}

export const rowToEvent = (r: TaskEventRow): TaskEvent => ({
  id: Number(r.id),
  taskId: r.task_id,
  teamId: r.team_id,
  type: r.event_type,
  data: jsonObject(r.payload),
  createdAt: ts(r.created_at) ?? 0,
});

/** The columns of a TaskRecord (never the large JSON: workflow, parameters, output). */
export const TASK_COLS = `id, team_id, task_status, attempt, max_retries, lease_epoch, agent_id, dispatch_target, tool_type, task_timeout_s, required_labels,
  min_vram_gb, required_models, preferred_gpu, seq, started_at, created_at, parent_task_id, retry_task_id, not_before, trace_parent,
  priority, created_by_user_id, created_by_credential_id, workflow_id, workflow_version`;
/** What an agent needs besides the record (returned by the assigning transition). */
export const ASSIGNMENT_COLS = 'resolved_workflow, parameters, input_files, checkpoint_key, checkpoint_step';

type InputFile = TaskAssignment['inputFiles'][number];
const isInputFile = (x: unknown): x is InputFile => isRecord(x) && typeof x.key === 'string' && typeof x.fileKey === 'string' && typeof x.fileName === 'string';

export const rowToAssignment = (r: AssignmentRow): TaskAssignment => ({
  taskId: r.id,
  attempt: Number(r.attempt),
  toolType: r.tool_type,
  workflow: jsonObject(r.resolved_workflow),
  parameters: jsonObject(r.parameters),
  inputFiles: jsonArrayOf(r.input_files, isInputFile),
  timeoutS: Number(r.task_timeout_s),
  requiredModels: jsonStrings(r.required_models),
  traceParent: r.trace_parent ?? null,
  checkpoint: r.checkpoint_key ? { key: String(r.checkpoint_key), step: Number(r.checkpoint_step ?? 0) } : null,
});
