// Quotas hold cluster-wide: max_concurrent_tasks with submits on every node and agents on every
// node (the team's scheduler is one actor in the cluster, placed on one node), and max_agents with
// agents connecting to different nodes.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { startCluster, clusterSkipReason, type TestCluster, agentsOnline, type ClusterNodeProc } from '../helpers/cluster.js';
import { setupTeam, createWorkflow, runWorkflow, spawnAgent, tmpDir, tinyGraph, waitFor, type AgentProcess } from '../agents/helpers.js';
import type { TestNode } from '../helpers/node.js';

const skip = clusterSkipReason();
let c: TestCluster | null = null;
const procs: AgentProcess[] = [];
after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await c?.stop();
});

test('max_concurrent_tasks and max_agents hold across three nodes', { skip: skip ?? false, timeout: 150_000 }, async () => {
  c = await startCluster({ nodes: 3, env: { GANTRY_MAX_CONCURRENT_TASKS: '2', GANTRY_MAX_AGENTS: '2' } });
  const cl = c;
  const s = await setupTeam({ http: cl.nodes[0]?.http } as unknown as TestNode);
  const agent = (i: number): AgentProcess => {
    const p = spawnAgent(['--server', `127.0.0.1:${cl.nodes[i]?.grpcPort}`, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-quota-agent-'), '--simulate-duration-ms', '700', '--simulate-steps', '3', '--concurrency', '4']);
    procs.push(p);
    return p;
  };
  agent(0);
  agent(1);
  await agentsOnline(cl.nodes[2] as ClusterNodeProc, s.user, 2);
  // a third agent, on the third node, is over the team's max_agents
  const third = agent(2);
  const refused = await third.waitLine((l) => /agent_quota_exceeded|maximum is 2/.test(JSON.stringify(l)), 'the third agent refused', 30_000);
  assert.ok(refused);

  const wf = await createWorkflow({ http: cl.nodes[0]?.http } as unknown as TestNode, s, tinyGraph(), { max_retries: 0 });
  const ids: string[] = [];
  for (let k = 0; k < 12; k++) ids.push(await runWorkflow({ http: cl.nodes[k % 3]?.http } as unknown as TestNode, s, wf, { prompt: `q ${k}` }));
  const client = new pg.Client({ connectionString: cl.db.url });
  await client.connect();
  let maxActive = 0;
  try {
    await waitFor('all tasks completed', async () => {
      const a = await client.query<{ n: number }>(`select count(*)::int as n from tasks where id = any($1::uuid[]) and task_status in ('provisioning','queued','running')`, [ids]);
      maxActive = Math.max(maxActive, a.rows[0]?.n ?? 0);
      const d = await client.query<{ n: number }>(`select count(*)::int as n from tasks where id = any($1::uuid[]) and task_status = 'completed'`, [ids]);
      return d.rows[0]?.n === ids.length;
    }, 90_000, 20);
  } finally {
    await client.end();
  }
  assert.ok(maxActive <= 2, `at most 2 tasks active at once across the cluster (saw ${maxActive})`);
  assert.ok(maxActive >= 1);

  // GPU budgets hold cluster-wide from the answer on: every node ran this team's submits without a
  // budget (each node's run gate cached that the team has none); a budget of 0 set on one node
  // refuses the very next submit on every node, and removing it lets them through again
  const put = await cl.nodes[0]?.http.put('/usage/budgets', { gpu_hours: 0 }, { token: s.user.accessToken, team: s.user.teamId });
  assert.equal(put?.status, 200, put?.text);
  for (const n of cl.nodes) {
    const r = await n.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'over budget' } }, { token: s.sk.value });
    assert.equal(r.status, 429, `node ${n.index}: ${r.text}`);
    assert.equal(r.body.error_code, 'gpu_budget_exhausted');
  }
  const del = await cl.nodes[1]?.http.del('/usage/budgets', { token: s.user.accessToken, team: s.user.teamId });
  assert.equal(del?.status, 200, del?.text);
  for (const n of cl.nodes) assert.equal((await n.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'budget removed' } }, { token: s.sk.value })).status, 202);
});
