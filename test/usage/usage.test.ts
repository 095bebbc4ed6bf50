/**
 * Issue 30 (usage accounting, queue-delay signals) end to end on one node with real
 * `gantry agent --executor simulate` child processes:
 * - every attempt records its GPU-seconds (run time x the agent's GPUs), queue wait and
 *   provisioning time; a task whose first attempt dies and whose retry succeeds has two attempt
 *   rows that add up to what the tasks' own timestamps say; replaying the write changes nothing;
 * - GET /usage: the totals of every group_by equal the sum of the tasks' attempts, page by page,
 *   and the CSV export parses back to the same numbers; a member gets 403, bad parameters 400;
 * - a monthly GPU budget refuses new runs (both run endpoints and the MCP run tool) with 429
 *   gpu_budget_exhausted, Retry-After and reset_at, and lets them through again at the reset (the
 *   usage clock is injected: the next month without waiting);
 * - /metrics: gantry_gpu_seconds_total per team/workflow/GPU type, and the per-pool queue gauges
 *   (a task no agent can take makes the oldest-age gauge rise).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { addMember, registerUser } from '../helpers/identity.js';
import { agentServer, agentsOf, createWorkflow, runWorkflow, setupTeam, spawnAgent, tinyGraph, tmpDir, waitFor, waitTask, type AgentProcess, type TeamSetup } from '../agents/helpers.js';
import { recordAttemptsCtes } from '../../src/persistence/usage-store.js';

let t: TestNode;
let s: TeamSetup;
let wf = '';
let wf2 = '';
/** The usage clock's offset from real time (moved to the next month by the budget test). */
let offsetMs = 0;
const procs: AgentProcess[] = [];
const mgmt = () => ({ token: s.user.accessToken, team: s.user.teamId });
const terminal = (x: Record<string, any>): boolean => ['completed', 'failed', 'cancelled'].includes(x.task_status);

before(async () => {
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1, GANTRY_METRICS_CACHE_MS: 0, GANTRY_RETRY_BACKOFF_BASE_S: 0 }, 'usage', { usageNow: () => Date.now() + offsetMs });
  s = await setupTeam(t);
});

after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await t?.stop();
});

function agent(name: string, extra: string[]): AgentProcess {
  const p = spawnAgent(['--server', agentServer(t.node, 'grpc'), '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-usage-'), '--name', name, '--simulate-duration-ms', '300', '--simulate-steps', '3', ...extra]);
  procs.push(p);
  return p;
}

const online = (name: string) => waitFor(`agent ${name} online`, async () => (await agentsOf(t, s)).find((a) => a.display_name === name && a.agent_status !== 'offline'), 30_000);

interface AttemptRow {
  task_id: string;
  attempt: number;
  outcome: string;
  gpu_count: number;
  gpu_type: string | null;
  credential_id: string | null;
  user_id: string | null;
  workflow_id: string;
  workflow_version: number;
  run_s: number;
  queue_wait_s: number;
  provisioning_s: number;
  gpu_seconds: number;
  finished_at: Date | string;
}

const attempts = (teamId = s.user.teamId) => t.node.db.execute<AttemptRow>('select * from task_attempts where team_id = ? order by finished_at, attempt', [teamId]);

/** What the tasks' own rows say each ended attempt ran (finished - started, seconds) and on which agent. */
const taskRuns = (ids: string[]) =>
  t.node.db.execute<{ id: string; agent_id: string | null; run_s: number; wait_s: number }>(
    `select id, agent_id, coalesce(extract(epoch from (finished_at - started_at)), 0)::float8 as run_s,
            extract(epoch from (queued_at - greatest(created_at, coalesce(not_before, created_at))))::float8 as wait_s
     from tasks where id = any(?::uuid[])`,
    [`{${ids.join(',')}}`],
  );

const close = (a: number, b: number, what: string, eps = 0.002): void => assert.ok(Math.abs(a - b) <= eps, `${what}: ${a} vs ${b}`);

