/**
 * Cluster throughput: submits (POST /r/workflows/{id}/run -> 202) and a REST read (GET
 * /r/tasks/{id}) on a single node without Redis, one node in cluster mode, and three nodes in
 * cluster mode (node processes on loopback, one PostgreSQL, one Redis), each driven by wrk in its own
 * process (three wrk processes, one per node, for the 3-node case). This machine has 2 cores, so
 * three nodes share the cores of one: the figures show what the cluster layer costs and that
 * throughput holds, not how it scales on more machines.
 *
 *   npm run bench:cluster    env: BENCH_DURATION_S (8), BENCH_CONNS (48, split over the nodes)
 * Last line: `CLUSTER single_submit=... c1_submit=... c3_submit=... ratio_c3_c1=... single_get=... c1_get=... c3_get=...`
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { BenchError, envNum, fmt, machineLine, onCleanup, requireTool, runBench, startGantry, wrk, type WrkResult } from './lib/harness.js';
import { startCluster, type TestCluster } from '../test/helpers/cluster.js';
import { registerUser, createCredential } from '../test/helpers/identity.js';
import { tinyGraph } from '../test/agents/helpers.js';

const SECONDS = envNum('BENCH_DURATION_S', 8);
const CONNS = envNum('BENCH_CONNS', 48);

interface Target {
  label: string;
  bases: string[];
  sk: string;
  workflowId: string;
  taskId: string;
}

async function runAll(tmp: string, t: Target, what: 'submit' | 'get'): Promise<{ rps: number; p99: number; non2xx: number }> {
  const per = Math.max(1, Math.floor(CONNS / t.bases.length));
  const script = join(tmp, `${what}.lua`);
  writeFileSync(
    script,
    what === 'submit'
      ? `wrk.method = "POST"\nwrk.body = '{"parameters":{}}'\nwrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer ${t.sk}"\n`
      : `wrk.method = "GET"\nwrk.headers["Authorization"] = "Bearer ${t.sk}"\n`,
  );
  const url = (b: string): string => (what === 'submit' ? `${b}/r/workflows/${t.workflowId}/run` : `${b}/r/tasks/${t.taskId}`);
  const rs: WrkResult[] = await Promise.all(t.bases.map((b) => wrk(url(b), { conns: per, seconds: SECONDS, script })));
  return { rps: rs.reduce((s, r) => s + r.okRps, 0), p99: Math.max(...rs.map((r) => r.p99Ms)), non2xx: rs.reduce((s, r) => s + r.non2xx, 0) };
}

async function clusterTarget(n: number): Promise<{ c: TestCluster; t: Target }> {
  const c = await startCluster({ nodes: n, env: { LOG_LEVEL: 'warn', GANTRY_DB_POOL_MAX: String(Math.max(5, Math.floor(20 / n))), GANTRY_AUTH_RATE_LIMIT_PER_MIN: '1000000' } });
  onCleanup(() => c.stop());
  const http = c.nodes[0]?.http;
  if (!http) throw new BenchError('no node');
  const user = await registerUser(http);
  const sk = (await createCredential(http, user, 'integration')).value;
  const wf = await http.post('/workflows', { workflow_slug: `bench-${Date.now().toString(36)}`, display_name: 'bench', workflow_json: tinyGraph(), max_retries: 0 }, { token: user.accessToken, team: user.teamId });
  if (wf.status !== 200) throw new BenchError(`create workflow: ${wf.status} ${wf.text}`);
  const run = await http.post(`/r/workflows/${wf.body.id}/run`, { parameters: {} }, { token: sk });
  if (run.status !== 202) throw new BenchError(`run: ${run.status} ${run.text}`);
  return { c, t: { label: `${n} node(s), cluster mode`, bases: c.nodes.map((x) => x.baseUrl), sk, workflowId: String(wf.body.id), taskId: String(run.body.task_id) } };
}

runBench('CLUSTER', async () => {
  requireTool('wrk', 'apt-get install -y wrk');
  if (!process.env.REDIS_URL) throw new BenchError('REDIS_URL is required (cluster mode)');
  console.log(`CLUSTER: submits and GET /r/tasks/{id} on 1 node (no Redis), 1 and 3 nodes (cluster mode), wrk ${CONNS} connections split over the nodes, ${SECONDS} s each`);
  console.log(await machineLine());
  const tmp = mkdtempSync(join(os.tmpdir(), 'gantry-clb-'));
  onCleanup(async () => rmSync(tmp, { recursive: true, force: true }));

  const redisUrl = process.env.REDIS_URL;
  delete process.env.REDIS_URL; // the single node runs without Redis
  const g = await startGantry('clsingle', { GANTRY_AUTH_RATE_LIMIT_PER_MIN: '1000000' });
  process.env.REDIS_URL = redisUrl;
  const run = await g.http.post(`/r/workflows/${g.workflowId}/run`, { parameters: {} }, { token: g.sk });
  const single: Target = { label: '1 node, no Redis', bases: [g.apiBase], sk: g.sk, workflowId: g.workflowId, taskId: String(run.body.task_id) };

  const rows: Array<{ label: string; submit: number; submitP99: number; get: number; getP99: number }> = [];
  const measure = async (t: Target): Promise<void> => {
    const s = await runAll(tmp, t, 'submit');
    const r = await runAll(tmp, t, 'get');
    if (s.non2xx || r.non2xx) throw new BenchError(`${t.label}: ${s.non2xx} submit and ${r.non2xx} GET responses were not 2xx`);
    rows.push({ label: t.label, submit: s.rps, submitP99: s.p99, get: r.rps, getP99: r.p99 });
    console.log(`${t.label.padEnd(28)} submits ${fmt(s.rps).padStart(6)}/s (p99 ${fmt(s.p99, 1)} ms)   GET task ${fmt(r.rps).padStart(6)}/s (p99 ${fmt(r.p99, 1)} ms)`);
  };
  await measure(single);
  const one = await clusterTarget(1);
  await measure(one.t);
  await one.c.stop();
  const three = await clusterTarget(3);
  await measure(three.t);
  const [s0, s1, s3] = rows as [(typeof rows)[0], (typeof rows)[0], (typeof rows)[0]];
  console.log(`3 nodes / 1 node (cluster mode): submits ${fmt(s3.submit / s1.submit, 2)}x, GET ${fmt(s3.get / s1.get, 2)}x; cluster mode / no Redis on 1 node: submits ${fmt(s1.submit / s0.submit, 2)}x, GET ${fmt(s1.get / s0.get, 2)}x`);
  console.log(
    `CLUSTER single_submit=${fmt(s0.submit)} c1_submit=${fmt(s1.submit)} c3_submit=${fmt(s3.submit)} ratio_c3_c1=${fmt(s3.submit / s1.submit, 3)} single_get=${fmt(s0.get)} c1_get=${fmt(s1.get)} c3_get=${fmt(s3.get)} ratio_get_c3_c1=${fmt(s3.get / s1.get, 3)} conns=${CONNS} duration_s=${SECONDS}`,
  );
}, 600);
