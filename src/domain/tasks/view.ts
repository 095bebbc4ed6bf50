/**
 * Task presentation: the API's Task read shape built from a `tasks` row. Pure (no SQL, no I/O):
 * the stores read rows, the routes present them through these functions.
 */

/** A row of `tasks` as the driver returns it (snake_case columns; timestamps as Date or string). */
export type TaskRow = Record<string, any>;

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
}

const isoOf = (v: Date | string | number | null | undefined): string | null => (v === null || v === undefined ? null : new Date(v).toISOString());

/** The progress shown for a task: the last persisted tick, or 100% once completed, else null. */
export function progressView(r: TaskRow): TaskProgressView | null {
  if (r.progress) return { progress: r.progress.progress, step_current: r.progress.step_current, step_total: r.progress.step_total, current_node: r.progress.current_node };
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
  parameters: r.parameters ?? {},
  progress: progressView(r),
  attempt: Number(r.attempt),
  parent_task_id: r.parent_task_id ?? null,
  retry_task_id: r.retry_task_id ?? null,
  task_error: r.task_error ?? null,
  created_at: isoOf(r.created_at),
  updated_at: isoOf(r.updated_at),
  queued_at: isoOf(r.queued_at),
  started_at: isoOf(r.started_at),
  finished_at: isoOf(r.finished_at),
});
