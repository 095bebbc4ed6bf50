import type { Database } from './db.js';
import { q, json, iso, ts } from './sql.js';
import type { TaskEvent, TaskRecord } from '../actors/ports.js';

export interface NewTask {
  id: string;
  teamId: string;
  workflowId: string;
  workflowSlug: string;
  workflowVersion: number;
  snapshotId: string | null;
  dispatchTarget: 'agent' | 'comfy_cloud';
  toolType: 'comfyui' | 'nerfstudio';
  parameters: Record<string, unknown>;
  resolvedWorkflow: unknown;
  inputFiles: unknown[];
  maxRetries: number;
  timeoutS: number;
  requiredLabels: string[];
  minVramGb: number;
  requiredModels: string[];
  preferredGpu: string | null;
  createdByUserId: string | null;
  createdByCredentialId: string | null;
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
  progress: { progress: number; step_current: number; step_total: number; current_node: string } | null;
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

export const taskView = (r: Record<string, any>): TaskView => ({
  task_id: r.id,
  workflow_id: r.workflow_id,
  workflow_slug: r.workflow_slug,
  workflow_version: Number(r.workflow_version),
  task_status: r.task_status,
  dispatch_target: r.dispatch_target,
  agent_id: r.agent_id ?? null,
  parameters: r.parameters ?? {},
  progress: r.progress
    ? { progress: r.progress.progress, step_current: r.progress.step_current, step_total: r.progress.step_total, current_node: r.progress.current_node }
    : r.task_status === 'completed'
      ? { progress: 1, step_current: 0, step_total: 0, current_node: '' }
      : null,
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

/** Reads and the one insert of the task API (writes after insert go through the task actor). */
export class TaskQueries {
  constructor(private readonly db: Database) {}

  /** Inserts the pending task and its first event in one atomic statement; returns the event and the record. */
  async insert(t: NewTask): Promise<TaskEvent[] & { record?: TaskRecord }> {
    const rows = await q(this.db)(
      `with t as (
         insert into tasks (id, team_id, workflow_id, workflow_slug, workflow_version, snapshot_id, task_status, dispatch_target, tool_type, parameters,
           resolved_workflow, input_files, max_retries, task_timeout_s, required_labels, min_vram_gb, required_models, preferred_gpu, created_by_user_id, created_by_credential_id)
         values (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?::jsonb, ?::jsonb, ?::jsonb, ?, ?, ?::jsonb, ?, ?::jsonb, ?, ?, ?)
         returning id, team_id, seq, created_at),
       e as (
         insert into task_events (task_id, team_id, event_type, payload)
         select id, team_id, 'status', jsonb_build_object('task_id', id, 'status', 'pending', 'timestamp', ?::text) from t
         returning *)
       select e.*, t.seq as task_seq, t.created_at as task_created_at from e, t`,
      [
        t.id,
        t.teamId,
        t.workflowId,
        t.workflowSlug,
        t.workflowVersion,
        t.snapshotId,
        t.dispatchTarget,
        t.toolType,
        json(t.parameters),
        json(t.resolvedWorkflow),
        json(t.inputFiles),
        t.maxRetries,
        t.timeoutS,
        json(t.requiredLabels),
        t.minVramGb,
        json(t.requiredModels),
        t.preferredGpu,
        t.createdByUserId,
        t.createdByCredentialId,
        new Date().toISOString(),
      ],
    );
    const events: TaskEvent[] & { record?: TaskRecord } = rows.map((r) => ({ id: Number(r.id), taskId: r.task_id, teamId: r.team_id, type: r.event_type, data: r.payload, createdAt: ts(r.created_at) ?? 0 }));
    const p = rows[0] as { task_seq?: number; task_created_at?: string } | undefined;
    if (p?.task_seq !== undefined)
      events.record = {
        id: t.id,
        teamId: t.teamId,
        status: 'pending',
        attempt: 1,
        maxRetries: t.maxRetries,
        leaseEpoch: 0,
        agentId: null,
        dispatchTarget: t.dispatchTarget,
        toolType: t.toolType,
        timeoutS: t.timeoutS,
        requiredLabels: t.requiredLabels,
        minVramGb: t.minVramGb,
        requiredModels: t.requiredModels,
        preferredGpu: t.preferredGpu,
        seq: Number(p.task_seq),
        startedAt: null,
        createdAt: ts(p.task_created_at) ?? Date.now(),
        parentTaskId: null,
        retryTaskId: null,
      };
    return events;
  }

  async get(teamId: string, taskId: string): Promise<Record<string, any> | null> {
    const rows = await q(this.db)('select * from tasks where team_id = ? and id = ?', [teamId, taskId]);
    return rows[0] ?? null;
  }

  async list(teamId: string, f: { status?: string; workflowId?: string }, limit: number, offset: number): Promise<{ rows: Record<string, any>[]; total: number }> {
    const where = ['team_id = ?'];
    const params: unknown[] = [teamId];
    if (f.status) {
      where.push('task_status = ?');
      params.push(f.status);
    }
    if (f.workflowId) {
      where.push('workflow_id = ?');
      params.push(f.workflowId);
    }
    const qq = q(this.db);
    const rows = await qq(`select * from tasks where ${where.join(' and ')} order by created_at desc, seq desc limit ? offset ?`, [...params, limit, offset]);
    const c = await qq<{ n: number }>(`select count(*)::int as n from tasks where ${where.join(' and ')}`, params);
    return { rows, total: Number(c[0]?.n ?? 0) };
  }

  /** Events of a task after an id (SSE replay), oldest first. */
  async eventsAfter(teamId: string, taskId: string, afterId: number, limit = 1000): Promise<TaskEvent[]> {
    const rows = await q(this.db)('select * from task_events where team_id = ? and task_id = ? and id > ? order by id limit ?', [teamId, taskId, afterId, limit]);
    return rows.map((r) => ({ id: Number(r.id), taskId: r.task_id, teamId: r.team_id, type: r.event_type, data: r.payload, createdAt: ts(r.created_at) ?? 0 }));
  }

  async setOutputExpiry(taskId: string, expiresAt: number): Promise<void> {
    await q(this.db)('update tasks set output_expires_at = ? where id = ? and output_expires_at is null', [new Date(expiresAt).toISOString(), taskId]);
  }
}
