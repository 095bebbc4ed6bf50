import { NON_TERMINAL } from '../domain/tasks/record.js';
import type { Database } from './db.js';
import { q, json, iso, ts, TickBatcher, memberFenceSql, type BatcherStats, type Settled } from './sql.js';
import type { PgTimestamp } from './rows.js';
import type { LedgerSeedRow } from '../actors/scheduler/ledger.js';
import { ASSIGNMENT_COLS, rowToAssignment, rowToEvent, rowToTask, TASK_COLS, type AssignmentCols, type AssignmentRow, type BatchTaskRow, type TaskEventRow, type TaskRecordRow } from './task-rows.js';
import { UUID_RE, uuidv7 } from '../shared/ids.js';
import { recordAttemptsCtes, usageReturning } from './usage-store.js';
import type { TaskAssignment, TaskEvent, TaskEventInput, TaskProgress, TaskRecord, TaskStorePort, TransitionRequest, TransitionResult } from '../actors/ports.js';

/** Builds the fenced UPDATE of a transition (SET list and WHERE with the from-states and the epoch). */
function fencedUpdate(req: TransitionRequest, extraSets: string[], extraParams: unknown[], fence: string): { sql: string; params: unknown[] } {
  const sets: string[] = ['task_status = ?', 'updated_at = now()'];
  const params: unknown[] = [req.to];
  const p = req.patch;
  const setTs = (col: string, v: number | null | undefined): void => {
    if (v === undefined) return;
    sets.push(`${col} = ?`);
    params.push(iso(v));
  };
  if (p.agentId !== undefined) {
    sets.push('agent_id = ?');
    params.push(p.agentId);
  }
  if (p.leaseEpoch !== undefined) {
    sets.push('lease_epoch = ?');
    params.push(p.leaseEpoch);
  }
  if (p.progress !== undefined) {
    sets.push('progress = ?::jsonb');
    params.push(json(p.progress));
  }
  if (p.output !== undefined) {
    sets.push('output = ?::jsonb');
    params.push(json(p.output));
  }
  if (p.error !== undefined) {
    sets.push('task_error = ?');
    params.push(p.error);
  }
  setTs('queued_at', p.queuedAt);
  setTs('started_at', p.startedAt);
  setTs('finished_at', p.finishedAt);
  sets.push(...extraSets);
  params.push(...extraParams);
  let where = `id = ? and task_status in (${req.from.map(() => '?').join(',')})`;
  params.push(req.taskId, ...req.from);
  if (req.epoch !== undefined) {
    where += ' and lease_epoch = ?';
    params.push(req.epoch);
  }
  return { sql: `update tasks set ${sets.join(', ')} where ${where}${fence}`, params };
}

/** A lifecycle write waiting for its tick's batch. */
type LifecycleOp =
  | { kind: 'transition'; req: TransitionRequest }
  | { kind: 'progress'; taskId: string; epoch: number; p: TaskProgress; event: TaskEventInput | null };
type ProgressResult = { ok: boolean; event: TaskEvent | null };
type LifecycleResult = TransitionResult | ProgressResult;

const opTaskId = (op: LifecycleOp): string => (op.kind === 'transition' ? op.req.taskId : op.taskId);
const isAssigning = (req: TransitionRequest): boolean => req.patch.leaseEpoch !== undefined && req.patch.agentId !== undefined && req.patch.agentId !== null;