test('GPU-seconds per attempt: a task that dies on its first attempt and succeeds on the retry has two rows that add up', async () => {
  // the first agent (1 GPU) kills itself mid-task: the attempt fails (agent lost) and a retry is created
  const f = agent('crashy', ['--simulate-crash', '--gpu', 'NVIDIA L4:24']);
  await online('crashy');
  wf = await createWorkflow(t, s, tinyGraph(), { max_retries: 1 });
  const first = await runWorkflow(t, s, wf, { prompt: 'a red fox' });
  await f.exited;
  const failed = await waitTask(t, s, first, terminal, 'first attempt ends', 30_000);
  assert.equal(failed.task_status, 'failed', JSON.stringify(failed));
  const retry = String(failed.retry_task_id);
  assert.ok(retry, 'a retry task');
  // the retry runs on a 2-GPU agent
  agent('big', ['--gpu', 'NVIDIA A100-SXM4-80GB:80', '--gpu', 'NVIDIA A100-SXM4-80GB:80']);
  const done = await waitTask(t, s, retry, terminal, 'retry ends', 30_000);
  assert.equal(done.task_status, 'completed', JSON.stringify(done));
  assert.equal(done.attempt, 2);

  const rows = (await attempts()).filter((r) => r.task_id === first || r.task_id === retry);
  assert.equal(rows.length, 2, 'one row per attempt');
  const [a1, a2] = rows as [AttemptRow, AttemptRow];
  assert.deepEqual([a1.task_id, a1.attempt, a1.outcome, a1.gpu_count, a1.gpu_type], [first, 1, 'failed', 1, 'NVIDIA L4']);
  assert.deepEqual([a2.task_id, a2.attempt, a2.outcome, a2.gpu_count, a2.gpu_type], [retry, 2, 'completed', 2, 'NVIDIA A100-SXM4-80GB']);
  for (const r of rows) {
    assert.equal(r.credential_id, s.sk.id, 'attributed to the credential that ran it');
    assert.equal(r.user_id, s.user.userId, 'and to its user');
    assert.equal(r.workflow_id, wf);
    assert.ok(r.run_s > 0, 'it ran');
    close(r.gpu_seconds, r.run_s * r.gpu_count, 'gpu_seconds = run time x GPUs');
    assert.ok(r.queue_wait_s >= 0 && r.provisioning_s >= 0);
  }
  // the sum equals what the tasks' own timestamps say: run time x the GPUs of the agent each ran on
  const runs = new Map((await taskRuns([first, retry])).map((r) => [r.id, r]));
  const expected = (runs.get(first)?.run_s ?? NaN) * 1 + (runs.get(retry)?.run_s ?? NaN) * 2;
  close(a1.gpu_seconds + a2.gpu_seconds, expected, 'attempts add up to the tasks');
  close(a1.queue_wait_s, runs.get(first)?.wait_s ?? NaN, 'queue wait = created to assigned');

  // a replayed write (a retried statement, a takeover) records nothing more
  const monthly = () => t.node.db.execute<{ s: number; n: number }>('select sum(gpu_seconds)::float8 as s, sum(attempt_count)::int as n from usage_monthly where team_id = ?', [s.user.teamId]);
  const before = await monthly();
  await t.node.db.execute(`with u as (select * from tasks where id = any(?::uuid[])), ${recordAttemptsCtes('u')} select 1`, [`{${first},${retry}}`]);
  const again = (await attempts()).filter((r) => r.task_id === first || r.task_id === retry);
  assert.deepEqual(again.map((r) => [r.task_id, r.gpu_seconds]), rows.map((r) => [r.task_id, r.gpu_seconds]));
  assert.deepEqual(await monthly(), before, 'the monthly rollup adds nothing either');
  // the monthly rollup (what the budget gate reads) holds exactly the attempts
  close(before[0]?.s ?? NaN, a1.gpu_seconds + a2.gpu_seconds, 'usage_monthly = the attempts');
  assert.equal(before[0]?.n, 2);
});

/** Every page of GET /usage for a group_by (per_page 2), and the totals it reports. */
interface Totals {
  attempt_count: number;
  gpu_seconds: number;
  run_seconds: number;
  queue_wait_seconds: number;
  provisioning_seconds: number;
}

async function allPages(groupBy: string): Promise<{ rows: Array<Record<string, any>>; totals: Totals; total: number }> {
  const rows: Array<Record<string, any>> = [];
  let totals: Totals = { attempt_count: 0, gpu_seconds: 0, run_seconds: 0, queue_wait_seconds: 0, provisioning_seconds: 0 };
  let total = 0;
  for (let page = 1; ; page++) {
    assert.ok(page <= 20, `${groupBy}: pagination never ends`);
    const r = await t.http.get(`/usage?group_by=${groupBy}&per_page=2&current_page=${page}`, mgmt());
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.group_by, groupBy);
    assert.deepEqual(r.body.page_meta.current_page, page);
    rows.push(...r.body.usage_list);
    totals = r.body.usage_totals;
    total = r.body.page_meta.total_count;
    if (r.body.usage_list.length < 2) break;
  }
  assert.equal(rows.length, total, 'total_count counts the groups');
  return { rows, totals, total };
}

