/**
 * Usage accounting in PostgreSQL (docs/api.md "Usage and GPU budgets"): the attempt rows the task
 * store writes when an attempt ends (recordAttemptsCtes, part of that very statement), the
 * aggregations of GET /usage and the monthly GPU-hour budgets.
 */
import type { Database } from './db.js';
import { q as pooled, TickBatcher, type Q, type Settled } from './sql.js';
import { audited } from './audit.js';
import type { AuditNote } from '../shared/audit.js';
import type { PgTimestamp } from './rows.js';
import { TASK_COLS } from './task-rows.js';
import { uuidv7 } from '../shared/ids.js';
import { BudgetPresence } from './budget-presence.js';
import { USAGE_GROUP_FIELDS, type UsageAggregate, type UsageBudget, type UsageGroupBy, type UsageSums } from '../domain/usage.js';

const NIL_UUID = '00000000-0000-0000-0000-000000000000';

/** The GPU type label of gantry_gpu_seconds_total: the agent's GPU model, '' for none, the provider for a cloud attempt. */
const METRIC_GPU_TYPE = `coalesce(gpu_type, case when dispatch_target <> 'agent' then dispatch_target else '' end)`;

/** What the attempt row needs of the task. */
const USAGE_COLS = ['workflow_id', 'workflow_slug', 'workflow_version', 'created_by_user_id', 'created_by_credential_id', 'queued_at', 'finished_at'];
const TASK_COL_SET = new Set(TASK_COLS.split(',').map((c) => c.trim()));
/**
 * What a terminal transition's UPDATE must return besides TASK_COLS for recordAttemptsCtes (qualify
 * with the table alias when the UPDATE has a FROM). Columns TASK_COLS already returns are not
 * returned twice: a duplicate name in the CTE is ambiguous (42702) where the statement reads it.
 */
export const usageReturning = (alias = ''): string =>
  USAGE_COLS.filter((c) => !TASK_COL_SET.has(c))
    .map((c) => `${alias}${c}`)
    .join(', ');

/**
 * Two data-modifying CTEs (`g`, `gm`; put them in the statement's WITH list): one task_attempts row per row of `src` (the transition's UPDATE ...
 * RETURNING TASK_COLS and usageReturning()) that reached a terminal state. Same statement, so the
 * same transaction as the state change: the attempt is recorded exactly when its end is committed.
 * (task_id, attempt) is the key: a repeated write (a retried statement, a takeover after a node
 * died) inserts nothing.
 *
 * The user is the one who ran it, or for a credential (sk-, dk-) the user who created that credential.
 *
 * GPUs held: the agent's advertised gpu_count (at least 1 when it reports a GPU model; 0 for an
 * agent without GPU: its GPU-seconds are 0, its run time still counts). A cloud-dispatched attempt
 * (no agent; the provider does not report GPUs) counts run time × 1, gpu_source 'estimate'.
 *
 * `gm` adds the rows `g` inserted (only those: a repeated write adds nothing) to usage_monthly,
 * one upsert per (team, month, credential, workflow, GPU type) of the statement.
 */