/** One row of the batch's VALUES (a jsonb recordset): the fence (from-states, epoch), the target and which columns to set. */
function batchRow(i: number, op: LifecycleOp): Record<string, unknown> {
  if (op.kind === 'progress') {
    return { i, id: op.taskId, from_s: ['running'], epoch: op.epoch, to_s: null, s_progress: true, progress: op.p, events: op.event ? [{ type: op.event.type, data: op.event.data }] : [] };
  }
  const { req } = op;
  const p = req.patch;
  const row: Record<string, unknown> = { i, id: req.taskId, from_s: [...req.from], epoch: req.epoch ?? null, to_s: req.to, with_assignment: isAssigning(req), events: req.events.map((e) => ({ type: e.type, data: e.data })) };
  if (p.agentId !== undefined) Object.assign(row, { s_agent: true, agent_id: p.agentId });
  if (p.leaseEpoch !== undefined) Object.assign(row, { s_lease: true, lease_epoch: p.leaseEpoch });
  if (p.progress !== undefined) Object.assign(row, { s_progress: true, progress: p.progress });
  if (p.output !== undefined) Object.assign(row, { s_output: true, output: p.output });
  if (p.error !== undefined) Object.assign(row, { s_error: true, task_error: p.error });
  if (p.queuedAt !== undefined) Object.assign(row, { s_queued: true, queued_at: iso(p.queuedAt) });
  if (p.startedAt !== undefined) Object.assign(row, { s_started: true, started_at: iso(p.startedAt) });
  if (p.finishedAt !== undefined) Object.assign(row, { s_finished: true, finished_at: iso(p.finishedAt) });
  return row;
}

const setIf = (col: string, flag: string): string => `${col} = case when coalesce(r.${flag}, false) then r.${col} else t.${col} end`;

/**
 * The lifecycle batch: ONE statement for every transition and progress write of a tick. The UPDATE
 * joins the batch rows and keeps each row's own fence (task_status = any(its from-states) and, when
 * given, lease_epoch = its epoch), so a stale writer's row matches nothing and gets nothing written;
 * the INSERT appends the events of exactly the rows that were updated, in request order.
 */
const batchSql = (fence: string): string => `with r as (
    select * from jsonb_to_recordset(?::jsonb) as x(i int, id uuid, from_s text[], epoch int, to_s text, with_assignment boolean, events jsonb,
      s_agent boolean, agent_id uuid, s_lease boolean, lease_epoch int, s_progress boolean, progress jsonb, s_output boolean, output jsonb,
      s_error boolean, task_error text, s_queued boolean, queued_at timestamptz, s_started boolean, started_at timestamptz, s_finished boolean, finished_at timestamptz)),
  u as (
    update tasks t set task_status = coalesce(r.to_s, t.task_status), updated_at = now(),
      ${setIf('agent_id', 's_agent')}, ${setIf('lease_epoch', 's_lease')}, ${setIf('progress', 's_progress')}, ${setIf('output', 's_output')},
      ${setIf('task_error', 's_error')}, ${setIf('queued_at', 's_queued')}, ${setIf('started_at', 's_started')}, ${setIf('finished_at', 's_finished')}
    from r
    where t.id = r.id and t.task_status = any(r.from_s) and (r.epoch is null or t.lease_epoch = r.epoch)${fence}
    returning r.i, r.with_assignment, ${TASK_COLS.split(',').map((c) => `t.${c.trim()}`).join(', ')},
      case when r.with_assignment then t.resolved_workflow end as resolved_workflow,
      case when r.with_assignment then t.parameters end as parameters,
      case when r.with_assignment then t.input_files end as input_files,
      case when r.with_assignment then t.checkpoint_key end as checkpoint_key,
      case when r.with_assignment then t.checkpoint_step end as checkpoint_step, ${usageReturning('t.')}),
  e as (
    insert into task_events (task_id, team_id, event_type, payload)
    select u.id, u.team_id, x.ev->>'type', x.ev->'data'
    from u join r on r.i = u.i cross join lateral jsonb_array_elements(r.events) with ordinality as x(ev, n)
    order by u.i, x.n
    returning *),
  ${recordAttemptsCtes('u')}
  select (select coalesce(json_agg(u), '[]'::json) from u) as tasks, (select coalesce(json_agg(e order by e.id), '[]'::json) from e) as events`;