function parseCsv(text: string): string[][] {
  return text
    .split('\r\n')
    .filter((l) => l !== '')
    .map((l) => l.split(','));
}

test('GET /usage: totals of every group_by equal the sum of the attempts, paginated; CSV parses back to the same numbers; 403 and 400', async () => {
  // more runs: another workflow, by the user's own session (no credential) and by the sk-
  wf2 = await createWorkflow(t, s, tinyGraph(), { max_retries: 0 });
  const ids = [await runWorkflow(t, s, wf2, { prompt: 'one' }), await runWorkflow(t, s, wf, { prompt: 'two' })];
  const jwtRun = await t.http.post(`/r/workflows/${wf2}/run`, { parameters: { prompt: 'three' } }, mgmt());
  assert.equal(jwtRun.status, 202, jwtRun.text);
  ids.push(jwtRun.body.task_id);
  for (const id of ids) assert.equal((await waitTask(t, s, id, terminal, 'ends', 30_000)).task_status, 'completed');

  const rows = await attempts();
  assert.ok(rows.length >= 5);
  const [monthly] = await t.node.db.execute<{ s: number; n: number }>('select sum(gpu_seconds)::float8 as s, sum(attempt_count)::int as n from usage_monthly where team_id = ?', [s.user.teamId]);
  assert.equal(monthly?.n, rows.length, 'usage_monthly counts every attempt once');
  const sum = (xs: AttemptRow[], k: 'gpu_seconds' | 'run_s' | 'queue_wait_s' | 'provisioning_s'): number => xs.reduce((a, r) => a + Number(r[k]), 0);
  // independent of task_attempts: run time x GPUs from the tasks' rows and the agents they ran on
  const runs = await taskRuns(rows.map((r) => r.task_id));
  const gpus = new Map((await agentsOf(t, s)).map((a) => [a.id, a.display_name === 'big' ? 2 : 1]));
  const fromTasks = runs.reduce((a, r) => a + r.run_s * (r.agent_id ? (gpus.get(r.agent_id) ?? NaN) : NaN), 0);
  close(sum(rows, 'gpu_seconds'), fromTasks, 'attempt rows vs tasks', 0.005);
  close(monthly?.s ?? NaN, sum(rows, 'gpu_seconds'), 'usage_monthly vs attempt rows', 0.005);

  const groupKey: Record<string, (r: AttemptRow) => string> = {
    day: (r) => new Date(r.finished_at).toISOString().slice(0, 10),
    workflow: (r) => r.workflow_id,
    workflow_version: (r) => `${r.workflow_id}@${r.workflow_version}`,
    credential: (r) => String(r.credential_id),
    user: (r) => String(r.user_id),
  };
  const keyOfRow: Record<string, (x: Record<string, any>) => string> = {
    day: (x) => x.day,
    workflow: (x) => x.workflow_id,
    workflow_version: (x) => `${x.workflow_id}@${x.workflow_version}`,
    credential: (x) => String(x.credential_id),
    user: (x) => String(x.user_id),
  };
  for (const g of Object.keys(groupKey)) {
    const { rows: got, totals } = await allPages(g);
    close(totals.gpu_seconds, sum(rows, 'gpu_seconds'), `${g}: total gpu_seconds`);
    close(totals.run_seconds, sum(rows, 'run_s'), `${g}: total run_seconds`);
    close(totals.queue_wait_seconds, sum(rows, 'queue_wait_s'), `${g}: total queue wait`);
    close(totals.provisioning_seconds, sum(rows, 'provisioning_s'), `${g}: total provisioning`);
    assert.equal(totals.attempt_count, rows.length);
    close(got.reduce((a, x) => a + x.gpu_seconds, 0), totals.gpu_seconds, `${g}: the pages add up`, 0.005);
    // each group equals the sum of its attempts
    const expected = new Map<string, { gpu: number; n: number }>();
    for (const r of rows) {
      const e = expected.get(groupKey[g]!(r)) ?? { gpu: 0, n: 0 };
      expected.set(groupKey[g]!(r), { gpu: e.gpu + r.gpu_seconds, n: e.n + 1 });
    }
    assert.equal(got.length, expected.size, `${g}: one row per group`);
    for (const x of got) {
      const e = expected.get(keyOfRow[g]!(x));
      assert.ok(e, `${g}: unexpected group ${keyOfRow[g]!(x)}`);
      close(x.gpu_seconds, e.gpu, `${g} ${keyOfRow[g]!(x)}`);
      assert.equal(x.attempt_count, e.n);
    }
    // the CSV export of the same page: a header row, then the same numbers
    const json = await t.http.get(`/usage?group_by=${g}&per_page=100`, mgmt());
    for (const csv of [await t.http.get(`/usage?group_by=${g}&per_page=100&format=csv`, mgmt()), await t.http.get(`/usage?group_by=${g}&per_page=100`, { ...mgmt(), headers: { accept: 'text/csv' } })]) {
      assert.equal(csv.status, 200);
      assert.match(csv.headers.get('content-type') ?? '', /^text\/csv/);
      const [header, ...lines] = parseCsv(csv.text);
      assert.ok(header && header.includes('gpu_seconds') && header.includes('attempt_count'), String(header));
      assert.equal(lines.length, json.body.usage_list.length);
      lines.forEach((cells, i) => {
        const back = Object.fromEntries(header.map((h, k) => [h, cells[k] ?? '']));
        const j = json.body.usage_list[i];
        for (const k of ['attempt_count', 'gpu_seconds', 'gpu_hours', 'run_seconds', 'queue_wait_seconds', 'provisioning_seconds']) assert.equal(Number(back[k]), j[k], `${g} csv ${k}`);
        assert.equal(back[header[0]!], j[header[0]!] === null ? '' : String(j[header[0]!]));
      });
    }
  }

  // an explicit range without the attempts: nothing
  const empty = await t.http.get('/usage?from=2020-01-01&to=2020-02-01', mgmt());
  assert.equal(empty.status, 200);
  assert.equal(empty.body.usage_totals.attempt_count, 0);
  assert.deepEqual(empty.body.usage_list, []);

  // a member (not admin), and an sk-: 403
  const member = await registerUser(t.http);
  await addMember(t.http, t.node, s.user, member, 'member');
  const denied = await t.http.get('/usage', { token: member.accessToken, team: s.user.teamId });
  assert.equal(denied.status, 403);
  assert.equal(denied.body.error_code, 'insufficient_role');
  assert.equal((await t.http.get('/usage', { token: s.sk.value })).status, 403);
  assert.equal((await t.http.put('/usage/budgets', { gpu_hours: 1 }, { token: member.accessToken, team: s.user.teamId })).status, 403);
  // an admin may
  const admin = await registerUser(t.http);
  await addMember(t.http, t.node, s.user, admin, 'admin');
  assert.equal((await t.http.get('/usage', { token: admin.accessToken, team: s.user.teamId })).status, 200);

  // bad parameters: 400 invalid_parameter
  for (const q of ['group_by=month', 'from=yesterday', 'from=2026-02-01&to=2026-01-01', 'per_page=0', 'format=xml', 'color=blue', 'from=2020-01-01&to=2026-01-01']) {
    const r = await t.http.get(`/usage?${q}`, mgmt());
    assert.equal(r.status, 400, `${q}: ${r.text}`);
    assert.equal(r.body.error_code, 'invalid_parameter', q);
  }
});

