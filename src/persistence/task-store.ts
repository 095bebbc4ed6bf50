import type { Database } from './db.js';
import { inTx, q, json, ts, type Q } from './sql.js';
import { uuidv7 } from '../shared/ids.js';
import type {
  TaskAssignment,
  TaskEvent,
  TaskEventInput,
  TaskProgress,
  TaskRecord,
  TaskStatus,
  TaskStorePort,
  TransitionRequest,
  TransitionResult,
} from '../actors/ports.js';

const NON_TERMINAL = ['pending', 'waiting', 'provisioning', 'queued', 'running'];

export function rowToTask(r: Record<string, any>): TaskRecord {
  return {
    id: r.id,
    teamId: r.team_id,
    status: r.task_status as TaskStatus,
    attempt: Number(r.attempt),
    maxRetries: Number(r.max_retries),
    leaseEpoch: Number(r.lease_epoch),
    agentId: r.agent_id ?? null,
    dispatchTarget: r.dispatch_target,
    toolType: r.tool_type,
    timeoutS: Number(r.task_timeout_s),
    requiredLabels: r.required_labels ?? [],
    minVramGb: Number(r.min_vram_gb ?? 0),
    requiredModels: r.required_models ?? [],
    preferredGpu: r.preferred_gpu ?? null,
    seq: Number(r.seq),
    startedAt: ts(r.started_at),
    createdAt: ts(r.created_at) ?? 0,
    parentTaskId: r.parent_task_id ?? null,
    retryTaskId: r.retry_task_id ?? null,
  };
}

const rowToEvent = (r: Record<string, any>): TaskEvent => ({
  id: Number(r.id),
  taskId: r.task_id,
  teamId: r.team_id,
  type: r.event_type,
  data: r.payload,
  createdAt: ts(r.created_at) ?? 0,
});

export async function appendEvents(qq: Q, taskId: string, teamId: string, events: readonly TaskEventInput[]): Promise<TaskEvent[]> {
  const out: TaskEvent[] = [];
  for (const e of events) {
    const rows = await qq(`insert into task_events (task_id, team_id, event_type, payload) values (?, ?, ?, ?::jsonb) returning *`, [taskId, teamId, e.type, json(e.data)]);
    if (rows[0]) out.push(rowToEvent(rows[0]));
  }
  return out;
}

/**
 * PostgreSQL is the source of truth: every transition is one conditional UPDATE fenced by the
 * allowed from-states and the lease epoch, and its events are appended in the same transaction.
 */
export class PgTaskStore implements TaskStorePort {
  constructor(private readonly db: Database) {}

  async load(taskId: string): Promise<TaskRecord | null> {
    const rows = await q(this.db)('select * from tasks where id = ?', [taskId]);
    return rows[0] ? rowToTask(rows[0]) : null;
  }

