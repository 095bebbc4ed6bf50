/**
 * Task presentation: the API's Task read shape built from a `tasks` row. Pure (no SQL, no I/O):
 * the stores read rows, the routes present them through these functions.
 */
import type { TaskStatus } from './record.js';
import { iso } from '../../shared/time.js';

/** A timestamptz as a driver returns it: text (PostgreSQL) or a Date (embedded PGlite). */
type Timestamp = Date | string;

/**
 * A row of `tasks` as the driver returns it (`select *`: snake_case columns; bigint seq as text or
 * a number; jsonb columns parsed, typed unknown until narrowed).
 */
export interface TaskRow {
  id: string;
  team_id: string;
  seq: string | number;
  workflow_id: string;
  workflow_slug: string;
  workflow_version: number;
  snapshot_id: string | null;
  task_status: TaskStatus;
  dispatch_target: string;
  tool_type: string;
  agent_id: string | null;
  parameters: unknown;
  resolved_workflow: unknown;
  input_files: unknown;
  progress: unknown;
  output: unknown;
  task_error: string | null;
  attempt: number;
  max_retries: number;
  parent_task_id: string | null;
  retry_task_id: string | null;
  lease_epoch: number;
  task_timeout_s: number;
  required_labels: unknown;
  min_vram_gb: number;
  required_models: unknown;
  preferred_gpu: string | null;
  created_by_user_id: string | null;
  created_by_credential_id: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
  queued_at: Timestamp | null;
  started_at: Timestamp | null;
  finished_at: Timestamp | null;
  output_expires_at: Timestamp | null;
  not_before: Timestamp | null;
  trace_parent: string | null;
  checkpoint_key: string | null;
  checkpoint_step: number | null;
}

export interface TaskProgressView {
  progress: number;
  step_current: number;
  step_total: number;
  current_node: string;
}

export interface TaskView {
  task_id: string;
  workflow_id: string;
  workflow_slug: string;
  workflow_version: number;
  task_status: string;
  dispatch_target: string;
  agent_id: string | null;
  parameters: Record<string, unknown>;
  progress: TaskProgressView | null;
  attempt: number;
  parent_task_id: string | null;
  retry_task_id: string | null;
  task_error: string | null;
  created_at: string | null;
  updated_at: string | null;
  queued_at: string | null;
  started_at: string | null;
  finished_at: string | null;
  /** Why a pending/waiting task waits, from the team scheduler (an extension; GET of one task only). */
  waiting_reason?: string;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const numberOr0 = (v: unknown): number => (typeof v === 'number' ? v : 0);

/** The progress shown for a task: the last persisted tick, or 100% once completed, else null. */
export function progressView(r: TaskRow): TaskProgressView | null {
  const p = r.progress;
  if (isObject(p)) return { progress: numberOr0(p.progress), step_current: numberOr0(p.step_current), step_total: numberOr0(p.step_total), current_node: typeof p.current_node === 'string' ? p.current_node : '' };
  return r.task_status === 'completed' ? { progress: 1, step_current: 0, step_total: 0, current_node: '' } : null;
}

export const taskView = (r: TaskRow): TaskView => ({
  task_id: r.id,
  workflow_id: r.workflow_id,
  workflow_slug: r.workflow_slug,
  workflow_version: Number(r.workflow_version),
  task_status: r.task_status,
  dispatch_target: r.dispatch_target,
  agent_id: r.agent_id ?? null,
  parameters: isObject(r.parameters) ? r.parameters : {},
  progress: progressView(r),
  attempt: Number(r.attempt),
  parent_task_id: r.parent_task_id ?? null,
  retry_task_id: r.retry_task_id ?? null,
  task_error: r.task_error ?? null,
  created_at: iso(r.created_at),
  updated_at: iso(r.updated_at),
  queued_at: iso(r.queued_at),
  started_at: iso(r.started_at),
  finished_at: iso(r.finished_at),
});