/**
 * PostgreSQL is the source of truth: every transition is one conditional UPDATE fenced by the
 * allowed from-states and the lease epoch, and its events are appended in the same transaction.
 *
 * A transition is sent as ONE statement (data-modifying CTEs: the fenced UPDATE, the INSERT of its
 * events that reads the UPDATE's RETURNING, and for a failure with retries left the INSERT of the
 * retry task). A single statement runs in its own implicit transaction, so the row change and its
 * event rows commit together or not at all — the same guarantee as BEGIN/UPDATE/INSERT/COMMIT in one
 * network round trip instead of four, and the pooled connection is held for one statement only.
 * When the UPDATE matches no row (a stale writer), nothing is inserted.
 *
 * transition() and progress() calls of the same tick (from many task actors) share that statement:
 * batchSql updates all their rows at once, each with its own fence, and inserts the events of the
 * rows that moved. Retry-creating transitions keep their own statement (above).
 *
 * Usage: every statement that can end an attempt also records it (task_attempts, CTE `g`:
 * recordAttemptsCtes), so an attempt's usage is written exactly when its end commits, once.
 */
export class PgTaskStore implements TaskStorePort {
  /** Lifecycle writes of the same tick share one statement (per task: one at a time, in order). */
  private readonly lifecycle: TickBatcher<LifecycleOp, LifecycleResult>;
  private readonly reads: TickBatcher<string, TaskRecord | null>;

  private readonly memberId: () => string | null;
  private fenced: { member: string | null; fence: string; batch: string } = { member: null, fence: '', batch: batchSql('') };

  constructor(
    private readonly db: Database,
    opts: {
      maxBatch?: number;
      maxInFlight?: number;
      /** Cluster mode: this node's current member id; its writes apply only while cluster_members has it unfenced. */
      memberId?: () => string | null;
    } = {},
  ) {
    this.memberId = opts.memberId ?? (() => null);
    this.lifecycle = new TickBatcher((ops) => this.runLifecycle(ops), { maxBatch: opts.maxBatch ?? 500, maxInFlight: opts.maxInFlight ?? 2, key: opTaskId });
    this.reads = new TickBatcher((ids) => this.loadBatch(ids), { maxBatch: 500, maxInFlight: 2 });
  }

  /** The member fence of this node's writes (rebuilt when the member id changes: a node re-joins as a new member). */
  private sqlFence(): { fence: string; batch: string } {
    const m = this.memberId();
    if (m !== this.fenced.member) {
      const fence = memberFenceSql(m);
      this.fenced = { member: m, fence, batch: batchSql(fence) };
    }
    return this.fenced;
  }

  /** Lifecycle batches written, ops, failed batches, largest batch (bench and tests read it). */
  get lifecycleStats(): BatcherStats {
    return this.lifecycle.stats;
  }

  /** The lifecycle batcher: tests hold it to gather a known set of writes into one batch. */
  get lifecycleBatcher(): Pick<TickBatcher<unknown, unknown>, 'hold' | 'whenQueued' | 'queued' | 'drain'> {
    return this.lifecycle;
  }

  /** Reads of one tick share one `where id = any(...)` statement (agents' presign calls read the task per output). */
  async load(taskId: string): Promise<TaskRecord | null> {
    if (!UUID_RE.test(taskId)) return null;
    return this.reads.submit(taskId);
  }

  private async loadBatch(ids: string[]): Promise<Array<Settled<TaskRecord | null>>> {
    const byId = new Map((await this.loadMany([...new Set(ids)])).map((t) => [t.id, t]));
    return ids.map((id) => ({ value: byId.get(id) ?? null }));
  }

  /** Batched with the other lifecycle writes of this tick; the result is this request's own. */
  transition(req: TransitionRequest): Promise<TransitionResult> {
    return this.lifecycle.submit({ kind: 'transition', req }) as Promise<TransitionResult>;
  }

  /** Progress while running with this epoch (batched like transitions). */
  progress(taskId: string, epoch: number, p: TaskProgress, event: TaskEventInput | null): Promise<ProgressResult> {
    return this.lifecycle.submit({ kind: 'progress', taskId, epoch, p, event }) as Promise<ProgressResult>;
  }

