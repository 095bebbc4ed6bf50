import type { Database } from './db.js';
import { NON_TERMINAL, SCHEDULABLE } from '../domain/tasks/record.js';
import { q } from './sql.js';
import type { OpsSnapshot } from '../domain/ops.js';

export type { AgentCount, GpuSecondsFigure, OpsSnapshot, PoolFigure, QueueFigure, TaskCount } from '../domain/ops.js';

const marks = (xs: readonly unknown[]): string => xs.map(() => '?').join(',');

/**
 * The figures /metrics counts in PostgreSQL (the source of truth, so every node of a cluster reports
 * the same numbers). Operator queries across teams: they scan only open tasks (the partial index
 * tasks_open_idx), agents and the webhook outbox's due index.
 */
export class OpsQueries {
  constructor(private readonly db: Database) {}

  async snapshot(): Promise<OpsSnapshot> {
    const run = q(this.db);
    const [tasks, queues, pools, gpu, agents, hooks] = await Promise.all([
      run<{ team_id: string; task_status: string; n: number }>(`select team_id, task_status, count(*)::int as n from tasks
           where task_status in (${marks(NON_TERMINAL)}) group by team_id, task_status`, [...NON_TERMINAL]),
      run<{ team_id: string; labels: string; n: number; oldest_s: number }>(`select team_id, labels, count(*)::int as n,
                  greatest(0, extract(epoch from (now() - min(coalesce(not_before, created_at)))))::float8 as oldest_s
           from (select team_id, not_before, created_at,
                        coalesce((select string_agg(l, ',' order by l) from jsonb_array_elements_text(required_labels) as l), '') as labels
                 from tasks where task_status in (${marks(SCHEDULABLE)})) t
           group by team_id, labels`, [...SCHEDULABLE]),
      run<{ team_id: string; labels: string; tool_type: string; gpu_type: string; n: number; oldest_s: number }>(`select team_id, labels, tool_type, gpu_type, count(*)::int as n,
                  greatest(0, extract(epoch from (now() - min(coalesce(not_before, created_at)))))::float8 as oldest_s
           from (select team_id, not_before, created_at, tool_type, coalesce(preferred_gpu, '') as gpu_type,
                        coalesce((select string_agg(l, ',' order by l) from jsonb_array_elements_text(required_labels) as l), '') as labels
                 from tasks where task_status in (${marks(SCHEDULABLE)})) t
           group by team_id, labels, tool_type, gpu_type`, [...SCHEDULABLE]),
      // every attempt ever recorded (a counter), from the monthly rollup the task store keeps with them
      run<{ team_id: string; workflow_id: string; gpu_type: string; s: number }>(`select team_id, workflow_id, gpu_type, sum(gpu_seconds)::float8 as s
           from usage_monthly group by 1, 2, 3`),
      run<{ agent_status: string; gpu_type: string; n: number }>(`select agent_status, coalesce(gpu_type, '') as gpu_type, count(*)::int as n from agents group by agent_status, coalesce(gpu_type, '')`),
      run<{ n: number; oldest_s: number }>(`select count(*)::int as n, coalesce(greatest(0, extract(epoch from (now() - min(created_at)))), 0)::float8 as oldest_s
           from webhook_deliveries where delivery_status in ('pending','delivering')`),
    ]);
    return {
      tasks: tasks.map((r) => ({ teamId: String(r.team_id), status: String(r.task_status), count: Number(r.n) })),
      queues: queues.map((r) => ({ teamId: String(r.team_id), labels: String(r.labels), depth: Number(r.n), oldestAgeS: Number(r.oldest_s) })),
      pools: pools.map((r) => ({ teamId: String(r.team_id), labels: String(r.labels), toolType: String(r.tool_type), gpuType: String(r.gpu_type), depth: Number(r.n), oldestAgeS: Number(r.oldest_s) })),
      gpuSeconds: gpu.map((r) => ({ teamId: String(r.team_id), workflowId: String(r.workflow_id), gpuType: String(r.gpu_type), gpuSeconds: Number(r.s) })),
      agents: agents.map((r) => ({ status: String(r.agent_status), gpuType: String(r.gpu_type), count: Number(r.n) })),
      webhookBacklog: Number(hooks[0]?.n ?? 0),
      webhookOldestAgeS: Number(hooks[0]?.oldest_s ?? 0),
    };
  }
}
