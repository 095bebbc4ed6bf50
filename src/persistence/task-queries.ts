import type { Database } from './db.js';
import { q, qBound, ts, TickBatcher, type BatcherStats, type Settled } from './sql.js';
import { rowToEvent, type TaskEventRow } from './task-rows.js';
import type { PgBigint, PgTimestamp } from './rows.js';
import type { TaskRow } from '../domain/tasks/view.js';
import { AppError } from '../shared/errors.js';

const submitFailed = (cause?: unknown): AppError =>
  new AppError('unavailable', 'task_submit_failed', 'the task could not be committed (nothing was accepted); retry the request', { retryAfterS: 1, ...(cause === undefined ? {} : { cause }) });
import type { TaskEvent, TaskRecord } from '../actors/ports.js';
import { IdempotencyKeyTaken, IdempotencyStore } from './idempotency-store.js';
import type { NewTask } from '../domain/tasks/new-task.js';

/** The submit statement's row: the task's status event and the inserted task's seq and created_at. */
interface SubmittedEventRow extends TaskEventRow {
  task_seq: PgBigint;
  task_created_at: PgTimestamp;
}

export type { NewTask } from '../domain/tasks/new-task.js';

/** Reads and the one insert of the task API (writes after insert go through the task actor). SQL only: presentation is src/domain/tasks/view.ts. */
export class TaskQueries {

  /**
   * The submit path's group commit: every insert made in the same tick (and while an earlier batch
   * is still being written) goes into ONE statement that inserts all the tasks and their first
   * `pending` status events (one implicit transaction). Each caller's promise resolves only after
   * that statement committed; when it fails, every caller of that batch gets 503 `task_submit_failed`
   * and none of their rows exist.
   */
  private readonly submits: TickBatcher<NewTask & { at: string }, TaskEvent[] & { record?: TaskRecord }>;

  constructor(
    private readonly db: Database,
    opts: { maxBatch?: number; maxInFlight?: number } = {},
  ) {
    this.submits = new TickBatcher((items) => this.insertBatch(items), { maxBatch: opts.maxBatch ?? 500, maxInFlight: opts.maxInFlight ?? 2 });
    this.idempotency = new IdempotencyStore(db);
  }

  /** Idempotency keys of the run endpoint (read side; the write is part of the insert batch). */
  readonly idempotency: IdempotencyStore;

  /** Batches written, items, failed batches, largest batch (bench and tests read it). */
  get submitStats(): BatcherStats {
    return this.submits.stats;
  }

  /** The submit batcher itself: tests hold it to gather a known set of requests into one batch. */
  get submitBatcher(): Pick<TickBatcher<unknown, unknown>, 'hold' | 'whenQueued' | 'queued' | 'drain'> {
    return this.submits;
  }

  /**
   * Inserts the pending task and its first event (group commit); returns the event and the record.
   * With `idempotency`, the key row is inserted in the same statement (`on conflict do nothing`);
   * when (team, key) is already taken (earlier, by another item of this batch, or by a concurrent
   * batch that committed first) nothing is inserted for this item and it rejects with IdempotencyKeyTaken.
   */
  insert(t: NewTask): Promise<TaskEvent[] & { record?: TaskRecord }> {
    return this.submits.submit({ ...t, at: new Date().toISOString() });
  }