  /**
   * Runs one batch: transitions that create a retry task go through their own statement (in
   * parallel); everything else goes through batchSql. If that statement fails (a deadlock, one bad
   * row), each of its ops is retried alone so one op's failure is only its own.
   */
  private async runLifecycle(ops: LifecycleOp[]): Promise<Array<Settled<LifecycleResult>>> {
    const out: Array<Settled<LifecycleResult> | undefined> = new Array(ops.length);
    const single = async (i: number, op: LifecycleOp): Promise<void> => {
      try {
        out[i] = { value: op.kind === 'transition' ? await this.transitionOne(op.req) : await this.progressOne(op.taskId, op.epoch, op.p, op.event) };
      } catch (error) {
        out[i] = { error };
      }
    };
    const batched: number[] = [];
    const alone: Array<Promise<void>> = [];
    ops.forEach((op, i) => {
      if (op.kind === 'transition' && op.req.createRetry) alone.push(single(i, op));
      else batched.push(i);
    });
    const runBatched = async (): Promise<void> => {
      if (batched.length === 0) return;
      let results: Array<Settled<LifecycleResult>>;
      try {
        results = await this.batchStatement(batched.map((i) => ops[i] as LifecycleOp));
      } catch {
        // the statement failed as a whole (nothing of it was written): each op alone
        await Promise.all(batched.map((i) => single(i, ops[i] as LifecycleOp)));
        return;
      }
      batched.forEach((i, k) => (out[i] = results[k]));
    };
    await Promise.all([runBatched(), ...alone]);
    return out.map((r) => r ?? { error: new Error('lifecycle op produced no result') });
  }

  /** batchSql for ops; throws only when that statement failed (then nothing of it was written). */
  private async batchStatement(ops: LifecycleOp[]): Promise<Array<Settled<LifecycleResult>>> {
    const [row] = await q(this.db)<{ tasks: BatchTaskRow[]; events: TaskEventRow[] }>(this.sqlFence().batch, [JSON.stringify(ops.map((op, i) => batchRow(i, op)))]);
    const updated = new Map<number, BatchTaskRow>((row?.tasks ?? []).map((t) => [Number(t.i), t]));
    const eventsOf = new Map<string, TaskEvent[]>();
    for (const e of row?.events ?? []) {
      const ev = rowToEvent(e);
      const list = eventsOf.get(ev.taskId);
      if (list) list.push(ev);
      else eventsOf.set(ev.taskId, [ev]);
    }
    // stale writers: nothing was written; re-read the truth (as of now) in one query. The batch has
    // committed by now, so a failure of this read is only the stale writers' (never a reason to re-run)
    const staleIds = ops.filter((op, i) => !updated.has(i) && op.kind === 'transition').map(opTaskId);
    const current = new Map<string, TaskRecord>();
    let readError: { error: unknown } | null = null;
    if (staleIds.length > 0) {
      try {
        const rows = await q(this.db)<TaskRecordRow>(`select ${TASK_COLS} from tasks where id in (select jsonb_array_elements_text(?::jsonb)::uuid)`, [JSON.stringify(staleIds)]);
        for (const r of rows) current.set(String(r.id), rowToTask(r));
      } catch (error) {
        readError = { error };
      }
    }
    return ops.map((op, i): Settled<LifecycleResult> => {
      const u = updated.get(i);
      const events = eventsOf.get(opTaskId(op)) ?? [];
      if (op.kind === 'progress') return { value: u ? { ok: true, event: events[0] ?? null } : { ok: false, event: null } };
      if (!u) return readError ?? { value: { ok: false, current: current.get(op.req.taskId) ?? null } };
      return { value: { ok: true, task: rowToTask(u), events, retryTaskId: null, ...(u.with_assignment ? { assignment: rowToAssignment(u) } : {}) } };
    });
  }