  async transition(req: TransitionRequest): Promise<TransitionResult> {
    return inTx(this.db, async (qq) => {
      const sets: string[] = ['task_status = ?', 'updated_at = now()'];
      const params: unknown[] = [req.to];
      const p = req.patch;
      const setTs = (col: string, v: number | null | undefined): void => {
        if (v === undefined) return;
        sets.push(`${col} = ?`);
        params.push(v === null ? null : new Date(v).toISOString());
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
      let where = `id = ? and task_status in (${req.from.map(() => '?').join(',')})`;
      params.push(req.taskId, ...req.from);
      if (req.epoch !== undefined) {
        where += ' and lease_epoch = ?';
        params.push(req.epoch);
      }
      const rows = await qq(`update tasks set ${sets.join(', ')} where ${where} returning *`, params);
      const row = rows[0];
      if (!row) {
        const cur = await qq('select * from tasks where id = ?', [req.taskId]);
        return { ok: false, current: cur[0] ? rowToTask(cur[0]) : null };
      }
      let task = rowToTask(row);
      let retryTaskId: string | null = null;
      const events = [...req.events];
      if (req.createRetry && task.attempt <= task.maxRetries) {
        retryTaskId = uuidv7();
        await qq(
          `insert into tasks (id, team_id, workflow_id, workflow_slug, workflow_version, snapshot_id, task_status, dispatch_target, tool_type,
             parameters, resolved_workflow, input_files, attempt, max_retries, parent_task_id, lease_epoch, task_timeout_s, required_labels,
             min_vram_gb, required_models, preferred_gpu, created_by_user_id, created_by_credential_id)
           select ?, team_id, workflow_id, workflow_slug, workflow_version, snapshot_id, 'pending', dispatch_target, tool_type,
             parameters, resolved_workflow, input_files, attempt + 1, max_retries, id, 0, task_timeout_s, required_labels,
             min_vram_gb, required_models, preferred_gpu, created_by_user_id, created_by_credential_id
           from tasks where id = ?`,
          [retryTaskId, task.id],
        );
        const upd = await qq('update tasks set retry_task_id = ? where id = ? returning *', [retryTaskId, task.id]);
        if (upd[0]) task = rowToTask(upd[0]);
        for (const e of events) if (e.type === 'failed') e.data = { ...e.data, retry_task_id: retryTaskId };
      }
      const written = await appendEvents(qq, task.id, task.teamId, events);
      if (retryTaskId) {
        written.push(
          ...(await appendEvents(qq, retryTaskId, task.teamId, [{ type: 'status', data: { task_id: retryTaskId, status: 'pending', timestamp: new Date().toISOString() } }])),
        );
      }
      return { ok: true, task, events: written, retryTaskId };
    });
  }

  async progress(taskId: string, epoch: number, p: TaskProgress, event: TaskEventInput | null): Promise<{ ok: boolean; event: TaskEvent | null }> {
    return inTx(this.db, async (qq) => {
      const rows = await qq(`update tasks set progress = ?::jsonb, updated_at = now() where id = ? and task_status = 'running' and lease_epoch = ? returning team_id`, [
        json(p),
        taskId,
        epoch,
      ]);
      const row = rows[0];
      if (!row) return { ok: false, event: null };
      if (!event) return { ok: true, event: null };
      const [ev] = await appendEvents(qq, taskId, row.team_id, [event]);
      return { ok: true, event: ev ?? null };
    });
  }

  async markWaiting(teamId: string, taskIds: readonly string[]): Promise<{ moved: string[]; events: TaskEvent[] }> {
    if (taskIds.length === 0) return { moved: [], events: [] };
    return inTx(this.db, async (qq) => {
      const rows = await qq<{ id: string }>(
        `update tasks set task_status = 'waiting', updated_at = now() where team_id = ? and task_status = 'pending' and id in (${taskIds.map(() => '?').join(',')}) returning id`,
        [teamId, ...taskIds],
      );
      const moved = rows.map((r) => r.id);
      if (moved.length === 0) return { moved, events: [] };
      const ts = new Date().toISOString();
      const evRows = await qq(
        `insert into task_events (task_id, team_id, event_type, payload)
         select x.id, ?, 'status', jsonb_build_object('task_id', x.id, 'status', 'waiting', 'timestamp', ?::text)
         from unnest(?::uuid[]) with ordinality as x(id, n) order by x.n returning *`,
        [teamId, ts, `{${moved.join(',')}}`],
      );
      return { moved, events: evRows.map(rowToEvent) };
    });
  }

  async schedulable(teamId: string): Promise<TaskRecord[]> {
    const rows = await q(this.db)(`select * from tasks where team_id = ? and task_status in ('pending','waiting') order by seq`, [teamId]);
    return rows.map(rowToTask);
  }

  async active(teamId: string): Promise<TaskRecord[]> {
    const rows = await q(this.db)(`select * from tasks where team_id = ? and task_status in ('provisioning','queued','running') order by seq`, [teamId]);
    return rows.map(rowToTask);
  }

  async nonTerminal(): Promise<TaskRecord[]> {
    const rows = await q(this.db)(`select * from tasks where task_status in (${NON_TERMINAL.map(() => '?').join(',')}) order by seq`, NON_TERMINAL);
    return rows.map(rowToTask);
  }

  async assignment(taskId: string): Promise<TaskAssignment | null> {
    const rows = await q(this.db)('select id, attempt, tool_type, resolved_workflow, parameters, input_files, task_timeout_s from tasks where id = ?', [taskId]);
    const r = rows[0];
    if (!r) return null;
    return {
      taskId: r.id,
      attempt: Number(r.attempt),
      toolType: r.tool_type,
      workflow: r.resolved_workflow,
      parameters: r.parameters ?? {},
      inputFiles: r.input_files ?? [],
      timeoutS: Number(r.task_timeout_s),
    };
  }
}