export const recordAttemptsCtes = (src: string): string => `g as (
    insert into task_attempts (task_id, attempt, team_id, workflow_id, workflow_slug, workflow_version, credential_id, user_id, agent_id,
      dispatch_target, tool_type, gpu_type, gpu_count, outcome, gpu_source, created_at, queued_at, started_at, finished_at,
      queue_wait_s, provisioning_s, run_s, gpu_seconds)
    select s.id, s.attempt, s.team_id, s.workflow_id, s.workflow_slug, s.workflow_version, s.created_by_credential_id, s.run_user_id, s.agent_id,
      s.dispatch_target, s.tool_type, s.gpu_type, s.gpus, s.task_status, s.gpu_source, s.created_at, s.queued_at, s.started_at, s.fin,
      s.queue_wait_s, s.provisioning_s, s.run_s, s.run_s * s.gpus
    from (
      select x.*, coalesce(x.finished_at, now()) as fin, a.gpu_type, coalesce(x.created_by_user_id, c.user_id) as run_user_id,
        case when x.dispatch_target <> 'agent' then 1
             when a.id is null then 0
             when a.gpu_count > 0 then a.gpu_count
             when coalesce(a.gpu_type, '') <> '' then 1
             else 0 end as gpus,
        case when x.dispatch_target <> 'agent' then 'estimate' else 'agent' end as gpu_source,
        greatest(0, extract(epoch from (coalesce(x.queued_at, x.finished_at, now()) - greatest(x.created_at, coalesce(x.not_before, x.created_at)))))::float8 as queue_wait_s,
        case when x.queued_at is null then 0
             else greatest(0, extract(epoch from (coalesce(x.started_at, x.finished_at, now()) - x.queued_at)))::float8 end as provisioning_s,
        case when x.started_at is null then 0
             else greatest(0, extract(epoch from (coalesce(x.finished_at, now()) - x.started_at)))::float8 end as run_s
      from ${src} x left join agents a on a.id = x.agent_id left join credentials c on c.id = x.created_by_credential_id
      where x.task_status in ('completed','failed','cancelled')
    ) s
    on conflict (task_id, attempt) do nothing
    returning team_id, credential_id, finished_at, gpu_seconds, workflow_id, ${METRIC_GPU_TYPE} as metric_gpu_type),
  gm as (
    insert into usage_monthly (team_id, credential_id, month, workflow_id, gpu_type, gpu_seconds, attempt_count)
    select team_id, coalesce(credential_id, '${NIL_UUID}'::uuid), (date_trunc('month', finished_at at time zone 'UTC'))::date, workflow_id, metric_gpu_type, sum(gpu_seconds), count(*)::int
    from g group by 1, 2, 3, 4, 5
    on conflict (team_id, month, credential_id, workflow_id, gpu_type) do update set gpu_seconds = usage_monthly.gpu_seconds + excluded.gpu_seconds, attempt_count = usage_monthly.attempt_count + excluded.attempt_count)`;

interface AggregateRow {
  k1: string | null;
  k2: string | null;
  k3: number | null;
  n: number;
  gpu_s: number;
  run_s: number;
  wait_s: number;
  prov_s: number;
}

interface BudgetRow {
  id: string;
  team_id: string;
  credential_id: string | null;
  gpu_hours: number;
  created_at: PgTimestamp;
  updated_at: PgTimestamp;
}

/** The SQL key expressions of each grouping (k1..k3 map to USAGE_GROUP_FIELDS in order). */
const GROUP_KEYS: Record<UsageGroupBy, { select: string; group: string; order: string }> = {
  day: { select: `to_char(finished_at at time zone 'UTC', 'YYYY-MM-DD') as k1, null::text as k2, null::int as k3`, group: '1', order: 'k1' },
  workflow: { select: 'workflow_id::text as k1, max(workflow_slug) as k2, null::int as k3', group: 'workflow_id', order: 'gpu_s desc, k1' },
  workflow_version: { select: 'workflow_id::text as k1, max(workflow_slug) as k2, workflow_version as k3', group: 'workflow_id, workflow_version', order: 'gpu_s desc, k1, k3' },
  credential: { select: 'credential_id::text as k1, null::text as k2, null::int as k3', group: 'credential_id', order: 'gpu_s desc, k1 nulls last' },
  user: { select: 'user_id::text as k1, null::text as k2, null::int as k3', group: 'user_id', order: 'gpu_s desc, k1 nulls last' },
};

const SUMS = `count(*)::int as n, coalesce(sum(gpu_seconds), 0)::float8 as gpu_s, coalesce(sum(run_s), 0)::float8 as run_s,
  coalesce(sum(queue_wait_s), 0)::float8 as wait_s, coalesce(sum(provisioning_s), 0)::float8 as prov_s`;

/** usage_monthly's key of the month starting at `month` (YYYY-MM-DD, UTC). */
const monthKey = (month: number): string => new Date(month).toISOString().slice(0, 10);

const ms3 = (x: number): number => Math.round(Number(x) * 1000) / 1000;