  /** One transition as its own statement (retry-creating transitions, and the fallback of a failed batch). */
  private async transitionOne(req: TransitionRequest): Promise<TransitionResult> {
    // the failed event of a task that gets a retry names the retry task (filled in by SQL, since
    // only the UPDATE knows whether attempts are left)
    const retryId = req.createRetry ? uuidv7() : null;
    const withAssignment = isAssigning(req);
    const extraSets = retryId ? ['retry_task_id = case when attempt <= max_retries then ?::uuid else retry_task_id end'] : [];
    const upd = fencedUpdate(req, extraSets, retryId ? [retryId] : [], this.sqlFence().fence);
    // the usage columns: an attempt that ends here is recorded in this statement (g, gm: recordAttemptsCtes)
    const returning = `${withAssignment ? `${TASK_COLS}, ${ASSIGNMENT_COLS}` : TASK_COLS}, ${usageReturning()}`;
    const events = req.events.map((e) => ({ type: e.type, data: e.data }));
    const nowIso = new Date().toISOString();
    const sql = retryId
      ? `with u as (${upd.sql} returning ${returning}),
         r as (
           insert into tasks (id, team_id, workflow_id, workflow_slug, workflow_version, snapshot_id, task_status, dispatch_target, tool_type,
             parameters, resolved_workflow, input_files, attempt, max_retries, parent_task_id, lease_epoch, task_timeout_s, required_labels,
             min_vram_gb, required_models, preferred_gpu, created_by_user_id, created_by_credential_id, not_before, trace_parent, checkpoint_key, checkpoint_step, priority)
           select ?::uuid, p.team_id, p.workflow_id, p.workflow_slug, p.workflow_version, p.snapshot_id, 'pending', p.dispatch_target, p.tool_type,
             p.parameters, p.resolved_workflow, p.input_files, p.attempt + 1, p.max_retries, p.id, 0, p.task_timeout_s, p.required_labels,
             p.min_vram_gb, p.required_models, p.preferred_gpu, p.created_by_user_id, p.created_by_credential_id, ?::timestamptz, p.trace_parent, p.checkpoint_key, p.checkpoint_step, p.priority
           from u join tasks p on p.id = u.id
           where u.retry_task_id = ?::uuid
           returning id, team_id),
         e as (
           insert into task_events (task_id, team_id, event_type, payload)
           select s.task_id, s.team_id, s.event_type, s.payload from (
             select u.id as task_id, u.team_id, x.ev->>'type' as event_type,
               case when x.ev->>'type' = 'failed' and u.retry_task_id = ?::uuid then (x.ev->'data') || jsonb_build_object('retry_task_id', ?::text) else x.ev->'data' end as payload,
               0 as grp, x.n
             from u, jsonb_array_elements(?::jsonb) with ordinality as x(ev, n)
             union all
             select r.id, r.team_id, 'status', jsonb_build_object('task_id', r.id, 'status', 'pending', 'timestamp', ?::text), 1, 1 from r
           ) s order by s.grp, s.n
           returning *),
         ${recordAttemptsCtes('u')}
         select (select row_to_json(u) from u) as task, (select coalesce(json_agg(e order by e.id), '[]'::json) from e) as events`
      : `with u as (${upd.sql} returning ${returning}),
         e as (
           insert into task_events (task_id, team_id, event_type, payload)
           select u.id, u.team_id, x.ev->>'type', x.ev->'data'
           from u, jsonb_array_elements(?::jsonb) with ordinality as x(ev, n) order by x.n
           returning *),
         ${recordAttemptsCtes('u')}
         select (select row_to_json(u) from u) as task, (select coalesce(json_agg(e order by e.id), '[]'::json) from e) as events`;
    const notBefore = req.retryNotBefore !== undefined ? new Date(req.retryNotBefore).toISOString() : null;
    const params = retryId ? [...upd.params, retryId, notBefore, retryId, retryId, retryId, json(events), nowIso] : [...upd.params, json(events)];
    const [row] = await q(this.db)<{ task: (TaskRecordRow & AssignmentCols) | null; events: TaskEventRow[] }>(sql, params);
    if (!row?.task) {
      // a stale writer: nothing was written; re-read the truth (as of now, like a read after the UPDATE)
      return { ok: false, current: await this.load(req.taskId) };
    }
    const task = rowToTask(row.task);
    return {
      ok: true,
      task,
      events: row.events.map(rowToEvent),
      retryTaskId: task.retryTaskId !== null && task.retryTaskId === retryId ? retryId : null,
      ...(withAssignment ? { assignment: rowToAssignment(row.task) } : {}),
    };
  }

