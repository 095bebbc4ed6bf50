// Redis restarted (its data gone) and then FLUSHALL, both under load: membership and ownership are
// rebuilt from the nodes themselves, and no accepted task is lost. Uses a dedicated redis-server.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import pg from 'pg';
import { startCluster, startRedisServer, type TestCluster, agentsOnline, type ClusterNodeProc } from '../helpers/cluster.js';
import { setupTeam, createWorkflow, spawnAgent, tmpDir, tinyGraph, waitFor, type AgentProcess } from '../agents/helpers.js';
import type { TestNode } from '../helpers/node.js';

let c: TestCluster | null = null;
let redis: Awaited<ReturnType<typeof startRedisServer>> = null;
const procs: AgentProcess[] = [];
after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await c?.stop();
  await redis?.stop();
});

const hasRedisServer = spawnSync('sh', ['-c', 'command -v redis-server && command -v redis-cli']).status === 0;

test('Redis restarted and FLUSHALLed under load: membership and ownership rebuilt, no task lost', { skip: hasRedisServer ? false : 'redis-server/redis-cli not installed', timeout: 240_000 }, async () => {
  redis = await startRedisServer();
  assert.ok(redis, 'a dedicated redis-server');
  const r = redis;
  c = await startCluster({ nodes: 3, leaseMs: 1500, redisUrl: r.url });
  const cl = c;
  const s = await setupTeam({ http: cl.nodes[0]?.http } as unknown as TestNode);
  const servers = cl.nodes.map((n) => `127.0.0.1:${n.grpcPort}`).join(',');
  for (let i = 0; i < 2; i++) procs.push(spawnAgent(['--server', servers, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-redis-agent-'), '--simulate-duration-ms', '500', '--simulate-steps', '3', '--concurrency', '2']));
  await agentsOnline(cl.nodes[0] as ClusterNodeProc, s.user, 2);
  const wf = await createWorkflow({ http: cl.nodes[0]?.http } as unknown as TestNode, s, tinyGraph(), { max_retries: 2 });

  const accepted: string[] = [];
  let submitting = true;
  let k = 0;
  const submitter = (async () => {
    while (submitting) {
      const nd = cl.nodes[k++ % 3];
      try {
        const res = await nd?.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: `r ${k}` } }, { token: s.sk.value });
        if (res?.status === 202) accepted.push(res.body.task_id as string);
      } catch {
        /* not accepted */
      }
      await new Promise((res) => setTimeout(res, 100));
    }
  })();

  const fullView = async (what: string): Promise<void> => {
    // each node's newest view lists three members again
    await waitFor(what, () =>
      cl.nodes.every((n) => {
        const v = [...n.lines].reverse().find((l) => l.msg === 'cluster membership changed' || l.msg === 'joined the cluster');
        return v && ((Array.isArray(v.members) && v.members.length === 3) || v.members === 3);
      }),
      30_000,
      100,
    );
  };
  await new Promise((res) => setTimeout(res, 3000));
  await r.restart();
  const afterRestart = cl.nodes.map((n) => n.lines.length);
  await waitFor('the nodes re-registered after the restart', async () => {
    const out = spawnSync('redis-cli', ['-p', String(r.port), 'keys', `${cl.prefix}*`], { encoding: 'utf8' }).stdout;
    return out.includes('members') || out.includes('member');
  }, 30_000, 100);
  await fullView('three members after the Redis restart');
  await new Promise((res) => setTimeout(res, 3000));
  spawnSync('redis-cli', ['-p', String(r.port), 'flushall']);
  await fullView('three members after FLUSHALL');
  await new Promise((res) => setTimeout(res, 3000));
  submitting = false;
  await submitter;
  assert.ok(cl.nodes.some((n, i) => n.lines.slice(afterRestart[i]).some((l) => l.msg === 'cluster membership changed')), 'membership was rebuilt (a new view after the restart)');

  const client = new pg.Client({ connectionString: cl.db.url });
  await client.connect();
  try {
    await waitFor(`all ${accepted.length} tasks terminal`, async () => {
      const res = await client.query<{ n: number }>(`select count(*)::int as n from tasks where id = any($1::uuid[]) and task_status not in ('completed','failed','cancelled')`, [accepted]);
      return res.rows[0]?.n === 0;
    }, 120_000, 500);
    const term = await client.query<{ task_id: string; n: number }>(`select task_id, count(*)::int as n from task_events where task_id = any($1::uuid[]) and event_type in ('completed','failed','cancelled') group by task_id`, [accepted]);
    const byTask = new Map(term.rows.map((x) => [x.task_id, x.n]));
    for (const id of accepted) assert.equal(byTask.get(id), 1, `task ${id}: exactly one terminal event`);
    const done = await client.query<{ n: number }>(`select count(*)::int as n from tasks where id = any($1::uuid[]) and task_status = 'completed'`, [accepted]);
    console.log(`redis restart + flushall: ${accepted.length} accepted, ${done.rows[0]?.n} completed`);
  } finally {
    await client.end();
  }
  assert.ok(accepted.length > 30, `load ran (${accepted.length} accepted)`);
});
