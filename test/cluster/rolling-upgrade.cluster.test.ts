// Rolling upgrade across versions (issue 33 §3): three nodes of the previous landed release (a git
// worktree of deploy/previous-release in the test's temp dir, npm ci there) on one database and one
// Redis prefix, then each replaced in turn (SIGTERM, the current checkout started on the same ports)
// while integration clients submit to every node and agents run the tasks. Every acknowledged (202)
// run ends exactly once; a client only ever sees 202, or 503 + Retry-After / a refused connection from
// the node being restarted; old and new nodes deliver each other's remoting envelopes.
//
// At each release, bump deploy/previous-release to the released commit (the one users upgrade from).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startCluster, clusterSkipReason, agentsOnline, type TestCluster, type ClusterNodeProc } from '../helpers/cluster.js';
import { setupTeam, createWorkflow, spawnAgent, tmpDir, tinyGraph, waitFor, type AgentProcess } from '../agents/helpers.js';
import type { TestNode } from '../helpers/node.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const previous = readFileSync(join(root, 'deploy/previous-release'), 'utf8')
  .split('\n')
  .map((l) => l.trim())
  .find((l) => l && !l.startsWith('#')) as string;

const git = (...args: string[]): ReturnType<typeof spawnSync> => spawnSync('git', ['-C', root, ...args], { encoding: 'utf8' });

/** Why this test cannot run here, or null. */
function skipReason(): string | null {
  const r = clusterSkipReason();
  if (r) return r;
  if (!process.env.DATABASE_URL) return 'DATABASE_URL unset';
  if (spawnSync('git', ['--version']).status !== 0) return 'git is not installed';
  if (git('rev-parse', '--git-dir').status !== 0) return 'not a git checkout';
  if (git('cat-file', '-e', `${previous}^{commit}`).status !== 0) return `the previous release ${previous} is not in this clone (shallow clone? fetch with full history)`;
  return null;
}

let c: TestCluster | null = null;
let tmp: string | null = null;
let prev: string | null = null;
const procs: AgentProcess[] = [];
const agentDirs: string[] = [];
after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await c?.stop();
  if (prev) git('worktree', 'remove', '--force', prev);
  if (tmp) rmSync(tmp, { recursive: true, force: true });
  for (const d of agentDirs) rmSync(d, { recursive: true, force: true });
  git('worktree', 'prune');
});