  private async progressOne(taskId: string, epoch: number, p: TaskProgress, event: TaskEventInput | null): Promise<ProgressResult> {
    const upd = `update tasks set progress = ?::jsonb, updated_at = now() where id = ? and task_status = 'running' and lease_epoch = ?${this.sqlFence().fence}`;
    if (!event) {
      const rows = await q(this.db)<{ id: string }>(`${upd} returning id`, [json(p), taskId, epoch]);
      return { ok: rows.length > 0, event: null };
    }
    // one statement: the fenced UPDATE and its event (nothing is appended when the UPDATE is stale)
    const [row] = await q(this.db)<{ n: number; event: TaskEventRow | null }>(
      `with u as (${upd} returning id, team_id),
       e as (insert into task_events (task_id, team_id, event_type, payload) select u.id, u.team_id, ?, ?::jsonb from u returning *)
       select (select count(*) from u)::int as n, (select row_to_json(e) from e) as event`,
      [json(p), taskId, epoch, event.type, json(event.data)],
    );
    if (!row || Number(row.n) === 0) return { ok: false, event: null };
    return { ok: true, event: row.event ? rowToEvent(row.event) : null };
  }

  async markWaiting(teamId: string, taskIds: readonly string[]): Promise<{ moved: string[]; events: TaskEvent[] }> {
    if (taskIds.length === 0) return { moved: [], events: [] };
    // one statement: the fenced batch UPDATE (pending only) and one status event per moved task, FIFO
    const [row] = await q(this.db)<{ moved: string[]; events: TaskEventRow[] }>(
      `with u as (
         update tasks set task_status = 'waiting', updated_at = now() where team_id = ? and task_status = 'pending' and id in (${taskIds.map(() => '?').join(',')})${this.sqlFence().fence}
         returning id, seq),
       e as (
         insert into task_events (task_id, team_id, event_type, payload)
         select u.id, ?, 'status', jsonb_build_object('task_id', u.id, 'status', 'waiting', 'timestamp', ?::text) from u order by u.seq
         returning *)
       select (select coalesce(json_agg(u.id order by u.seq), '[]'::json) from u) as moved, (select coalesce(json_agg(e order by e.id), '[]'::json) from e) as events`,
      [teamId, ...taskIds, teamId, new Date().toISOString()],
    );
    return { moved: row?.moved ?? [], events: (row?.events ?? []).map(rowToEvent) };
  }

  async schedulable(teamId: string): Promise<TaskRecord[]> {
    const rows = await q(this.db)<TaskRecordRow>(`select ${TASK_COLS} from tasks where team_id = ? and task_status in ('pending','waiting') order by seq`, [teamId]);
    return rows.map(rowToTask);
  }

  async active(teamId: string): Promise<TaskRecord[]> {
    const rows = await q(this.db)<TaskRecordRow>(`select ${TASK_COLS} from tasks where team_id = ? and task_status in ('provisioning','queued','running') order by seq`, [teamId]);
    return rows.map(rowToTask);
  }

  /** Teams with pending or waiting tasks (the open-tasks partial index serves it). */
  async teamsWithSchedulable(): Promise<string[]> {
    const rows = await q(this.db)<{ team_id: string }>(`select distinct team_id from tasks where task_status in ('pending','waiting')`);
    return rows.map((r) => String(r.team_id));
  }

