/**
 * Usage accounting figures (issue 30 §4): what the queries over task_attempts cost at a size, on
 * a scratch database of DATABASE_URL. Figures only, nothing asserted.
 *
 *   npm run bench:usage            (ROWS=200000 by default; ROWS=1000000 npm run bench:usage)
 *
 * Prints, for ROWS attempt rows of one month spread over TEAMS teams (the measured team holds
 * ROWS/TEAMS of them, 50 workflows, 20 credentials): the budget gate of a run with no budget and
 * with a team budget (one round trip: the month's sum), GET /usage's aggregation for each group_by
 * (one page + the totals), and the /metrics counter's aggregation over every row
 * (gantry_gpu_seconds_total). Median of 7 runs each after 2 warm-ups.
 */
import os from 'node:os';
import { createLogger } from '../src/shared/logger.js';
import { Database } from '../src/persistence/db.js';
import { PgUsageStore } from '../src/persistence/usage-store.js';
import { OpsQueries } from '../src/persistence/ops-queries.js';
import { USAGE_GROUPS } from '../src/domain/usage.js';
import { monthOf } from '../src/domain/usage.js';
import { createTestDatabase } from '../test/helpers/pg.js';
import { uuidv7 } from '../src/shared/ids.js';

const ROWS = Number(process.env.ROWS ?? 200_000);
const TEAMS = Number(process.env.TEAMS ?? 10);

async function median(fn: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < 2; i++) await fn();
  const xs: number[] = [];
  for (let i = 0; i < 7; i++) {
    const t0 = performance.now();
    await fn();
    xs.push(performance.now() - t0);
  }
  xs.sort((a, b) => a - b);
  return Math.round((xs[3] ?? 0) * 100) / 100;
}

async function main(): Promise<void> {
  const scratch = await createTestDatabase('bench_usage');
  const db = await Database.open({ databaseUrl: scratch.url, dataDir: os.tmpdir(), poolMax: 4, logger: createLogger('silent') });
  try {
    await db.migrate();
    const teams = Array.from({ length: TEAMS }, () => uuidv7());
    const team = teams[0] as string;
    const { start, reset } = monthOf(Date.now());
    // generate_series in PostgreSQL: ROWS attempts of this month
    await db.execute(
      `insert into task_attempts (task_id, attempt, team_id, workflow_id, workflow_slug, workflow_version, credential_id, user_id, agent_id,
         dispatch_target, tool_type, gpu_type, gpu_count, outcome, gpu_source, created_at, queued_at, started_at, finished_at,
         queue_wait_s, provisioning_s, run_s, gpu_seconds)
       select gen_random_uuid(), 1, (?::uuid[])[1 + i % ?], md5('wf' || (i % 50))::uuid, 'wf-' || (i % 50), 1 + i % 3, md5('c' || (i % 20))::uuid, md5('u' || (i % 7))::uuid, null,
         'agent', 'comfyui', 'NVIDIA A100', 1 + i % 4, 'completed', 'agent', f - interval '1 minute', f - interval '50 seconds', f - interval '40 seconds', f,
         10, 10, 40, 40 * (1 + i % 4)
       from generate_series(1, ?) as i, lateral (select ?::timestamptz + (i::float8 / ? * (?::timestamptz - ?::timestamptz)) as f) x`,
      [`{${teams.join(',')}}`, TEAMS, ROWS, new Date(start).toISOString(), ROWS, new Date(Math.min(reset, Date.now())).toISOString(), new Date(start).toISOString()],
    );
    // the monthly rollup the task store keeps alongside (what the budget gate reads)
    await db.execute(`insert into usage_monthly (team_id, credential_id, month, workflow_id, gpu_type, gpu_seconds, attempt_count)
      select team_id, coalesce(credential_id, '00000000-0000-0000-0000-000000000000'::uuid), (date_trunc('month', finished_at at time zone 'UTC'))::date,
        workflow_id, coalesce(gpu_type, ''), sum(gpu_seconds), count(*)::int from task_attempts group by 1, 2, 3, 4, 5`);
    await db.execute('analyze task_attempts');
    await db.execute('analyze usage_monthly');
    const usage = new PgUsageStore(db);
    const ops = new OpsQueries(db);
    console.log(`date=${new Date().toISOString()} nproc=${os.cpus().length} node=${process.version} rows=${ROWS} teams=${TEAMS} team_rows=${Math.round(ROWS / TEAMS)}`);
    const gateNone = await median(() => usage.applicableBudgets(teams[1] as string, null, start));
    await usage.setBudget(team, null, 1e6);
    const gateTeam = await median(() => usage.applicableBudgets(team, null, start));
    console.log(`budget gate per run: no budget ${gateNone} ms, team budget (usage_monthly) ${gateTeam} ms`);
    const agg: string[] = [];
    for (const g of USAGE_GROUPS) agg.push(`${g}=${await median(() => usage.aggregate(team, g, start, reset, 20, 0))}`);
    console.log(`GET /usage aggregation (one page + totals), ms: ${agg.join(' ')}`);
    const scrape = await median(() => ops.snapshot());
    console.log(`/metrics PostgreSQL snapshot (incl. gantry_gpu_seconds_total from usage_monthly): ${scrape} ms`);
    console.log(`USAGE rows=${ROWS} gate_none_ms=${gateNone} gate_team_ms=${gateTeam} ${agg.map((a) => `usage_${a}_ms`.replace(/=(.*)_ms$/, '_ms=$1')).join(' ')} metrics_snapshot_ms=${scrape}`);
  } finally {
    await db.close();
    await scratch.drop();
  }
}

await main();