  private async insertBatch(items: Array<NewTask & { at: string }>): Promise<Array<Settled<TaskEvent[] & { record?: TaskRecord }>>> {
    const rowsIn = items.map((t, i) => ({
      ord: i,
      id: t.id,
      team_id: t.teamId,
      workflow_id: t.workflowId,
      workflow_slug: t.workflowSlug,
      workflow_version: t.workflowVersion,
      snapshot_id: t.snapshotId,
      dispatch_target: t.dispatchTarget,
      tool_type: t.toolType,
      parameters: t.parameters ?? {},
      resolved_workflow: t.resolvedWorkflow ?? null,
      input_files: t.inputFiles ?? [],
      max_retries: t.maxRetries,
      task_timeout_s: t.timeoutS,
      required_labels: t.requiredLabels ?? [],
      min_vram_gb: t.minVramGb,
      required_models: t.requiredModels ?? [],
      preferred_gpu: t.preferredGpu,
      created_by_user_id: t.createdByUserId,
      created_by_credential_id: t.createdByCredentialId,
      trace_parent: t.traceParent ?? null,
      priority: t.priority ?? 3,
      at: t.at,
      idem_key: t.idempotency?.key ?? null,
      idem_fp: t.idempotency?.fingerprint ?? null,
      idem_status: t.idempotency?.responseStatus ?? null,
      idem_body: t.idempotency?.responseBody ?? null,
    }));
    let rows: SubmittedEventRow[];
    try {
      // the batch's JSON as a bound parameter: not escaped into the statement's text
      rows = await qBound(this.db)<SubmittedEventRow>(
        `with v as (
           select * from jsonb_to_recordset(?::jsonb) as x(ord int, id uuid, team_id uuid, workflow_id uuid, workflow_slug text, workflow_version int,
             snapshot_id uuid, dispatch_target text, tool_type text, parameters jsonb, resolved_workflow jsonb, input_files jsonb, max_retries int,
             task_timeout_s int, required_labels jsonb, min_vram_gb float8, required_models jsonb, preferred_gpu text, created_by_user_id uuid,
             created_by_credential_id uuid, trace_parent text, priority int, at text, idem_key text, idem_fp text, idem_status int, idem_body jsonb)),
         k as (
           insert into idempotency_keys (team_id, idem_key, fingerprint, response_status, response_body, task_id)
           select team_id, idem_key, idem_fp, idem_status, idem_body, id from v where idem_key is not null order by ord
           on conflict (team_id, idem_key) do nothing
           returning task_id),
         t as (
           insert into tasks (id, team_id, workflow_id, workflow_slug, workflow_version, snapshot_id, task_status, dispatch_target, tool_type, parameters,
             resolved_workflow, input_files, max_retries, task_timeout_s, required_labels, min_vram_gb, required_models, preferred_gpu, created_by_user_id, created_by_credential_id, trace_parent, priority)
           select id, team_id, workflow_id, workflow_slug, workflow_version, snapshot_id, 'pending', dispatch_target, tool_type, parameters,
             resolved_workflow, input_files, max_retries, task_timeout_s, required_labels, min_vram_gb, required_models, preferred_gpu, created_by_user_id, created_by_credential_id, trace_parent, priority
           from v where v.idem_key is null or v.id in (select task_id from k) order by ord
           returning id, team_id, seq, created_at),
         e as (
           insert into task_events (task_id, team_id, event_type, payload)
           select t.id, t.team_id, 'status', jsonb_build_object('task_id', t.id, 'status', 'pending', 'timestamp', v.at) from t join v on v.id = t.id order by v.ord
           returning *)
         select e.*, t.seq as task_seq, t.created_at as task_created_at from e join t on t.id = e.task_id`,
        [JSON.stringify(rowsIn)],
      );
    } catch (err) {
      // an outage is said as such (database_unavailable, its Retry-After); any other failure of the batch is task_submit_failed
      if (err instanceof AppError && err.code === 'database_unavailable') throw err;
      throw submitFailed(err);
    }
    const byTask = new Map(rows.map((r) => [String(r.task_id), r]));
    return items.map((t) => {
      const r = byTask.get(t.id);
      if (!r) return { error: t.idempotency ? new IdempotencyKeyTaken(t.idempotency.key) : submitFailed() };
      const events: TaskEvent[] & { record?: TaskRecord } = [rowToEvent(r)];
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
        seq: Number(r.task_seq),
        startedAt: null,
        createdAt: ts(r.task_created_at) ?? Date.now(),
        parentTaskId: null,
        retryTaskId: null,
        traceParent: t.traceParent ?? null,
        priority: t.priority ?? 3,
        submitter: t.createdByCredentialId ?? t.createdByUserId ?? null,
        workflowKey: `${t.workflowId}@${t.workflowVersion}`,
      };
      return { value: events };
    });
  }

  async get(teamId: string, taskId: string): Promise<TaskRow | null> {
    const rows = await q(this.db)<TaskRow>('select * from tasks where team_id = ? and id = ?', [teamId, taskId]);
    return rows[0] ?? null;
  }

  async list(teamId: string, f: { status?: string; workflowId?: string }, limit: number, offset: number): Promise<{ rows: TaskRow[]; total: number }> {
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
    const rows = await qq<TaskRow>(`select * from tasks where ${where.join(' and ')} order by created_at desc, seq desc limit ? offset ?`, [...params, limit, offset]);
    const c = await qq<{ n: number }>(`select count(*)::int as n from tasks where ${where.join(' and ')}`, params);
    return { rows, total: Number(c[0]?.n ?? 0) };
  }

  /** Events of a task after an id (SSE replay), oldest first. */
  async eventsAfter(teamId: string, taskId: string, afterId: number, limit = 1000): Promise<TaskEvent[]> {
    const rows = await q(this.db)<TaskEventRow>('select * from task_events where team_id = ? and task_id = ? and id > ? order by id limit ?', [teamId, taskId, afterId, limit]);
    return rows.map(rowToEvent);
  }

  async setOutputExpiry(taskId: string, expiresAt: number): Promise<void> {
    await q(this.db)('update tasks set output_expires_at = ? where id = ? and output_expires_at is null', [new Date(expiresAt).toISOString(), taskId]);
  }
}