  async nonTerminal(): Promise<TaskRecord[]> {
    const rows = await q(this.db)<TaskRecordRow>(`select ${TASK_COLS} from tasks where task_status in (${NON_TERMINAL.map(() => '?').join(',')}) order by seq`, [...NON_TERMINAL]);
    return rows.map(rowToTask);
  }

  /** The checkpoint remembered for a task (CommitCheckpoint), or null. */
  async checkpoint(taskId: string): Promise<{ key: string; step: number } | null> {
    const rows = await q(this.db)<{ checkpoint_key: string | null; checkpoint_step: number | null }>(`select checkpoint_key, checkpoint_step from tasks where id = ?`, [taskId]);
    const r = rows[0];
    return r?.checkpoint_key ? { key: r.checkpoint_key, step: Number(r.checkpoint_step ?? 0) } : null;
  }

  /**
   * Remembers a task's latest checkpoint, fenced like every agent write (the attempt's epoch, a
   * running task). Returns the key it replaced (null: none), or undefined when the fence failed.
   */
  async setCheckpoint(taskId: string, epoch: number, key: string, step: number): Promise<{ previous: string | null } | undefined> {
    const rows = await q(this.db)<{ previous: string | null }>(
      `update tasks t set checkpoint_key = ?, checkpoint_step = ?, updated_at = now()
       from (select id, checkpoint_key as previous from tasks where id = ? for update) o
       where t.id = o.id and t.lease_epoch = ? and t.task_status in ('queued','running') returning o.previous`,
      [key, step, taskId, epoch],
    );
    return rows[0] ? { previous: rows[0].previous ?? null } : undefined;
  }

  async assignment(taskId: string): Promise<TaskAssignment | null> {
    const rows = await q(this.db)<AssignmentRow>(`select id, attempt, tool_type, ${ASSIGNMENT_COLS}, task_timeout_s, required_models, trace_parent from tasks where id = ?`, [taskId]);
    return rows[0] ? rowToAssignment(rows[0]) : null;
  }

  /** The fair-share ledger's seed: the team's tasks that held an agent since `sinceMs` (see TaskStorePort.recentUsage). */
  async recentUsage(teamId: string, sinceMs: number): Promise<LedgerSeedRow[]> {
    const rows = await q(this.db)<{ id: string; submitter: string | null; start_at: PgTimestamp; end_at: PgTimestamp | null; gpus: number | null; agent_id: string | null; workflow_id: string; workflow_version: number }>(
      `select t.id, coalesce(t.created_by_credential_id, t.created_by_user_id)::text as submitter, coalesce(t.queued_at, t.started_at) as start_at,
         case when t.task_status in ('provisioning','queued','running') then null else coalesce(t.finished_at, t.updated_at) end as end_at,
         a.gpu_count as gpus, t.agent_id, t.workflow_id, t.workflow_version
       from tasks t left join agents a on a.id = t.agent_id
       where t.team_id = ? and (t.queued_at is not null or t.started_at is not null)
         and (t.task_status in ('provisioning','queued','running') or t.finished_at >= ?::timestamptz)
       order by t.seq desc limit 100000`,
      [teamId, new Date(sinceMs).toISOString()],
    );
    return rows.map((r) => ({
      taskId: String(r.id),
      submitter: r.submitter ?? '',
      start: ts(r.start_at) ?? sinceMs,
      end: ts(r.end_at),
      gpus: Number(r.gpus ?? 1),
      agentId: r.agent_id ?? null,
      workflowKey: `${r.workflow_id}@${Number(r.workflow_version)}`,
    }));
  }

  /** Many records in one statement (the scheduler's bulk refresh); ids that are not UUIDs or not found are absent. */
  async loadMany(taskIds: readonly string[]): Promise<TaskRecord[]> {
    const ids = taskIds.filter((id) => UUID_RE.test(id));
    if (ids.length === 0) return [];
    const rows = await q(this.db)<TaskRecordRow>(`select ${TASK_COLS} from tasks where id = any(?::uuid[])`, [`{${ids.join(',')}}`]);
    return rows.map(rowToTask);
  }
}
