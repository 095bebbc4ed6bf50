// A node paused (SIGSTOP) for twice its lease is declared dead and fenced in PostgreSQL; its tasks
// are taken over by the others; when it resumes (SIGCONT) none of its stale writes is applied, and
// it re-joins the cluster as a new member.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { startCluster, clusterSkipReason, type TestCluster, agentsOnline } from '../helpers/cluster.js';
import { setupTeam, createWorkflow, runWorkflow, spawnAgent, tmpDir, tinyGraph, waitFor, type AgentProcess } from '../agents/helpers.js';
import type { TestNode } from '../helpers/node.js';

const skip = clusterSkipReason();
const LEASE_MS = 1500;
let c: TestCluster | null = null;
const procs: AgentProcess[] = [];
after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await c?.stop();
});

test('SIGSTOP a node for twice its lease, then SIGCONT: its stale writes are not applied and it re-joins', { skip: skip ?? false, timeout: 180_000 }, async () => {
  c = await startCluster({ nodes: 3, leaseMs: LEASE_MS });
  const cl = c;
  const [n0, n1, n2] = cl.nodes as [(typeof cl.nodes)[0], (typeof cl.nodes)[0], (typeof cl.nodes)[0]];
  const s = await setupTeam({ http: n1.http } as unknown as TestNode);
  // the agents are on the nodes that stay up; tasks run long enough to outlive the pause
  for (const nd of [n1, n2])
    procs.push(spawnAgent(['--server', `127.0.0.1:${nd.grpcPort}`, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-pause-agent-'), '--simulate-duration-ms', '6000', '--simulate-steps', '12', '--concurrency', '8']));
  await agentsOnline(n1, s.user, 2);
  const wf = await createWorkflow({ http: n1.http } as unknown as TestNode, s, tinyGraph(), { max_retries: 0 });
  const ids: string[] = [];
  for (let k = 0; k < 12; k++) ids.push(await runWorkflow({ http: cl.nodes[k % 3]?.http } as unknown as TestNode, s, wf, { prompt: `pause ${k}` }));
  // wait until node 0 runs some of them (its task actors made their transitions)
  await waitFor('node 0 owns running tasks', () => n0.lines.some((l) => l.msg === 'task transition' && l.to === 'running' && ids.includes(l.task_id)), 30_000);
  const oldMember = [...n0.lines].reverse().find((l) => l.msg === 'joined the cluster')?.member as string;

  cl.signal(0, 'SIGSTOP');
  const pausedAt = Date.now();
  // the others declare it dead (after its lease and a second one) and take over its actors
  await waitFor('node 0 declared dead', () => [n1, n2].some((n) => n.lines.some((l) => l.msg === 'cluster member declared dead: fenced in PostgreSQL' && l.member === oldMember)), 30_000, 20);
  await new Promise((r) => setTimeout(r, Math.max(0, 2 * LEASE_MS - (Date.now() - pausedAt)) + 3000));
  const resumeFrom = n0.lines.length;
  cl.signal(0, 'SIGCONT');

  // it learns it was declared dead and re-joins as a new member
  const ev = await n0.waitLine((l) => l.msg === 'this node was declared dead by the cluster (paused or partitioned); dropping what it owned and re-joining', 'eviction', 30_000);
  assert.equal(ev.member, oldMember);
  await waitFor('node 0 back in the others\' view as a new member', () => [n1, n2].some((n) => n.lines.some((l) => l.msg === 'cluster membership changed' && Array.isArray(l.members) && l.members.some((m: string) => m.startsWith('n0/') && m !== oldMember))), 30_000);

  // every task completes (taken over while node 0 was away), with exactly one terminal event
  const client = new pg.Client({ connectionString: cl.db.url });
  await client.connect();
  try {
    await waitFor('all tasks terminal', async () => {
      const r = await client.query<{ n: number }>(`select count(*)::int as n from tasks where id = any($1::uuid[]) and task_status not in ('completed','failed','cancelled')`, [ids]);
      return r.rows[0]?.n === 0;
    }, 90_000, 250);
    const term = await client.query<{ task_id: string; n: number }>(`select task_id, count(*)::int as n from task_events where task_id = any($1::uuid[]) and event_type in ('completed','failed','cancelled') group by task_id`, [ids]);
    for (const id of ids) assert.equal(term.rows.find((r) => r.task_id === id)?.n, 1, `task ${id}: one terminal event`);
    const fenced = await client.query<{ fenced_at: Date | null }>(`select fenced_at from cluster_members where member_id = $1`, [oldMember]);
    assert.ok(fenced.rows[0]?.fenced_at, 'the paused member is fenced in PostgreSQL');
  } finally {
    await client.end();
  }
  // none of its stale writes was applied: every transition the paused member logged after SIGSTOP
  // was committed before it was fenced (a statement in flight at SIGSTOP commits in PostgreSQL while
  // the process is stopped; its result is only logged after SIGCONT), none after
  const evictedAt = n0.lines.indexOf(ev);
  const late = n0.lines.slice(resumeFrom, evictedAt).filter((l) => l.msg === 'task transition' && l.task_id && Date.parse(l.time as string) > pausedAt);
  const check = new pg.Client({ connectionString: cl.db.url });
  await check.connect();
  try {
    const fencedAt = (await check.query<{ f: Date }>(`select fenced_at as f from cluster_members where member_id = $1`, [oldMember])).rows[0]?.f;
    assert.ok(fencedAt, 'the paused member is fenced');
    for (const l of late) {
      const ev2 = await check.query<{ created_at: Date }>(
        `select created_at from task_events where task_id = $1 and (event_type = $2 or payload->>'status' = $2) order by id desc limit 1`,
        [l.task_id, l.to],
      );
      const at = ev2.rows[0]?.created_at;
      assert.ok(at && at.getTime() < fencedAt.getTime(), `transition ${l.task_id} -> ${l.to} was committed at ${at?.toISOString()}, before the fence at ${fencedAt.toISOString()}`);
    }
  } finally {
    await check.end();
  }
  const rejected = n0.lines.slice(resumeFrom).filter((l) => l.msg === 'fenced transition rejected' && Date.parse(l.time as string) > pausedAt);
  console.log(`pause: after SIGCONT the paused member's writes rejected by the fence: ${rejected.length}; results of statements in flight at SIGSTOP (committed before the fence): ${late.length}; committed after the fence: 0`);
});