function sumsOf(r: Pick<AggregateRow, 'n' | 'gpu_s' | 'run_s' | 'wait_s' | 'prov_s'>): UsageSums {
  return {
    attempt_count: Number(r.n),
    gpu_seconds: ms3(r.gpu_s),
    gpu_hours: Math.round((Number(r.gpu_s) / 3600) * 1e6) / 1e6,
    run_seconds: ms3(r.run_s),
    queue_wait_seconds: ms3(r.wait_s),
    provisioning_seconds: ms3(r.prov_s),
  };
}

const budgetOf = (r: BudgetRow): UsageBudget => ({
  id: r.id,
  teamId: r.team_id,
  credentialId: r.credential_id ?? null,
  gpuHours: Number(r.gpu_hours),
  createdAt: new Date(r.created_at).getTime(),
  updatedAt: new Date(r.updated_at).getTime(),
});


type GateItem = { teamId: string; credentialId: string | null; month: number };
type GateBudget = UsageBudget & { usedGpuSeconds: number };

export interface UsageStoreOptions {
  now?: () => number;
  /** Cluster: the invalidation subscription's state (BudgetPresenceOptions.state). */
  state?: () => { healthy: boolean; generation: number };
  /** Cluster: tells every other node that the team's budgets changed; resolves once they have heard it. */
  changed?: (teamId: string) => Promise<void>;
}

export class PgUsageStore {
  private readonly q: Q;
  /** The run gate's reads of one tick share one statement (runs are group-committed too: no query per run). */
  private readonly gate: TickBatcher<GateItem, GateBudget[]>;
  /** Which budgets each team has: a run no budget applies to needs no gate statement. */
  readonly presence: BudgetPresence;
  constructor(
    private readonly db: Database,
    private readonly o: UsageStoreOptions = {},
  ) {
    this.q = pooled(db);
    this.gate = new TickBatcher((items) => this.gateBatch(items), { maxBatch: 500, maxInFlight: 2 });
    this.presence = new BudgetPresence({
      read: async (teamId) => (await this.q<{ credential_id: string | null }>('select credential_id from usage_budgets where team_id = ?', [teamId])).map((r) => r.credential_id),
      now: o.now ?? Date.now,
      ...(o.state ? { state: o.state } : {}),
    });
  }

  /** After a budget write committed: this node's presence entry goes, then every other node's (awaited, so the answer means it holds everywhere). */
  private async changed(teamId: string): Promise<void> {
    this.presence.drop(teamId);
    await this.o.changed?.(teamId);
  }

  /** A team's attempts that ended in [from, to), grouped: one page of groups, the group count and the range's totals. */
  async aggregate(teamId: string, groupBy: UsageGroupBy, from: number, to: number, limit: number, offset: number): Promise<{ rows: UsageAggregate[]; total: number; totals: UsageSums }> {
    const g = GROUP_KEYS[groupBy];
    const where = 'team_id = ? and finished_at >= ? and finished_at < ?';
    const params = [teamId, new Date(from).toISOString(), new Date(to).toISOString()];
    const [rows, [tot]] = await Promise.all([
      this.q<AggregateRow>(`select ${g.select}, ${SUMS} from task_attempts where ${where} group by ${g.group} order by ${g.order} limit ${Math.floor(limit)} offset ${Math.floor(offset)}`, params),
      this.q<AggregateRow & { groups: number }>(`select (select count(*) from (select 1 from task_attempts where ${where} group by ${g.group}) x)::int as groups, ${SUMS} from task_attempts where ${where}`, [...params, ...params]),
    ]);
    const fields = USAGE_GROUP_FIELDS[groupBy];
    return {
      rows: rows.map((r) => {
        const keys = [r.k1, r.k2, r.k3 === null ? null : Number(r.k3)];
        const out: Record<string, string | number | null> = {};
        fields.forEach((f, i) => (out[f] = keys[i] ?? null));
        return { ...out, ...sumsOf(r) } as UsageAggregate;
      }),
      total: Number(tot?.groups ?? 0),
      totals: sumsOf(tot ?? { n: 0, gpu_s: 0, run_s: 0, wait_s: 0, prov_s: 0 }),
    };
  }