/** npm ci in the old worktree; null when done, else the reason it failed (network vs other). */
function npmCi(dir: string): Promise<{ ok: true } | { ok: false; network: boolean; out: string }> {
  return new Promise((resolve) => {
    const p = spawn('npm', ['ci', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error'], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => (out = (out + String(d)).slice(-4000)));
    p.stderr.on('data', (d) => (out = (out + String(d)).slice(-4000)));
    const t = setTimeout(() => p.kill('SIGKILL'), 200_000);
    p.on('exit', (code) => {
      clearTimeout(t);
      if (code === 0) resolve({ ok: true });
      else resolve({ ok: false, network: /ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|network|offline/i.test(out) || code === null, out });
    });
  });
}

interface Outcome {
  node: number;
  status: number | 'refused';
  retryAfter: string | null;
  restarting: boolean;
  text: string;
}

test('rolling upgrade from the previous release under load: 0 lost, only 503/refused on the restarting node, mixed-version remoting', { skip: skipReason() ?? false, timeout: 420_000 }, async (t) => {
  const t0 = Date.now();
  tmp = mkdtempSync(join(tmpdir(), 'gantry-rolling-'));
  const dir = join(tmp, 'prev');
  const add = git('worktree', 'add', '--detach', dir, previous);
  assert.equal(add.status, 0, `git worktree add: ${String(add.stderr)}`);
  prev = dir;
  const ci = await npmCi(dir);
  if (!ci.ok && ci.network) {
    t.skip(`npm ci of the previous release failed, the npm registry is unreachable: ${ci.out.slice(-300)}`);
    return;
  }
  assert.ok(ci.ok, `npm ci in the previous release's worktree: ${ci.ok ? '' : ci.out}`);
  const npmCiS = (Date.now() - t0) / 1000;

  // three nodes of the previous release
  const t1 = Date.now();
  c = await startCluster({ nodes: 3, leaseMs: 1500, root: dir });
  const cl = c;
  const s = await setupTeam({ http: cl.nodes[0]?.http } as unknown as TestNode);
  const servers = cl.nodes.map((n) => `127.0.0.1:${n.grpcPort}`).join(',');
  for (let i = 0; i < 2; i++) {
    agentDirs.push(tmpDir('gantry-rolling-agent-'));
    procs.push(spawnAgent(['--server', servers, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', agentDirs[i] as string, '--simulate-duration-ms', '300', '--simulate-steps', '2', '--concurrency', '3']));
  }
  await agentsOnline(cl.nodes[0] as ClusterNodeProc, s.user, 2);
  const wf = await createWorkflow({ http: cl.nodes[0]?.http } as unknown as TestNode, s, tinyGraph(), { max_retries: 2 });

  // load: one submitter per node (raw fetch: the nodes' OpenAPI documents differ across versions)
  const restarting = new Set<number>();
  const outcomes: Outcome[] = [];
  const accepted: string[] = [];
  let submitting = true;
  const submitter = async (i: number): Promise<void> => {
    const nd = cl.nodes[i] as ClusterNodeProc;
    let k = 0;
    while (submitting) {
      const during = restarting.has(i);
      try {
        const res = await fetch(`${nd.baseUrl}/r/workflows/${wf}/run`, {
          method: 'POST',
          headers: { authorization: `Bearer ${s.sk.value}`, 'content-type': 'application/json' },
          body: JSON.stringify({ parameters: { prompt: `n${i} ${k++}` } }),
        });
        const text = await res.text();
        outcomes.push({ node: i, status: res.status, retryAfter: res.headers.get('retry-after'), restarting: during || restarting.has(i), text: text.slice(0, 200) });
        if (res.status === 202) accepted.push((JSON.parse(text) as { task_id: string }).task_id);
      } catch {
        outcomes.push({ node: i, status: 'refused', retryAfter: null, restarting: during || restarting.has(i), text: '' });
      }
      await new Promise((r) => setTimeout(r, 150));
    }
  };
  const load = [0, 1, 2].map((i) => submitter(i));
  const acceptedAt = (): number => accepted.length;
  const more = async (what: string, n: number): Promise<void> => {
    const from = acceptedAt();
    await waitFor(what, () => acceptedAt() >= from + n, 60_000, 50);
  };
  await more('load on the old cluster', 10);

  // roll: old node i stops (SIGTERM, graceful), new node i starts on its ports; each step waits for
  // the new node to be in everyone's view and for runs to be accepted again
  const stepS: number[] = [];
  for (let i = 0; i < 3; i++) {
    const ts = Date.now();
    restarting.add(i);
    await cl.kill(i, 'SIGTERM');
    await cl.start(i, { root });
    const nd = cl.nodes[i] as ClusterNodeProc;
    await nd.waitLine((l) => (l.msg === 'cluster membership changed' || l.msg === 'joined the cluster') && (l.members === 3 || (Array.isArray(l.members) && l.members.length === 3)), `${nd.name} sees three members`, 60_000);
    restarting.delete(i);
    stepS.push((Date.now() - ts) / 1000);
    await more(`runs accepted after replacing n${i}`, 10);
  }
  submitting = false;
  await Promise.all(load);

  // clients: only 202, or 503 + Retry-After / refused from the node being restarted
  const bad = outcomes.filter((o) => o.status !== 202 && !(o.restarting && (o.status === 'refused' || (o.status === 503 && o.retryAfter))));
  assert.deepEqual(bad.slice(0, 10), [], `${bad.length} unexpected client outcome(s)`);

  // 0 lost, exactly one terminal event each
  const client = new pg.Client({ connectionString: cl.db.url });
  await client.connect();
  let completed = 0;
  let failedWhy = '';
  let retried = 0;
  try {
    await waitFor(`all ${accepted.length} accepted runs (and their retries) terminal`, async () => {
      const res = await client.query<{ n: number }>(
        `with recursive chain(id, retry) as (
           select id, retry_task_id from tasks where id = any($1::uuid[])
           union all select t.id, t.retry_task_id from chain join tasks t on t.id = chain.retry)
         select count(*)::int as n from chain join tasks t on t.id = chain.id where t.task_status not in ('completed','failed','cancelled')`,
        [accepted],
      );
      return res.rows[0]?.n === 0;
    }, 120_000, 500);
    const term = await client.query<{ task_id: string; n: number }>(`select task_id, count(*)::int as n from task_events where task_id = any($1::uuid[]) and event_type in ('completed','failed','cancelled') group by task_id`, [accepted]);
    const byTask = new Map(term.rows.map((x) => [x.task_id, x.n]));
    for (const id of accepted) assert.equal(byTask.get(id), 1, `task ${id}: exactly one terminal event`);
    // a run whose attempt failed (e.g. its output upload hit the node being restarted) is retried as
    // a new task (retry_task_id): the run completes when the last task of its chain does
    const fin = await client.query<{ n: number; retried: number }>(
      `with recursive chain(root, id, retry) as (
         select id, id, retry_task_id from tasks where id = any($1::uuid[])
         union all select chain.root, t.id, t.retry_task_id from chain join tasks t on t.id = chain.retry)
       select count(*) filter (where t.task_status = 'completed')::int as n, count(*) filter (where chain.root <> chain.id)::int as retried
       from chain join tasks t on t.id = chain.id where chain.retry is null`,
      [accepted],
    );
    completed = fin.rows[0]?.n ?? 0;
    retried = fin.rows[0]?.retried ?? 0;
    const failed = await client.query<{ task_status: string; task_error: unknown; n: number }>(`select task_status, task_error, count(*)::int as n from tasks where id = any($1::uuid[]) and task_status <> 'completed' group by 1, 2`, [accepted]);
    failedWhy = JSON.stringify(failed.rows);
  } finally {
    await client.end();
  }
  assert.equal(completed, accepted.length, `every accepted run completed (itself or its retry); failed attempts: ${failedWhy}`);

  // mixed-version remoting: a new node delivered envelopes from an old one
  const servedOld = cl.nodes.flatMap((n) => n.lines.filter((l) => l.msg === 'remoting: serving a node of an older cluster protocol'));
  const oldAnswered = cl.nodes.flatMap((n) => n.lines.filter((l) => l.msg === 'remoting: a node of an older cluster protocol answered'));
  assert.ok(servedOld.length > 0, 'a new node delivered envelopes sent by a node of the previous release');

  const count = (p: (o: Outcome) => boolean): number => outcomes.filter(p).length;
  console.log(
    `rolling upgrade ${previous} -> current: npm ci ${npmCiS.toFixed(0)} s, roll steps ${stepS.map((x) => x.toFixed(1)).join('/')} s, total ${((Date.now() - t1) / 1000).toFixed(0)} s after npm ci; ` +
      `${outcomes.length} submits: ${accepted.length} accepted (all completed, ${retried} through a retry, one terminal event each; failed attempts ${failedWhy}), ${count((o) => o.status === 503)} 503, ${count((o) => o.status === 'refused')} refused; ` +
      `old->new envelope streams ${servedOld.length}, new->old answered asks ${oldAnswered.length}`,
  );
});
