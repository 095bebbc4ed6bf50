/**
 * P4: end-to-end tasks/s with instant simulated tasks: submit N tasks over HTTP and measure from
 * the first submit to the moment the last one is `completed`.
 *
 *   npm run bench:p4            (DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/postgres)
 *   env: BENCH_TASKS (3000), BENCH_CONNS (64 concurrent submitters), BENCH_AGENTS (16),
 *        BENCH_SLOTS (8 per agent), BENCH_WARMUP_TASKS (200),
 *        BENCH_AGENT_TRANSPORT (grpc: `--server HOST:PORT`; ws: `--server ws://HOST:PORT`, the
 *        WebSocket on the HTTP port)
 *
 * Three processes besides this one: the Gantry node (`node bin/gantry.mjs serve`, fresh database),
 * the agents (bench/proc/agents.ts: BENCH_AGENTS instances of the real agent program over gRPC,
 * simulate executor with zero duration and zero steps, one small PNG upload per task) and the
 * submitter (bench/proc/loadgen.ts closed loop, BENCH_CONNS keep-alive connections). This process
 * polls GET /r/tasks?task_status=completed every 50 ms near the end (the end time is known to within
 * one poll), less often while much is left (a tenth of the rest's expected time, at most 500 ms:
 * the node serves the polls, and its CPU per task is a figure here), failed ones once a second.
 * A warm-up batch runs first. Target: >= 1,000 tasks/s on this machine (no peer; the machine line
 * names the date and the cores). Last line: `P4 tasks_per_s=... submits_per_s=... ...`.
 */
import os from 'node:os';
import { BenchError, envNum, fmt, jsonLines, machineLine, procCpuS, runBench, sleep, spawnChild, startGantry, waitUntil, type GantryProcess } from './lib/harness.js';

const N = envNum('BENCH_TASKS', 3000);
const CONNS = envNum('BENCH_CONNS', 64);
const AGENTS = envNum('BENCH_AGENTS', 16);
const SLOTS = envNum('BENCH_SLOTS', 8);
const WARMUP = Math.floor(Number(process.env.BENCH_WARMUP_TASKS ?? 200));
const MAX_RUN_S = 180;
const TRANSPORT = process.env.BENCH_AGENT_TRANSPORT ?? 'grpc';
if (TRANSPORT !== 'grpc' && TRANSPORT !== 'ws') throw new Error(`BENCH_AGENT_TRANSPORT: grpc or ws, got ${TRANSPORT}`);

async function count(g: GantryProcess, status: string): Promise<number> {
  const r = await g.http.get(`/r/tasks?task_status=${status}&per_page=1`, { token: g.sk });
  if (r.status !== 200) throw new BenchError(`GET /r/tasks?task_status=${status}: ${r.status} ${r.text}`);
  return Number(r.body.page_meta?.total_count);
}

interface Batch {
  accepted: number;
  sent: number;
  firstSendAt: number;
  lastAcceptAt: number;
  p50Ms: number;
  p99Ms: number;
  statuses: Record<string, number>;
  completedAt: number;
  completed: number;
  failed: number;
}

/** Submits n tasks from the loadgen process and waits until base + accepted tasks are completed. */
async function batch(g: GantryProcess, n: number, base: { completed: number; failed: number }): Promise<Batch> {
  const url = `${g.apiBase}/r/workflows/${g.workflowId}/run`;
  const child = spawnChild(process.execPath, ['--import', 'tsx', 'bench/proc/loadgen.ts', 'closed', url, g.sk, String(n), String(CONNS)]);
  let result: Record<string, any> | null = null;
  let failure: unknown = null;
  jsonLines(child)
    .next((o) => o.mode === 'closed', 'the submitter result', MAX_RUN_S * 1000)
    .then((o) => (result = o), (e: unknown) => (failure = e));
  const deadline = Date.now() + MAX_RUN_S * 1000;
  const t0 = Date.now();
  let failed = 0;
  let failedAt = 0;
  for (;;) {
    if (failure) throw failure;
    const completed = (await count(g, 'completed')) - base.completed;
    const at = Date.now();
    // failures are rare: counted once a second, and whenever the completed ones alone fall short
    if (at - failedAt >= 1000) {
      failed = (await count(g, 'failed')) - base.failed;
      failedAt = at;
    }
    const target = result ? (result as Batch).accepted : n;
    if (completed + failed < target && completed + failed >= target * 0.99 && at - failedAt > 0) {
      failed = (await count(g, 'failed')) - base.failed;
      failedAt = Date.now();
    }
    if (completed + failed >= target) {
      if (!result) await waitUntil('the submitter result', () => result !== null || failure !== null, 60_000, 20);
      if (failure) throw failure;
      const r = result as unknown as Batch;
      if (r.accepted !== r.sent) throw new BenchError(`submitter: ${r.accepted}/${r.sent} accepted, statuses ${JSON.stringify(r.statuses)}`);
      return { ...r, completedAt: at, completed, failed };
    }
    if (at > deadline) throw new BenchError(`${completed} completed, ${failed} failed of ${target} after ${MAX_RUN_S} s`);
    // the poll is served by the node under test (its CPU is in node_cpu_ms_per_task): every 50 ms
    // near the end (the end time stays within one 50 ms poll), less often while much is left
    // (a tenth of the time the rest should take at the rate so far, at most 500 ms)
    const done = completed + failed;
    const restMs = done > 0 ? ((target - done) * (at - t0)) / done : 0;
    await sleep(Math.min(500, Math.max(50, restMs / 10)));
  }
}