  /** GPU-seconds of the calendar month starting at `month`: the team's (credentialId null) or one credential's. */
  async monthGpuSeconds(teamId: string, credentialId: string | null, month: number): Promise<number> {
    const [r] = await this.q<{ s: number }>(
      `select coalesce(sum(gpu_seconds), 0)::float8 as s from usage_monthly where team_id = ? and month = ?::date and (?::uuid is null or credential_id = ?::uuid)`,
      [teamId, monthKey(month), credentialId, credentialId],
    );
    return Number(r?.s ?? 0);
  }

  /**
   * The run gate: the budgets that apply to a run by this credential (the team's, and the
   * credential's own) with the GPU-seconds each has used in the calendar month starting at `month`
   * (usage_monthly: a few rows per team, never the month's attempts). The gates of one tick share
   * one statement.
   */
  async applicableBudgets(teamId: string, credentialId: string | null, month: number): Promise<GateBudget[]> {
    if (!(await this.presence.mayApply(teamId, credentialId))) return [];
    return this.gate.submit({ teamId, credentialId, month });
  }

  private async gateBatch(items: GateItem[]): Promise<Array<Settled<GateBudget[]>>> {
    const rows = await this.q<BudgetRow & { i: number; used: number }>(
      `with r as (select * from jsonb_to_recordset(?::jsonb) as x(i int, team_id uuid, credential_id uuid, month date))
       select r.i, b.*, (select coalesce(sum(m.gpu_seconds), 0) from usage_monthly m
                         where m.team_id = b.team_id and m.month = r.month and (b.credential_id is null or m.credential_id = b.credential_id))::float8 as used
       from r join usage_budgets b on b.team_id = r.team_id and (b.credential_id is null or b.credential_id = r.credential_id)
       order by r.i, b.credential_id nulls first`,
      [JSON.stringify(items.map((it, i) => ({ i, team_id: it.teamId, credential_id: it.credentialId, month: monthKey(it.month) })))],
    );
    const out: GateBudget[][] = items.map(() => []);
    for (const r of rows) out[Number(r.i)]?.push({ ...budgetOf(r), usedGpuSeconds: Number(r.used) });
    return out.map((value) => ({ value }));
  }

  async budgets(teamId: string): Promise<UsageBudget[]> {
    const rows = await this.q<BudgetRow>('select * from usage_budgets where team_id = ? order by credential_id nulls first', [teamId]);
    return rows.map(budgetOf);
  }

  /** Sets (creates or replaces) the budget of the team (credentialId null) or of one credential. */
  async setBudget(teamId: string, credentialId: string | null, gpuHours: number, audit?: AuditNote): Promise<UsageBudget> {
    const b = await audited(this.db, audit, async (q, record) => {
      const [r] = await q<BudgetRow>(
      `insert into usage_budgets (id, team_id, credential_id, gpu_hours) values (?, ?, ?, ?)
       on conflict (team_id, coalesce(credential_id, '${NIL_UUID}'::uuid)) do update set gpu_hours = excluded.gpu_hours, updated_at = now()
       returning *`,
        [uuidv7(), teamId, credentialId, gpuHours],
      );
      if (!r) throw new Error('usage budget upsert returned no row');
      await record({ targetId: r.id, details: { credential_id: credentialId, gpu_hours: gpuHours } });
      return budgetOf(r);
    });
    await this.changed(teamId);
    return b;
  }

  /** Removes a budget; false when there was none. */
  async clearBudget(teamId: string, credentialId: string | null, audit?: AuditNote): Promise<boolean> {
    const found = await audited(this.db, audit, async (q, record) => {
      const rows = await q<{ id: string }>(`delete from usage_budgets where team_id = ? and coalesce(credential_id, '${NIL_UUID}'::uuid) = ?::uuid returning id`, [teamId, credentialId ?? NIL_UUID]);
      if (rows[0]) await record({ targetId: rows[0].id, details: { credential_id: credentialId } });
      return rows.length > 0;
    });
    if (found) await this.changed(teamId);
    return found;
  }

  /** Whether the credential exists in the team (any type; revoked ones too: their past usage still counts). */
  async credentialInTeam(teamId: string, credentialId: string): Promise<boolean> {
    const rows = await this.q<{ id: string }>('select id from credentials where id = ? and team_id = ?', [credentialId, teamId]);
    return rows.length > 0;
  }
}