async function mcpRun(workflowId: string): Promise<CallToolResult> {
  const transport = new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/mcp`), { requestInit: { headers: { authorization: `Bearer ${s.sk.value}` } } });
  const client = new Client({ name: 'gantry-usage-test', version: '1.0.0' });
  await client.connect(transport);
  try {
    return (await client.callTool({ name: 'run_workflow', arguments: { workflow_id: workflowId, parameters: { prompt: 'mcp' } } })) as CallToolResult;
  } finally {
    await client.close();
  }
}

test('GPU budget: at or over the month budget new runs get 429 gpu_budget_exhausted with the reset; they run again at the reset', async () => {
  try {
    await budgetScenario();
  } finally {
    // whatever happened, the tests after this one run without budgets and on the real clock
    offsetMs = 0;
    await t.http.del('/usage/budgets', mgmt());
    await t.http.del(`/usage/budgets?credential_id=${s.sk.id}`, mgmt());
  }
});

test('GPU budget: set or removed, it holds from the next submit (the run gate caches that a team has none)', async () => {
  const ran: string[] = [];
  const run = async (prompt: string): Promise<{ status: number; body: Record<string, any> }> => {
    const r = await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt } }, { token: s.sk.value });
    if (r.status === 202) ran.push(r.body.task_id as string);
    return r;
  };
  try {
    assert.equal((await run('no budget yet')).status, 202);
    assert.equal((await run('still none')).status, 202); // answered from the cache
    assert.equal((await t.http.put('/usage/budgets', { gpu_hours: 0 }, mgmt())).status, 200);
    assert.equal((await run('zero')).body.error_code, 'gpu_budget_exhausted');
    assert.equal((await t.http.del('/usage/budgets', mgmt())).status, 200);
    assert.equal((await run('removed')).status, 202);
    // a credential's budget: that credential is refused, the user session is not
    assert.equal((await t.http.put('/usage/budgets', { gpu_hours: 0, credential_id: s.sk.id }, mgmt())).status, 200);
    assert.equal((await run('sk capped')).body.error_code, 'gpu_budget_exhausted');
    const jwt = await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'jwt' } }, mgmt());
    assert.equal(jwt.status, 202, 'the user session is not capped');
    ran.push(jwt.body.task_id as string);
  } finally {
    await t.http.del(`/usage/budgets?credential_id=${s.sk.id}`, mgmt());
  }
  // the runs end before the next test reads the month's use
  await waitFor('the runs of this test ended', async () => {
    const ended = await Promise.all(ran.map(async (id) => terminal((await t.http.get(`/r/tasks/${id}`, { token: s.sk.value })).body)));
    return ended.every(Boolean);
  }, 30_000);
});

async function budgetScenario(): Promise<void> {
  const month = (ms: number) => {
    const d = new Date(ms);
    return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  };
  const reset = month(Date.now());
  const used = (await attempts()).reduce((a, r) => a + r.gpu_seconds, 0);
  assert.ok(used > 0);
  // a budget above the month's use: runs go through
  const roomy = await t.http.put('/usage/budgets', { gpu_hours: 1000 }, mgmt());
  assert.equal(roomy.status, 200, roomy.text);
  assert.equal(roomy.body.credential_id, null);
  close(roomy.body.used_gpu_hours, used / 3600, 'used_gpu_hours', 1e-5);
  assert.equal(roomy.body.reset_at, new Date(reset).toISOString());
  assert.equal((await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'ok' } }, { token: s.sk.value })).status, 202);

  // at or over it: refused on both run endpoints and the MCP tool
  const tight = await t.http.put('/usage/budgets', { gpu_hours: used / 3600 / 2 }, mgmt());
  assert.equal(tight.body.is_exhausted, true);
  const slug = (await t.http.get(`/workflows/${wf}`, mgmt())).body.workflow_slug as string;
  for (const r of [await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'no' } }, { token: s.sk.value }), await t.http.post(`/r/workflows/slug/${slug}/run`, { parameters: { prompt: 'no' } }, mgmt())]) {
    assert.equal(r.status, 429, r.text);
    assert.equal(r.body.error_code, 'gpu_budget_exhausted');
    assert.equal(r.body.reset_at, new Date(reset).toISOString());
    assert.ok(r.body.error_message.includes(new Date(reset).toISOString()), r.body.error_message);
    const retryAfter = Number(r.headers.get('retry-after'));
    assert.ok(retryAfter > 0 && retryAfter <= Math.ceil((reset - Date.now()) / 1000) + 1, `Retry-After ${retryAfter}`);
  }
  const viaMcp = await mcpRun(wf);
  assert.equal(viaMcp.isError, true);
  const mcpErr = JSON.parse((viaMcp.content[0] as { text: string }).text) as Record<string, string>;
  assert.equal(mcpErr.error_code, 'gpu_budget_exhausted');
  assert.equal(mcpErr.reset_at, new Date(reset).toISOString());

  // a credential budget refuses that credential only: the team's budget removed, the sk- capped
  assert.equal((await t.http.del('/usage/budgets', mgmt())).status, 200);
  assert.equal((await t.http.del('/usage/budgets', mgmt())).body.error_code, 'budget_not_found');
  const credBudget = await t.http.put('/usage/budgets', { gpu_hours: 0, credential_id: s.sk.id }, mgmt());
  assert.equal(credBudget.status, 200, credBudget.text);
  assert.equal((await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'sk' } }, { token: s.sk.value })).body.error_code, 'gpu_budget_exhausted');
  assert.equal((await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'jwt' } }, mgmt())).status, 202, 'the user session is not capped');
  const list = await t.http.get('/usage/budgets', mgmt());
  assert.deepEqual(list.body.budget_list.map((b: Record<string, unknown>) => [b.credential_id, b.gpu_hours]), [[s.sk.id, 0]]);
  assert.equal((await t.http.put('/usage/budgets', { gpu_hours: 1, credential_id: '00000000-0000-4000-8000-000000000000' }, mgmt())).status, 404);
  assert.equal((await t.http.put('/usage/budgets', { gpu_hours: -1 }, mgmt())).status, 400);

  // the reset: the next calendar month (UTC) starts with nothing used
  const teamCap = await t.http.put('/usage/budgets', { gpu_hours: used / 3600 / 2 }, mgmt());
  assert.equal(teamCap.status, 200);
  assert.equal((await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'still no' } }, mgmt())).status, 429);
  offsetMs = reset - Date.now() + 1000;
  const after = await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'new month' } }, mgmt());
  assert.equal(after.status, 202, after.text);
  const view = (await t.http.get('/usage/budgets', mgmt())).body.budget_list.find((b: Record<string, unknown>) => b.credential_id === null);
  assert.equal(view.used_gpu_hours, 0);
  assert.equal(view.period_start, new Date(reset).toISOString());
}

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

async function scrape(): Promise<Sample[]> {
  const text = await (await fetch(`${t.origin}/metrics`)).text();
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[k as string] = v as string;
    out.push({ name: m[1] as string, labels, value: Number(m[3]) });
  }
  return out;
}

const metric = (xs: Sample[], name: string, labels: Record<string, string>): number | undefined => xs.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))?.value;

test('metrics: gantry_gpu_seconds_total per team, workflow and GPU type; per-pool waiting count and oldest age rise for a task no agent can take', async () => {
  // let every run of the tests before end: the counter is what task_attempts holds
  await waitFor('no open task', async () => (await t.node.db.execute<{ n: number }>(`select count(*)::int as n from tasks where team_id = ? and task_status not in ('completed','failed','cancelled')`, [s.user.teamId]))[0]?.n === 0, 30_000);
  const rows = await attempts();
  const samples = await scrape();
  for (const [workflowId, gpuType] of [[wf, 'NVIDIA A100-SXM4-80GB'], [wf, 'NVIDIA L4'], [wf2, 'NVIDIA A100-SXM4-80GB']] as const) {
    const expected = rows.filter((r) => r.workflow_id === workflowId && r.gpu_type === gpuType).reduce((a, r) => a + r.gpu_seconds, 0);
    const got = metric(samples, 'gantry_gpu_seconds_total', { team_id: s.user.teamId, workflow_id: workflowId, gpu_type: gpuType });
    assert.ok(got !== undefined, `series for ${workflowId} ${gpuType}`);
    close(got, expected, `gantry_gpu_seconds_total ${gpuType}`, 0.005);
  }

  // a nerfstudio-free pool no agent serves: labels nobody has, a preferred GPU
  const stuck = await createWorkflow(t, s, tinyGraph(), { required_labels: ['h100', 'nvlink'], preferred_gpu: 'H100' });
  const pool = { team_id: s.user.teamId, required_labels: 'h100,nvlink', tool_type: 'comfyui', gpu_type: 'H100' };
  assert.equal(metric(await scrape(), 'gantry_pool_waiting_tasks', pool), undefined, 'no series before');
  await runWorkflow(t, s, stuck, { prompt: 'wait' });
  await runWorkflow(t, s, stuck, { prompt: 'wait too' });
  const first = await waitFor('the pool gauge', async () => {
    const x = await scrape();
    return metric(x, 'gantry_pool_waiting_tasks', pool) === 2 ? x : null;
  });
  const age0 = metric(first, 'gantry_pool_oldest_waiting_seconds', pool) ?? -1;
  assert.ok(age0 >= 0, `oldest age ${age0}`);
  // it rises while they wait (no agent is eligible)
  await waitFor('the oldest age to rise', async () => (metric(await scrape(), 'gantry_pool_oldest_waiting_seconds', pool) ?? -1) > age0 + 0.2, 10_000, 100);
  assert.equal(metric(await scrape(), 'gantry_pool_waiting_tasks', pool), 2, 'still waiting');
});