runBench('P4', async () => {
  console.log(`P4: end to end, ${N} instant simulated tasks, ${CONNS} concurrent submitters, ${AGENTS} agents x ${SLOTS} slots over ${TRANSPORT} (agents, submitter and node in their own processes)`);
  console.log(await machineLine());
  const g = await startGantry('p4');
  const ak = await g.agentCredential();
  const agents = spawnChild(process.execPath, [...(process.env.BENCH_AGENTS_NODE_ARGS ?? '').split(' ').filter(Boolean), '--import', 'tsx', 'bench/proc/agents.ts', TRANSPORT === 'ws' ? g.origin.replace(/^http/, 'ws') : `127.0.0.1:${g.grpcPort}`, ak, String(AGENTS), String(SLOTS)]);
  const agentOut = jsonLines(agents);
  await agentOut.next((o) => typeof o.ready === 'number', 'the agents to connect', 90_000);
  await waitUntil(`${AGENTS} agents online`, async () => {
    const r = await g.http.get('/agents?per_page=1', { token: g.user.accessToken, team: g.user.teamId });
    return r.body.page_meta?.total_count === AGENTS;
  }, 60_000, 100);

  if (WARMUP > 0) await batch(g, WARMUP, { completed: 0, failed: 0 });
  const base = { completed: await count(g, 'completed'), failed: await count(g, 'failed') };
  // the node's fixed cost while idle (agents connected, heartbeats, timers, no requests): with
  // node_cpu_ms_per_task it tells how much of the figure is per task at a low rate
  const idle0 = procCpuS(g.pid);
  const idleT0 = Date.now();
  await sleep(3000);
  const nodeIdlePct = ((procCpuS(g.pid) - idle0) / ((Date.now() - idleT0) / 1000)) * 100;
  const nodeCpu0 = procCpuS(g.pid);
  const agentsCpu0 = procCpuS(agents.pid as number);
  const b = await batch(g, N, base);
  const wallS = (b.completedAt - b.firstSendAt) / 1000;
  const nodeCpuS = procCpuS(g.pid) - nodeCpu0;
  const nodeCpu = (nodeCpuS / wallS) * 100;
  const nodeMsPerTask = (nodeCpuS * 1000) / b.completed;
  const agentsCpu = ((procCpuS(agents.pid as number) - agentsCpu0) / wallS) * 100;
  const tasksPerS = b.completed / wallS;
  const submitsPerS = b.accepted / ((b.lastAcceptAt - b.firstSendAt) / 1000);
  console.log(`submitted   ${b.accepted}/${b.sent} accepted at ${fmt(submitsPerS)}/s, 202 p50 ${fmt(b.p50Ms, 1)} ms p99 ${fmt(b.p99Ms, 1)} ms`);
  console.log(`completed   ${b.completed} (${b.failed} failed) in ${fmt(wallS, 2)} s from the first submit = ${fmt(tasksPerS)} tasks/s end to end`);
  console.log(`cpu         node ${fmt(nodeCpu)}% of one core (${fmt(nodeMsPerTask, 2)} ms of node CPU per task; ${fmt(nodeIdlePct, 1)}% of one core for 3 s idle before the batch), agents process ${fmt(agentsCpu)}% (the submitter, PostgreSQL and this poller share the same cores)`);
  if (b.failed > 0) throw new BenchError(`${b.failed} tasks failed`);
  console.log(`target: >= 1,000 tasks/s: ${tasksPerS >= 1000 ? 'met' : 'NOT met'}`);
  console.log(`P4 tasks_per_s=${fmt(tasksPerS)} submits_per_s=${fmt(submitsPerS)} submit_p99_ms=${fmt(b.p99Ms, 1)} tasks=${N} conns=${CONNS} agents=${AGENTS} slots=${SLOTS} transport=${TRANSPORT} node_idle_cpu_pct=${fmt(nodeIdlePct, 1)} node_cpu_ms_per_task=${fmt(nodeMsPerTask, 2)} nproc=${os.availableParallelism()} date=${new Date().toISOString().slice(0, 10)}`);
}, 300);
