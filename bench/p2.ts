/**
 * P2: submits, POST /api/v1/r/workflows/{id}/run -> 202 (no agents connected), against pgbench
 * single-row INSERT tps on the same PostgreSQL in the same run.
 *
 *   npm run bench:p2            (DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/postgres)
 *   env: BENCH_DURATION_S (10), BENCH_RATE (1000), BENCH_CONNS (64), BENCH_WARMUP_S (2),
 *        BENCH_PGBENCH_CLIENTS (16)
 *
 * Phases, each with the load generator in its own process:
 *  1. pgbench -n -c 16 -j 2 -T <d> -f <one INSERT of a uuid + jsonb row> on a scratch database;
 *  2. (a) open loop at BENCH_RATE/s for <d> s (bench/proc/loadgen.ts: sends on a schedule, latency from
 *     the scheduled send time), after a warm-up at the same rate;
 *  3. (b) saturation: wrk, BENCH_CONNS connections (closed loop), <d> s, POST via a Lua script.
 * Targets: >= 3,000 submits/s at saturation; p99 < 20 ms at 1,000/s offered.
 * Last line: `P2 sat_submits_per_s=... sat_p50_ms=... sat_p99_ms=... open_rate=... open_p50_ms=...
 * open_p99_ms=... pgbench_tps=... ratio=...`.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { createTestDatabase } from '../test/helpers/pg.js';
import { BenchError, adminUrl, envNum, fmt, jsonLines, machineLine, onCleanup, procCpuS, requireTool, runBench, quiesce, runCapture, spawnChild, startGantry, wrk, type GantryProcess } from './lib/harness.js';

const SECONDS = envNum('BENCH_DURATION_S', 10);
const RATE = envNum('BENCH_RATE', 1000);
const CONNS = envNum('BENCH_CONNS', 64);
const WARMUP_S = envNum('BENCH_WARMUP_S', 2);
const PGB_CLIENTS = envNum('BENCH_PGBENCH_CLIENTS', 16);

async function pgbench(tmp: string): Promise<number> {
  adminUrl();
  const db = await createTestDatabase('pgbench');
  onCleanup(() => db.drop());
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  try {
    await c.query('create table bench_insert (id uuid primary key default gen_random_uuid(), payload jsonb not null, created_at timestamptz not null default now())');
  } finally {
    await c.end();
  }
  const script = join(tmp, 'insert.sql');
  writeFileSync(script, `insert into bench_insert (payload) values ('{"parameters":{}}');\n`);
  const out = await runCapture('pgbench', ['-n', '-c', String(PGB_CLIENTS), '-j', String(Math.min(2, PGB_CLIENTS)), '-T', String(SECONDS), '-f', script, db.url], (SECONDS + 60) * 1000);
  const m = /tps = ([\d.]+) \(without initial connection time\)/.exec(out) ?? /tps = ([\d.]+)/.exec(out);
  if (!m) throw new BenchError(`could not parse pgbench output:\n${out}`);
  return Number(m[1]);
}

interface LoadgenResult {
  sent: number;
  accepted: number;
  refused: number;
  errors: number;
  seconds: number;
  acceptedPerS: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
  statuses: Record<string, number>;
  lateSends: number;
  unanswered: number;
  cpuPercent: number;
}

async function openLoop(url: string, token: string, rate: number, seconds: number): Promise<LoadgenResult> {
  const child = spawnChild(process.execPath, ['--import', 'tsx', 'bench/proc/loadgen.ts', 'open', url, token, String(rate), String(seconds)]);
  const r = (await jsonLines(child).next((o) => o.mode === 'open', 'the open-loop result', (seconds + 60) * 1000)) as unknown as LoadgenResult;
  if (r.errors > 0 || r.accepted + r.unanswered !== r.sent) throw new BenchError(`open loop: ${r.sent} sent, ${r.accepted} accepted, ${r.errors} socket errors, statuses ${JSON.stringify(r.statuses)}`);
  return r;
}

async function taskCount(g: GantryProcess): Promise<number> {
  const r = await g.http.get('/r/tasks?per_page=1', { token: g.sk });
  if (r.status !== 200) throw new BenchError(`GET /r/tasks: ${r.status} ${r.text}`);
  return Number(r.body.page_meta?.total_count);
}

runBench('P2', async () => {
  requireTool('wrk', 'apt-get install -y wrk');
  requireTool('pgbench', 'apt-get install -y postgresql-client');
  console.log(`P2: POST /r/workflows/{id}/run -> 202, no agents; open loop ${RATE}/s and saturation (wrk ${CONNS} conns), ${SECONDS} s each; peer pgbench -c ${PGB_CLIENTS} single-row INSERT`);
  console.log(await machineLine());
  const tmp = mkdtempSync(join(os.tmpdir(), 'gantry-p2-'));
  onCleanup(async () => rmSync(tmp, { recursive: true, force: true }));

  const tps = await pgbench(tmp);
  console.log(`pgbench single-row INSERT   ${fmt(tps)} tps (${PGB_CLIENTS} clients, ${SECONDS} s)`);

  const g = await startGantry('p2');
  const url = `${g.apiBase}/r/workflows/${g.workflowId}/run`;
  const probe = await g.http.post(`/r/workflows/${g.workflowId}/run`, { parameters: {} }, { token: g.sk });
  if (probe.status !== 202) throw new BenchError(`POST ${url} answered ${probe.status}: ${probe.text}`);

  await openLoop(url, g.sk, RATE, WARMUP_S);
  await quiesce(g);
  let cpu0 = procCpuS(g.pid);
  let t0 = performance.now();
  const open = await openLoop(url, g.sk, RATE, SECONDS);
  const openNodeCpu = ((procCpuS(g.pid) - cpu0) / ((performance.now() - t0) / 1000)) * 100;
  await quiesce(g);
  console.log(
    `(a) open loop ${RATE}/s offered   ${fmt(open.acceptedPerS)} accepted/s  p50 ${fmt(open.p50Ms, 2)} ms  p90 ${fmt(open.p90Ms, 2)} ms  p99 ${fmt(open.p99Ms, 2)} ms  max ${fmt(open.maxMs, 1)} ms  (${open.accepted}/${open.sent} 202; ${open.lateSends} sends > 5 ms behind schedule; node CPU ${fmt(openNodeCpu)}%, generator CPU ${fmt(open.cpuPercent)}% of one core${open.unanswered ? `; ${open.unanswered} unanswered 30 s after the last send, so these percentiles are lower bounds` : ''})`,
  );

  const lua = join(tmp, 'run.lua');
  writeFileSync(lua, `wrk.method = "POST"\nwrk.body = '{"parameters":{}}'\nwrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer ${g.sk}"\n`);
  const before = await taskCount(g);
  cpu0 = procCpuS(g.pid);
  t0 = performance.now();
  const sat = await wrk(url, { conns: CONNS, seconds: SECONDS, script: lua });
  const satNodeCpu = ((procCpuS(g.pid) - cpu0) / ((performance.now() - t0) / 1000)) * 100;
  console.log(`(b) saturation, ${CONNS} conns     ${fmt(sat.okRps)} submits/s  p50 ${fmt(sat.p50Ms, 2)} ms  p99 ${fmt(sat.p99Ms, 2)} ms  (${sat.requests} requests in ${fmt(sat.seconds, 1)} s, non-2xx ${sat.non2xx}, socket errors ${sat.socketErrors}; node CPU ${fmt(satNodeCpu)}% of one core)`);
  if (sat.non2xx > 0) throw new BenchError(`saturation: ${sat.non2xx} of ${sat.requests} responses were not 202`);
  await quiesce(g);
  const stored = (await taskCount(g)) - before;
  // wrk stops mid-flight: requests it did not wait for may still have been committed
  if (stored < sat.requests) throw new BenchError(`saturation: wrk counted ${sat.requests} 202s but only ${stored} new tasks are stored`);
  console.log(`stored tasks: ${stored} new rows for ${sat.requests} 202s counted by wrk`);

  const ratio = sat.okRps / tps;
  console.log(`targets: >= 3,000 submits/s at saturation: ${sat.okRps >= 3000 ? 'met' : 'NOT met'}; p99 < 20 ms at 1,000/s offered: ${RATE === 1000 ? (open.p99Ms < 20 ? 'met' : 'NOT met') : `n/a (offered ${RATE}/s)`}`);
  console.log(
    `P2 sat_submits_per_s=${fmt(sat.okRps)} sat_p50_ms=${fmt(sat.p50Ms, 2)} sat_p99_ms=${fmt(sat.p99Ms, 2)} open_rate=${RATE} open_accepted_per_s=${fmt(open.acceptedPerS)} open_p50_ms=${fmt(open.p50Ms, 2)} open_p99_ms=${fmt(open.p99Ms, 2)} pgbench_tps=${fmt(tps)} ratio=${fmt(ratio, 3)} conns=${CONNS} duration_s=${SECONDS}`,
  );
}, 300);
